//! The scheduler's window over the workers' period reports and the refit of every server's model
//! from it; servers with no samples in the window keep their last model and speed.

use super::estimate::{degenerate_fit, ols_fit, pool, PairFit};
use super::{OlsStats, PeriodReport, Pred, ServerModel};
use concord_engine::prelude::*;
use std::collections::{BTreeMap, VecDeque};

/// History window of the last `window` periods per (worker, server) (default H = 5).
///
/// Every [`History::ingest`] is one period; a period older than the window is dropped. The last
/// model and the last literal speed of each server are remembered, so a server that received no
/// samples in the whole window (it holds no blocks) keeps its stale estimate, as the paper's
/// scheduler does (§1.4, A9).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
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
