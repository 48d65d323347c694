//! RNA-H's model averaging on the worker side: after every `sync_period` rounds of its group,
//! the round's initiator pushes the group's parameters to the averaging server and the answer
//! travels down a binomial tree over the group; every member overwrites its parameters.

use super::round::Finished;
use super::RnaWorker;
use crate::hier::{sync_op, tree, PUSH_WITH_BASE};
use concord_engine::collective::is_hop;
use concord_engine::prelude::*;

impl RnaWorker {
    /// RNA-H model averaging after round `a.round`: the initiator pushes the group's parameters
    /// to server 0 and pulls the mean of the groups' latest models, then broadcasts it to the
    /// group along a binomial tree; every member overwrites its parameters (optimizer state kept).
    /// The group's variables are locked meanwhile: no round starts until it is done.
    pub(super) async fn sync(&mut self, ctx: &mut RoleContext, a: &Finished) -> Result<()> {
        let op = sync_op(self.group_id, a.round);
        let t0 = ctx.now();
        let p = self.group.size();
        let rank = self
            .group
            .rank_of(RoleId::Worker(self.id))
            .ok_or_else(|| EngineError::protocol(ctx.id(), "averages with a group it is not in"))?;
        let root = self
            .group
            .rank_of(RoleId::Worker(a.initiator))
            .ok_or_else(|| {
                EngineError::protocol(
                    ctx.id(),
                    format!("initiator {} is not in the group", a.initiator),
                )
            })?;
        let (parent, children) = tree(rank, root, p);
        let msg_of = |data: Payload| Message::Collective {
            op,
            part: 0,
            step: 0,
            data,
        };
        let from = match parent {
            None => {
                let elems = self.sizes.iter().sum::<usize>() as u64;
                // What the group pushes comes down from the replica's device if it lives there.
                let (mine, part) = match (self.model.values()?, self.group_base.as_ref()) {
                    // The group's first push under `delta`: its parameters, then its base.
                    (Some(params), Some(base)) => {
                        let mut v: Vec<f32> = params.into_iter().flatten().collect();
                        v.extend_from_slice(base);
                        (Payload::Real(v), PUSH_WITH_BASE)
                    }
                    (Some(params), None) => {
                        (Payload::Real(params.into_iter().flatten().collect()), 0)
                    }
                    (None, _) => (Payload::Virtual { elems }, 0),
                };
                let m = Message::Collective {
                    op,
                    part,
                    step: 0,
                    data: mine,
                };
                self.sync_bytes += m.wire_bytes();
                ctx.send(RoleId::Server(0), m);
                RoleId::Server(0)
            }
            Some(q) => self.group.member(q),
        };
        let env = match self
            .sync_early
            .iter()
            .position(|e| is_hop(e, from, op, 0, 0))
        {
            Some(i) => self.sync_early.remove(i),
            None => ctx.recv_matching(|e| is_hop(e, from, op, 0, 0)).await?,
        };
        let Message::Collective { data, .. } = env.msg else {
            return Err(EngineError::protocol(
                ctx.id(),
                "averaging hop without data",
            ));
        };
        for c in children {
            let m = msg_of(data.clone());
            self.sync_bytes += m.wire_bytes();
            ctx.send(self.group.member(c), m);
        }
        if let (Payload::Real(flat), true) = (&data, self.model.is_real()) {
            if flat.len() != self.sizes.iter().sum::<usize>() {
                return Err(EngineError::protocol(
                    ctx.id(),
                    format!("averaged model of {} elements", flat.len()),
                ));
            }
            let mut rest = flat.as_slice();
            let mut values = Vec::with_capacity(self.sizes.len());
            for &n in &self.sizes {
                let (head, tail) = rest.split_at(n);
                values.push(head.to_vec());
                rest = tail;
            }
            self.model.set_params(values, ctx.now())?;
        }
        self.group_base = None;
        ctx.trace_span("ps-average", "comm", t0, ctx.now());
        Ok(())
    }
}
