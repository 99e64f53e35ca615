//! The sampler pipeline: logits -> grammar mask -> temperature -> top-k -> top-p -> min-p
//! -> seeded draw (greedy at temperature 0).
//!
//! The grammar mask comes first, so every later stage renormalizes over tokens the grammar
//! allows: top-p keeps the most likely *allowed* tokens, and a constrained generation never
//! ends up with nothing to draw from while the grammar has a continuation. Draws come from
//! ChaCha8 seeded per generation, so the same seed, prompt and parameters give the same
//! output on every run and platform.
//!
//! Cost: one pass over the vocabulary to gather allowed candidates (skipping whole zero
//! mask words), then work proportional to the candidates kept; top-p sorts only the head
//! of the distribution unless that head holds less than `top_p` of the mass.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::RuntimeError;

/// Sampling parameters (the subset of [`crate::GenerateParams`] the sampler uses).
#[derive(Debug, Clone, PartialEq)]
pub struct SamplerConfig {
    /// 0 = greedy.
    pub temperature: f32,
    /// Keep the k most likely tokens (0 = off).
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose mass reaches p (1.0 = off).
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` times the most likely one (0.0 = off).
    pub min_p: f32,
    /// llama.cpp's repetition penalty on the last [`PENALTY_WINDOW`] tokens: positive
    /// logits divided by it, negative ones multiplied (1.0 = off).
    pub repeat_penalty: f32,
    /// OpenAI's presence penalty: subtracted once from tokens seen in the window (0 = off).
    pub presence_penalty: f32,
    /// OpenAI's frequency penalty: subtracted per occurrence in the window (0 = off).
    pub frequency_penalty: f32,
}

/// Tokens (prompt tail plus output) the penalties look back over, as llama.cpp's default
/// `repeat_last_n`.
pub const PENALTY_WINDOW: usize = 64;

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            temperature: 0.7,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repeat_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
        }
    }
}

impl SamplerConfig {
    /// Checks the ranges (temperature >= 0 and finite, 0 < top_p <= 1, 0 <= min_p <= 1).
    pub fn validate(&self) -> Result<(), RuntimeError> {
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(RuntimeError::Params {
                param: "temperature",
                msg: format!("{} is not a finite number >= 0", self.temperature),
            });
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(RuntimeError::Params {
                param: "top_p",
                msg: format!("{} is not in (0, 1]", self.top_p),
            });
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(RuntimeError::Params {
                param: "min_p",
                msg: format!("{} is not in [0, 1]", self.min_p),
            });
        }
        if !(self.repeat_penalty.is_finite() && self.repeat_penalty > 0.0) {
            return Err(RuntimeError::Params {
                param: "repeat_penalty",
                msg: format!("{} is not a finite number > 0", self.repeat_penalty),
            });
        }
        for (param, v) in [
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
        ] {
            if !(-2.0..=2.0).contains(&v) {
                return Err(RuntimeError::Params {
                    param,
                    msg: format!("{v} is not in [-2, 2]"),
                });
            }
        }
        Ok(())
    }

    /// Whether any penalty is on.
    pub fn penalizes(&self) -> bool {
        self.repeat_penalty != 1.0 || self.presence_penalty != 0.0 || self.frequency_penalty != 0.0
    }

    /// Applies the penalties to `logits` for the tokens in `recent` (the last
    /// [`PENALTY_WINDOW`] tokens). Cost: O(window log window).
    pub fn penalize(&self, logits: &mut [f32], recent: &[u32]) {
        if !self.penalizes() {
            return;
        }
        let mut seen: Vec<u32> = recent.to_vec();
        seen.sort_unstable();
        for run in seen.chunk_by(|a, b| a == b) {
            let Some(l) = logits.get_mut(run[0] as usize) else {
                continue;
            };
            if *l > 0.0 {
                *l /= self.repeat_penalty;
            } else {
                *l *= self.repeat_penalty;
            }
            *l -= self.presence_penalty + self.frequency_penalty * run.len() as f32;
        }
    }
}

/// A seeded sampler for one generation.
#[derive(Debug, Clone)]
pub struct Sampler {
    cfg: SamplerConfig,
    rng: ChaCha8Rng,
    cand: Vec<(u32, f32)>,
}

const HEAD: usize = 1024;

impl Sampler {
    /// A sampler drawing from ChaCha8 seeded with `seed`.
    pub fn new(cfg: SamplerConfig, seed: u64) -> Sampler {
        Sampler {
            cfg,
            rng: ChaCha8Rng::seed_from_u64(seed),
            cand: Vec::new(),
        }
    }

    /// Chooses a token from `logits`, among those whose bit is set in `allowed` (all when
    /// `None`). `None` when no token is allowed (or every allowed logit is NaN or -inf).
    pub fn sample(&mut self, logits: &[f32], allowed: Option<&[u32]>) -> Option<u32> {
        if self.cfg.temperature <= 0.0 {
            return greedy(logits, allowed);
        }
        // One pass builds the candidates, scaled by the temperature, and their maximum; a
        // second exponentiates and sums; a third normalizes (and totals, when no filter
        // follows). For a 262k vocabulary each pass is a few hundred microseconds.
        let inv_t = 1.0 / self.cfg.temperature;
        let cand = &mut self.cand;
        let max = scaled_candidates(cand, logits, allowed, inv_t);
        if cand.is_empty() {
            return None;
        }
        let desc = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if cand.len() == 1 {
            return Some(cand[0].0);
        }
        if self.cfg.top_k > 0 && self.cfg.top_k < cand.len() {
            cand.select_nth_unstable_by(self.cfg.top_k - 1, desc);
            cand.truncate(self.cfg.top_k);
        }
        // Softmax (in place: logits become probabilities).
        let mut sum = 0.0f64;
        for c in cand.iter_mut() {
            c.1 = if max == f32::INFINITY {
                if c.1 == f32::INFINITY {
                    1.0
                } else {
                    0.0
                }
            } else {
                (c.1 - max).exp()
            };
            sum += c.1 as f64;
        }
        let filtered = self.cfg.top_p < 1.0 || self.cfg.min_p > 0.0;
        let mut total = 0.0f32;
        for c in cand.iter_mut() {
            c.1 = (c.1 as f64 / sum) as f32;
            total += c.1;
        }
        if self.cfg.top_p < 1.0 {
            if cand.len() > HEAD {
                cand.select_nth_unstable_by(HEAD - 1, desc);
                let head: f32 = cand[..HEAD].iter().map(|c| c.1).sum();
                if head >= self.cfg.top_p {
                    cand.truncate(HEAD);
                }
            }
            cand.sort_unstable_by(desc);
            let mut acc = 0.0f32;
            let mut keep = cand.len();
            for (i, c) in cand.iter().enumerate() {
                acc += c.1;
                if acc >= self.cfg.top_p {
                    keep = i + 1;
                    break;
                }
            }
            cand.truncate(keep.max(1));
        }
        if self.cfg.min_p > 0.0 {
            let pmax = cand.iter().map(|c| c.1).fold(0.0f32, f32::max);
            let cut = pmax * self.cfg.min_p;
            cand.retain(|c| c.1 >= cut);
        }
        if filtered {
            total = cand.iter().map(|c| c.1).sum();
        }
        let mut r = self.rng.random::<f32>() * total;
        for c in cand.iter() {
            if r < c.1 {
                return Some(c.0);
            }
            r -= c.1;
        }
        cand.iter()
            .rev()
            .find(|c| c.1 > 0.0)
            .or(cand.last())
            .map(|c| c.0)
    }
}

/// Fills `cand` with the allowed tokens (all when `allowed` is `None`) whose logits are
/// not NaN or `-inf`, each scaled by `inv_t`, and returns the largest scaled logit. Cost:
/// one pass over the mask's set bits (or the logits).
fn scaled_candidates(
    cand: &mut Vec<(u32, f32)>,
    logits: &[f32],
    allowed: Option<&[u32]>,
    inv_t: f32,
) -> f32 {
    cand.clear();
    let mut max = f32::NEG_INFINITY;
    let mut push = |i: usize, l: f32| {
        let s = l * inv_t;
        if s > max {
            max = s;
        }
        cand.push((i as u32, s));
    };
    match allowed {
        Some(mask) => {
            for i in set_bits(mask) {
                if let Some(&l) = logits.get(i) {
                    if l.is_finite() || l == f32::INFINITY {
                        push(i, l);
                    }
                }
            }
        }
        None => {
            for (i, &l) in logits.iter().enumerate() {
                if !l.is_nan() && l != f32::NEG_INFINITY {
                    push(i, l);
                }
            }
        }
    }
    max
}

/// The token ids whose bits are set in a mask (bit `t % 32` of word `t / 32`), in order.
fn set_bits(mask: &[u32]) -> impl Iterator<Item = usize> + '_ {
    mask.iter().enumerate().flat_map(|(w, &bits)| {
        let mut b = bits;
        std::iter::from_fn(move || {
            (b != 0).then(|| {
                let i = w * 32 + b.trailing_zeros() as usize;
                b &= b - 1;
                i
            })
        })
    })
}

/// The highest logit's token among the allowed ones (the lowest id on a tie), in one pass
/// without building the candidate list; NaN and -inf are never chosen.
fn greedy(logits: &[f32], allowed: Option<&[u32]>) -> Option<u32> {
    let mut best: Option<(u32, f32)> = None;
    let mut see = |i: usize, l: f32| {
        if l.is_nan() || l == f32::NEG_INFINITY {
            return;
        }
        match best {
            Some((_, b)) if l <= b => {}
            _ => best = Some((i as u32, l)),
        }
    };
    match allowed {
        Some(mask) => {
            for i in set_bits(mask) {
                if let Some(&l) = logits.get(i) {
                    see(i, l);
                }
            }
        }
        None => return argmax(logits),
    }
    best.map(|b| b.0)
}

/// The first index of the largest logit, ignoring NaN and `-inf` (`None` when nothing
/// else is left). Cost: two passes over the row, the first one vectorized (lanes of
/// `>`-maxima, which never take a NaN); a few microseconds for 262k logits.
fn argmax(logits: &[f32]) -> Option<u32> {
    const LANES: usize = 16;
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let chunks = logits.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for (m, &l) in lanes.iter_mut().zip(c) {
            if l > *m {
                *m = l;
            }
        }
    }
    let mut max = f32::NEG_INFINITY;
    for &l in lanes.iter().chain(rest) {
        if l > max {
            max = l;
        }
    }
    if max == f32::NEG_INFINITY {
        return None;
    }
    logits.iter().position(|&l| l == max).map(|i| i as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(t: f32, k: usize, p: f32, m: f32) -> SamplerConfig {
        SamplerConfig {
            temperature: t,
            top_k: k,
            top_p: p,
            min_p: m,
            ..Default::default()
        }
    }

    #[test]
    fn penalties_follow_llama_cpp_and_openai() {
        let c = SamplerConfig {
            repeat_penalty: 2.0,
            presence_penalty: 0.5,
            frequency_penalty: 0.25,
            ..Default::default()
        };
        let mut l = vec![4.0, -4.0, 1.0];
        c.penalize(&mut l, &[0, 1, 1]);
        assert_eq!(l, vec![4.0 / 2.0 - 0.75, -8.0 - 1.0, 1.0]);
        assert!(SamplerConfig {
            repeat_penalty: 0.0,
            ..Default::default()
        }
        .validate()
        .is_err());
        assert!(SamplerConfig {
            presence_penalty: 3.0,
            ..Default::default()
        }
        .validate()
        .is_err());
    }

    #[test]
    fn greedy_takes_the_best_allowed_token() {
        let logits = [1.0, 5.0, 3.0, 4.0];
        let mut s = Sampler::new(cfg(0.0, 0, 1.0, 0.0), 1);
        assert_eq!(s.sample(&logits, None), Some(1));
        assert_eq!(s.sample(&logits, Some(&[0b1101])), Some(3));
        assert_eq!(s.sample(&logits, Some(&[0])), None);
    }

    #[test]
    fn argmax_matches_the_scalar_walk() {
        let scalar = |v: &[f32]| {
            let mut best: Option<(u32, f32)> = None;
            for (i, &l) in v.iter().enumerate() {
                if l.is_nan() || l == f32::NEG_INFINITY {
                    continue;
                }
                if best.is_none_or(|(_, b)| l > b) {
                    best = Some((i as u32, l));
                }
            }
            best.map(|b| b.0)
        };
        let mut v: Vec<f32> = (0..1000).map(|i| ((i * 7919) % 101) as f32).collect();
        for len in [0, 1, 15, 16, 17, 999, 1000] {
            assert_eq!(argmax(&v[..len]), scalar(&v[..len]), "len {len}");
        }
        v[3] = f32::NAN;
        v[500] = 1e9;
        v[700] = 1e9;
        assert_eq!(argmax(&v), Some(500));
        v[999] = f32::INFINITY;
        assert_eq!(argmax(&v), Some(999));
        assert_eq!(argmax(&[f32::NAN, f32::NEG_INFINITY]), None);
        assert_eq!(argmax(&[f32::NEG_INFINITY, -1.0, f32::NAN]), Some(1));
    }

    #[test]
    fn same_seed_same_draws() {
        let logits: Vec<f32> = (0..1000)
            .map(|i| ((i * 7919) % 101) as f32 / 10.0)
            .collect();
        let draw = |seed| {
            let mut s = Sampler::new(cfg(1.0, 0, 0.95, 0.0), seed);
            (0..50)
                .map(|_| s.sample(&logits, None).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }

    #[test]
    fn filters_restrict_the_support() {
        // Probabilities ~ 0.64, 0.24, 0.09, 0.03 at temperature 1.
        let logits = [3.0, 2.0, 1.0, 0.0];
        let support = |c: SamplerConfig| {
            let mut s = Sampler::new(c, 3);
            let mut seen = [false; 4];
            for _ in 0..2000 {
                seen[s.sample(&logits, None).unwrap() as usize] = true;
            }
            seen
        };
        assert_eq!(support(cfg(1.0, 0, 1.0, 0.0)), [true; 4]);
        assert_eq!(support(cfg(1.0, 2, 1.0, 0.0)), [true, true, false, false]);
        assert_eq!(support(cfg(1.0, 0, 0.8, 0.0)), [true, true, false, false]);
        assert_eq!(support(cfg(1.0, 0, 1.0, 0.2)), [true, true, false, false]);
        assert_eq!(support(cfg(1.0, 0, 0.5, 0.0)), [true, false, false, false]);
    }

    #[test]
    fn masked_tokens_are_never_drawn() {
        let logits: Vec<f32> = (0..100).map(|i| i as f32 / 10.0).collect();
        let mask = [0x0000_0401u32, 0, 0, 0];
        let mut s = Sampler::new(cfg(2.0, 0, 1.0, 0.0), 9);
        for _ in 0..500 {
            let t = s.sample(&logits, Some(&mask)).unwrap();
            assert!(t == 0 || t == 10, "{t}");
        }
    }

    #[test]
    fn bad_parameters_are_refused() {
        assert!(cfg(-1.0, 0, 1.0, 0.0).validate().is_err());
        assert!(cfg(f32::NAN, 0, 1.0, 0.0).validate().is_err());
        assert!(cfg(1.0, 0, 0.0, 0.0).validate().is_err());
        assert!(cfg(1.0, 0, 1.0, 1.5).validate().is_err());
        assert!(cfg(0.7, 40, 0.9, 0.05).validate().is_ok());
    }
}
