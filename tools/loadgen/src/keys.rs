//! Message keys and the partition each message goes to.
//!
//! Owns: the `--keys` distributions (none, uniform over K keys, Zipf over K keys with
//! exponent s) and a small seeded PRNG, so a run's key sequence is reproducible from
//! its seed and costs no allocation per message.
//!
//! Invariants:
//! - Keys are integers in `0..K`, written as fixed-width ASCII (`KEY_BYTES` bytes), so
//!   every keyed record has the same size and batch sizing stays exact.
//! - Zipf rank 0 is the most frequent key; sampling is inverse-CDF with binary search
//!   over a table built once (K is capped at `ZIPF_KEYS_MAX` to bound that table).
//! - A key always maps to the same partition (`partition_for`).

use anyhow::{bail, Result};
use std::str::FromStr;

pub const KEY_BYTES: usize = 12;
/// The Zipf CDF table takes 8 bytes per key: 10 M keys is 80 MB per producer.
pub const ZIPF_KEYS_MAX: u64 = 10_000_000;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KeySpec {
    None,
    Uniform(u64),
    Zipf(u64, f64),
}

impl FromStr for KeySpec {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        if s == "none" {
            return Ok(KeySpec::None);
        }
        let (kind, rest) = s.split_once(':').unwrap_or((s, ""));
        let mut parts = rest.split(',');
        let k: u64 = match parts.next().filter(|p| !p.is_empty()) {
            Some(p) => p
                .parse()
                .map_err(|_| anyhow::anyhow!("bad key count {p:?}"))?,
            None => bail!("--keys {kind} needs a key count, e.g. {kind}:1000"),
        };
        if k == 0 {
            bail!("--keys needs at least one key");
        }
        match kind {
            "uniform" => Ok(KeySpec::Uniform(k)),
            "zipf" => {
                let s_exp: f64 = match parts.next() {
                    Some(p) => p
                        .parse()
                        .map_err(|_| anyhow::anyhow!("bad zipf exponent {p:?}"))?,
                    None => 1.0,
                };
                if !(s_exp > 0.0 && s_exp.is_finite()) {
                    bail!("zipf exponent must be positive");
                }
                if k > ZIPF_KEYS_MAX {
                    bail!("zipf supports at most {ZIPF_KEYS_MAX} keys");
                }
                Ok(KeySpec::Zipf(k, s_exp))
            }
            _ => bail!("--keys must be none, uniform:K or zipf:K[,s]"),
        }
    }
}

/// xorshift64*: tiny, fast, good enough for picking keys.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn below(&mut self, n: u64) -> u64 {
        // Multiply-shift: unbiased enough for load generation, no division.
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

pub struct KeyGen {
    spec: KeySpec,
    rng: Rng,
    zipf_cdf: Vec<f64>,
    buf: [u8; KEY_BYTES],
}

impl KeyGen {
    pub fn new(spec: KeySpec, seed: u64) -> Self {
        let zipf_cdf = match spec {
            KeySpec::Zipf(k, s) => {
                let mut cdf = Vec::with_capacity(k as usize);
                let mut sum = 0.0;
                for rank in 1..=k {
                    sum += 1.0 / (rank as f64).powf(s);
                    cdf.push(sum);
                }
                for c in cdf.iter_mut() {
                    *c /= sum;
                }
                cdf
            }
            _ => Vec::new(),
        };
        KeyGen {
            spec,
            rng: Rng::new(seed),
            zipf_cdf,
            buf: [b'0'; KEY_BYTES],
        }
    }

    pub fn keyed(&self) -> bool {
        self.spec != KeySpec::None
    }

    /// The next key index, or `None` without keys.
    pub fn next_index(&mut self) -> Option<u64> {
        match self.spec {
            KeySpec::None => None,
            KeySpec::Uniform(k) => Some(self.rng.below(k)),
            KeySpec::Zipf(..) => {
                let u = self.rng.next_f64();
                let i = self.zipf_cdf.partition_point(|&c| c < u);
                Some(i.min(self.zipf_cdf.len().saturating_sub(1)) as u64)
            }
        }
    }

    /// Writes key `index` as fixed-width ASCII and returns it.
    pub fn render(&mut self, index: u64) -> &[u8] {
        let mut v = index;
        for b in self.buf.iter_mut().rev() {
            *b = b'0' + (v % 10) as u8;
            v /= 10;
        }
        &self.buf
    }
}

/// The partition of a key: a 64-bit mix (so neighbouring keys spread) modulo the count.
pub fn partition_for(key: u64, partitions: usize) -> usize {
    let mut z = key.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z % partitions.max(1) as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_specs() {
        assert_eq!("none".parse::<KeySpec>().unwrap(), KeySpec::None);
        assert_eq!(
            "uniform:10".parse::<KeySpec>().unwrap(),
            KeySpec::Uniform(10)
        );
        assert_eq!(
            "zipf:100".parse::<KeySpec>().unwrap(),
            KeySpec::Zipf(100, 1.0)
        );
        assert_eq!(
            "zipf:100,1.5".parse::<KeySpec>().unwrap(),
            KeySpec::Zipf(100, 1.5)
        );
        assert!("zipf:0".parse::<KeySpec>().is_err());
        assert!("uniform".parse::<KeySpec>().is_err());
        assert!("zipf:10,-1".parse::<KeySpec>().is_err());
        assert!("other:3".parse::<KeySpec>().is_err());
    }

    #[test]
    fn uniform_covers_all_keys_evenly() {
        let mut g = KeyGen::new(KeySpec::Uniform(10), 7);
        let mut counts = [0u32; 10];
        for _ in 0..100_000 {
            counts[g.next_index().unwrap() as usize] += 1;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "{counts:?}");
        }
    }

    #[test]
    fn zipf_follows_rank_power_law() {
        let mut g = KeyGen::new(KeySpec::Zipf(1000, 1.0), 11);
        let mut counts = vec![0u32; 1000];
        for _ in 0..200_000 {
            counts[g.next_index().unwrap() as usize] += 1;
        }
        // p(rank r) ∝ 1/r: rank 1 about twice rank 2, about ten times rank 10.
        let r12 = counts[0] as f64 / counts[1] as f64;
        let r1_10 = counts[0] as f64 / counts[9] as f64;
        assert!((1.8..2.2).contains(&r12), "{r12}");
        assert!((8.5..11.5).contains(&r1_10), "{r1_10}");
        assert!(counts[0] > counts[500]);
    }

    #[test]
    fn keys_render_fixed_width_and_partition_stably() {
        let mut g = KeyGen::new(KeySpec::Uniform(5), 1);
        assert_eq!(g.render(42), b"000000000042");
        assert_eq!(partition_for(42, 8), partition_for(42, 8));
        let mut seen = [false; 8];
        for k in 0..100 {
            seen[partition_for(k, 8)] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }
}
