//! How many tokens each level has and how big they are (Fela §III-B, Eq. 2, with the token-count
//! reading that matches the paper's own examples).
//!
//! A T-i token trains sub-model i on `b_i` samples. Level 1 has `n_1 = max(X / b_th, N)` tokens
//! of `b_1 = X / n_1` samples (X the global batch, `b_th` sub-model 1's threshold batch, N the
//! workers): at least one per worker. A sub-model with weight `w_i` (its parallelism degree,
//! `w_1 = 1`, non-decreasing powers of two) takes `w_i / w_{i-1}` tokens of the level below per
//! token, so `n_i = n_1 / w_i` tokens of `b_i = w_i · b_1` samples: every level processes
//! exactly X samples per iteration. (The paper's text writes `n_i = (w_i / w_1) · n_1`, which its
//! Fig. 3 and its tuned `{1, 8, 8}` contradict.) When `n_1` does not divide X, the last T-1
//! token carries the remainder, and every higher token is as big as the tokens it consumes.

use concord_engine::prelude::*;

/// The token counts of one iteration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenPlan {
    /// Samples per iteration (X).
    pub total: u64,
    /// Tokens per level (`n_i`).
    pub counts: Vec<u64>,
    /// T-i tokens one T-(i+1) token consumes (`r_i = w_{i+1} / w_i`), one per level but the last.
    pub ratios: Vec<u64>,
    /// Samples of the regular T-1 token (`b_1`; the last may carry more).
    pub base_batch: u64,
}

impl TokenPlan {
    /// The plan for X = `total` samples over `workers` workers with threshold batch
    /// `threshold` and one weight per sub-model; `key` names the weights in errors.
    pub fn new(
        total: u64,
        workers: u32,
        threshold: u64,
        weights: &[u32],
        key: &str,
    ) -> Result<TokenPlan> {
        check_weights(weights, workers, key)?;
        let n = workers as u64;
        if total < n {
            return Err(EngineError::config(
                "batch",
                total,
                format!(
                    "the global batch ({total}) must give every one of the {n} workers a token"
                ),
            ));
        }
        let n1 = (total / threshold.max(1)).max(n);
        let mut counts = Vec::with_capacity(weights.len());
        for &w in weights {
            let w = w as u64;
            if !n1.is_multiple_of(w) {
                return Err(EngineError::config(
                    key,
                    format!("{weights:?}"),
                    format!(
                        "weight {w} does not divide the {n1} level-1 tokens \
                         (n_1 = max(X / b_th, N) = max({total} / {threshold}, {n}))"
                    ),
                ));
            }
            counts.push(n1 / w);
        }
        let ratios = weights.windows(2).map(|p| (p[1] / p[0]) as u64).collect();
        Ok(TokenPlan {
            total,
            counts,
            ratios,
            base_batch: total / n1,
        })
    }

    /// Number of levels (sub-models).
    pub fn levels(&self) -> usize {
        self.counts.len()
    }

    /// Tokens in all levels.
    pub fn tokens(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The first token id of `level`: ids run level by level (level 1 first), so the paper's
    /// Fig. 3 numbering (T-1: 0..7, T-2: 8..11, T-3: 12..13) holds whatever order tokens are
    /// created in.
    pub fn first_id(&self, level: usize) -> u64 {
        self.counts[..level].iter().sum()
    }

    /// The level of token `id`.
    pub fn level_of(&self, id: u64) -> usize {
        let mut start = 0;
        for (l, &c) in self.counts.iter().enumerate() {
            if id < start + c {
                return l;
            }
            start += c;
        }
        self.levels() - 1
    }

    /// The samples (offset within the iteration, count) of T-1 token `k`.
    pub fn leaf_span(&self, k: u64) -> (u64, u64) {
        let n1 = self.counts[0];
        let start = k * self.base_batch;
        let len = if k + 1 == n1 {
            self.total - start
        } else {
            self.base_batch
        };
        (start, len)
    }
}

/// The candidate weights for N workers: `1, 2, 4, …, 2^⌊log2 N⌋`.
pub fn weight_candidates(workers: u32) -> Vec<u32> {
    let mut c = vec![1];
    while c[c.len() - 1] * 2 <= workers {
        c.push(c[c.len() - 1] * 2);
    }
    c
}

/// Every weight vector of `levels` sub-models the tuner tries: `w_1 = 1`, non-decreasing, from
/// [`weight_candidates`], in lexicographic order (Fela's Cases 0–9 for N = 8, M = 3).
pub fn weight_cases(levels: usize, workers: u32) -> Vec<Vec<u32>> {
    let cands = weight_candidates(workers);
    let mut out = vec![vec![1]];
    for _ in 1..levels {
        let mut next = Vec::new();
        for w in &out {
            let last = w[w.len() - 1];
            for &c in cands.iter().filter(|&&c| c >= last) {
                let mut v = w.clone();
                v.push(c);
                next.push(v);
            }
        }
        out = next;
    }
    out
}

/// The CTD subset sizes the tuner's second phase tries after CTD off (N): N/2, N/4, …, 1 (sizes
/// that do not divide N cannot share the work evenly).
pub fn subset_sizes(workers: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut s = workers / 2;
    while s >= 1 && workers.is_multiple_of(s) {
        out.push(s);
        if s == 1 {
            break;
        }
        s /= 2;
    }
    out
}

fn check_weights(weights: &[u32], workers: u32, key: &str) -> Result<()> {
    let bad = |reason: String| Err(EngineError::config(key, format!("{weights:?}"), reason));
    let Some(&first) = weights.first() else {
        return bad("needs one weight per sub-model".into());
    };
    if first != 1 {
        return bad("the first sub-model's weight is the base: it must be 1".into());
    }
    let cands = weight_candidates(workers);
    for (i, w) in weights.iter().enumerate() {
        if !cands.contains(w) {
            return bad(format!(
                "weight {w} (sub-model {}) must be one of {cands:?} for {workers} workers",
                i + 1
            ));
        }
        if i > 0 && *w < weights[i - 1] {
            return bad(
                "weights must not decrease: deeper sub-models need more parallelism".into(),
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_follow_eq_2_and_the_weights() {
        // Fig. 3: X = 128, b_1 = 16, w = {1, 2, 4}: 8, 4 and 2 tokens.
        let p = TokenPlan::new(128, 8, 16, &[1, 2, 4], "w").unwrap();
        assert_eq!(p.counts, vec![8, 4, 2]);
        assert_eq!(p.ratios, vec![2, 2]);
        assert_eq!(p.base_batch, 16);
        assert_eq!((p.first_id(1), p.first_id(2)), (8, 12));
        // The max(.., N) of Eq. 2: X = 64, N = 8 gives 8 tokens of 8 samples.
        let p = TokenPlan::new(64, 8, 16, &[1], "w").unwrap();
        assert_eq!((p.counts[0], p.base_batch), (8, 8));
        // X = 1024, b_th = 16, {1, 8, 8}: 64, 8, 8 tokens.
        let p = TokenPlan::new(1024, 8, 16, &[1, 8, 8], "w").unwrap();
        assert_eq!(p.counts, vec![64, 8, 8]);
    }

    #[test]
    fn every_level_covers_x_samples_with_a_remainder() {
        let p = TokenPlan::new(100, 8, 16, &[1, 2], "w").unwrap();
        let total: u64 = (0..p.counts[0]).map(|k| p.leaf_span(k).1).sum();
        assert_eq!(total, 100);
        assert_eq!(p.leaf_span(7), (84, 16));
    }

    #[test]
    fn bad_weights_name_the_key() {
        for w in [vec![2, 2], vec![1, 3], vec![1, 4, 2], vec![1, 16], vec![]] {
            let e = TokenPlan::new(128, 8, 16, &w, "strategy.fela.weights").unwrap_err();
            assert!(e.to_string().contains("strategy.fela.weights"), "{e}");
        }
        // 12 level-1 tokens (X = 192, b_th = 16) cannot be grouped by 8.
        let e = TokenPlan::new(192, 8, 16, &[1, 8], "strategy.fela.weights").unwrap_err();
        assert!(e.to_string().contains("does not divide the 12"), "{e}");
    }

    #[test]
    fn the_tuner_tries_the_papers_13_cases() {
        let cases = weight_cases(3, 8);
        assert_eq!(cases.len(), 10);
        assert_eq!(cases[2], vec![1, 1, 4]);
        assert_eq!(cases[9], vec![1, 8, 8]);
        assert_eq!(subset_sizes(8), vec![4, 2, 1]);
    }
}
