//! The input service (the thesis's separate CPU cluster): reads, preprocesses and shards each
//! batch for the ranks it feeds, and streams the shards into each rank's bounded queue, so the
//! two input alltoalls disappear from the training cluster (§6.1.2, "1-stage").

use crate::protocol::{Shard, Want};
use concord_engine::prelude::*;

/// Largest chunk of a batch on the wire, in elements (256 KiB).
pub const CHUNK_ELEMS: u64 = 64 * 1024;

/// One input-service role: serves the ranks `r` with `r % servers == id`.
pub struct InputService {
    /// Elements of one rank's pre-sharded batch (ids its shards look up, its samples' dense
    /// features and labels).
    shard_elems: u64,
    served: u64,
}

impl InputService {
    /// An input service sending shards of `shard_elems` elements (4 bytes each).
    pub fn new(shard_elems: u64) -> InputService {
        InputService {
            shard_elems,
            served: 0,
        }
    }

    /// The same service, continuing the count of batches served from `served` (a run resumed
    /// from a checkpoint).
    pub fn having_served(mut self, served: u64) -> InputService {
        self.served = served;
        self
    }

    /// Chunks a batch travels in.
    pub fn chunks(shard_elems: u64) -> u32 {
        shard_elems.div_ceil(CHUNK_ELEMS).max(1) as u32
    }
}

#[async_trait]
impl ServerHandler for InputService {
    async fn handle(&mut self, ctx: &mut RoleContext, env: Envelope) -> Result<()> {
        let Some(want) = env.msg.decode::<Want>()? else {
            return Err(unexpected(ctx, &env));
        };
        let chunks = InputService::chunks(self.shard_elems);
        for chunk in 0..chunks {
            let start = u64::from(chunk) * CHUNK_ELEMS;
            let elems = CHUNK_ELEMS.min(self.shard_elems - start.min(self.shard_elems));
            ctx.send(
                env.from,
                Message::strategy_with(
                    &Shard {
                        clock: want.clock,
                        chunk,
                        chunks,
                    },
                    vec![Payload::Virtual { elems }],
                )?,
            );
        }
        self.served += 1;
        Ok(())
    }

    fn finish(&mut self, _ctx: &mut RoleContext) -> Result<ServerReport> {
        Ok(ServerReport {
            version: self.served as i64,
            state: Some(RoleState::encode(&self.served)?),
            ..ServerReport::default()
        })
    }
}

#[async_trait]
impl Server for InputService {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<ServerReport> {
        serve(self, ctx).await
    }
}
