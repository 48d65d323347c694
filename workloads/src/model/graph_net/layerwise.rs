//! A layer-by-layer training step that follows a memory manager's [`MovePlan`].
//!
//! The forward pass runs the nodes in [`OpGraph::exec_order`], each on detached inputs, and
//! keeps every node's output (feature map) in a store where it may be on the device, on the
//! host, both, or dropped. At each [`MovePoint`] the plan's moves are applied to the store:
//! `Offload` copies a feature map to a host `Vec<f32>` (the device tensor stays), `Free` drops
//! the device tensor, `Prefetch` rebuilds the device tensor from the host copy. Freeing a
//! feature map that is not on the device does nothing, nor does prefetching one that is (it
//! still needs a host copy), so a plan may overlap with the executor's own frees. A node computes
//! only when everything it needs is on the device (its inputs in the forward pass; its inputs
//! and its output in the backward pass, as a swapping memory manager assumes); anything else is
//! an error naming the pass, the node and the missing tensor. Nothing is ever recomputed to
//! make up for a tensor the plan dropped.
//!
//! The backward pass runs the nodes in reverse execution order. Node `n`'s output gradient
//! `dY` is the sum of its consumers' contributions, added in the order the consumers' backward
//! passes run. Its parameter and input gradients come from a *local re-execution*: the inputs
//! become `Var`s, the node's output is computed again from them and its parameters, and the
//! surrogate `sum(y · dY)` is differentiated, whose gradient is exactly the chain rule through
//! the node. This is how candle yields a single layer's gradients; it is an implementation
//! device, not recomputation in the memory-management sense (the feature maps it reads must be
//! resident, and a cost model charges nothing for it). After node `n`'s backward, its output is
//! needed by no later backward pass (its consumers ran theirs before it), so the executor drops
//! it.

use super::net::GraphNet;
use super::ops;
use crate::error::{Result, TensorContext};
use crate::graph::{Move, MovePlan, MovePoint, Pass};
use crate::model::StepOutput;
use candle_core::{Tensor, Var};
use std::collections::HashMap;
use thiserror::Error;

/// A move plan the executor cannot follow.
#[derive(Debug, Error, PartialEq)]
pub enum PlanError {
    /// A node was about to compute without a tensor it needs on the device.
    #[error(
        "{pass} pass, node {node} (`{name}`): its {role} `{tensor}` is not on the device \
         (the plan freed it and did not prefetch it back)"
    )]
    NotOnDevice {
        /// `forward` or `backward`.
        pass: &'static str,
        /// The node about to compute.
        node: usize,
        /// Its name.
        name: String,
        /// `input` or `output`.
        role: &'static str,
        /// The missing tensor (the name of the node that produces it).
        tensor: String,
    },
    /// A prefetch of a feature map that was never offloaded.
    #[error("{at}: prefetch of `{tensor}`, which has no host copy")]
    NoHostCopy {
        /// Where the move is issued.
        at: String,
        /// The feature map (the name of the node that produces it).
        tensor: String,
    },
    /// An offload of a feature map that is neither on the device nor already on the host.
    #[error("{at}: offload of `{tensor}`, which is not on the device")]
    NothingToOffload {
        /// Where the move is issued.
        at: String,
        /// The feature map.
        tensor: String,
    },
    /// A move point or a move names a node the network does not have.
    #[error("the plan names node {node}, but the network has {len} nodes")]
    UnknownNode {
        /// The node index in the plan.
        node: usize,
        /// Nodes of the network.
        len: usize,
    },
    /// The model is not a graph network.
    #[error("a layer-by-layer step with a move plan needs a graph network, not a {kind} model")]
    NotAGraph {
        /// What the model is.
        kind: &'static str,
    },
}

fn pass_name(pass: Pass) -> &'static str {
    match pass {
        Pass::Forward => "forward",
        Pass::Backward => "backward",
    }
}

/// Where a feature map is: on the device, on the host, both, or neither (dropped).
#[derive(Default)]
struct Slot {
    device: Option<Tensor>,
    host: Option<(Vec<f32>, Vec<usize>)>,
}

/// The feature maps of one iteration and the plan's moves by point.
struct Store<'a> {
    net: &'a GraphNet,
    slots: Vec<Slot>,
    moves: HashMap<MovePoint, Vec<Move>>,
}

impl<'a> Store<'a> {
    fn new(net: &'a GraphNet, plan: &MovePlan) -> Result<Store<'a>> {
        let len = net.spec().nodes.len();
        let mut moves: HashMap<MovePoint, Vec<Move>> = HashMap::new();
        for (point, m) in &plan.moves {
            let target = match *m {
                Move::Offload(t) | Move::Free(t) | Move::Prefetch(t) => t,
            };
            if let Some(&node) = [point.node, target].iter().find(|&&i| i >= len) {
                return Err(PlanError::UnknownNode { node, len }.into());
            }
            moves.entry(*point).or_default().push(*m);
        }
        Ok(Store {
            net,
            slots: (0..len).map(|_| Slot::default()).collect(),
            moves,
        })
    }

    fn name(&self, i: usize) -> String {
        self.net.spec().nodes[i].name.clone()
    }

    /// Applies the plan's moves at `(pass, node, before)`, in issue order.
    fn apply(&mut self, pass: Pass, node: usize, before: bool) -> Result<()> {
        let point = MovePoint { pass, node, before };
        let Some(moves) = self.moves.get(&point).cloned() else {
            return Ok(());
        };
        let net = self.net;
        let name = |i: usize| net.spec().nodes[i].name.clone();
        let at = || {
            format!(
                "{} pass, {} node {node} (`{}`)",
                pass_name(pass),
                if before { "before" } else { "after" },
                name(node)
            )
        };
        for m in moves {
            match m {
                Move::Offload(t) => {
                    let slot = &self.slots[t];
                    match (&slot.device, &slot.host) {
                        (Some(d), _) => {
                            let values = d.flatten_all().and_then(|v| v.to_vec1::<f32>());
                            let host = (values.ctx("offload")?, d.dims().to_vec());
                            self.slots[t].host = Some(host);
                        }
                        (None, Some(_)) => {}
                        (None, None) => {
                            return Err(PlanError::NothingToOffload {
                                at: at(),
                                tensor: name(t),
                            }
                            .into())
                        }
                    }
                }
                Move::Free(t) => self.slots[t].device = None,
                Move::Prefetch(t) => {
                    let Some((values, shape)) = &self.slots[t].host else {
                        return Err(PlanError::NoHostCopy {
                            at: at(),
                            tensor: name(t),
                        }
                        .into());
                    };
                    if self.slots[t].device.is_none() {
                        let d =
                            Tensor::from_vec(values.clone(), shape.as_slice(), self.net.device())
                                .ctx("prefetch")?;
                        self.slots[t].device = Some(d);
                    }
                }
            }
        }
        Ok(())
    }

    /// The device tensor of `tensor`, which node `node` needs as its `role` in `pass`.
    fn need(&self, pass: Pass, node: usize, role: &'static str, tensor: usize) -> Result<Tensor> {
        self.slots[tensor].device.clone().ok_or_else(|| {
            PlanError::NotOnDevice {
                pass: pass_name(pass),
                node,
                name: self.name(node),
                role,
                tensor: self.name(tensor),
            }
            .into()
        })
    }
}

impl GraphNet {
    /// One training step run layer by layer, following `plan` (see the module docs): the same
    /// mean softmax cross-entropy and gradients (layout order) as [`GraphNet::step`] up to
    /// floating-point rounding, and bit for bit the same whatever feature maps a plan moves,
    /// as long as every tensor a node needs is on the device when it computes. A plan that
    /// breaks that, prefetches what was never offloaded, or names a node the network lacks is
    /// a [`PlanError`].
    pub fn step_layerwise(
        &self,
        features: Vec<f32>,
        labels: &[u32],
        plan: &MovePlan,
    ) -> Result<StepOutput> {
        let spec = self.spec();
        let last = match spec.nodes.len() {
            0 | 1 => {
                return Err(crate::WorkloadError::Tensor {
                    context: "layer-by-layer step".into(),
                    source: candle_core::Error::Msg("the network has no layers".into()),
                })
            }
            n => n - 1,
        };
        let order = spec.op_graph().exec_order();
        let batch = labels.len();
        let mut store = Store::new(self, plan)?;
        store.slots[0].device = Some(self.input(features, batch).ctx("batch input")?);

        for &n in &order {
            store.apply(Pass::Forward, n, true)?;
            if n != 0 {
                let node = &spec.nodes[n];
                let inputs = node
                    .inputs
                    .iter()
                    .map(|&j| Ok(store.need(Pass::Forward, n, "input", j)?.detach()))
                    .collect::<Result<Vec<_>>>()?;
                let params: Vec<Tensor> = self
                    .node_vars(n)
                    .iter()
                    .map(|v| v.as_tensor().detach())
                    .collect();
                let y = ops::forward(
                    &node.op,
                    &inputs.iter().collect::<Vec<_>>(),
                    &params.iter().collect::<Vec<_>>(),
                )
                .and_then(|y| y.contiguous())
                .ctx(&format!("forward of `{}`", node.name))?;
                store.slots[n].device = Some(y);
            }
            store.apply(Pass::Forward, n, false)?;
        }

        let logits = store.need(Pass::Forward, last, "output", last)?;
        let (loss, dlogits) = loss_grad(&logits, labels)?;

        let mut dy: Vec<Option<Tensor>> = vec![None; spec.nodes.len()];
        dy[last] = Some(dlogits);
        let mut param_grads: Vec<Vec<Option<Tensor>>> = (0..spec.nodes.len())
            .map(|i| vec![None; self.node_vars(i).len()])
            .collect();
        for &n in order.iter().rev() {
            store.apply(Pass::Backward, n, true)?;
            if n != 0 {
                let node = &spec.nodes[n];
                let inputs = node
                    .inputs
                    .iter()
                    .map(|&j| store.need(Pass::Backward, n, "input", j))
                    .collect::<Result<Vec<_>>>()?;
                store.need(Pass::Backward, n, "output", n)?;
                let grad_out = dy[n].take().ok_or_else(|| crate::WorkloadError::Tensor {
                    context: format!("backward of `{}`", node.name),
                    source: candle_core::Error::Msg("no gradient reached its output".into()),
                })?;
                let (dx, dw) = self
                    .node_backward(n, &inputs, &grad_out)
                    .ctx(&format!("backward of `{}`", node.name))?;
                for (&j, g) in node.inputs.iter().zip(dx) {
                    if j == 0 {
                        continue;
                    }
                    dy[j] = Some(match dy[j].take() {
                        None => g,
                        Some(acc) => (acc + g).ctx("gradient sum")?,
                    });
                }
                param_grads[n] = dw;
            }
            store.apply(Pass::Backward, n, false)?;
            // No later backward pass reads node n's output: its consumers ran theirs already.
            store.slots[n] = Slot::default();
        }

        let mut grads = Vec::new();
        for (n, per_node) in param_grads.into_iter().enumerate() {
            for (g, var) in per_node.into_iter().zip(self.node_vars(n)) {
                grads.push(match g {
                    Some(g) => g
                        .flatten_all()
                        .and_then(|g| g.to_vec1::<f32>())
                        .ctx("gradient")?,
                    None => vec![0.0; var.elem_count()],
                });
            }
        }
        Ok(StepOutput { loss, grads })
    }

    /// The backward of node `n` by local re-execution from its `inputs` and the gradient of
    /// its output: the gradients of its inputs (argument order) and of its parameters
    /// (layout order; `None` for one the output does not depend on).
    fn node_backward(
        &self,
        n: usize,
        inputs: &[Tensor],
        grad_out: &Tensor,
    ) -> candle_core::Result<(Vec<Tensor>, Vec<Option<Tensor>>)> {
        let xs = inputs
            .iter()
            .map(|x| Var::from_tensor(&x.detach()))
            .collect::<candle_core::Result<Vec<_>>>()?;
        let vars = self.node_vars(n);
        let y = ops::forward(
            &self.spec().nodes[n].op,
            &xs.iter().map(Var::as_tensor).collect::<Vec<_>>(),
            &vars.iter().map(Var::as_tensor).collect::<Vec<_>>(),
        )?;
        let grads = (y * grad_out)?.sum_all()?.backward()?;
        let dx = xs
            .iter()
            .map(|x| match grads.get(x.as_tensor()) {
                Some(g) => Ok(g.clone()),
                None => x.as_tensor().zeros_like(),
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        let dw = vars
            .iter()
            .map(|v| grads.get(v.as_tensor()).cloned())
            .collect();
        Ok((dx, dw))
    }
}

/// The mean softmax cross-entropy of `logits` against `labels` and its gradient with respect
/// to the logits.
fn loss_grad(logits: &Tensor, labels: &[u32]) -> Result<(f64, Tensor)> {
    let logits = Var::from_tensor(&logits.detach()).ctx("loss")?;
    let y = Tensor::from_slice(labels, labels.len(), logits.device()).ctx("batch labels")?;
    let loss = candle_nn::loss::cross_entropy(logits.as_tensor(), &y).ctx("loss")?;
    let grad = loss
        .backward()
        .ctx("loss gradient")?
        .get(logits.as_tensor())
        .cloned()
        .ok_or_else(|| crate::WorkloadError::Tensor {
            context: "loss gradient".into(),
            source: candle_core::Error::Msg("no gradient for the logits".into()),
        })?;
    Ok((loss.to_scalar::<f32>().ctx("loss value")? as f64, grad))
}
