//! Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3") with the
//! state layout of curand: `curand_init(seed, subsequence, offset)` sets the key to the two
//! halves of the seed, puts the subsequence in the high 64 bits of the 128-bit counter,
//! advances the counter by `offset / 4` blocks and starts at word `offset % 4` of a block.

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// One Philox4x32-10 block.
pub fn philox4x32_10(ctr: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let (mut c, mut k) = (ctr, key);
    for round in 0..10 {
        let p0 = M0 as u64 * c[0] as u64;
        let p1 = M1 as u64 * c[2] as u64;
        c = [(p1 >> 32) as u32 ^ c[1] ^ k[0], p1 as u32, (p0 >> 32) as u32 ^ c[3] ^ k[1], p0 as u32];
        if round < 9 {
            k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
        }
    }
    c
}

/// The 32-bit word curand returns first after `curand_init(seed, subsequence, offset)`.
pub fn curand_u32(seed: u64, subsequence: u64, offset: u64) -> u32 {
    let block = offset / 4;
    let ctr = [block as u32, (block >> 32) as u32, subsequence as u32, (subsequence >> 32) as u32];
    philox4x32_10(ctr, [seed as u32, (seed >> 32) as u32])[(offset % 4) as usize]
}

/// curand_uniform's map of a 32-bit word onto (0, 1], in f32 arithmetic.
pub fn curand_uniform_from_u32(x: u32) -> f32 {
    const INV: f32 = 2.328_306_4e-10;
    x as f32 * INV + INV / 2.0
}

/// `curand_uniform` after `curand_init(seed, subsequence, offset)`.
pub fn curand_uniform(seed: u64, subsequence: u64, offset: u64) -> f32 {
    curand_uniform_from_u32(curand_u32(seed, subsequence, offset))
}

/// torch's CUDA exponential transform of a (0, 1] uniform (lambda = 1), in f32: the log is
/// clamped at -eps/2 near 1 so the variate is never 0. The log is taken in f64 and rounded
/// once, i.e. the correctly rounded f32 log (libm's logf may be off by one ulp).
pub fn exponential_from_uniform(u: f32) -> f32 {
    let log = if u >= 1.0 - f32::EPSILON / 2.0 { -f32::EPSILON / 2.0 } else { (u as f64).ln() as f32 };
    -log
}
