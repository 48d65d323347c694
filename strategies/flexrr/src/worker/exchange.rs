//! The FlexRR worker's exchanges with the parameter servers: reads at the freshness SSP asks
//! for, with this worker's own writes put back on top (read-my-writes), and flushes of deltas
//! tagged with their clock and owner.

use super::inbox::not_params;
use super::FlexWorker;
use crate::protocol::Update;
use concord_engine::prelude::*;
use std::collections::BTreeMap;

impl FlexWorker {
    /// Sends deltas tagged (`clock`, `owner`) to every server; a helper's flush waits for the
    /// servers' acknowledgements, the owner's completing flush does not need to.
    pub(super) async fn flush(
        &mut self,
        ctx: &mut RoleContext,
        clock: Clock,
        owner: WorkerId,
        completes: bool,
        delta: Option<Vec<Vec<f32>>>,
    ) -> Result<()> {
        let layout = self.job.layout.clone();
        let ack = !completes;
        for s in 0..layout.servers() {
            let deltas: Vec<BlockPayload> = layout.slice_for(s, delta.as_deref());
            let msg = Update {
                clock,
                owner,
                completes_clock: completes,
                ack,
                blocks: Vec::new(),
            }
            .message(deltas)?;
            let bytes = msg.wire_bytes();
            self.bytes_sent += bytes;
            if !completes {
                // A helper's flush of a helped range: traffic the reassignment adds.
                self.count_rr(bytes);
            }
            ctx.send(RoleId::Server(s), msg);
        }
        if let Some(d) = delta.filter(|_| self.opts().read_my_writes) {
            self.writes.push((clock, d));
        }
        if ack {
            self.acks_pending += layout.servers();
            while self.acks_pending > 0 {
                let env = ctx.recv_matching(not_params).await?;
                self.handle(ctx, env)?;
            }
        }
        Ok(())
    }

    /// Reads every server's blocks at the freshness the consistency rule asks for at `clock`,
    /// serving peers while waiting, and installs them with this worker's own writes the servers
    /// do not have yet. Returns the lowest version read and the latest time a server served
    /// its part (when the consistency wait ended and the transfer began).
    pub(super) async fn read(&mut self, ctx: &mut RoleContext, clock: Clock) -> Result<(i64, f64)> {
        let layout = self.job.layout.clone();
        let min_version = self.job.consistency.min_version(clock);
        for s in 0..layout.servers() {
            ctx.send(RoleId::Server(s), Message::Pull { clock, min_version });
        }
        let mut fresh = self.real().then(|| layout.zeros());
        let mut versions = BTreeMap::new();
        let mut last_served = f64::NEG_INFINITY;
        while versions.len() < layout.servers() as usize {
            let env = ctx.recv().await?;
            match (env.from, &env.msg) {
                (
                    RoleId::Server(s),
                    Message::Params {
                        version,
                        blocks,
                        served_at,
                    },
                ) => {
                    if let Some(f) = fresh.as_mut() {
                        layout.write_into(blocks, f);
                    }
                    versions.insert(s, *version);
                    last_served = last_served.max(*served_at);
                }
                _ => {
                    self.handle(ctx, env)?;
                    self.drain_help(ctx).await?;
                }
            }
        }
        if let Some(mut f) = fresh {
            // Own writes a server does not reflect yet go back on top of its blocks.
            for block in layout.blocks() {
                let v = versions.get(&layout.owner(block.id)).copied().unwrap_or(-1);
                for (tag, w) in &self.writes {
                    if *tag as i64 > v {
                        let range = block.offset..block.offset + block.len;
                        for (x, d) in f[block.param][range.clone()]
                            .iter_mut()
                            .zip(&w[block.param][range])
                        {
                            *x += d;
                        }
                    }
                }
            }
            self.params = f;
        }
        let lowest = versions.values().copied().min().unwrap_or(-1);
        self.writes.retain(|(tag, _)| *tag as i64 > lowest);
        Ok((lowest, last_served))
    }
}
