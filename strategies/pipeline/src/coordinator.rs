//! The pipeline's coordinator: it directs nothing (the schedules are static); it gathers each
//! stage worker's statistics and reports the figures that explain a run: the configuration,
//! NOAM, the planner's prediction, utilisation in steady state, weight versions held per stage
//! against the warm-up bound, and bytes per sample across stage boundaries and replica syncs.
//!
//! A run cut by checkpoints plays its stretches with fresh workers; the coordinator keeps the
//! statistics of the stretches before in its checkpoint, so the figures cover the whole run.

use crate::layout::Layout;
use crate::protocol::StageStats;
use concord_engine::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// What the coordinator carries across a checkpoint: the statistics of the stretches played.
#[derive(Default, Serialize, Deserialize)]
struct Earlier {
    /// Samples of the minibatches of those stretches.
    samples: u64,
    /// Every worker's statistics of every stretch.
    stats: Vec<StageStats>,
}

/// Gathers [`StageStats`]; reports `<name>.*` figures on shutdown.
pub struct PipelineCoordinator {
    layout: Arc<Layout>,
    /// Samples of this run's (or stretch's) minibatches.
    samples: u64,
    earlier: Earlier,
    stats: BTreeMap<WorkerId, StageStats>,
}

impl PipelineCoordinator {
    /// The coordinator of a run of `layout` over `job`'s iterations, continuing the statistics
    /// of a checkpoint the job resumes from.
    pub fn new(layout: Arc<Layout>, job: &Job) -> Result<PipelineCoordinator> {
        let minibatches = layout.minibatches(job.clocks());
        let earlier = match job.resumed(RoleId::Coordinator).and_then(|cp| cp.state) {
            Some(state) => state.decode()?,
            None => Earlier::default(),
        };
        Ok(PipelineCoordinator {
            samples: (minibatches.end - minibatches.start) * layout.minibatch,
            layout,
            earlier,
            stats: BTreeMap::new(),
        })
    }

    /// The statistics of the whole run so far: the earlier stretches' and this one's.
    fn all_stats(&self) -> impl Iterator<Item = &StageStats> {
        self.earlier.stats.iter().chain(self.stats.values())
    }

    fn figures(&self) -> Vec<(String, f64)> {
        let l = &self.layout;
        let name = l.kind.name();
        let f = |k: &str| format!("{name}.{k}");
        let mut out = vec![
            (f("stages"), l.len() as f64),
            (f("workers_used"), l.workers_used() as f64),
            (f("noam"), l.noam as f64),
            (f("depth"), l.depth as f64),
        ];
        if let Some(p) = l.predicted_s {
            out.push((f("predicted_s"), p));
        }
        if let Some(p) = l.replayed_s {
            out.push((f("replayed_s"), p));
        }
        for (s, st) in l.stages.iter().enumerate() {
            out.push((format!("{name}.replicas.stage-{s}"), st.replicas as f64));
            out.push((
                format!("{name}.first_layer.stage-{s}"),
                st.layers.start as f64,
            ));
            out.push((format!("{name}.warmup.stage-{s}"), l.warmup[s] as f64));
            let versions = self
                .all_stats()
                .filter(|x| x.stage as usize == s)
                .map(|x| x.max_versions)
                .max()
                .unwrap_or(0);
            out.push((format!("{name}.max_versions.stage-{s}"), versions as f64));
        }
        let utils: Vec<f64> = self
            .all_stats()
            .filter_map(|x| x.steady_utilisation)
            .collect();
        if !utils.is_empty() {
            let max = utils.iter().copied().fold(0.0, f64::max);
            let mean = utils.iter().sum::<f64>() / utils.len() as f64;
            out.push((f("steady_utilisation.max"), max));
            out.push((f("steady_utilisation.mean"), mean));
        }
        let (busy, span) = self
            .all_stats()
            .fold((0.0, 0.0), |(b, s), x| (b + x.busy_s, s + x.span_s));
        if span > 0.0 {
            out.push((f("utilisation"), busy / span));
        }
        let samples = (self.earlier.samples + self.samples) as f64;
        if samples > 0.0 {
            let boundary: u64 = self.all_stats().map(|x| x.boundary_bytes).sum();
            let sync: u64 = self.all_stats().map(|x| x.sync_bytes).sum();
            out.push((f("bytes_per_sample"), (boundary + sync) as f64 / samples));
            out.push((f("boundary_bytes_per_sample"), boundary as f64 / samples));
        }
        out
    }
}

#[async_trait]
impl Coordinator for PipelineCoordinator {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<CoordinatorReport> {
        loop {
            let env = ctx.recv().await?;
            match env.from {
                RoleId::Worker(w) => {
                    if let Some(s) = env.msg.decode::<StageStats>()? {
                        self.stats.insert(w, s);
                    }
                }
                _ if matches!(env.msg, Message::Shutdown) => {
                    let figures = self.figures();
                    let mut earlier = std::mem::take(&mut self.earlier);
                    earlier.samples += self.samples;
                    earlier
                        .stats
                        .extend(std::mem::take(&mut self.stats).into_values());
                    return Ok(CoordinatorReport {
                        figures,
                        state: Some(RoleState::encode(&earlier)?),
                        ..CoordinatorReport::default()
                    });
                }
                _ => {}
            }
        }
    }
}
