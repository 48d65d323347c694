//! The pipeline's coordinator: it directs nothing (the schedules are static); it gathers each
//! stage worker's statistics and reports the figures that explain a run: the configuration,
//! NOAM, the planner's prediction, utilisation in steady state, weight versions held per stage
//! against the warm-up bound, and bytes per sample across stage boundaries and replica syncs.

use crate::layout::Layout;
use crate::protocol::StageStats;
use concord_engine::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Gathers [`StageStats`]; reports `<name>.*` figures on shutdown.
pub struct PipelineCoordinator {
    layout: Arc<Layout>,
    stats: BTreeMap<WorkerId, StageStats>,
}

impl PipelineCoordinator {
    /// The coordinator of a run of `layout`.
    pub fn new(layout: Arc<Layout>) -> PipelineCoordinator {
        PipelineCoordinator {
            layout,
            stats: BTreeMap::new(),
        }
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
        for (s, st) in l.stages.iter().enumerate() {
            out.push((format!("{name}.replicas.stage-{s}"), st.replicas as f64));
            out.push((
                format!("{name}.first_layer.stage-{s}"),
                st.layers.start as f64,
            ));
            out.push((format!("{name}.warmup.stage-{s}"), l.warmup[s] as f64));
            let versions = self
                .stats
                .values()
                .filter(|x| x.stage as usize == s)
                .map(|x| x.max_versions)
                .max()
                .unwrap_or(0);
            out.push((format!("{name}.max_versions.stage-{s}"), versions as f64));
        }
        let utils: Vec<f64> = self
            .stats
            .values()
            .filter_map(|x| x.steady_utilisation)
            .collect();
        if !utils.is_empty() {
            let max = utils.iter().copied().fold(0.0, f64::max);
            let mean = utils.iter().sum::<f64>() / utils.len() as f64;
            out.push((f("steady_utilisation.max"), max));
            out.push((f("steady_utilisation.mean"), mean));
        }
        let (busy, span) = self
            .stats
            .values()
            .fold((0.0, 0.0), |(b, s), x| (b + x.busy_s, s + x.span_s));
        if span > 0.0 {
            out.push((f("utilisation"), busy / span));
        }
        let samples = (l.minibatches * l.minibatch) as f64;
        if samples > 0.0 {
            let boundary: u64 = self.stats.values().map(|x| x.boundary_bytes).sum();
            let sync: u64 = self.stats.values().map(|x| x.sync_bytes).sum();
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
                    return Ok(CoordinatorReport {
                        figures: self.figures(),
                        ..CoordinatorReport::default()
                    })
                }
                _ => {}
            }
        }
    }
}
