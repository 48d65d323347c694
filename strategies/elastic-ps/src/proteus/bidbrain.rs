//! BidBrain (thesis §4.3, spec §5.1.6) as pure functions: the expected cost, work and cost per
//! work of a footprint (Eqs. 4.1–4.4), the eviction estimates β and median time to eviction
//! learnt from a price history, and the acquisition and renewal decisions.
//!
//! Units: times in minutes, prices in $/h (Eq. 4.1's per-minute price is `price / 60`), work
//! in vCPU-minutes times φ.

use super::market::PriceTrace;
use serde::{Deserialize, Serialize};

/// The application's characteristics BidBrain reads (Table 4.2); the thesis measures them.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppParams {
    /// φ: how efficiently the application scales (0–1).
    pub phi: f64,
    /// σ: minutes without progress after adding or removing resources.
    pub sigma_min: f64,
    /// λ: minutes without progress after an eviction.
    pub lambda_min: f64,
}

impl Default for AppParams {
    /// φ = 1 (work proportional to vCPUs, AgileML's claim), σ = 1 min (additions load data in
    /// the background), λ = 2 min (a warned eviction's hand-over; Fig. 4.15's one slower
    /// iteration).
    fn default() -> Self {
        AppParams {
            phi: 1.0,
            sigma_min: 1.0,
            lambda_min: 2.0,
        }
    }
}

/// One allocation as BidBrain sees it: `k` instances of one type bought at one price.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AllocView {
    /// Instances k_i.
    pub k: u32,
    /// Work per instance per minute ν_i (vCPUs; 0 for machines that run no workers, e.g. the
    /// reliable machines in AgileML's stage 3, or Fig. 4.5's on-demand instance).
    pub nu: f64,
    /// Price per instance, $/h (P_i·60).
    pub price_per_h: f64,
    /// β_i: probability of eviction within the billing hour (0 for on-demand).
    pub beta: f64,
    /// Median time to eviction when evicted, minutes.
    pub median_tte_min: f64,
    /// t_r: minutes left in the allocation's billing hour.
    pub t_r_min: f64,
}

impl AllocView {
    /// An on-demand allocation: never evicted.
    pub fn on_demand(k: u32, nu: f64, price_per_h: f64, t_r_min: f64) -> AllocView {
        AllocView {
            k,
            nu,
            price_per_h,
            beta: 0.0,
            median_tte_min: t_r_min,
            t_r_min,
        }
    }
}

/// Eq. 4.1 for one allocation: `(1-β)·P·k·t_r + β·0·k·t_r` (an evicted hour is refunded).
pub fn alloc_cost(a: &AllocView) -> f64 {
    (1.0 - a.beta) * (a.price_per_h / 60.0) * a.k as f64 * a.t_r_min
}

/// Eq. 4.1: C_A, the expected cost of the rest of the footprint's billing hours.
pub fn cost(x: &[AllocView]) -> f64 {
    x.iter().map(alloc_cost).sum()
}

/// ω_i \[C\]: the most compute time left in the allocation's hour, cut where an eviction is
/// expected first: `(1-β)·t_r + β·min(t_r, median time to eviction)`.
pub fn omega(a: &AllocView) -> f64 {
    (1.0 - a.beta) * a.t_r_min + a.beta * a.t_r_min.min(a.median_tte_min)
}

/// The probability that at least one allocation of `x` is evicted: `1 - Π(1-β_j)`.
pub fn any_eviction(x: &[AllocView]) -> f64 {
    1.0 - x.iter().map(|a| 1.0 - a.beta).product::<f64>()
}

/// Eq. 4.2: Δt_i = ω_i − (1 − Π(1−β_j))·λ − σ, with σ only where the footprint changes.
/// Not clamped: [`work`] counts a negative Δt as no work.
pub fn delta_t(a: &AllocView, x: &[AllocView], app: &AppParams, changing: bool) -> f64 {
    let sigma = if changing { app.sigma_min } else { 0.0 };
    omega(a) - any_eviction(x) * app.lambda_min - sigma
}

/// Eq. 4.3: W_A = (Σ k_i·Δt_i·ν_i)·φ; an allocation whose Δt_i is negative adds nothing \[C\]
/// (it cannot produce negative work).
pub fn work(x: &[AllocView], app: &AppParams, changing: bool) -> f64 {
    x.iter()
        .map(|a| a.k as f64 * delta_t(a, x, app, changing).max(0.0) * a.nu)
        .sum::<f64>()
        * app.phi
}

/// Eq. 4.4: E_A = C_A / W_A, the expected cost per unit work; +∞ where no work is expected.
pub fn cost_per_work(x: &[AllocView], app: &AppParams, changing: bool) -> f64 {
    let w = work(x, app, changing);
    if w > 0.0 {
        cost(x) / w
    } else {
        f64::INFINITY
    }
}

/// The acquisition decision: the candidate (by index) minimising E_A(x ∪ {c}) (σ applies),
/// if it lowers E_A(x) (no σ: the footprint as it is).
pub fn best_acquisition(
    x: &[AllocView],
    candidates: &[AllocView],
    app: &AppParams,
) -> Option<usize> {
    let now = cost_per_work(x, app, false);
    let mut with = x.to_vec();
    with.push(AllocView::on_demand(0, 0.0, 0.0, 0.0));
    let last = with.len() - 1;
    let mut best: Option<(usize, f64)> = None;
    for (i, c) in candidates.iter().enumerate() {
        with[last] = *c;
        let e = cost_per_work(&with, app, true);
        if e < now && best.is_none_or(|(_, b)| e < b) {
            best = Some((i, e));
        }
    }
    best.map(|(i, _)| i)
}

/// The renewal decision for allocation `a` of `x` (shortly before its hour ends, `x[a]`
/// describing the hour it would renew for): terminate if E_A(x \ {a}) (σ applies) is below
/// E_A(x).
pub fn should_terminate(x: &[AllocView], a: usize, app: &AppParams) -> bool {
    let without: Vec<AllocView> = x
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != a)
        .map(|(_, v)| *v)
        .collect();
    cost_per_work(&without, app, true) < cost_per_work(x, app, false)
}

/// The bid deltas BidBrain considers: `n` values spaced evenly in log from $0.0001 to $0.4
/// over the market price (thesis §4.3.2).
pub fn delta_grid(n: usize) -> Vec<f64> {
    let (lo, hi) = (1e-4_f64, 0.4_f64);
    match n {
        0 => Vec::new(),
        1 => vec![lo],
        _ => (0..n)
            .map(|i| lo * (hi / lo).powf(i as f64 / (n - 1) as f64))
            .collect(),
    }
}

/// β and the median time to eviction per bid delta for one instance type, learnt from its
/// price history.
#[derive(Clone, Debug, PartialEq)]
pub struct BetaTable {
    /// The bid deltas ($/h over the market price), increasing.
    pub deltas: Vec<f64>,
    /// β per delta: the share of historical starts evicted within the hour.
    pub beta: Vec<f64>,
    /// Median time to eviction per delta among the evicted starts, minutes (60 where none was).
    pub median_tte_min: Vec<f64>,
}

impl BetaTable {
    /// Learns the table from `trace` over `[from, to)`: for each delta, start at every
    /// `every_s` instant (bid = price then + delta) and see whether the price rises above the
    /// bid within the hour, and when.
    pub fn estimate(
        trace: &PriceTrace,
        from: f64,
        to: f64,
        every_s: f64,
        deltas: &[f64],
    ) -> BetaTable {
        let mut beta = Vec::with_capacity(deltas.len());
        let mut median = Vec::with_capacity(deltas.len());
        for &d in deltas {
            let mut starts = 0usize;
            let mut ttes = Vec::new();
            let mut t = from;
            while t < to {
                let bid = trace.price_at(t) + d;
                starts += 1;
                if let Some(e) = trace.first_above(bid, t, t + 3600.0) {
                    ttes.push((e - t) / 60.0);
                }
                t += every_s;
            }
            beta.push(if starts == 0 {
                0.0
            } else {
                ttes.len() as f64 / starts as f64
            });
            ttes.sort_by(f64::total_cmp);
            median.push(match ttes.len() {
                0 => 60.0,
                n if n % 2 == 1 => ttes[n / 2],
                n => 0.5 * (ttes[n / 2 - 1] + ttes[n / 2]),
            });
        }
        BetaTable {
            deltas: deltas.to_vec(),
            beta,
            median_tte_min: median,
        }
    }

    /// (β, median time to eviction) for a bid `delta` over the market: the entry of the
    /// largest grid delta not above it (the safe side), or the smallest delta's.
    pub fn lookup(&self, delta: f64) -> (f64, f64) {
        let i = self
            .deltas
            .partition_point(|&d| d <= delta * (1.0 + 1e-9))
            .saturating_sub(1);
        match (self.beta.get(i), self.median_tte_min.get(i)) {
            (Some(&b), Some(&m)) => (b, m),
            _ => (0.0, 60.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const APP: AppParams = AppParams {
        phi: 0.9,
        sigma_min: 1.0,
        lambda_min: 2.0,
    };

    fn spot(k: u32, nu: f64, price: f64, beta: f64, tte: f64) -> AllocView {
        AllocView {
            k,
            nu,
            price_per_h: price,
            beta,
            median_tte_min: tte,
            t_r_min: 60.0,
        }
    }

    #[test]
    fn equations_4_1_to_4_4_on_a_hand_case() {
        // On-demand: 1 × ν 4 at $0.209/h, 30 min left. Spot: 2 × ν 4 at $0.06/h, β 0.2,
        // median eviction after 30 min, a full hour left.
        let od = AllocView::on_demand(1, 4.0, 0.209, 30.0);
        let sp = spot(2, 4.0, 0.06, 0.2, 30.0);
        let x = [od, sp];
        // C = 0.209/60·1·30 + 0.8·0.06/60·2·60 = 0.1045 + 0.096.
        assert!((cost(&x) - 0.2005).abs() < 1e-12);
        // ω: 30; 0.8·60 + 0.2·min(60, 30) = 54.
        assert!((omega(&od) - 30.0).abs() < 1e-12);
        assert!((omega(&sp) - 54.0).abs() < 1e-12);
        // P(any eviction) = 1 − 1·0.8 = 0.2; Δt = ω − 0.2·2 − σ.
        assert!((delta_t(&od, &x, &APP, false) - 29.6).abs() < 1e-12);
        assert!((delta_t(&sp, &x, &APP, true) - 52.6).abs() < 1e-12);
        // W = (1·29.6·4 + 2·53.6·4)·0.9 without σ.
        let w = (29.6 * 4.0 + 2.0 * 53.6 * 4.0) * 0.9;
        assert!((work(&x, &APP, false) - w).abs() < 1e-9);
        assert!((cost_per_work(&x, &APP, false) - 0.2005 / w).abs() < 1e-15);
    }

    #[test]
    fn fig_4_5_a_spot_allocation_lowers_cost_per_work_although_cost_rises() {
        // The reliable on-demand c4.xlarge runs no workers (ν 0): infinite cost per work.
        let x = [AllocView::on_demand(1, 0.0, 0.209, 60.0)];
        assert_eq!(cost_per_work(&x, &APP, false), f64::INFINITY);
        let c = spot(2, 4.0, 0.06, 0.2, 30.0);
        let with = [x[0], c];
        // Cost rises: 0.209 → 0.209 + 0.8·0.06·2 = 0.305.
        assert!((cost(&with) - 0.305).abs() < 1e-12);
        assert!(cost(&with) > cost(&x));
        // Work 2·(54 − 0.2·2 − 1)·4·0.9 = 378.72, so E_A = 0.305/378.72.
        assert!((cost_per_work(&with, &APP, true) - 0.305 / 378.72).abs() < 1e-15);
        assert_eq!(best_acquisition(&x, &[c], &APP), Some(0));
    }

    #[test]
    fn acquisition_takes_the_cheapest_work_and_only_if_it_helps() {
        let od = AllocView::on_demand(1, 4.0, 0.209, 60.0);
        let cheap = spot(4, 4.0, 0.05, 0.1, 40.0);
        let dear = spot(4, 4.0, 0.50, 0.0, 60.0);
        // E_A(x) = 0.209 / 216 ≈ 9.7e-4 per vCPU-min. The dear one alone would cost
        // (0.209 + 2.0)/((59·4 + 4·59·4)·0.9) ≈ 2.1e-3: worse, so never chosen.
        assert_eq!(best_acquisition(&[od], &[dear], &APP), None);
        assert_eq!(best_acquisition(&[od], &[dear, cheap], &APP), Some(1));
    }

    #[test]
    fn renewal_drops_an_allocation_that_raises_cost_per_work() {
        let od = AllocView::on_demand(1, 4.0, 0.209, 60.0);
        let cheap = spot(4, 4.0, 0.05, 0.0, 60.0);
        let dear = spot(4, 4.0, 0.60, 0.0, 60.0);
        // With all three: C = 0.209 + 0.2 + 2.4 = 2.809 over W = 9·60·4·0.9 = 1944 → 1.44e-3.
        // Without `dear` (σ = 1): C = 0.409 over 5·59·4·0.9 = 1062 → 3.9e-4: drop it.
        let x = [od, cheap, dear];
        assert!(should_terminate(&x, 2, &APP));
        // Without `cheap`: C = 2.609 over 5·59·4·0.9 → 2.5e-3, worse than 1.44e-3: keep it.
        assert!(!should_terminate(&x, 1, &APP));
    }

    #[test]
    fn beta_is_the_share_of_starts_evicted_within_the_hour() {
        // Price 0.10 for an hour, then 0.20 for an hour, then 0.10. Starts every 30 min over
        // the first two hours: t = 0, 30, 60, 90 min.
        let tr = PriceTrace::new(vec![(0.0, 0.10), (3600.0, 0.20), (7200.0, 0.10)]).unwrap();
        let t = BetaTable::estimate(&tr, 0.0, 7200.0, 1800.0, &[0.05, 0.5]);
        // Delta 0.05: the starts at 0 and 30 min see the rise to 0.20 (> 0.15) at 60 min,
        // after 60 min (no: the window is [t, t+60 min), so only the start at 30 min, after
        // 30 min); starts at 60 and 90 min bid 0.25 and are never evicted.
        assert_eq!(t.beta[0], 0.25);
        assert_eq!(t.median_tte_min[0], 30.0);
        assert_eq!(t.beta[1], 0.0);
        assert_eq!(t.lookup(0.07), (0.25, 30.0));
        assert_eq!(t.lookup(0.5), (0.0, 60.0));
        assert_eq!(t.lookup(0.0), (0.25, 30.0));
    }

    #[test]
    fn delta_grid_spans_the_thesis_range() {
        let g = delta_grid(16);
        assert_eq!(g.len(), 16);
        assert!((g[0] - 1e-4).abs() < 1e-12 && (g[15] - 0.4).abs() < 1e-12);
        assert!(g.windows(2).all(|w| w[0] < w[1]));
    }
}
