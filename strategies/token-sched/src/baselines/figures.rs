//! The baselines' coordinator: it directs nothing; it gathers each worker's busy time and
//! reports the figures that explain the baselines' speed: the bubble (idle) share of the
//! workers' iterations overall and per worker, beside the configuration the run used.

use super::protocol::Busy;
use concord_engine::prelude::*;
use std::collections::BTreeMap;

/// Gathers [`Busy`] reports; on shutdown, reports `<name>.bubble_share` (1 − Σ busy / Σ
/// iteration time over the workers), `<name>.busy_share.worker-<w>` and the fixed figures it
/// was built with.
pub struct FiguresCoordinator {
    name: &'static str,
    fixed: Vec<(String, f64)>,
    busy: BTreeMap<WorkerId, Busy>,
}

impl FiguresCoordinator {
    /// The coordinator of strategy `name`, reporting `fixed` beside the busy figures (those of
    /// the iterations before `job`'s checkpoint included when it resumes).
    pub fn new(
        name: &'static str,
        fixed: Vec<(String, f64)>,
        job: &Job,
    ) -> Result<FiguresCoordinator> {
        let busy = job.resumed_state(RoleId::Coordinator, "busy times")?;
        Ok(FiguresCoordinator { name, fixed, busy })
    }

    fn figures(&self) -> Vec<(String, f64)> {
        let mut out = self.fixed.clone();
        let (busy, span) = self
            .busy
            .values()
            .fold((0.0, 0.0), |(b, s), x| (b + x.busy_s, s + x.span_s));
        if span > 0.0 {
            out.push((format!("{}.bubble_share", self.name), 1.0 - busy / span));
        }
        for (w, b) in &self.busy {
            if b.span_s > 0.0 {
                out.push((
                    format!("{}.busy_share.worker-{w}", self.name),
                    b.busy_s / b.span_s,
                ));
            }
        }
        out
    }
}

#[async_trait]
impl Coordinator for FiguresCoordinator {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<CoordinatorReport> {
        loop {
            let env = ctx.recv().await?;
            match env.from {
                RoleId::Worker(w) => {
                    if let Some(b) = env.msg.decode::<Busy>()? {
                        let total = self.busy.entry(w).or_insert(Busy {
                            busy_s: 0.0,
                            span_s: 0.0,
                        });
                        total.busy_s += b.busy_s;
                        total.span_s += b.span_s;
                    }
                }
                _ if matches!(env.msg, Message::Shutdown) => {
                    return Ok(CoordinatorReport {
                        figures: self.figures(),
                        state: Some(RoleState::encode(&self.busy)?),
                        ..CoordinatorReport::default()
                    })
                }
                _ => {}
            }
        }
    }
}
