//! torch's CPU normal stream (`torch.manual_seed(s); torch.randn(n)`), reproduced so the
//! acoustic noise of a seed is the reference's noise:
//! - mt19937 seeded with the low 32 bits of the seed (torch's `init_with_uint32`);
//! - a float uniform is the low 24 bits of one 32-bit draw times 2^-24;
//! - for 16 elements or more, every element first gets a uniform, then each block of 16 is
//!   turned into normals by Box-Muller pairing element j with j + 8 (u1 = 1 - d[j],
//!   u2 = d[j + 8]); a tail shorter than 16 redraws 16 fresh uniforms into the last 16
//!   slots and transforms them as one more block;
//! - below 16 elements torch takes its scalar double path (two 53-bit uniforms per pair,
//!   the second normal of a pair cached for the next element).
//!
//! The uniforms are exact; the normals match to float rounding of log/sin/cos (torch's AVX2
//! build uses vectorised approximations of them).

/// The 32-bit Mersenne twister with torch's seeding.
pub struct Mt19937 {
    state: [u32; 624],
    index: usize,
}

impl Mt19937 {
    pub fn new(seed: u64) -> Self {
        let mut state = [0u32; 624];
        state[0] = seed as u32;
        for j in 1..624 {
            state[j] = 1812433253u32.wrapping_mul(state[j - 1] ^ (state[j - 1] >> 30)).wrapping_add(j as u32);
        }
        Mt19937 { state, index: 624 }
    }

    fn twist(&mut self) {
        for i in 0..624 {
            let y = (self.state[i] & 0x8000_0000) | (self.state[(i + 1) % 624] & 0x7fff_ffff);
            let mut v = self.state[(i + 397) % 624] ^ (y >> 1);
            if y & 1 != 0 {
                v ^= 0x9908_b0df;
            }
            self.state[i] = v;
        }
        self.index = 0;
    }

    pub fn next_u32(&mut self) -> u32 {
        if self.index >= 624 {
            self.twist();
        }
        let mut y = self.state[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// torch's float uniform in [0, 1): 24 random bits.
    pub fn uniform_f32(&mut self) -> f32 {
        (self.next_u32() & 0x00ff_ffff) as f32 * (1.0 / (1u32 << 24) as f32)
    }

    /// torch's double uniform in [0, 1): 53 bits of a 64-bit draw (first draw high).
    pub fn uniform_f64(&mut self) -> f64 {
        let hi = self.next_u32() as u64;
        let lo = self.next_u32() as u64;
        let v = (hi << 32) | lo;
        (v & ((1u64 << 53) - 1)) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

fn box_muller_16(d: &mut [f32]) {
    for j in 0..8 {
        let u1 = 1.0 - d[j];
        let u2 = d[j + 8];
        let radius = (-2.0 * (u1 as f64).ln()).sqrt();
        let theta = 2.0 * std::f64::consts::PI * u2 as f64;
        d[j] = (radius * theta.cos()) as f32;
        d[j + 8] = (radius * theta.sin()) as f32;
    }
}

/// `torch.manual_seed(seed); torch.randn(n)` on the CPU.
pub fn randn(seed: u64, n: usize) -> Vec<f32> {
    let mut g = Mt19937::new(seed);
    if n < 16 {
        // Scalar double path: pairs of normals, the sine one cached for the next element.
        let mut out = Vec::with_capacity(n);
        let mut cached: Option<f64> = None;
        while out.len() < n {
            if let Some(c) = cached.take() {
                out.push(c as f32);
                continue;
            }
            let u1 = g.uniform_f64();
            let u2 = g.uniform_f64();
            let r = (-2.0 * (-u2).ln_1p()).sqrt();
            let theta = 2.0 * std::f64::consts::PI * u1;
            cached = Some(r * theta.sin());
            out.push((r * theta.cos()) as f32);
        }
        return out;
    }
    let mut d: Vec<f32> = (0..n).map(|_| g.uniform_f32()).collect();
    let mut i = 0;
    while i + 16 <= n {
        box_muller_16(&mut d[i..i + 16]);
        i += 16;
    }
    if !n.is_multiple_of(16) {
        let tail = &mut d[n - 16..];
        for v in tail.iter_mut() {
            *v = g.uniform_f32();
        }
        box_muller_16(tail);
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mt19937_matches_the_standard_sequence() {
        // The C++ std::mt19937 default seed 5489: the 10000th output is 4123659995.
        let mut g = Mt19937::new(5489);
        let mut last = 0;
        for _ in 0..10000 {
            last = g.next_u32();
        }
        assert_eq!(last, 4123659995);
        assert_eq!(Mt19937::new(5489).next_u32(), 3499211612);
    }

    /// Against `torch.randn` (fixtures/rng/randn.json, scripts/ref/randn_reference.py):
    /// exact below 16 elements (the double path), within 1e-5 above, where torch's
    /// vectorised log/sin/cos approximations differ from ours in the last bits.
    #[test]
    fn randn_matches_torch() {
        let p = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/rng/randn.json");
        let f: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
        let num =
            |v: &serde_json::Value| -> f64 { v.as_str().map(|s| s.parse().unwrap()).or_else(|| v.as_f64()).unwrap() };
        let list = |v: &serde_json::Value| -> Vec<f32> {
            let v: serde_json::Value = match v.as_str() {
                Some(s) => serde_json::from_str(s).unwrap(),
                None => v.clone(),
            };
            v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
        };
        let mut checked = 0;
        for c in f["cases"].as_array().unwrap() {
            let seed = num(&c["seed"]) as u64;
            let n = num(&c["numel"]) as usize;
            let got = randn(seed, n);
            let exact = n < 16;
            let mut pairs: Vec<(usize, f32)> = Vec::new();
            if let Some(v) = c.get("values") {
                pairs.extend(list(v).into_iter().enumerate());
            } else {
                let head = list(&c["head"]);
                let tail = list(&c["tail"]);
                pairs.extend(head.into_iter().enumerate());
                let t0 = n - tail.len();
                pairs.extend(tail.into_iter().enumerate().map(|(i, x)| (t0 + i, x)));
            }
            for (i, want) in pairs {
                if exact {
                    assert_eq!(got[i], want, "seed {seed} n {n} element {i}");
                } else {
                    assert!((got[i] - want).abs() <= 1e-5, "seed {seed} n {n} element {i}: {} vs {want}", got[i]);
                }
            }
            let sum: f64 = got.iter().map(|&x| x as f64).sum();
            assert!((sum - num(&c["sum"])).abs() < 1e-3, "seed {seed} n {n}: sum {sum}");
            checked += 1;
        }
        assert!(checked >= 30);
    }

    #[test]
    fn randn_is_standard_normal_and_deterministic() {
        let v = randn(42, 64 * 1000);
        assert_eq!(v, randn(42, 64 * 1000));
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / v.len() as f64;
        assert!(mean.abs() < 0.02 && (var - 1.0).abs() < 0.03, "mean {mean} var {var}");
        assert_ne!(randn(43, 16), randn(42, 16));
    }
}
