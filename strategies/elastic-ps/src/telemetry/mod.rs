//! Load telemetry and the per-server cost model `Pred(r, s) = α_r·s + β_r` (spec §1.2, §1.4).
//!
//! Workers time every exchange with every parameter server and report, once per period, the
//! sufficient statistics of those (size, time) samples ([`PeriodReport`]). The scheduler keeps the
//! last `H` periods in a [`History`] and fits, per server, a linear model of communication time
//! on bytes with its standard error ([`ServerModel`]); all of them together are the profile
//! [`Pred`] that Algorithms 1–3 ([`crate::psld`]) read.
//!
//! Estimator (\[choice\] §1.4): one ordinary-least-squares fit per (worker, server) over the window;
//! `Pred_mean` is the mean of the workers' predictions and `Pred_SEM` combines their sample
//! standard deviation over `√W` with the fits' own OLS standard errors of the mean prediction
//! (the part of the noise all workers share — the server's own fluctuation — does not average
//! out over workers). With a single worker it is that worker's OLS standard error. A fit whose
//! sizes do not vary, or whose times do not grow with size, is taken through the origin (β = 0,
//! time proportional to load): more load is never predicted free. α and β are never negative.
//!
//! - `samples`: what workers collect, [`OlsStats`] per server in a [`PeriodReport`];
//! - `history`: the scheduler's window of periods and the refit ([`History`]);
//! - `estimate`: the per-(worker, server) fits and their pooling into a server's model;
//! - `model`: the resulting [`ServerModel`]s and the profile [`Pred`].

mod estimate;
mod history;
mod model;
mod samples;

pub use history::History;
pub use model::{Pred, ServerModel};
pub use samples::{OlsStats, PeriodReport};

#[cfg(test)]
mod tests;
