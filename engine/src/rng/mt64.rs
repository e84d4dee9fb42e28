//! The 64-bit Mersenne Twister (`std::mt19937_64`), and the uniform float libstdc++'s
//! `std::uniform_real_distribution<float>(0, 1)` makes of one of its outputs: MiniMax Music
//! 3's token draws (minimaxmusic.cpp: one engine per song, seeded `lm_seed + i`).

const NN: usize = 312;
const MM: usize = 156;
const MATRIX_A: u64 = 0xB502_6F5A_A966_19E9;
const UPPER: u64 = 0xFFFF_FFFF_8000_0000;
const LOWER: u64 = 0x7FFF_FFFF;

/// `std::mt19937_64`.
#[derive(Clone)]
pub struct Mt19937_64 {
    mt: [u64; NN],
    i: usize,
}

impl Mt19937_64 {
    pub fn new(seed: u64) -> Self {
        let mut mt = [0u64; NN];
        mt[0] = seed;
        for i in 1..NN {
            mt[i] = 6_364_136_223_846_793_005u64.wrapping_mul(mt[i - 1] ^ (mt[i - 1] >> 62)).wrapping_add(i as u64);
        }
        Mt19937_64 { mt, i: NN }
    }

    pub fn next_u64(&mut self) -> u64 {
        if self.i >= NN {
            for k in 0..NN {
                let x = (self.mt[k] & UPPER) | (self.mt[(k + 1) % NN] & LOWER);
                let mag = if x & 1 == 1 { MATRIX_A } else { 0 };
                self.mt[k] = self.mt[(k + MM) % NN] ^ (x >> 1) ^ mag;
            }
            self.i = 0;
        }
        let mut x = self.mt[self.i];
        self.i += 1;
        x ^= (x >> 29) & 0x5555_5555_5555_5555;
        x ^= (x << 17) & 0x71D6_7FFF_EDA6_0000;
        x ^= (x << 37) & 0xFFF7_EEE0_0000_0000;
        x ^= x >> 43;
        x
    }

    /// A uniform float in [0, 1) as libstdc++ makes it from one output (its
    /// `generate_canonical<float, 24>` on a 64-bit engine): the output rounded to float,
    /// divided by 2^64, and kept below 1.
    pub fn uniform_f32(&mut self) -> f32 {
        let u = self.next_u64() as f32 / 18_446_744_073_709_551_616.0f32;
        if u >= 1.0 {
            1.0f32.next_down()
        } else {
            u
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_standard() {
        // C++11 [rand.predef]: the 10000th consecutive output of a default-constructed
        // mt19937_64 (seed 5489) is 9981545732273789042.
        let mut r = Mt19937_64::new(5489);
        let mut x = 0;
        for _ in 0..10_000 {
            x = r.next_u64();
        }
        assert_eq!(x, 9_981_545_732_273_789_042);
        // The float is below 1 even when the output rounds up to 2^64.
        let mut r = Mt19937_64::new(1);
        assert!((0..10_000).map(|_| r.uniform_f32()).all(|u| (0.0..1.0).contains(&u)));
    }
}
