//! Load telemetry and the per-server cost model `Pred(r, s) = α_r·s + β_r` (spec §1.2, §1.4).
//!
//! Workers time every exchange with every parameter server and report, once per period, the
//! sufficient statistics of those (size, time) samples ([`PeriodReport`]). The scheduler keeps the
//! last `H` periods in a [`History`] and fits, per server, a linear model of communication time
//! on bytes with its standard error ([`ServerModel`]); all of them together are the profile
//! [`Pred`] that Algorithms 1–3 ([`crate::psld`]) read.
//!
//! Estimator ([choice] §1.4): one ordinary-least-squares fit per (worker, server) over the window;
//! `Pred_mean` is the mean of the workers' predictions and `Pred_SEM` combines their sample
//! standard deviation over `√W` with the fits' own OLS standard errors of the mean prediction
//! (the part of the noise all workers share — the server's own fluctuation — does not average
//! out over workers). With a single worker it is that worker's OLS standard error. A fit whose sizes do not vary, or whose times do not grow with size, is taken
//! through the origin (β = 0, time proportional to load): more load is never predicted free.
//! α and β are never negative.

use concord_engine::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// Relative spread of sizes below which a fit is treated as degenerate: the standard deviation
/// of `s` is at most this fraction of its mean (sizes that are equal up to rounding).
const DEGENERATE_CV: f64 = 1e-6;

/// Sufficient statistics of an OLS fit of time t (seconds) on size s (bytes).
///
/// Workers accumulate these per server instead of shipping raw samples, so a report is a few
/// numbers per server whatever the period length, and reports merge by addition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OlsStats {
    /// Number of samples.
    pub n: f64,
    /// Σ s.
    pub sum_s: f64,
    /// Σ t.
    pub sum_t: f64,
    /// Σ s².
    pub sum_ss: f64,
    /// Σ s·t.
    pub sum_st: f64,
    /// Σ t².
    pub sum_tt: f64,
}

impl OlsStats {
    /// Adds one sample of `s` bytes that took `t` seconds.
    pub fn add(&mut self, s: f64, t: f64) {
        self.n += 1.0;
        self.sum_s += s;
        self.sum_t += t;
        self.sum_ss += s * s;
        self.sum_st += s * t;
        self.sum_tt += t * t;
    }

    /// Adds all samples of `other` (the statistics of the union of both sample sets).
    pub fn merge(&mut self, other: &OlsStats) {
        self.n += other.n;
        self.sum_s += other.sum_s;
        self.sum_t += other.sum_t;
        self.sum_ss += other.sum_ss;
        self.sum_st += other.sum_st;
        self.sum_tt += other.sum_tt;
    }

    /// Mean size (0 without samples).
    pub fn mean_s(&self) -> f64 {
        if self.n > 0.0 {
            self.sum_s / self.n
        } else {
            0.0
        }
    }

    /// Mean time (0 without samples).
    pub fn mean_t(&self) -> f64 {
        if self.n > 0.0 {
            self.sum_t / self.n
        } else {
            0.0
        }
    }

    /// Centered sum of squares of sizes, `Σ (s − s̄)²` (never negative).
    fn sxx(&self) -> f64 {
        if self.n > 0.0 {
            (self.sum_ss - self.sum_s * self.sum_s / self.n).max(0.0)
        } else {
            0.0
        }
    }

    /// Centered cross product, `Σ (s − s̄)(t − t̄)`.
    fn sxy(&self) -> f64 {
        if self.n > 0.0 {
            self.sum_st - self.sum_s * self.sum_t / self.n
        } else {
            0.0
        }
    }

    /// Residual sum of squares of the line `t = α·s + β` over these samples (never negative).
    fn sse(&self, alpha: f64, beta: f64) -> f64 {
        (self.sum_tt - 2.0 * alpha * self.sum_st - 2.0 * beta * self.sum_t
            + alpha * alpha * self.sum_ss
            + 2.0 * alpha * beta * self.sum_s
            + self.n * beta * beta)
            .max(0.0)
    }

    /// Whether the sizes do not vary enough to fit a slope.
    fn degenerate(&self) -> bool {
        let mean = self.mean_s();
        self.n < 2.0 || self.sxx() / self.n <= (DEGENERATE_CV * mean) * (DEGENERATE_CV * mean)
    }
}

/// One worker's samples of one report period, per server. A sample is (bytes the worker exchanged with
/// server r in one iteration = r's load, seconds that exchange took excluding barrier wait).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PeriodReport {
    /// Reporting worker.
    pub worker: u32,
    /// Statistics of this period's samples, per server the worker talked to.
    pub per_server: BTreeMap<ServerId, OlsStats>,
}

/// Variance of a prediction as a quadratic in the size: `Var(s) = a·s² + 2b·s + c`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct VarQuad {
    a: f64,
    b: f64,
    c: f64,
}

impl VarQuad {
    fn sem(&self, s: f64) -> f64 {
        let v = self.a * s * s + 2.0 * self.b * s + self.c;
        if v.is_finite() && v > 0.0 {
            v.sqrt()
        } else {
            0.0
        }
    }
}

/// A server's fitted model with its uncertainty.
///
/// `mean(s) = α·s + β` is the predicted time of exchanging `s` bytes with the server in one
/// iteration; `sem(s)` is the standard error of that prediction, from which the confidence bounds
/// of Algorithm 1 are built.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerModel {
    alpha: f64,
    beta: f64,
    /// The SEM is the weighted sum of the square roots of these variance quadratics: one part
    /// for a fitted model, one per averaged server for [`Pred::average_model`] (so the average
    /// of SEMs is exact at every size).
    sem_parts: Vec<(f64, VarQuad)>,
}

impl ServerModel {
    /// A model with the given α (s/byte), β (s) and a SEM that does not depend on the size (for
    /// the worked example and tests). Negative or non-finite inputs are taken as 0.
    pub fn fixed(alpha: f64, beta: f64, sem: f64) -> ServerModel {
        let sem = non_negative(sem);
        ServerModel {
            alpha: non_negative(alpha),
            beta: non_negative(beta),
            sem_parts: vec![(
                1.0,
                VarQuad {
                    a: 0.0,
                    b: 0.0,
                    c: sem * sem,
                },
            )],
        }
    }

    /// Time per byte (s/byte).
    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// Fixed time per exchange (s): update and acknowledgement latency.
    pub fn beta(&self) -> f64 {
        self.beta
    }

    /// `Pred_mean(r, s)`: predicted seconds for a load of `s` bytes.
    pub fn mean(&self, s: f64) -> f64 {
        self.alpha * s + self.beta
    }

    /// `Pred_SEM(r, s)`: standard error of [`ServerModel::mean`] at `s` bytes.
    pub fn sem(&self, s: f64) -> f64 {
        self.sem_parts.iter().map(|(w, q)| w * q.sem(s)).sum()
    }

    /// `Pred_lower(r, s) = mean − z·SEM` (z = 1.645 for the paper's 90% bound).
    pub fn lower(&self, s: f64, z: f64) -> f64 {
        self.mean(s) - z * self.sem(s)
    }

    /// `Pred_upper(r, s) = mean + z·SEM`.
    pub fn upper(&self, s: f64, z: f64) -> f64 {
        self.mean(s) + z * self.sem(s)
    }
}

fn non_negative(x: f64) -> f64 {
    if x.is_finite() && x > 0.0 {
        x
    } else {
        0.0
    }
}

/// The scheduler's profile of every server.
///
/// Servers are kept in id order so every iteration over the profile is deterministic.
#[derive(Clone, Debug, Default)]
pub struct Pred {
    models: BTreeMap<ServerId, ServerModel>,
}

impl Pred {
    /// The model of server `r`, if it has one.
    pub fn get(&self, r: ServerId) -> Option<&ServerModel> {
        self.models.get(&r)
    }

    /// Sets (or replaces) the model of server `r`.
    pub fn insert(&mut self, r: ServerId, m: ServerModel) {
        self.models.insert(r, m);
    }

    /// Servers with a model, ascending.
    pub fn servers(&self) -> Vec<ServerId> {
        self.models.keys().copied().collect()
    }

    /// Model for a newly added server: the average α, β and SEM of the existing ones (§1.4, A9/A10).
    /// The SEM of the result is, at every size, the mean of the existing servers' SEMs. `None`
    /// when no server has a model.
    pub fn average_model(&self) -> Option<ServerModel> {
        if self.models.is_empty() {
            return None;
        }
        let k = self.models.len() as f64;
        let alpha = self.models.values().map(|m| m.alpha).sum::<f64>() / k;
        let beta = self.models.values().map(|m| m.beta).sum::<f64>() / k;
        let sem_parts = self
            .models
            .values()
            .flat_map(|m| m.sem_parts.iter().map(move |&(w, q)| (w / k, q)))
            .collect();
        Some(ServerModel {
            alpha,
            beta,
            sem_parts,
        })
    }

    /// Model-based speed `s_ref / Pred_mean(r, s_ref)` (A6); None without a model.
    /// Also `None` when the predicted time is not positive (no usable estimate), so a detector
    /// never divides by zero.
    pub fn speed(&self, r: ServerId, s_ref: f64) -> Option<f64> {
        let t = self.get(r)?.mean(s_ref);
        (t.is_finite() && t > 0.0).then(|| s_ref / t)
    }
}

/// One (worker, server) fit before pooling over workers.
#[derive(Clone, Copy, Debug)]
struct PairFit {
    alpha: f64,
    beta: f64,
    /// Variance of this single fit's prediction (used only when the server has one worker).
    var: VarQuad,
}

/// History window of the last `window` periods per (worker, server) (default H = 5).
///
/// Every [`History::ingest`] is one period; a period older than the window is dropped. The last
/// model and the last literal speed of each server are remembered, so a server that received no
/// samples in the whole window (it holds no blocks) keeps its stale estimate, as the paper's
/// scheduler does (§1.4, A9).
#[derive(Clone, Debug)]
pub struct History {
    window: usize,
    periods: VecDeque<BTreeMap<(ServerId, u32), OlsStats>>,
    last_models: BTreeMap<ServerId, ServerModel>,
    last_speeds: BTreeMap<ServerId, f64>,
}

impl History {
    /// An empty history keeping the last `window` periods (at least one).
    pub fn new(window: usize) -> History {
        History {
            window: window.max(1),
            periods: VecDeque::new(),
            last_models: BTreeMap::new(),
            last_speeds: BTreeMap::new(),
        }
    }

    /// Appends one period: the reports of all workers for it (several reports of one worker
    /// are merged). The oldest period leaves the window when it is full.
    pub fn ingest(&mut self, reports: &[PeriodReport]) {
        let mut period: BTreeMap<(ServerId, u32), OlsStats> = BTreeMap::new();
        for rep in reports {
            for (&r, st) in &rep.per_server {
                if st.n > 0.0 {
                    period.entry((r, rep.worker)).or_default().merge(st);
                }
            }
        }
        self.periods.push_back(period);
        while self.periods.len() > self.window {
            self.periods.pop_front();
        }
    }

    /// Merged statistics over the window, per server then per worker.
    fn window_stats(&self) -> BTreeMap<ServerId, BTreeMap<u32, OlsStats>> {
        let mut out: BTreeMap<ServerId, BTreeMap<u32, OlsStats>> = BTreeMap::new();
        for period in &self.periods {
            for (&(r, w), st) in period {
                out.entry(r).or_default().entry(w).or_default().merge(st);
            }
        }
        out
    }

    /// Refits every server that has samples in the window; a server with no samples keeps its last model
    /// (faithful: this is why PSLD without exploration cannot see a recovered server, Fig. 18).
    pub fn fit(&mut self) -> Pred {
        let stats = self.window_stats();
        for (&r, ws) in &stats {
            let fits: Vec<PairFit> = ws
                .values()
                .map(|st| {
                    if st.degenerate() {
                        degenerate_fit(st)
                    } else {
                        ols_fit(st)
                    }
                })
                .collect();
            if let Some(m) = pool(&fits) {
                self.last_models.insert(r, m);
            }
        }
        Pred {
            models: self.last_models.clone(),
        }
    }

    /// Literal speed per server: bytes handled / time over the window (the strawman's "profiled performance"); servers with no samples keep their last value.
    /// Computed as `Σ s / Σ t` over all workers' samples of the window (the mean load over the
    /// mean exchange time); a server whose samples moved no bytes or took no time gets no new
    /// value.
    pub fn literal_speeds(&mut self) -> BTreeMap<ServerId, f64> {
        for (r, ws) in self.window_stats() {
            let mut all = OlsStats::default();
            for st in ws.values() {
                all.merge(st);
            }
            if all.sum_s > 0.0 && all.sum_t > 0.0 && (all.sum_s / all.sum_t).is_finite() {
                self.last_speeds.insert(r, all.sum_s / all.sum_t);
            }
        }
        self.last_speeds.clone()
    }
}

/// OLS of t on s with α, β ≥ 0 (the least-squares fit on the boundary when the free fit
/// leaves it), and the OLS variance of its mean prediction.
fn ols_fit(st: &OlsStats) -> PairFit {
    let (n, sxx, sxy) = (st.n, st.sxx(), st.sxy());
    let (ms, mt) = (st.mean_s(), st.mean_t());
    let mut alpha = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    let mut beta = mt - alpha * ms;
    if alpha <= 0.0 || beta < 0.0 {
        // Time not growing with size is noise, and a negative intercept is meaningless: take the
        // best line through the origin. (A flat line, α = 0, would predict that more load costs
        // nothing, and Algorithm 2 would pile every block onto that server.)
        beta = 0.0;
        alpha = if st.sum_ss > 0.0 {
            (st.sum_st / st.sum_ss).max(0.0)
        } else {
            0.0
        };
    }
    let sigma2 = if n > 2.0 {
        st.sse(alpha, beta) / (n - 2.0)
    } else {
        0.0
    };
    // Var(α̂s + β̂) = σ²·(1/n + (s − s̄)²/Sxx), written as a quadratic in s.
    let var = if sxx > 0.0 && n > 0.0 {
        VarQuad {
            a: sigma2 / sxx,
            b: -sigma2 * ms / sxx,
            c: sigma2 * (1.0 / n + ms * ms / sxx),
        }
    } else {
        VarQuad::default()
    };
    PairFit {
        alpha: non_negative(alpha),
        beta: non_negative(beta),
        var,
    }
}

/// Fit of samples whose sizes do not vary: the spec's second option, β = 0 and α through the
/// mean point (time proportional to load). Borrowing another server's β instead can leave a
/// lightly loaded server with α ≈ 0 — its samples carry none of the queueing that other servers'
/// intercepts absorb — and a flat model attracts every block in Algorithm 2. With all sizes zero
/// there is nothing to learn α from: α = 0 and β is the mean time.
fn degenerate_fit(st: &OlsStats) -> PairFit {
    let (n, ms, mt) = (st.n, st.mean_s(), st.mean_t());
    let sigma2 = if n > 1.0 {
        (st.sum_tt - n * mt * mt).max(0.0) / (n - 1.0)
    } else {
        0.0
    };
    if ms > 0.0 {
        let beta = 0.0;
        let alpha = mt / ms;
        // β is taken as known; Var(α̂) = σ²/(n·s̄²), so Var(α̂s + β) = σ²·s²/(n·s̄²).
        PairFit {
            alpha: non_negative(alpha),
            beta: non_negative(beta),
            var: VarQuad {
                a: sigma2 / (n * ms * ms),
                b: 0.0,
                c: 0.0,
            },
        }
    } else {
        PairFit {
            alpha: 0.0,
            beta: non_negative(mt),
            var: VarQuad {
                a: 0.0,
                b: 0.0,
                c: if n > 0.0 { sigma2 / n } else { 0.0 },
            },
        }
    }
}

/// One server's model from its workers' fits: mean prediction, and the SEM across workers (the
/// single fit's own OLS error when there is one worker).
fn pool(fits: &[PairFit]) -> Option<ServerModel> {
    let w = fits.len() as f64;
    let first = fits.first()?;
    let alpha = fits.iter().map(|f| f.alpha).sum::<f64>() / w;
    let beta = fits.iter().map(|f| f.beta).sum::<f64>() / w;
    let var = if fits.len() == 1 {
        first.var
    } else {
        // Var_w(α_w s + β_w)/W = (var α · s² + 2 cov(α, β) · s + var β)/W, sample (W − 1) moments.
        let d = w - 1.0;
        let var_a = fits.iter().map(|f| (f.alpha - alpha).powi(2)).sum::<f64>() / d;
        let var_b = fits.iter().map(|f| (f.beta - beta).powi(2)).sum::<f64>() / d;
        let cov = fits
            .iter()
            .map(|f| (f.alpha - alpha) * (f.beta - beta))
            .sum::<f64>()
            / d;
        // Plus each fit's own uncertainty, averaged and not divided by W: the samples of all
        // workers share the server's own fluctuations, so averaging over workers does not
        // shrink that part (counting it once keeps Algorithm 1 from seeing confident gaps
        // between servers that differ only by noise).
        let own = fits.iter().fold(VarQuad::default(), |acc, f| VarQuad {
            a: acc.a + f.var.a / w,
            b: acc.b + f.var.b / w,
            c: acc.c + f.var.c / w,
        });
        VarQuad {
            a: var_a / w + own.a,
            b: cov / w + own.b,
            c: var_b / w + own.c,
        }
    };
    Some(ServerModel {
        alpha,
        beta,
        sem_parts: vec![(1.0, var)],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(samples: &[(f64, f64)]) -> OlsStats {
        let mut st = OlsStats::default();
        for &(s, t) in samples {
            st.add(s, t);
        }
        st
    }

    fn report(worker: u32, per: &[(ServerId, &[(f64, f64)])]) -> PeriodReport {
        PeriodReport {
            worker,
            per_server: per.iter().map(|&(r, s)| (r, stats(s))).collect(),
        }
    }

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * (1.0 + a.abs().max(b.abs()))
    }

    #[test]
    fn merge_equals_adding_all_samples() {
        let a = [(1.0, 2.0), (3.0, 5.0)];
        let b = [(4.0, 1.0)];
        let mut m = stats(&a);
        m.merge(&stats(&b));
        assert_eq!(m, stats(&[(1.0, 2.0), (3.0, 5.0), (4.0, 1.0)]));
        assert_eq!(m.mean_s(), 8.0 / 3.0);
        assert_eq!(OlsStats::default().mean_t(), 0.0);
    }

    #[test]
    fn exact_line_is_recovered_with_zero_sem_when_workers_agree() {
        // t = 2e-9·s + 1e-3 for both workers, sizes 1..4 MB.
        let line: Vec<(f64, f64)> = (1..=4)
            .map(|k| {
                let s = k as f64 * 1e6;
                (s, 2e-9 * s + 1e-3)
            })
            .collect();
        let mut h = History::new(5);
        h.ingest(&[report(0, &[(7, &line)]), report(1, &[(7, &line)])]);
        let pred = h.fit();
        let m = pred.get(7).expect("server 7 fitted");
        assert!(close(m.alpha(), 2e-9, 1e-9), "alpha {}", m.alpha());
        assert!(close(m.beta(), 1e-3, 1e-9), "beta {}", m.beta());
        // Zero up to the rounding of the sums of squares (times are milliseconds here).
        assert!(m.sem(3e6) < 1e-9, "sem {}", m.sem(3e6));
        assert_eq!(pred.servers(), vec![7]);
    }

    #[test]
    fn noise_every_worker_shares_is_not_averaged_away() {
        // Both workers see the same noisy times (the server's own fluctuation): the spread
        // across workers is zero, but the server's speed is still uncertain. The SEM is each
        // fit's own OLS standard error of the mean prediction, not that over √W.
        let noisy: Vec<(f64, f64)> = [(1e6, 0.011), (2e6, 0.019), (3e6, 0.032), (4e6, 0.039)]
            .into_iter()
            .collect();
        let mut h = History::new(5);
        h.ingest(&[report(0, &[(3, &noisy)]), report(1, &[(3, &noisy)])]);
        let both = h.fit().get(3).cloned().expect("fitted");
        let mut h = History::new(5);
        h.ingest(&[report(0, &[(3, &noisy)])]);
        let one = h.fit().get(3).cloned().expect("fitted");
        assert!(
            one.sem(2.5e6) > 1e-4,
            "a real uncertainty: {}",
            one.sem(2.5e6)
        );
        for s in [1e6, 2.5e6, 5e6] {
            assert!(
                close(both.sem(s), one.sem(s), 1e-9),
                "at {s}: {} vs {}",
                both.sem(s),
                one.sem(s)
            );
        }
    }

    #[test]
    fn sem_is_stddev_over_workers_over_sqrt_w() {
        // Worker 0: t = 1e-9 s + 1e-3; worker 1: t = 3e-9 s + 1e-3 (exact lines).
        let l0: Vec<(f64, f64)> = [1e6, 2e6].iter().map(|&s| (s, 1e-9 * s + 1e-3)).collect();
        let l1: Vec<(f64, f64)> = [1e6, 2e6].iter().map(|&s| (s, 3e-9 * s + 1e-3)).collect();
        let mut h = History::new(5);
        h.ingest(&[report(0, &[(0, &l0)]), report(1, &[(0, &l1)])]);
        let m = h.fit().get(0).cloned().expect("fitted");
        let s = 4e6;
        // Predictions 5e-3 and 13e-3: mean 9e-3, sample stddev 4e-3·√2, SEM = that / √2 = 4e-3.
        assert!(close(m.mean(s), 9e-3, 1e-9), "mean {}", m.mean(s));
        assert!(close(m.sem(s), 4e-3, 1e-6), "sem {}", m.sem(s));
        assert!(close(m.upper(s, 1.645), 9e-3 + 1.645 * 4e-3, 1e-6));
        assert!(close(m.lower(s, 1.645), 9e-3 - 1.645 * 4e-3, 1e-6));
    }

    #[test]
    fn single_worker_uses_the_ols_standard_error() {
        // Residuals ±0.1 around t = s: s = 0,1,2,3, t = 0.1, 0.9, 2.1, 2.9.
        let pts = [(0.0, 0.1), (1.0, 0.9), (2.0, 2.1), (3.0, 2.9)];
        let st = stats(&pts);
        let f = ols_fit(&st);
        // Hand computation: s̄ = 1.5, Sxx = 5, Sxy = 4.8 → α = 0.96, β = 1.5 − 1.44 = 0.06.
        assert!(close(f.alpha, 0.96, 1e-12));
        assert!(close(f.beta, 0.06, 1e-12));
        let sse: f64 = pts
            .iter()
            .map(|&(s, t)| (t - 0.96 * s - 0.06_f64).powi(2))
            .sum();
        let sigma = (sse / 2.0).sqrt();
        let mut h = History::new(5);
        h.ingest(&[report(3, &[(1, &pts)])]);
        let m = h.fit().get(1).cloned().expect("fitted");
        for s in [0.0, 1.5, 4.0] {
            let want = sigma * (0.25 + (s - 1.5) * (s - 1.5) / 5.0_f64).sqrt();
            assert!(
                close(m.sem(s), want, 1e-9),
                "s = {s}: {} vs {want}",
                m.sem(s)
            );
        }
    }

    #[test]
    fn degenerate_fit_is_proportional_to_load() {
        // Servers 0 and 1 have varying sizes (β = 1 ms and 3 ms); server 2 always moves 8 MB in
        // 0.1 s: β = 0 and α = t̄/s̄, whatever the other servers' intercepts.
        let l0: Vec<(f64, f64)> = [1e6, 2e6].iter().map(|&s| (s, 1e-9 * s + 1e-3)).collect();
        let l1: Vec<(f64, f64)> = [1e6, 2e6].iter().map(|&s| (s, 1e-9 * s + 3e-3)).collect();
        let flat = [(8e6, 0.1), (8e6, 0.1), (8e6, 0.1)];
        let mut h = History::new(5);
        h.ingest(&[report(0, &[(0, &l0), (1, &l1), (2, &flat)])]);
        let m = h.fit().get(2).cloned().expect("fitted");
        assert_eq!(m.beta(), 0.0);
        assert!(close(m.alpha(), 0.1 / 8e6, 1e-12));
        assert!(close(m.mean(8e6), 0.1, 1e-9));
        // Twice the load, twice the predicted time: more load is never free.
        assert!(close(m.mean(16e6), 0.2, 1e-9));
    }

    #[test]
    fn negative_coefficients_are_clamped() {
        // Time falls with size: α would be negative → the best line through the origin.
        let down = [(1.0, 3.0), (2.0, 2.0), (3.0, 1.0)];
        let f = ols_fit(&stats(&down));
        assert_eq!(f.beta, 0.0);
        assert!(close(f.alpha, (3.0 + 4.0 + 3.0) / 14.0, 1e-12));
        // A line with a negative intercept → fit through the origin.
        let neg = [(1.0, 1.0), (2.0, 3.0), (3.0, 5.0)];
        let f = ols_fit(&stats(&neg));
        assert_eq!(f.beta, 0.0);
        assert!(close(f.alpha, (1.0 + 6.0 + 15.0) / 14.0, 1e-12));
    }

    #[test]
    fn window_drops_old_periods_and_idle_servers_keep_their_model() {
        let slow: Vec<(f64, f64)> = [1e6, 2e6].iter().map(|&s| (s, 1e-8 * s)).collect();
        let fast: Vec<(f64, f64)> = [1e6, 2e6].iter().map(|&s| (s, 1e-9 * s)).collect();
        let mut h = History::new(2);
        h.ingest(&[report(0, &[(0, &slow), (1, &slow)])]);
        let p = h.fit();
        assert!(close(p.get(1).map_or(0.0, |m| m.alpha()), 1e-8, 1e-9));
        // Two periods in which server 0 became fast and server 1 got no samples.
        h.ingest(&[report(0, &[(0, &fast)])]);
        h.ingest(&[report(0, &[(0, &fast)])]);
        let p = h.fit();
        assert!(close(p.get(0).map_or(0.0, |m| m.alpha()), 1e-9, 1e-9));
        assert!(close(p.get(1).map_or(0.0, |m| m.alpha()), 1e-8, 1e-9));
        let speeds = h.literal_speeds();
        assert!(close(speeds[&0], 1e9, 1e-9));
        // Server 1 had no samples in this window and no earlier literal-speed call: absent.
        assert!(!speeds.contains_key(&1));
    }

    #[test]
    fn literal_speed_is_bytes_over_time_and_sticky() {
        let mut h = History::new(1);
        h.ingest(&[
            report(0, &[(0, &[(4e6, 0.1), (4e6, 0.3)])]),
            report(1, &[(0, &[(4e6, 0.2)])]),
        ]);
        let sp = h.literal_speeds();
        assert!(close(sp[&0], 12e6 / 0.6, 1e-12));
        h.ingest(&[]);
        assert!(close(h.literal_speeds()[&0], 12e6 / 0.6, 1e-12));
        // The model, unlike the speed, was never fitted while samples were in the window.
        assert!(h.fit().get(0).is_none());
    }

    #[test]
    fn empty_inputs_do_not_panic() {
        let mut h = History::new(0);
        h.ingest(&[]);
        assert!(h.fit().servers().is_empty());
        assert!(h.literal_speeds().is_empty());
        h.ingest(&[report(0, &[(0, &[(0.0, 0.0)])])]);
        let m = h.fit().get(0).cloned().expect("fitted");
        assert_eq!((m.alpha(), m.beta(), m.sem(1.0)), (0.0, 0.0, 0.0));
        assert_eq!(Pred::default().average_model(), None);
        assert_eq!(Pred::default().speed(0, 1.0), None);
        let mut p = Pred::default();
        p.insert(0, ServerModel::fixed(0.0, 0.0, 0.0));
        assert_eq!(p.speed(0, 1.0), None);
    }

    #[test]
    fn average_model_and_speed() {
        let mut p = Pred::default();
        p.insert(0, ServerModel::fixed(1e-9, 1e-3, 0.02));
        p.insert(1, ServerModel::fixed(3e-9, 3e-3, 0.04));
        let avg = p.average_model().expect("two models");
        assert!(close(avg.alpha(), 2e-9, 1e-12));
        assert!(close(avg.beta(), 2e-3, 1e-12));
        assert!(close(avg.sem(1e6), 0.03, 1e-12));
        // s_ref = 1 MB on server 0: 1e6 / (1e-3 + 1e-3) bytes/s.
        assert!(close(p.speed(0, 1e6).unwrap_or(0.0), 5e8, 1e-12));
        assert_eq!(p.speed(9, 1e6), None);
    }

    #[test]
    fn report_round_trips_through_json() {
        let r = report(4, &[(2, &[(1.0, 2.0)]), (5, &[(3.0, 4.0), (5.0, 6.0)])]);
        let json = serde_json::to_string(&r).expect("serializes");
        let back: PeriodReport = serde_json::from_str(&json).expect("parses");
        assert_eq!(back, r);
    }
}
