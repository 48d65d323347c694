//! The model a run ends with, as the union of its holders' parts.
//!
//! Each holder of the model — a server, or a worker that keeps the model itself (allreduce, RNA)
//! — reports the blocks it holds, their optimizer state and its snapshots. A holder may hold only
//! part of the model (a parameter range, a set of stages). When any worker reports a part, the
//! model is the union of the workers' parts; otherwise it is the union of the servers' parts.
//! The final union must cover every parameter block exactly once: a block nobody holds, or one
//! that two holders report, is an error naming the block, its parameter and the holders.

use crate::contract::ModelState;
use crate::error::{EngineError, Result};
use crate::ids::RoleId;
use crate::optim::OptState;
use crate::payload::{BlockId, BlockPayload};
use crate::ps::ParamLayout;
use std::collections::BTreeMap;
use std::sync::Arc;

/// One holder's part of the model: who holds it and what it reported.
pub(super) struct Part {
    /// The holder.
    pub holder: RoleId,
    /// Its final blocks, optimizer state and snapshots.
    pub model: ModelState,
}

/// The parts the run's model is made of: the workers' parts when any worker reports one (in
/// worker order), else the servers' (in server order).
pub(super) fn holders(
    workers: Vec<(RoleId, Option<ModelState>)>,
    servers: Vec<(RoleId, ModelState)>,
) -> Vec<Part> {
    let held: Vec<Part> = workers
        .into_iter()
        .filter_map(|(holder, model)| model.map(|model| Part { holder, model }))
        .collect();
    if !held.is_empty() {
        return held;
    }
    servers
        .into_iter()
        .map(|(holder, model)| Part { holder, model })
        .collect()
}

/// The model a run ends with: every parameter block once, from the holder that holds it, with
/// that holder's optimizer state for it. The checkpoint is written from it.
#[derive(Clone, Debug)]
pub struct FinalModel {
    /// How the parameters are cut into blocks.
    pub layout: Arc<ParamLayout>,
    /// Every block of the layout, in block order.
    pub blocks: Vec<BlockPayload>,
    /// Optimizer state of the blocks whose holder reported one.
    pub opt_state: BTreeMap<BlockId, OptState>,
}

impl FinalModel {
    /// The union of `parts`' final blocks over `layout`: each block must be held by exactly one
    /// part. A part's optimizer state counts for the blocks it holds.
    pub(super) fn union(layout: &Arc<ParamLayout>, parts: &[Part]) -> Result<FinalModel> {
        let n = layout.blocks().len();
        // Each block's copies: (holder, payload), in holder order.
        let mut held_by: Vec<Vec<(usize, &BlockPayload)>> = vec![Vec::new(); n];
        for (i, part) in parts.iter().enumerate() {
            for b in &part.model.blocks {
                let Some(copies) = held_by.get_mut(b.block as usize) else {
                    return Err(EngineError::protocol(
                        part.holder,
                        format!(
                            "reports model block {}, which the layout does not have ({n} blocks)",
                            b.block
                        ),
                    ));
                };
                copies.push((i, b));
            }
        }
        let param_of = |block: usize| {
            let p = layout.blocks()[block].param;
            layout.params()[p].name.clone()
        };
        let mut blocks = Vec::with_capacity(n);
        let mut opt_state = BTreeMap::new();
        for (block, copies) in held_by.into_iter().enumerate() {
            let id = block as BlockId;
            match copies.as_slice() {
                [] => {
                    return Err(EngineError::MissingBlock {
                        block: id,
                        param: param_of(block),
                        holders: parts.iter().map(|p| p.holder).collect(),
                    })
                }
                [(h, payload)] => {
                    blocks.push((*payload).clone());
                    if let Some(s) = parts[*h].model.opt_state.get(&id) {
                        opt_state.insert(id, s.clone());
                    }
                }
                many => {
                    return Err(EngineError::DoubledBlock {
                        block: id,
                        param: param_of(block),
                        holders: many.iter().map(|(h, _)| parts[*h].holder).collect(),
                    })
                }
            }
        }
        Ok(FinalModel {
            layout: layout.clone(),
            blocks,
            opt_state,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ParamInfo;
    use crate::payload::Payload;
    use crate::ps::RoundRobinPlacement;

    /// Two parameters, `a` (4 elements) and `b` (2), in blocks of 2: blocks 0, 1 of `a`, 2 of `b`.
    fn layout() -> Arc<ParamLayout> {
        let p = |name: &str, n| ParamInfo {
            name: name.into(),
            shape: vec![n],
            fan_in: 0,
        };
        Arc::new(ParamLayout::new(
            vec![p("a", 4), p("b", 2)],
            2,
            &RoundRobinPlacement,
            1,
        ))
    }

    fn part(holder: RoleId, blocks: &[BlockId]) -> Part {
        let report = ModelState {
            blocks: blocks
                .iter()
                .map(|&block| BlockPayload {
                    block,
                    data: Payload::Real(vec![block as f32; 2]),
                })
                .collect(),
            opt_state: blocks
                .iter()
                .map(|&b| {
                    let state = OptState {
                        step: u64::from(b) + 1,
                        slots: vec![vec![0.5; 2]],
                    };
                    (b, state)
                })
                .collect(),
            ..ModelState::default()
        };
        Part {
            holder,
            model: report,
        }
    }

    #[test]
    fn the_union_takes_every_block_from_its_holder() {
        let parts = [
            part(RoleId::Worker(1), &[2]),
            part(RoleId::Worker(0), &[1, 0]),
        ];
        let m = FinalModel::union(&layout(), &parts).unwrap();
        let ids: Vec<BlockId> = m.blocks.iter().map(|b| b.block).collect();
        assert_eq!(ids, vec![0, 1, 2]);
        assert_eq!(m.blocks[1].data, Payload::Real(vec![1.0; 2]));
        assert_eq!(m.opt_state.keys().copied().collect::<Vec<_>>(), ids);
    }

    #[test]
    fn a_missing_block_names_itself_its_parameter_and_the_holders() {
        let parts = [part(RoleId::Worker(0), &[0, 2])];
        let e = FinalModel::union(&layout(), &parts).unwrap_err();
        assert!(
            matches!(&e, EngineError::MissingBlock { block: 1, param, holders }
                if param == "a" && holders == &[RoleId::Worker(0)]),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(text.contains("block 1") && text.contains("`a`"), "{text}");
    }

    #[test]
    fn a_block_held_twice_names_both_holders() {
        let parts = [
            part(RoleId::Server(0), &[0, 1, 2]),
            part(RoleId::Server(1), &[2]),
        ];
        let e = FinalModel::union(&layout(), &parts).unwrap_err();
        assert!(
            matches!(&e, EngineError::DoubledBlock { block: 2, param, holders }
                if param == "b" && holders == &[RoleId::Server(0), RoleId::Server(1)]),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(
            text.contains("server-0") && text.contains("server-1"),
            "{text}"
        );
    }

    #[test]
    fn a_block_outside_the_layout_is_a_protocol_error() {
        let parts = [part(RoleId::Worker(0), &[0, 1, 2, 7])];
        let e = FinalModel::union(&layout(), &parts).unwrap_err();
        assert!(e.to_string().contains("block 7"), "{e}");
    }

    #[test]
    fn workers_parts_take_precedence_over_the_servers() {
        let servers = vec![(RoleId::Server(0), part(RoleId::Server(0), &[0, 1, 2]).model)];
        let only_servers = holders(vec![(RoleId::Worker(0), None)], servers.clone());
        assert_eq!(only_servers[0].holder, RoleId::Server(0));
        let workers = vec![
            (RoleId::Worker(0), None),
            (RoleId::Worker(1), Some(ModelState::default())),
        ];
        let held = holders(workers, servers);
        assert_eq!(held.len(), 1);
        assert_eq!(held[0].holder, RoleId::Worker(1));
    }
}
