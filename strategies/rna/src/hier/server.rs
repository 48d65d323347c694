//! RNA-H's central parameter server (server 0): keeps each group's latest model and answers a
//! push with their mean, or (`merge = "delta"`) keeps one global model and adds each group's
//! change to it.

use super::ops::{is_sync_op, sync_group, PUSH_WITH_BASE};
use crate::options::Merge;
use concord_engine::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The mean of the groups' latest models, in group-id order (deterministic). One group gives its
/// model back bit for bit.
pub fn average(latest: &BTreeMap<u32, Payload>) -> Result<Payload> {
    let mut it = latest.values();
    let Some(first) = it.next() else {
        return Ok(Payload::Virtual { elems: 0 });
    };
    let Payload::Real(first) = first else {
        return Ok(first.clone());
    };
    let mut sum = first.clone();
    for p in it {
        match p {
            Payload::Real(v) if v.len() == sum.len() => {
                for (s, x) in sum.iter_mut().zip(v) {
                    *s += x;
                }
            }
            _ => {
                return Err(EngineError::protocol(
                    RoleId::Server(0),
                    "groups pushed models of different sizes",
                ))
            }
        }
    }
    if latest.len() > 1 {
        let n = latest.len() as f32;
        for s in &mut sum {
            *s /= n;
        }
    }
    Ok(Payload::Real(sum))
}

/// The global model after adding a group's change: `global + (pushed − base)`, element-wise.
pub fn add_delta(global: &[f32], pushed: &[f32], base: &[f32]) -> Vec<f32> {
    global
        .iter()
        .zip(pushed)
        .zip(base)
        .map(|((x, p), b)| x + (p - b))
        .collect()
}

/// The central parameter server of RNA-H (server 0; other servers stay idle).
#[derive(Debug, Default)]
pub struct AveragingServer {
    merge: Merge,
    models: GroupModels,
}

/// The groups' models the averaging server keeps: all it carries across a checkpoint.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct GroupModels {
    /// Each group's latest pushed parameters ([`Merge::Average`]).
    latest: BTreeMap<u32, Payload>,
    /// The global model ([`Merge::Delta`]).
    global: Option<Vec<f32>>,
    /// What the server last answered each group: the base of its next change ([`Merge::Delta`]).
    answered: BTreeMap<u32, Vec<f32>>,
}

impl AveragingServer {
    /// A server with no group model yet, merging pushes by `merge`.
    pub fn new(merge: Merge) -> AveragingServer {
        AveragingServer {
            merge,
            models: GroupModels::default(),
        }
    }

    /// Server `id` of `job`, merging pushes by `merge`: with the groups' models it kept at the
    /// checkpoint when the job resumes from one, else with none.
    pub fn for_job(merge: Merge, job: &Job, id: ServerId) -> Result<AveragingServer> {
        Ok(AveragingServer {
            merge,
            models: job.resumed_state(RoleId::Server(id), "RNA-H averaging server state")?,
        })
    }

    /// The model to answer group `group`'s push `data` (`part` as sent) with; a malformed push is
    /// described in the error.
    pub fn merge_push(
        &mut self,
        group: u32,
        part: u32,
        data: Payload,
    ) -> std::result::Result<Payload, String> {
        match self.merge {
            Merge::Average => {
                self.models.latest.insert(group, data);
                average(&self.models.latest).map_err(|e| e.to_string())
            }
            Merge::Delta => {
                let Payload::Real(values) = data else {
                    return Ok(data);
                };
                let (pushed, base) = if part == PUSH_WITH_BASE {
                    let n = values.len() / 2;
                    (values[..n].to_vec(), values[n..].to_vec())
                } else {
                    let base = self.models.answered.get(&group).cloned().ok_or_else(|| {
                        format!("group {group}'s first push came without its base model")
                    })?;
                    (values, base)
                };
                let size = self.models.global.as_ref().map_or(base.len(), Vec::len);
                if pushed.len() != base.len() || base.len() != size {
                    return Err(format!(
                        "group {group} pushed a model of {} elements with a base of {} (model: {size})",
                        pushed.len(),
                        base.len()
                    ));
                }
                let global = self.models.global.get_or_insert_with(|| base.clone());
                let next = add_delta(global, &pushed, &base);
                *global = next.clone();
                self.models.answered.insert(group, next.clone());
                Ok(Payload::Real(next))
            }
        }
    }
}

#[async_trait]
impl ServerHandler for AveragingServer {
    async fn handle(&mut self, ctx: &mut RoleContext, env: Envelope) -> Result<()> {
        match env.msg {
            Message::Collective { op, part, data, .. } if is_sync_op(op) => {
                let elems = data.elems() as f64;
                let mean = self
                    .merge_push(sync_group(op), part, data)
                    .map_err(|e| EngineError::protocol(ctx.id(), e))?;
                // Summation only: one add per element per group (averaging), or two (subtract
                // the base, add to the global model).
                let adds = match self.merge {
                    Merge::Average => self.models.latest.len() as f64,
                    Merge::Delta => 2.0,
                };
                let secs = ctx.device().work_seconds(elems * adds);
                ctx.charge_modeled(secs).await;
                ctx.send(
                    env.from,
                    Message::Collective {
                        op,
                        part: 0,
                        step: 0,
                        data: mean,
                    },
                );
                Ok(())
            }
            Message::Collective { .. } | Message::Custom(_) => Err(unexpected(ctx, &env)),
            _ => Ok(()),
        }
    }

    fn finish(&mut self, _ctx: &mut RoleContext) -> Result<ServerReport> {
        Ok(ServerReport {
            state: Some(RoleState::encode(&self.models)?),
            ..ServerReport::default()
        })
    }
}

#[async_trait]
impl Server for AveragingServer {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<ServerReport> {
        serve(self, ctx).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `merge = "delta"`: each group's change since the server last answered it enters the
    /// global model whole, from any group in any order; nothing is averaged away.
    #[test]
    fn delta_merge_adds_each_groups_change_to_the_global_model() {
        let real = |v: &[f32]| Payload::Real(v.to_vec());
        let with_base = |p: &[f32], b: &[f32]| real(&[p, b].concat());
        let mut s = AveragingServer::new(Merge::Delta);
        // Both groups start from [1, 1]. Group 0 moved to [2, 0]: the global model is its model.
        let a = s.merge_push(0, PUSH_WITH_BASE, with_base(&[2.0, 0.0], &[1.0, 1.0]));
        assert_eq!(a, Ok(real(&[2.0, 0.0])));
        // Group 1 moved by [0, 3] from the same start: both changes, whole.
        let b = s.merge_push(1, PUSH_WITH_BASE, with_base(&[1.0, 4.0], &[1.0, 1.0]));
        assert_eq!(b, Ok(real(&[2.0, 3.0])));
        // Group 0's next push is measured from what it was answered, [2, 0]: +[1, 1].
        let c = s.merge_push(0, 0, real(&[3.0, 1.0]));
        assert_eq!(c, Ok(real(&[3.0, 4.0])));
        // A group that was never answered must send its base; sizes must agree.
        let err = s.merge_push(2, 0, real(&[1.0, 1.0])).unwrap_err();
        assert!(err.contains("group 2") && err.contains("base"), "{err}");
        let err = s
            .merge_push(1, PUSH_WITH_BASE, with_base(&[1.0], &[1.0]))
            .unwrap_err();
        assert!(err.contains("elements"), "{err}");
        // Averaging instead: the mean of the latest models, [2, 0] and [1, 4].
        let mut avg = AveragingServer::new(Merge::Average);
        avg.merge_push(0, 0, real(&[2.0, 0.0])).unwrap();
        assert_eq!(
            avg.merge_push(1, 0, real(&[1.0, 4.0])),
            Ok(real(&[1.5, 2.0]))
        );
    }
    #[test]
    fn averaging_is_exact_for_one_group() {
        let mut m = BTreeMap::new();
        m.insert(1, Payload::Real(vec![-0.0, 1.5, 3.0]));
        let Payload::Real(one) = average(&m).unwrap() else {
            panic!("real")
        };
        assert_eq!(
            one.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            [-0.0f32, 1.5, 3.0]
                .iter()
                .map(|x| x.to_bits())
                .collect::<Vec<_>>()
        );
        m.insert(0, Payload::Real(vec![1.0, 0.5, 1.0]));
        assert_eq!(average(&m).unwrap(), Payload::Real(vec![0.5, 1.0, 2.0]));
        m.insert(2, Payload::Real(vec![1.0]));
        assert!(average(&m).is_err());
    }
}
