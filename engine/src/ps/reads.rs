//! Versioned reads: the part of a parameter server that holds a read until its version is fresh
//! enough and records every read it answers. Shared by the engine's server and strategies' own.

use crate::context::RoleContext;
use crate::contract::ReadRecord;
use crate::ids::{Clock, RoleId, WorkerId};
use crate::message::Message;
use crate::payload::BlockPayload;

/// Reads waiting for a version, and, where the run asks for it, the record of those answered.
#[derive(Debug, Default)]
pub struct ReadGate {
    waiting: Vec<(WorkerId, Clock, Option<i64>)>,
    answered: Vec<ReadRecord>,
    record: bool,
}

impl ReadGate {
    /// A gate with nothing waiting that records no reads.
    pub fn new() -> ReadGate {
        ReadGate::default()
    }

    /// A gate with nothing waiting that records every read it answers when `record` is set
    /// ([`crate::job::Job::record_reads`]): a record grows by one entry per read, so it is kept
    /// only for a run whose result is checked against the consistency rule.
    pub fn recording(record: bool) -> ReadGate {
        ReadGate {
            record,
            ..ReadGate::default()
        }
    }

    /// A read by `worker` at `clock`: answered now with `blocks()` at `version` if that is at
    /// least `min_version` (`None`: any version), held until [`ReadGate::release`] otherwise.
    pub fn pull(
        &mut self,
        ctx: &RoleContext,
        worker: WorkerId,
        clock: Clock,
        min_version: Option<i64>,
        version: i64,
        blocks: impl FnOnce() -> Vec<BlockPayload>,
    ) {
        if min_version.is_none_or(|v| version >= v) {
            self.answer(ctx, (worker, clock, min_version), version, blocks());
        } else {
            self.waiting.push((worker, clock, min_version));
        }
    }

    /// The version moved to `version`: answers every held read it satisfies, with `blocks()`.
    pub fn release(
        &mut self,
        ctx: &RoleContext,
        version: i64,
        blocks: impl Fn() -> Vec<BlockPayload>,
    ) {
        let waiting = std::mem::take(&mut self.waiting);
        for read in waiting {
            if read.2.is_none_or(|v| version >= v) {
                self.answer(ctx, read, version, blocks());
            } else {
                self.waiting.push(read);
            }
        }
    }

    /// Every read answered so far, in order, if the gate records them; empties the record.
    pub fn take_answered(&mut self) -> Vec<ReadRecord> {
        std::mem::take(&mut self.answered)
    }

    fn answer(
        &mut self,
        ctx: &RoleContext,
        (worker, clock, min_version): (WorkerId, Clock, Option<i64>),
        version: i64,
        blocks: Vec<BlockPayload>,
    ) {
        if self.record {
            self.answered.push(ReadRecord {
                worker,
                clock,
                min_version,
                version,
            });
        }
        ctx.send_stamped(RoleId::Worker(worker), |served_at| Message::Params {
            version,
            served_at,
            blocks,
        });
    }
}
