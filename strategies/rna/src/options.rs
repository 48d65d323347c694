//! The `[strategy.rna]` options, their defaults and their validation.

use concord_engine::prelude::*;

/// How a worker combines the gradients it computed since its last contribution (§5.1.3 vs §5.4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Accumulate {
    /// `Σ_t (t − min t + 1)·g_t / Σ_t (t − min t + 1)`: newer gradients weigh more (§5.1.3).
    #[default]
    WeightedAvg,
    /// Plain sum (the TF WriteOp of §5.4).
    Sum,
}

/// How RNA-H's parameter server merges a group's push into the model it answers with (§5.2;
/// spec §2.1.4 \[AMBIG\]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Merge {
    /// The mean of every group's latest pushed parameters (the spec's \[CHOICE\]: "pushed to a
    /// central PS to be averaged").
    #[default]
    Average,
    /// Each group as a node of a classic parameter server (§5.2: "each group can be regarded as
    /// a node in the traditional PS"): the server adds the group's change since it last
    /// answered that group to the global model, and answers with the global model.
    Delta,
}

/// Probes per round unless the options say otherwise: the power of two choices (thesis §5.1).
pub const DEFAULT_Q: i64 = 2;

/// Options of `rna` (and `eager-sgd`, which is RNA with one probe).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RnaOptions {
    /// Probes per round (power-of-two choices): 2 (thesis), or every worker where there are
    /// fewer; 1 is eager-SGD's random initiator.
    pub q: Option<i64>,
    /// Staleness bound η: a gradient computed on version t is dropped at round k if k − t > η.
    /// Default 3 (the thesis gives none; Sven's bound).
    pub eta: i64,
    /// Local accumulation rule: `weighted-avg` (default) or `sum`.
    pub accumulate: Accumulate,
    /// Probe every worker and trigger only when all are ready, one gradient per version: the BSP
    /// limit of RNA (R8 (i)). Default false.
    pub wait_for_all: bool,
    /// Tensor-fusion bucket size in MiB (> 0). Default 64.
    pub bucket_mib: f64,
    /// Hierarchical mode (RNA-H, §5.2): workers split into groups by profiled speed, RNA inside
    /// each group, asynchronous model averaging of the groups through parameter server 0.
    /// Default false (flat RNA).
    pub hierarchy: bool,
    /// Split rule of the group formation: a set of workers is split into slow (mean step time
    /// above the set's mean v) and fast when ζ > `split_ratio` · v, ζ being the slowest minus
    /// the fastest mean step time. The thesis's literal rule is `split_ratio = 1` (ζ > v), which
    /// splits two equal halves only when one is more than 3× slower than the other; its own
    /// mixed-heterogeneity setting (≈ 2×) would then never split. Default 0.5: two equal halves
    /// split when one is more than 5/3× slower than the other. Must be > 0.
    pub split_ratio: f64,
    /// Local steps each worker times before the groups are formed; the job runs flat RNA until
    /// every worker has reported (the warm-up). Default 20 (spec's W). Must be >= 1.
    pub profile_steps: i64,
    /// Rounds of a group between two model averagings through the server (H). Default 1.
    pub sync_period: i64,
    /// Explicit groups (worker ids), instead of profiling: must partition `0..workers`.
    /// Default empty (groups formed from profiled speeds).
    pub groups: Vec<Vec<i64>>,
    /// How the server merges a group's push: `average` (default) or `delta`.
    pub merge: Merge,
}

impl Default for RnaOptions {
    fn default() -> Self {
        RnaOptions {
            q: None,
            eta: 3,
            accumulate: Accumulate::WeightedAvg,
            wait_for_all: false,
            bucket_mib: 64.0,
            hierarchy: false,
            split_ratio: 0.5,
            profile_steps: 20,
            sync_period: 1,
            groups: Vec::new(),
            merge: Merge::Average,
        }
    }
}

/// How the groups of the hierarchical mode are obtained.
#[derive(Clone, Debug, PartialEq)]
pub enum GroupSource {
    /// Given in the options (ascending worker ids per group, groups in the given order).
    Explicit(Vec<Vec<u32>>),
    /// Formed by the controller from `profile_steps` timed local steps per worker.
    Profiled {
        /// Split rule factor (see [`RnaOptions::split_ratio`]).
        split_ratio: f64,
        /// Timed steps per worker.
        profile_steps: u64,
    },
}

/// Validated options of the hierarchical mode.
#[derive(Clone, Debug, PartialEq)]
pub struct Hierarchy {
    /// Where the groups come from.
    pub groups: GroupSource,
    /// Group rounds between two averagings through the server (H >= 1).
    pub sync_period: u64,
    /// How the server merges a group's push.
    pub merge: Merge,
}

/// Validated options.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    /// Probes per round (≤ workers).
    pub q: usize,
    /// Staleness bound.
    pub eta: u64,
    /// Accumulation rule.
    pub accumulate: Accumulate,
    /// BSP limit.
    pub wait_for_all: bool,
    /// Fusion bucket in elements.
    pub bucket_elems: usize,
    /// The hierarchical mode, when on.
    pub hierarchy: Option<Hierarchy>,
}

impl RnaOptions {
    /// Checks every value against the run; errors name `strategy.<name>.<key>`.
    pub fn resolve(&self, name: &str, config: &RunConfig) -> Result<Resolved> {
        let key = |k: &str| format!("strategy.{name}.{k}");
        let workers = config.workers as i64;
        let q = self.q.unwrap_or(DEFAULT_Q.min(workers));
        if q < 1 || q > workers {
            return Err(EngineError::config(
                key("q"),
                q,
                format!("must be between 1 and the number of workers ({workers})"),
            ));
        }
        if self.eta < 0 {
            return Err(EngineError::config(
                key("eta"),
                self.eta,
                "the staleness bound must be >= 0",
            ));
        }
        if !(self.bucket_mib.is_finite() && self.bucket_mib > 0.0) {
            return Err(EngineError::config(
                key("bucket_mib"),
                self.bucket_mib,
                "must be a finite size in MiB > 0",
            ));
        }
        let hierarchy = self.resolve_hierarchy(name, config)?;
        Ok(Resolved {
            q: if self.wait_for_all {
                config.workers as usize
            } else {
                q as usize
            },
            eta: self.eta as u64,
            accumulate: self.accumulate,
            wait_for_all: self.wait_for_all,
            bucket_elems: ((self.bucket_mib * 1024.0 * 1024.0 / 4.0) as usize).max(1),
            hierarchy,
        })
    }

    fn resolve_hierarchy(&self, name: &str, config: &RunConfig) -> Result<Option<Hierarchy>> {
        let key = |k: &str| format!("strategy.{name}.{k}");
        if !(self.split_ratio.is_finite() && self.split_ratio > 0.0) {
            return Err(EngineError::config(
                key("split_ratio"),
                self.split_ratio,
                "must be a finite number > 0 (groups split when ζ > split_ratio · v)",
            ));
        }
        if self.profile_steps < 1 {
            return Err(EngineError::config(
                key("profile_steps"),
                self.profile_steps,
                "at least 1 timed step per worker is needed to form groups",
            ));
        }
        if self.sync_period < 1 {
            return Err(EngineError::config(
                key("sync_period"),
                self.sync_period,
                "must be >= 1 (group rounds between two averagings)",
            ));
        }
        if !self.hierarchy {
            if !self.groups.is_empty() {
                return Err(EngineError::config(
                    key("groups"),
                    format!("{:?}", self.groups),
                    "groups only apply with hierarchy = true",
                ));
            }
            if self.merge != Merge::Average {
                return Err(EngineError::config(
                    key("merge"),
                    format!("{:?}", self.merge).to_lowercase(),
                    "merge only applies with hierarchy = true",
                ));
            }
            return Ok(None);
        }
        let groups = if self.groups.is_empty() {
            if self.wait_for_all {
                return Err(EngineError::config(
                    key("wait_for_all"),
                    self.wait_for_all,
                    "with hierarchy = true, wait_for_all needs explicit `groups` \
                     (profiling takes several steps on one version)",
                ));
            }
            GroupSource::Profiled {
                split_ratio: self.split_ratio,
                profile_steps: self.profile_steps as u64,
            }
        } else {
            let n = config.workers as i64;
            let mut seen = vec![false; config.workers as usize];
            let mut out = Vec::new();
            for g in &self.groups {
                if g.is_empty() {
                    return Err(EngineError::config(
                        key("groups"),
                        format!("{:?}", self.groups),
                        "a group must not be empty",
                    ));
                }
                let mut members = Vec::new();
                for &w in g {
                    if w < 0 || w >= n || seen[w as usize] {
                        return Err(EngineError::config(
                            key("groups"),
                            format!("{:?}", self.groups),
                            format!(
                                "worker {w} is out of 0..{n} or listed twice: \
                                 groups must partition the workers"
                            ),
                        ));
                    }
                    seen[w as usize] = true;
                    members.push(w as u32);
                }
                members.sort_unstable();
                out.push(members);
            }
            if let Some(missing) = seen.iter().position(|s| !s) {
                return Err(EngineError::config(
                    key("groups"),
                    format!("{:?}", self.groups),
                    format!("worker {missing} is in no group: groups must partition the workers"),
                ));
            }
            GroupSource::Explicit(out)
        };
        Ok(Some(Hierarchy {
            groups,
            sync_period: self.sync_period as u64,
            merge: self.merge,
        }))
    }
}
