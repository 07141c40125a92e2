//! Token selection from logits: greedy, temperature, top-k, top-p, with an optional seed.
//! Scratch space lives in the sampler so a decode step allocates nothing once warm.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// How to pick the next token.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SamplingParams {
    /// 0 = greedy (argmax).
    pub temperature: f32,
    /// Nucleus mass in (0, 1]; 1 = off.
    pub top_p: f32,
    /// Keep only the k most likely tokens; 0 = off.
    pub top_k: usize,
    /// Seed for reproducible sampling; None = from the OS.
    pub seed: Option<u64>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_p: 1.0,
            top_k: 0,
            seed: None,
        }
    }
}

impl SamplingParams {
    pub fn greedy() -> SamplingParams {
        SamplingParams::default()
    }

    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0 || self.top_k == 1
    }
}

/// A sampler for one request.
pub struct Sampler {
    params: SamplingParams,
    rng: StdRng,
    candidates: Vec<(u32, f32)>,
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Sampler {
        let rng = match params.seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => StdRng::from_os_rng(),
        };
        Sampler {
            params,
            rng,
            candidates: Vec::new(),
        }
    }

    /// Picks a token from the full vocabulary.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        if self.params.is_greedy() {
            return argmax(
                logits
                    .iter()
                    .copied()
                    .enumerate()
                    .map(|(i, v)| (i as u32, v)),
            );
        }
        self.candidates.clear();
        self.candidates
            .extend(logits.iter().enumerate().map(|(i, v)| (i as u32, *v)));
        self.pick()
    }

    /// Picks a token among `allowed` only (a constrained step).
    pub fn sample_among(&mut self, logits: &[f32], allowed: &[u32]) -> u32 {
        if self.params.is_greedy() {
            return argmax(allowed.iter().map(|&t| (t, logits[t as usize])));
        }
        self.candidates.clear();
        self.candidates
            .extend(allowed.iter().map(|&t| (t, logits[t as usize])));
        self.pick()
    }

    /// Temperature, top-k, top-p over `self.candidates`, then a draw.
    fn pick(&mut self) -> u32 {
        let p = self.params;
        let c = &mut self.candidates;
        let by_logit_desc =
            |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if p.top_k > 0 && p.top_k < c.len() {
            c.select_nth_unstable_by(p.top_k - 1, by_logit_desc);
            c.truncate(p.top_k);
        }
        c.sort_unstable_by(by_logit_desc);
        let max = c.first().map_or(0.0, |x| x.1);
        let mut total = 0f64;
        for x in c.iter_mut() {
            x.1 = (((x.1 - max) / p.temperature) as f64).exp() as f32;
            total += x.1 as f64;
        }
        if p.top_p > 0.0 && p.top_p < 1.0 {
            // Smallest head of the sorted list whose mass reaches top_p (at least one token).
            let mut mass = 0f64;
            let mut keep = c.len();
            for (i, x) in c.iter().enumerate() {
                mass += x.1 as f64 / total;
                if mass >= p.top_p as f64 {
                    keep = i + 1;
                    break;
                }
            }
            c.truncate(keep);
            total = c.iter().map(|x| x.1 as f64).sum();
        }
        let mut draw = self.rng.random::<f64>() * total;
        for x in c.iter() {
            draw -= x.1 as f64;
            if draw <= 0.0 {
                return x.0;
            }
        }
        c.last().map_or(0, |x| x.0)
    }
}

/// The first index of the largest value (ties go to the lower id, as torch.argmax does).
fn argmax(values: impl Iterator<Item = (u32, f32)>) -> u32 {
    let mut best = (0u32, f32::NEG_INFINITY);
    let mut first = true;
    for (i, v) in values {
        if first || v > best.1 {
            best = (i, v);
            first = false;
        }
    }
    best.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_first_maximum() {
        let mut s = Sampler::new(SamplingParams::greedy());
        assert_eq!(s.sample(&[0.1, 0.9, 0.9, -1.0]), 1);
        assert_eq!(s.sample_among(&[0.1, 0.9, 0.9, -1.0], &[3, 0]), 0);
    }

    #[test]
    fn seeded_sampling_is_reproducible_and_respects_top_k() {
        let logits: Vec<f32> = (0..50).map(|i| (i as f32 * 0.37).sin()).collect();
        let params = SamplingParams {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 3,
            seed: Some(7),
        };
        let mut top3: Vec<u32> = (0..50u32).collect();
        top3.sort_by(|a, b| logits[*b as usize].total_cmp(&logits[*a as usize]));
        top3.truncate(3);
        let run = |p| {
            let mut s = Sampler::new(p);
            (0..40).map(|_| s.sample(&logits)).collect::<Vec<_>>()
        };
        let first = run(params);
        assert_eq!(first, run(params));
        assert!(
            first.iter().all(|t| top3.contains(t)),
            "{first:?} outside {top3:?}"
        );
        assert!(first.iter().collect::<std::collections::HashSet<_>>().len() > 1);
    }

    #[test]
    fn tiny_top_p_is_greedy() {
        let logits = [0.0, 3.0, 1.0, 2.9];
        let mut s = Sampler::new(SamplingParams {
            temperature: 1.0,
            top_p: 0.01,
            top_k: 0,
            seed: Some(1),
        });
        assert!((0..20).all(|_| s.sample(&logits) == 1));
    }
}
