//! The scheduler's load-distribution policies (§1.13): when to reassign, and to what.
//!
//! PSLD and PSLD without exploration run Algorithms 1–3 over the fitted cost model; the strawman
//! assigns in proportion to the literal measured speeds. Both share the trigger: the speed
//! variation `(best − worst)/worst` above `var_threshold`, or — every `gain_check_every` periods
//! (A7) — a greedy assignment predicted at least 10% faster than the current one, so that a
//! recovery can be acted on. Static policies never reassign.

use crate::assign;
use crate::options::{PolicyKind, Resolved};
use crate::psld::{self, PsldParams};
use crate::telemetry::{History, PeriodReport, Pred};
use concord_engine::prelude::*;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

/// Relative predicted gain that makes the periodic check reassign (A7).
const GAIN_CHECK: f64 = 0.10;

/// A new assignment and what led to it.
#[derive(Clone, Debug, PartialEq)]
pub struct Proposal {
    /// Owner of every block.
    pub owners: Vec<ServerId>,
    /// The superior set used (PSLD), or every server (strawman).
    pub superior: Vec<ServerId>,
    /// Algorithm 1 found too few good servers: launch one more.
    pub scale_out: bool,
}

/// What a policy learned and drew so far: all it carries across a checkpoint.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct PolicyState {
    history: History,
    pred: Pred,
    literal: BTreeMap<ServerId, f64>,
    rng: ChaCha8Rng,
    periods: u64,
}

/// A load-distribution policy with its telemetry history.
pub struct LoadPolicy {
    kind: PolicyKind,
    params: PsldParams,
    var_threshold: f64,
    scale_threshold: f64,
    gain_check_every: u64,
    initial_servers: u32,
    history: History,
    pred: Pred,
    literal: BTreeMap<ServerId, f64>,
    rng: ChaCha8Rng,
    periods: u64,
    block_bytes: Vec<u64>,
}

impl LoadPolicy {
    /// What this policy learned and drew so far, for a checkpoint.
    pub fn state(&self) -> PolicyState {
        PolicyState {
            history: self.history.clone(),
            pred: self.pred.clone(),
            literal: self.literal.clone(),
            rng: self.rng.clone(),
            periods: self.periods,
        }
    }

    /// Continues from `state` (from [`LoadPolicy::state`]).
    pub fn restore(&mut self, state: PolicyState) {
        self.history = state.history;
        self.pred = state.pred;
        self.literal = state.literal;
        self.rng = state.rng;
        self.periods = state.periods;
    }

    /// The policy of `opts`, for blocks of the given sizes; `seed` makes exploration reproducible.
    pub fn new(opts: &Resolved, block_bytes: Vec<u64>, seed: u64) -> LoadPolicy {
        LoadPolicy {
            kind: opts.policy,
            params: opts.psld,
            var_threshold: opts.var_threshold,
            scale_threshold: opts.scale_threshold,
            gain_check_every: opts.gain_check_every,
            initial_servers: opts.initial_servers,
            history: History::new(opts.history),
            pred: Pred::default(),
            literal: BTreeMap::new(),
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x5053_4c44),
            periods: 0,
            block_bytes,
        }
    }

    /// The current fitted model (for logs and figures).
    pub fn pred(&self) -> &Pred {
        &self.pred
    }

    fn model_bytes(&self) -> f64 {
        self.block_bytes.iter().sum::<u64>() as f64
    }

    /// The model with every server of `servers` covered: a server never measured (just added)
    /// is predicted as the average of the others (§1.10 step 2).
    fn covered_pred(&self, servers: &[ServerId]) -> Pred {
        let mut pred = self.pred.clone();
        if let Some(avg) = self.pred.average_model() {
            for &r in servers {
                if pred.get(r).is_none() {
                    pred.insert(r, avg.clone());
                }
            }
        }
        pred
    }

    /// Ingests one period of reports from every worker and decides whether to reassign.
    pub fn on_period(
        &mut self,
        reports: &[PeriodReport],
        current: &[ServerId],
        servers: &[ServerId],
        force: bool,
    ) -> Option<Proposal> {
        self.history.ingest(reports);
        self.pred = self.history.fit();
        self.literal = self.history.literal_speeds();
        self.periods += 1;
        if !self.kind.is_dynamic() || servers.is_empty() {
            return None;
        }
        let pred = self.covered_pred(servers);
        let s_ref = self.model_bytes() / servers.len() as f64;
        let speeds: Vec<f64> = servers
            .iter()
            .filter_map(|&r| pred.speed(r, s_ref))
            .collect();
        let straggling = psld::variation(&speeds) > self.var_threshold;
        let check = self.gain_check_every > 0 && self.periods.is_multiple_of(self.gain_check_every);
        if !(force || straggling || check) {
            return None;
        }
        if !(force || straggling) {
            // Periodic gain check: act only if a greedy assignment is clearly better.
            let greedy = self.greedy(&pred, servers, s_ref);
            let now = psld::predicted_makespan(&self.block_bytes, current, &pred);
            let then = psld::predicted_makespan(&self.block_bytes, &greedy, &pred);
            let clear_gain = then <= (1.0 - GAIN_CHECK) * now;
            if !clear_gain {
                return None;
            }
        }
        let proposal = self.assign(servers);
        (force || proposal.owners != current).then_some(proposal)
    }

    /// Alg. 3 with ε = 0 over the superior set: the predicted best, for the gain check.
    fn greedy(&mut self, pred: &Pred, servers: &[ServerId], s_ref: f64) -> Vec<ServerId> {
        match self.kind {
            PolicyKind::Strawman => {
                assign::strawman(&self.block_bytes, servers, &self.speeds_for(servers))
            }
            _ => {
                let superior =
                    psld::superior_set(pred, servers, s_ref, self.params.z, self.params.strict);
                let p = PsldParams {
                    epsilon: 0.0,
                    ..self.params
                };
                psld::eps_greedy(
                    &self.block_bytes,
                    servers,
                    &superior,
                    pred,
                    &p,
                    &mut self.rng,
                )
            }
        }
    }

    /// Literal speeds for `servers`; a server never measured gets the mean of the others.
    fn speeds_for(&self, servers: &[ServerId]) -> BTreeMap<ServerId, f64> {
        let known: Vec<f64> = servers
            .iter()
            .filter_map(|r| self.literal.get(r).copied())
            .filter(|v| v.is_finite() && *v > 0.0)
            .collect();
        let mean = if known.is_empty() {
            1.0
        } else {
            known.iter().sum::<f64>() / known.len() as f64
        };
        servers
            .iter()
            .map(|&r| {
                let v = self
                    .literal
                    .get(&r)
                    .copied()
                    .filter(|v| v.is_finite() && *v > 0.0);
                (r, v.unwrap_or(mean))
            })
            .collect()
    }

    /// A fresh assignment of every block over `servers` (also used when a server joins or leaves).
    pub fn assign(&mut self, servers: &[ServerId]) -> Proposal {
        match self.kind {
            PolicyKind::Strawman => Proposal {
                owners: assign::strawman(&self.block_bytes, servers, &self.speeds_for(servers)),
                superior: servers.to_vec(),
                scale_out: false,
            },
            _ => {
                let pred = self.covered_pred(servers);
                if servers.iter().any(|&r| pred.get(r).is_none()) {
                    // Nothing measured yet: the initial round-robin is all there is to go on.
                    return Proposal {
                        owners: assign::round_robin(self.block_bytes.len(), servers),
                        superior: servers.to_vec(),
                        scale_out: false,
                    };
                }
                let s_ref = self.model_bytes() / servers.len() as f64;
                let superior =
                    psld::superior_set(&pred, servers, s_ref, self.params.z, self.params.strict);
                let scale_out =
                    (superior.len() as f64) < self.scale_threshold * self.initial_servers as f64;
                let owners = psld::eps_greedy(
                    &self.block_bytes,
                    servers,
                    &superior,
                    &pred,
                    &self.params,
                    &mut self.rng,
                );
                Proposal {
                    owners,
                    superior,
                    scale_out,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::ElasticOptions;
    use crate::telemetry::OlsStats;

    /// Sixteen 4 MB blocks over four servers, PSLD defaults with `epsilon`.
    fn policy(kind: &str, epsilon: f64) -> LoadPolicy {
        let config = RunConfig {
            servers: 4,
            ..RunConfig::default()
        };
        let opts = ElasticOptions {
            policy: kind.into(),
            epsilon,
            ..ElasticOptions::default()
        }
        .resolve(&config)
        .expect("valid options");
        LoadPolicy::new(&opts, vec![4_000_000; 16], 7)
    }

    /// One period in which two workers saw every server take `secs_per_mb[r]` per MB of its load,
    /// at two different loads (so the fits are well determined).
    fn period(secs_per_mb: &[f64]) -> Vec<PeriodReport> {
        (0..2)
            .map(|w| PeriodReport {
                worker: w,
                per_server: secs_per_mb
                    .iter()
                    .enumerate()
                    .map(|(r, &k)| {
                        let mut st = OlsStats::default();
                        for (i, mb) in [8.0, 16.0, 8.0, 16.0].into_iter().enumerate() {
                            // A little deterministic noise, the same for both workers.
                            let noise = 1.0 + 0.02 * (i as f64 - 1.5);
                            st.add(mb * 1e6, k * mb * noise);
                        }
                        (r as ServerId, st)
                    })
                    .collect(),
            })
            .collect()
    }

    const SERVERS: [ServerId; 4] = [0, 1, 2, 3];

    #[test]
    fn a_slow_server_triggers_a_reassignment_that_avoids_it() {
        let mut p = policy("psld", 0.0);
        let current = assign::round_robin(16, &SERVERS);
        let proposal = p
            .on_period(&period(&[0.01, 0.01, 0.1, 0.01]), &current, &SERVERS, false)
            .expect("variation 9 > 1 reassigns");
        assert!(!proposal.superior.contains(&2), "{proposal:?}");
        assert!(!proposal.owners.contains(&2), "ε = 0 never uses it");
        assert!(!proposal.scale_out, "3 of 4 superior is not < ½ · 4");
        // Balanced over the other three within one block.
        let counts: Vec<usize> = [0, 1, 3]
            .iter()
            .map(|s| proposal.owners.iter().filter(|o| *o == s).count())
            .collect();
        assert!(counts.iter().all(|&c| (5..=6).contains(&c)), "{counts:?}");
    }

    #[test]
    fn equal_servers_do_not_trigger_and_a_forced_period_does() {
        let mut p = policy("psld", 0.1);
        let current = assign::round_robin(16, &SERVERS);
        let even = period(&[0.01, 0.011, 0.0105, 0.01]);
        assert_eq!(p.on_period(&even, &current, &SERVERS, false), None);
        assert!(p.on_period(&even, &current, &SERVERS, true).is_some());
    }

    #[test]
    fn most_servers_slow_asks_for_a_new_one() {
        let mut p = policy("psld", 0.1);
        let current = assign::round_robin(16, &SERVERS);
        let proposal = p
            .on_period(&period(&[0.01, 0.1, 0.1, 0.1]), &current, &SERVERS, false)
            .expect("reassigns");
        assert_eq!(proposal.superior, vec![0]);
        assert!(proposal.scale_out, "1 superior of 4 is below ½ · 4");
    }

    #[test]
    fn static_policies_never_reassign() {
        for kind in ["mxnet", "tf", "round-robin"] {
            let mut p = policy(kind, 0.1);
            let current = assign::round_robin(16, &SERVERS);
            let slow = period(&[0.01, 0.01, 0.1, 0.01]);
            assert_eq!(p.on_period(&slow, &current, &SERVERS, true), None, "{kind}");
        }
    }

    #[test]
    fn the_strawman_shares_in_proportion_to_measured_speed() {
        let mut p = policy("strawman", 0.1);
        let current = assign::round_robin(16, &SERVERS);
        let proposal = p
            .on_period(&period(&[0.01, 0.01, 0.02, 0.02]), &current, &SERVERS, true)
            .expect("forced");
        let count = |s: ServerId| proposal.owners.iter().filter(|&&o| o == s).count();
        // Speeds 2:2:1:1 of 16 blocks: 5⅓, 5⅓, 2⅔, 2⅔.
        assert!((5..=6).contains(&count(0)) && (5..=6).contains(&count(1)));
        assert!((2..=3).contains(&count(2)) && (2..=3).contains(&count(3)));
    }
}
