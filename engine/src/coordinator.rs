//! The engine's default coordinator: workers run their configured batch; it only gathers reports.

use crate::context::RoleContext;
use crate::contract::{Coordinator, CoordinatorReport, RoleState};
use crate::error::Result;
use crate::ids::RoleId;
use crate::job::Job;
use crate::message::{Message, Report};
use async_trait::async_trait;

/// Collects worker reports; directs nothing.
#[derive(Debug, Default)]
pub struct StaticCoordinator {
    /// Every worker report so far, in arrival order.
    reports: Vec<(u32, Report)>,
}

impl StaticCoordinator {
    /// The coordinator of `job`, with the reports it gathered before the checkpoint the job
    /// resumes from, if any.
    pub fn new(job: &Job) -> Result<StaticCoordinator> {
        let reports = match job.resumed(RoleId::Coordinator).and_then(|cp| cp.state) {
            Some(state) => state.decode()?,
            None => Vec::new(),
        };
        Ok(StaticCoordinator { reports })
    }
}

#[async_trait]
impl Coordinator for StaticCoordinator {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<CoordinatorReport> {
        loop {
            let env = ctx.recv().await?;
            match (env.msg, env.from) {
                (Message::Shutdown, _) => {
                    let reports = std::mem::take(&mut self.reports);
                    return Ok(CoordinatorReport {
                        state: Some(RoleState::encode(&reports)?),
                        reports,
                        figures: Vec::new(),
                    });
                }
                (Message::Report(r), RoleId::Worker(w)) => self.reports.push((w, r)),
                _ => {}
            }
        }
    }
}
