//! The engine's default coordinator: workers run their configured batch; it only gathers reports.

use crate::context::RoleContext;
use crate::contract::{Coordinator, CoordinatorReport};
use crate::error::Result;
use crate::ids::RoleId;
use crate::message::Message;
use async_trait::async_trait;

/// Collects worker reports; directs nothing.
#[derive(Debug, Default)]
pub struct StaticCoordinator;

#[async_trait]
impl Coordinator for StaticCoordinator {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<CoordinatorReport> {
        let mut report = CoordinatorReport::default();
        loop {
            let env = ctx.recv().await?;
            match (env.msg, env.from) {
                (Message::Shutdown, _) => return Ok(report),
                (Message::Report(r), RoleId::Worker(w)) => report.reports.push((w, r)),
                _ => {}
            }
        }
    }
}
