//! `[strategy.pipedream]`, `[strategy.pipedream-mp]` and `[strategy.gpipe]`: the options users
//! write, checked at composition ([`PipeOptions::check`]) and resolved against the job into a
//! [`Layout`](crate::layout::Layout) when the roles are built.

use crate::versions::Weights;
use concord_engine::prelude::*;

/// The schedule a strategy runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// PipeDream: 1F1B-RR with NOAM minibatches in flight (or `depth`).
    PipeDream,
    /// Model parallelism: the same stages, one minibatch in flight.
    ModelParallel,
    /// GPipe: rounds of `depth` minibatches, recomputation, a flush per round.
    GPipe,
}

impl Kind {
    /// The strategy's name, as users select it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::PipeDream => "pipedream",
            Kind::ModelParallel => "pipedream-mp",
            Kind::GPipe => "gpipe",
        }
    }

    /// The config key its options live under.
    pub fn key(self) -> String {
        format!("strategy.{}", self.name())
    }
}

/// `depth`: a number of minibatches, or `"fit"`, the largest number whose stages still fit the
/// device's memory (how the thesis ran GPipe beside NOAM, §5.5.4).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(untagged, expecting = "a number of minibatches, or \"fit\"")]
pub enum Depth {
    /// This many minibatches.
    Minibatches(u32),
    /// A word: `"fit"` is the only one ([`PipeOptions::check`] refuses others).
    Word(String),
}

/// The most minibatches `depth = "fit"` puts in flight, whatever the memory: far past where a
/// flush's bubble or a warm-up still costs anything.
pub const MAX_FIT_DEPTH: u32 = 1024;

/// `depth = "fit"` puts at most the run's minibatches over this in flight, so that a run times
/// at least this many GPipe flushes (a depth past the run would time none), or a PipeDream
/// steady state this many times its warm-up. Under recomputation a GPipe stage keeps only its
/// input for each minibatch in flight, which for a recurrent model is a small tensor: memory
/// alone would allow thousands.
pub const FIT_RUN_SHARE: u64 = 4;

/// What users write under `[strategy.<name>]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct PipeOptions {
    /// Layer indices where stages 2, 3, … start; unset: the planner's choice.
    pub boundaries: Option<Vec<usize>>,
    /// Workers per stage (data parallelism inside a stage); unset with `boundaries`: one each.
    /// Workers beyond their sum stay idle.
    pub replicas: Option<Vec<u32>>,
    /// Minibatches the input stage keeps in flight (PipeDream: NOAM by default; GPipe: the
    /// minibatches per flush, NOAM by default), or `"fit"`: the most whose stages fit the
    /// device's memory. Ignored by `pipedream-mp`, which keeps one.
    pub depth: Option<Depth>,
    /// Weight stashing (PipeDream; off only for the ablation).
    pub stash: bool,
    /// Vertical sync (PipeDream; off by default, as in the thesis).
    pub vertical_sync: bool,
    /// The best straight pipeline instead of the planner's choice: one unreplicated stage per
    /// worker, compute and boundaries balanced among the cuts whose stages fit the workers'
    /// memory (the thesis's "pipelining alone").
    pub straight: bool,
    /// The planner's search: `"flat"` (one level, every worker) or `"hierarchical"` (level by
    /// level, the thesis's DP as printed).
    pub search: String,
    /// The planner's charge for a replicated stage's weight sync: `"ring"` (the default: this
    /// runtime's ring allreduce after the backward passes, `(compute + 2(m−1)/m·|w|/B) / m`) or
    /// `"thesis"` (the thesis's `(1/m)·max(compute, 2(m−1)·|w|/B)`).
    pub cost: String,
}

impl Default for PipeOptions {
    fn default() -> Self {
        PipeOptions {
            boundaries: None,
            replicas: None,
            depth: None,
            stash: true,
            vertical_sync: false,
            straight: false,
            search: "flat".into(),
            cost: "ring".into(),
        }
    }
}

impl PipeOptions {
    /// Checks what can be checked without the job: option combinations, ranges, and that the
    /// run's shape suits a pipeline.
    pub fn check(&self, kind: Kind, config: &RunConfig) -> Result<()> {
        let key = kind.key();
        if kind != Kind::PipeDream && (!self.stash || self.vertical_sync) {
            return Err(EngineError::config(
                format!("{key}.stash"),
                format!("stash = {}, vertical_sync = {}", self.stash, self.vertical_sync),
                format!(
                    "weight stashing and vertical sync are PipeDream's options; {} has no weight staleness",
                    kind.name()
                ),
            ));
        }
        if self.vertical_sync && !self.stash {
            return Err(EngineError::config(
                format!("{key}.vertical_sync"),
                "true",
                "vertical sync runs each minibatch on a stashed version: it needs stash = true",
            ));
        }
        match &self.depth {
            Some(Depth::Minibatches(0)) => {
                return Err(EngineError::config(
                    format!("{key}.depth"),
                    "0",
                    "at least one minibatch must be in flight",
                ));
            }
            Some(Depth::Word(w)) if w != "fit" => {
                return Err(EngineError::config(
                    format!("{key}.depth"),
                    format!("{w:?}"),
                    "a number of minibatches, or \"fit\" (the most that fit the device's memory)",
                ));
            }
            _ => {}
        }
        if !matches!(self.search.as_str(), "flat" | "hierarchical") {
            return Err(EngineError::config(
                format!("{key}.search"),
                format!("{:?}", self.search),
                "one of \"flat\", \"hierarchical\"",
            ));
        }
        if self.straight && (self.boundaries.is_some() || self.replicas.is_some()) {
            return Err(EngineError::config(
                format!("{key}.straight"),
                "true",
                "a straight pipeline is planned: leave boundaries and replicas unset",
            ));
        }
        if !matches!(self.cost.as_str(), "thesis" | "ring") {
            return Err(EngineError::config(
                format!("{key}.cost"),
                format!("{:?}", self.cost),
                "one of \"thesis\", \"ring\"",
            ));
        }
        if let Some(reps) = &self.replicas {
            if reps.is_empty() || reps.contains(&0) {
                return Err(EngineError::config(
                    format!("{key}.replicas"),
                    format!("{reps:?}"),
                    "one positive count per stage",
                ));
            }
            let stages = self.boundaries.as_ref().map_or(1, |b| b.len() + 1);
            if reps.len() != stages {
                return Err(EngineError::config(
                    format!("{key}.replicas"),
                    format!("{reps:?}"),
                    format!(
                        "{} entries for {stages} stages (boundaries {:?})",
                        reps.len(),
                        self.boundaries.clone().unwrap_or_default()
                    ),
                ));
            }
            let used: u32 = reps.iter().sum();
            if used > config.workers {
                return Err(EngineError::config(
                    format!("{key}.replicas"),
                    format!("{reps:?}"),
                    format!("{used} workers, but the job has {}", config.workers),
                ));
            }
        } else if let Some(b) = &self.boundaries {
            if b.len() as u32 + 1 > config.workers {
                return Err(EngineError::config(
                    format!("{key}.boundaries"),
                    format!("{b:?}"),
                    format!(
                        "{} stages need as many workers, but the job has {}",
                        b.len() + 1,
                        config.workers
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Which weights a minibatch's passes run on.
    pub fn weights(&self, kind: Kind) -> Weights {
        match kind {
            Kind::PipeDream if self.vertical_sync => Weights::VerticalSync,
            Kind::PipeDream if !self.stash => Weights::Latest,
            _ => Weights::Stash,
        }
    }
}
