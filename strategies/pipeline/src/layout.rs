//! A pipeline configuration resolved against a job: its stages and their sub-models, which
//! worker runs which replica of which stage, the routing of minibatches, each stage's warm-up,
//! and the run's minibatches.
//!
//! Stages sit on consecutive workers in order (stage 0's replicas first), so a stage's replicas
//! share machines where they can; workers after the last stage's stay idle (the planner's
//! "12-1" answers leave some). Minibatch `b` runs on replica `b mod r_s` of stage `s`, forward
//! and backward. A job's iteration is one round of the output stage: `r_{S−1}` minibatches of
//! `batch` samples each (one minibatch for an unreplicated output stage; plain data
//! parallelism's global batch when the whole model is one stage on every worker).

use crate::options::{Depth, Kind, PipeOptions, FIT_RUN_SHARE, MAX_FIT_DEPTH};
use crate::planner::{stage_need, stashing_copies, PipelinePlan, StageNeed, StagePlan};
use crate::schedule::{self, Op};
use crate::versions::Weights;
use concord_engine::model::ModelSpec;
use concord_engine::prelude::*;
use concord_engine::submodel::SubModels;
use std::ops::Range;

/// A worker's place in the pipeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    /// The stage.
    pub stage: usize,
    /// The replica of the stage.
    pub replica: u32,
}

/// A pipeline resolved against a job.
#[derive(Clone, Debug)]
pub struct Layout {
    /// The schedule.
    pub kind: Kind,
    /// The stages and their replicas.
    pub stages: Vec<StagePlan>,
    /// One sub-model per stage.
    pub submodels: SubModels,
    /// Each stage's first worker.
    first_worker: Vec<u32>,
    /// Minibatches each stage admits before its first backward pass.
    pub warmup: Vec<u32>,
    /// Minibatches in flight per replica of the input stage: PipeDream's window, or GPipe's
    /// share of a round (a round is `depth` minibatches for each input replica).
    pub depth: u32,
    /// NOAM of the configuration.
    pub noam: u32,
    /// Samples per minibatch.
    pub minibatch: u64,
    /// Which weights a minibatch's passes run on.
    pub weights: Weights,
    /// The planner's predicted time per minibatch (`None` for a configuration given by hand
    /// before the planner evaluated it).
    pub predicted_s: Option<f64>,
    /// The time per minibatch of this configuration's schedule replayed on the planner's cost
    /// model ([`crate::planner::replay()`]; 1F1B schedules only).
    pub replayed_s: Option<f64>,
}

impl Layout {
    /// Resolves `plan` for `job` under the options of `kind`.
    pub fn new(job: &Job, kind: Kind, options: &PipeOptions, plan: PipelinePlan) -> Result<Layout> {
        if let ModelSpec::Mf(_) = job.model {
            return Err(EngineError::config(
                "model.kind",
                format!("{:?}", job.config.model.kind()),
                format!("{} needs a model made of layers", kind.name()),
            ));
        }
        if let ModelSpec::Graph(_) = job.model {
            return Err(EngineError::config(
                "model.kind",
                format!("{:?}", job.config.model.kind()),
                format!(
                    "{} cuts a chain of stages; a graph network's forks and joins are no chain: use a staged network or a profile",
                    kind.name()
                ),
            ));
        }
        // Model parallelism runs the same layer ranges with no replication: one minibatch in
        // flight keeps a single stage busy at a time, so replicas would only idle.
        let mut plan = plan;
        if kind == Kind::ModelParallel {
            for s in &mut plan.stages {
                s.replicas = 1;
            }
        }
        let mut boundaries = Vec::new();
        for s in &plan.stages[1..] {
            boundaries.push(s.layers.start);
        }
        let submodels = SubModels::new(
            &job.model,
            &boundaries,
            &format!("{}.boundaries", kind.key()),
        )?;
        let replicas: Vec<u32> = plan.stages.iter().map(|s| s.replicas).collect();
        let mut first_worker = Vec::with_capacity(replicas.len());
        let mut at = 0;
        for &r in &replicas {
            first_worker.push(at);
            at += r;
        }
        if at > job.config.workers {
            return Err(EngineError::config(
                format!("{}.replicas", kind.key()),
                format!("{replicas:?}"),
                format!("{at} workers, but the job has {}", job.config.workers),
            ));
        }
        let noam = schedule::noam(&replicas);
        let depth = match (kind, &options.depth) {
            (Kind::ModelParallel, _) => 1,
            (_, Some(Depth::Minibatches(m))) => *m,
            (Kind::GPipe, _) => noam,
            (Kind::PipeDream, _) => schedule::default_depth(&replicas),
        };
        let warmup = schedule::warmups(&replicas, depth);
        let mut layout = Layout {
            kind,
            submodels,
            first_worker,
            warmup,
            depth,
            noam,
            minibatch: job.config.batch,
            weights: options.weights(kind),
            predicted_s: plan.predicted_s,
            replayed_s: None,
            stages: plan.stages,
        };
        if kind != Kind::ModelParallel && matches!(options.depth, Some(Depth::Word(_))) {
            layout.fit_depth(job);
        }
        layout.check_memory(job)?;
        Ok(layout)
    }

    /// Puts as many minibatches in flight as every stage's memory holds (at least the depth
    /// it has, at most [`MAX_FIT_DEPTH`] and a [`FIT_RUN_SHARE`] of the run's minibatches):
    /// `depth = "fit"`.
    fn fit_depth(&mut self, job: &Job) {
        let replicas: Vec<u32> = self.stages.iter().map(|s| s.replicas).collect();
        // The run's minibatches, over the input replicas that share each round: a depth past
        // a quarter of them would time fewer than four rounds.
        let minibatches = self.minibatches(0..job.config.iterations).end;
        let per_replica = minibatches / u64::from(self.replicas(0).max(1)) / FIT_RUN_SHARE;
        let most = MAX_FIT_DEPTH.min(u32::try_from(per_replica).unwrap_or(u32::MAX));
        while self.depth < most {
            self.depth += 1;
            self.warmup = schedule::warmups(&replicas, self.depth);
            if self.check_memory(job).is_err() {
                self.depth -= 1;
                self.warmup = schedule::warmups(&replicas, self.depth);
                break;
            }
        }
    }

    /// Number of stages.
    pub fn len(&self) -> usize {
        self.stages.len()
    }

    /// Whether there are no stages (never, for a resolved layout).
    pub fn is_empty(&self) -> bool {
        self.stages.is_empty()
    }

    /// Replicas of stage `s`.
    pub fn replicas(&self, s: usize) -> u32 {
        self.stages[s].replicas
    }

    /// Minibatches of one GPipe round: `depth` for each replica of the input stage, so that a
    /// replicated pipeline runs, per replica, the rounds a straight one runs (one stage on `N`
    /// workers at depth 1 is BSP data parallelism, as PipeDream's is), and every replica of the
    /// input stage has work in every round.
    pub fn round_width(&self) -> u64 {
        u64::from(self.depth.max(1)) * u64::from(self.replicas(0).max(1))
    }

    /// Minibatches a replica of stage `s` holds in flight: PipeDream's warm-up, GPipe's share
    /// of a round (its replicas split the round's minibatches round-robin).
    pub fn in_flight(&self, s: usize) -> u64 {
        match self.kind {
            Kind::GPipe => self
                .round_width()
                .div_ceil(u64::from(self.replicas(s).max(1))),
            _ => u64::from(self.warmup[s]),
        }
    }

    /// Workers the pipeline uses.
    pub fn workers_used(&self) -> u32 {
        self.stages.iter().map(|s| s.replicas).sum()
    }

    /// Where worker `w` sits; `None` for an idle worker.
    pub fn position(&self, w: WorkerId) -> Option<Position> {
        (0..self.len()).find_map(|s| {
            let first = self.first_worker[s];
            (w >= first && w < first + self.replicas(s)).then_some(Position {
                stage: s,
                replica: w - first,
            })
        })
    }

    /// The worker that runs replica `replica` of stage `s`.
    pub fn worker(&self, s: usize, replica: u32) -> WorkerId {
        self.first_worker[s] + replica
    }

    /// The worker of stage `s` that runs minibatch `b` (round-robin on its id).
    pub fn route(&self, s: usize, b: u64) -> WorkerId {
        self.worker(s, (b % self.replicas(s) as u64) as u32)
    }

    /// The workers of stage `s`.
    pub fn stage_workers(&self, s: usize) -> Vec<RoleId> {
        (0..self.replicas(s))
            .map(|r| RoleId::Worker(self.worker(s, r)))
            .collect()
    }

    /// The job iteration minibatch `b` belongs to.
    pub fn clock_of(&self, b: u64) -> u64 {
        b / self.replicas(self.len() - 1) as u64
    }

    /// The minibatches of the job iterations `clocks`: the whole run, or the stretch a run cut
    /// by checkpoints plays between two of them.
    pub fn minibatches(&self, clocks: Range<u64>) -> Range<u64> {
        let per = self.replicas(self.len() - 1) as u64;
        clocks.start * per..clocks.end * per
    }

    /// The schedule of the worker at `at` over the run's `minibatches`.
    pub fn ops(&self, at: Position, minibatches: &Range<u64>) -> Vec<Op> {
        let r = self.replicas(at.stage);
        let own = schedule::own_minibatches(minibatches.clone(), r, at.replica);
        match self.kind {
            Kind::GPipe => schedule::gpipe(&own, self.round_width(), minibatches),
            _ => schedule::one_f_one_b(&own, self.warmup[at.stage], r, minibatches),
        }
    }

    /// The configuration as the thesis writes it: replicas per stage, `"12-1"`.
    pub fn config_string(&self) -> String {
        let parts: Vec<String> = self.stages.iter().map(|s| s.replicas.to_string()).collect();
        parts.join("-")
    }

    /// Bytes one worker of stage `s` holds at most ([`stage_need`], the planner's estimate too):
    /// its parameters, their gradients and optimizer state, the weight versions its in-flight
    /// minibatches keep (one each beyond the latest, when stashing), and their activations.
    pub fn stage_memory(&self, job: &Job, s: usize) -> u64 {
        let in_flight = self.in_flight(s);
        let copies = match self.weights {
            Weights::Latest => 0,
            _ if self.kind == Kind::PipeDream => stashing_copies(in_flight),
            _ => 0,
        };
        let layers = self.submodels.stages(s);
        let per_sample: u64 = job.stage_kept_bytes[layers.clone()].iter().sum();
        // GPipe keeps only each stage input and recomputes the rest in the backward pass.
        let kept = match self.kind {
            Kind::GPipe => stage_input_bytes(job, layers.start),
            _ => per_sample,
        };
        // GPipe's recomputed backward pass holds one minibatch's activations of the stage.
        let working = match self.kind {
            Kind::GPipe => per_sample * self.minibatch,
            _ => 0,
        };
        stage_need(StageNeed {
            weight_bytes: self.submodels.param_bytes(s),
            optimizer_slots: job.config.optimizer.state_slots() as u64,
            weight_copies: copies,
            kept_bytes: kept * self.minibatch,
            in_flight,
            working_bytes: working,
        })
    }

    /// Refuses a configuration some stage's memory cannot hold.
    fn check_memory(&self, job: &Job) -> Result<()> {
        for s in 0..self.len() {
            let w = RoleId::Worker(self.worker(s, 0));
            let device = job.cluster.device_of(w);
            let have = device.memory_bytes();
            let need = self.stage_memory(job, s);
            if need > have {
                return Err(EngineError::config(
                    format!("{}.boundaries", self.kind.key()),
                    format!("{:?}", self.submodels.stages(s)),
                    format!(
                        "stage {s} (layers {:?}, config {}) needs {} on {} ({} minibatches in flight), which has {}",
                        self.submodels.stages(s),
                        self.config_string(),
                        size(need),
                        job.cluster.device_label(w),
                        self.in_flight(s),
                        size(have),
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// `bytes` in the largest binary unit that keeps it at least 1 (GiB, MiB, KiB or bytes).
fn size(bytes: u64) -> String {
    let b = bytes as f64;
    match bytes {
        0..1024 => format!("{bytes} bytes"),
        1024..1_048_576 => format!("{:.2} KiB", b / 1024.0),
        1_048_576..1_073_741_824 => format!("{:.2} MiB", b / 1024f64.powi(2)),
        _ => format!("{:.2} GiB", b / 1024f64.powi(3)),
    }
}

/// The configuration `options` give by hand (`boundaries`, `replicas`), or `None` when the
/// planner is to choose.
pub fn given(options: &PipeOptions, job: &Job) -> Option<PipelinePlan> {
    let n = job.model.stage_facts().len();
    let (boundaries, replicas) = match (&options.boundaries, &options.replicas) {
        (None, None) => return None,
        (None, Some(r)) => (Vec::new(), r.clone()),
        (Some(b), r) => (b.clone(), r.clone().unwrap_or_else(|| vec![1; b.len() + 1])),
    };
    let mut cuts = vec![0];
    cuts.extend(boundaries.iter().copied());
    cuts.push(n);
    let stages = cuts
        .windows(2)
        .zip(&replicas)
        .map(|(w, &r)| StagePlan {
            layers: w[0]..w[1],
            replicas: r,
        })
        .collect::<Vec<_>>();
    Some(PipelinePlan {
        noam: schedule::noam(&replicas),
        stages,
        predicted_s: None,
    })
}

/// Bytes per sample of the input of a stage whose first layer is `first_layer`: the output of
/// the layer before it, what GPipe keeps of each micro-batch to recompute the stage from. The
/// first stage's input is the minibatch's samples, which the worker holds as data in any case
/// and no strategy counts as activations.
pub(crate) fn stage_input_bytes(job: &Job, first_layer: usize) -> u64 {
    first_layer
        .checked_sub(1)
        .and_then(|l| job.stage_output_bytes.get(l))
        .copied()
        .unwrap_or(0)
}
