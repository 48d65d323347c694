//! The estimators: one least-squares fit per (worker, server) — free, or through the origin when
//! the sizes do not vary or the free fit would make α or β negative — and their pooling over
//! workers into one server's model with its standard error (spec §1.4).

use super::model::{non_negative, VarQuad};
use super::{OlsStats, ServerModel};

/// One (worker, server) fit before pooling over workers.
#[derive(Clone, Copy, Debug)]
pub(super) struct PairFit {
    pub(super) alpha: f64,
    pub(super) beta: f64,
    /// Variance of this single fit's prediction (used only when the server has one worker).
    pub(super) var: VarQuad,
}

/// OLS of t on s with α, β ≥ 0 (the least-squares fit on the boundary when the free fit
/// leaves it), and the OLS variance of its mean prediction.
pub(super) fn ols_fit(st: &OlsStats) -> PairFit {
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
pub(super) fn degenerate_fit(st: &OlsStats) -> PairFit {
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
pub(super) fn pool(fits: &[PairFit]) -> Option<ServerModel> {
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
