//! The operator graph of a model: every tensor-producing operation with the operations it reads,
//! so that a memory manager can see forks (one output, many consumers) and joins (many inputs,
//! one consumer) rather than a chain of layers.
//!
//! A node is one operation (a convolution, a batch-norm, an activation, a pooling window, a
//! residual add, a concatenation, a fully-connected layer, …) with its output size and its cost
//! facts per sample. Node 0 is the model's input. Nodes are stored in declaration order, which is
//! a topological order: every input of a node comes before it.
//!
//! [`OpGraph::exec_order`] is the order a layer-granular executor runs the forward pass in (the
//! backward pass runs it reversed): a depth-first walk from the input in which a join is emitted
//! only once all its predecessors have been, so each branch of a fork runs to completion before
//! the next one starts (Dymem's Algorithm 2). [`OpGraph::consumers`] gives every node's readers,
//! whose count is the reference count that decides when an output may be released.

use crate::cost::LayerCost;
use serde::Serialize;
use std::fmt;
use thiserror::Error;

/// Bytes per fp32 element.
const F32: u64 = 4;

/// What an operation is, as far as memory management cares: which outputs are worth moving to
/// the host (large feature maps of convolutions, batch-norm, activations and pooling) and which
/// are small and short-lived (fully-connected layers, softmax, dropout).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OpKind {
    /// The model's input batch.
    Input,
    /// A convolution (any kernel size).
    Conv,
    /// Batch normalisation.
    BatchNorm,
    /// An activation function (ReLU).
    Activation,
    /// A pooling window (max, average, or global average).
    Pool,
    /// An element-wise sum of several inputs (a residual join).
    Add,
    /// A channel concatenation of several inputs (an inception join).
    Concat,
    /// A fully-connected layer.
    FullyConnected,
    /// A token embedding (a row of a table gathered per token).
    Embedding,
    /// A recurrent layer (an LSTM over a sequence).
    Recurrent,
    /// An attention over a sequence (scores, softmax, the weighted context).
    Attention,
    /// Dropout.
    Dropout,
    /// Softmax with the loss.
    Softmax,
}

impl OpKind {
    /// Whether the operation's outputs are small, short-lived tensors a memory manager keeps in
    /// a separate stack rather than moving them (Dymem's "reclaimed" layers: FC, softmax,
    /// dropout).
    pub fn is_reclaimed(self) -> bool {
        matches!(
            self,
            OpKind::FullyConnected | OpKind::Dropout | OpKind::Softmax
        )
    }

    /// Whether the operation is a join when it has several inputs.
    pub fn joins(self) -> bool {
        matches!(self, OpKind::Add | OpKind::Concat)
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            OpKind::Input => "input",
            OpKind::Conv => "conv",
            OpKind::BatchNorm => "batch-norm",
            OpKind::Activation => "activation",
            OpKind::Pool => "pool",
            OpKind::Add => "add",
            OpKind::Concat => "concat",
            OpKind::FullyConnected => "fully-connected",
            OpKind::Embedding => "embedding",
            OpKind::Recurrent => "recurrent",
            OpKind::Attention => "attention",
            OpKind::Dropout => "dropout",
            OpKind::Softmax => "softmax",
        };
        f.write_str(s)
    }
}

/// One operation of the graph.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OpNode {
    /// Name, unique within the graph (e.g. `stage1_block2_conv1`).
    pub name: String,
    /// What it is.
    pub kind: OpKind,
    /// The nodes whose outputs it reads, in argument order (empty for the input).
    pub inputs: Vec<usize>,
    /// Elements of its output per sample (fp32).
    pub out_elems: u64,
    /// Trainable parameter elements it owns.
    pub param_elems: u64,
    /// Its cost facts per sample (forward FLOPs per kind, bytes moved, kernels).
    #[serde(skip)]
    pub cost: LayerCost,
}

impl OpNode {
    /// Bytes of its output for a batch of `batch` samples (fp32).
    pub fn out_bytes(&self, batch: u64) -> u64 {
        self.out_elems * F32 * batch
    }
}

/// A graph that is not a well-formed operator graph.
#[derive(Debug, Error, PartialEq)]
pub enum GraphError {
    /// The graph has no nodes.
    #[error("the operator graph is empty")]
    Empty,
    /// Node 0 is not the input, or another node is.
    #[error("node {index} (`{name}`): {what}")]
    Input {
        /// Node index.
        index: usize,
        /// Node name.
        name: String,
        /// What is wrong.
        what: &'static str,
    },
    /// A node reads a node that does not come before it.
    #[error("node {index} (`{name}`) reads node {input}, which does not come before it")]
    Order {
        /// Node index.
        index: usize,
        /// Node name.
        name: String,
        /// The offending input.
        input: usize,
    },
    /// A node other than the last is read by no one.
    #[error("node {index} (`{name}`) is read by no node and is not the graph's output")]
    Dangling {
        /// Node index.
        index: usize,
        /// Node name.
        name: String,
    },
    /// Two nodes share a name.
    #[error("two nodes are named `{0}`")]
    DuplicateName(String),
}

/// A model's operator graph; see the module docs.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct OpGraph {
    /// Nodes in declaration (topological) order; node 0 is the input, the last node the output.
    pub nodes: Vec<OpNode>,
}

impl OpGraph {
    /// A graph holding only an input of `elems` elements per sample.
    pub fn with_input(elems: u64) -> OpGraph {
        OpGraph {
            nodes: vec![OpNode {
                name: "input".into(),
                kind: OpKind::Input,
                inputs: Vec::new(),
                out_elems: elems,
                param_elems: 0,
                cost: LayerCost::default(),
            }],
        }
    }

    /// Appends a node reading `inputs`; returns its index.
    pub fn push(
        &mut self,
        name: impl Into<String>,
        kind: OpKind,
        inputs: Vec<usize>,
        out_elems: u64,
        param_elems: u64,
        cost: LayerCost,
    ) -> usize {
        self.nodes.push(OpNode {
            name: name.into(),
            kind,
            inputs,
            out_elems,
            param_elems,
            cost,
        });
        self.nodes.len() - 1
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the graph has no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Checks the graph is well formed: a single input at index 0, every input read comes
    /// before its reader, every node but the last is read, names are unique.
    pub fn validate(&self) -> Result<(), GraphError> {
        let Some(first) = self.nodes.first() else {
            return Err(GraphError::Empty);
        };
        if first.kind != OpKind::Input || !first.inputs.is_empty() {
            return Err(GraphError::Input {
                index: 0,
                name: first.name.clone(),
                what: "the first node must be the input, reading nothing",
            });
        }
        let mut names = std::collections::HashSet::new();
        for (index, node) in self.nodes.iter().enumerate() {
            if !names.insert(node.name.as_str()) {
                return Err(GraphError::DuplicateName(node.name.clone()));
            }
            if index > 0 && (node.kind == OpKind::Input || node.inputs.is_empty()) {
                return Err(GraphError::Input {
                    index,
                    name: node.name.clone(),
                    what: "only the first node may be an input or read nothing",
                });
            }
            if let Some(&input) = node.inputs.iter().find(|&&i| i >= index) {
                return Err(GraphError::Order {
                    index,
                    name: node.name.clone(),
                    input,
                });
            }
        }
        let consumers = self.consumers();
        let last = self.nodes.len() - 1;
        if let Some(index) = (0..last).find(|&i| consumers[i].is_empty()) {
            return Err(GraphError::Dangling {
                index,
                name: self.nodes[index].name.clone(),
            });
        }
        Ok(())
    }

    /// Every node's readers, in declaration order (a node reading another twice is listed once).
    pub fn consumers(&self) -> Vec<Vec<usize>> {
        let mut out = vec![Vec::new(); self.nodes.len()];
        for (index, node) in self.nodes.iter().enumerate() {
            for &input in &node.inputs {
                if let Some(list) = out.get_mut(input) {
                    if list.last() != Some(&index) {
                        list.push(index);
                    }
                }
            }
        }
        out
    }

    /// Elements per sample that nodes `nodes` keep from the forward pass to the backward pass:
    /// their outputs, less those of activations computed in place, that is over an input no
    /// other node reads (a ReLU after a convolution or a batch-norm overwrites its input, as
    /// frameworks do: its backward pass needs only its output, and the layer before it needs
    /// its own input, not its output). Panics when `nodes` reaches past the graph, as slicing
    /// does.
    pub fn kept_elems(&self, nodes: std::ops::Range<usize>) -> u64 {
        let readers = self.consumers();
        self.nodes[nodes.clone()]
            .iter()
            .zip(nodes)
            .filter(|(node, index)| {
                let in_place = node.kind == OpKind::Activation
                    && matches!(node.inputs[..], [input] if readers[input] == [*index]);
                !in_place
            })
            .map(|(node, _)| node.out_elems)
            .sum()
    }

    /// The forward execution order (Dymem's Algorithm 2): depth first from the input, visiting a
    /// node's readers in declaration order, and emitting a join only when the last of its
    /// predecessors has been emitted. Every branch of a fork thus runs to its end (or to a join
    /// still waiting for other branches) before the next branch starts. The backward pass runs
    /// the reverse. Requires a valid graph ([`OpGraph::validate`]).
    pub fn exec_order(&self) -> Vec<usize> {
        let consumers = self.consumers();
        let indegree: Vec<usize> = self
            .nodes
            .iter()
            .map(|n| {
                let mut distinct = n.inputs.clone();
                distinct.sort_unstable();
                distinct.dedup();
                distinct.len()
            })
            .collect();
        let mut visits = vec![0usize; self.nodes.len()];
        let mut order = Vec::with_capacity(self.nodes.len());
        if self.nodes.is_empty() {
            return order;
        }
        // An explicit stack of (node, next reader to visit) instead of recursion: deep networks
        // (ResNet-152 has ~500 operations in a chain) would otherwise recurse that deep.
        order.push(0);
        let mut stack: Vec<(usize, usize)> = vec![(0, 0)];
        while let Some(top) = stack.last_mut() {
            let (node, next) = *top;
            let Some(&reader) = consumers[node].get(next) else {
                stack.pop();
                continue;
            };
            top.1 += 1;
            visits[reader] += 1;
            if visits[reader] == indegree[reader] {
                order.push(reader);
                stack.push((reader, 0));
            }
        }
        order
    }

    /// Forward FLOPs per sample of the whole graph.
    pub fn forward_flops(&self) -> f64 {
        self.nodes.iter().map(|n| n.cost.forward_flops()).sum()
    }

    /// Trainable parameter elements of the whole graph.
    pub fn param_elems(&self) -> u64 {
        self.nodes.iter().map(|n| n.param_elems).sum()
    }
}

/// Which pass of a training iteration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pass {
    /// The forward pass, in [`OpGraph::exec_order`].
    Forward,
    /// The backward pass, in the reverse order.
    Backward,
}

/// A point of a layer-granular iteration a memory manager acts at: just before or just after
/// node `node` computes in pass `pass`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct MovePoint {
    /// The pass.
    pub pass: Pass,
    /// The node (an index into [`OpGraph::nodes`]).
    pub node: usize,
    /// `true` before the node computes, `false` after.
    pub before: bool,
}

impl MovePoint {
    /// The point just after the same node's compute in the same pass.
    pub fn after(self) -> MovePoint {
        MovePoint {
            before: false,
            ..self
        }
    }
}

/// What a memory manager does to the output (feature map) of a node at a [`MovePoint`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case", tag = "move", content = "node")]
pub enum Move {
    /// Copy the feature map to the host; the device copy stays until freed.
    Offload(usize),
    /// Drop the device copy (the host copy, if any, stays).
    Free(usize),
    /// Copy the feature map back from the host to the device.
    Prefetch(usize),
}

/// The moves of one iteration, in the order they are issued. An executor that runs the real
/// math layer by layer applies them to its tensors and refuses to compute a node whose inputs
/// (or, in the backward pass, whose output) are not on the device: a plan that would need a
/// tensor it has dropped is an error, never a silent recomputation.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct MovePlan {
    /// `(where, what)`, in issue order.
    pub moves: Vec<(MovePoint, Move)>,
}

impl MovePlan {
    /// The moves issued at `point`, in order.
    pub fn at(&self, point: MovePoint) -> impl Iterator<Item = Move> + '_ {
        self.moves
            .iter()
            .filter(move |(p, _)| *p == point)
            .map(|(_, m)| *m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(g: &mut OpGraph, name: &str, kind: OpKind, inputs: &[usize]) -> usize {
        g.push(name, kind, inputs.to_vec(), 10, 0, LayerCost::default())
    }

    /// The Inception-A block of the thesis's Fig. 4.2: l0 forks into four branches that join
    /// at l9.
    fn inception_a() -> (OpGraph, Vec<usize>) {
        let mut g = OpGraph::with_input(10);
        let l0 = node(&mut g, "l0", OpKind::Conv, &[0]);
        // Declaration order of the readers of l0: l1, l2, l3, l4.
        let l1 = node(&mut g, "l1", OpKind::Pool, &[l0]);
        let l2 = node(&mut g, "l2", OpKind::Conv, &[l0]);
        let l3 = node(&mut g, "l3", OpKind::Conv, &[l0]);
        let l4 = node(&mut g, "l4", OpKind::Conv, &[l0]);
        let l5 = node(&mut g, "l5", OpKind::Conv, &[l1]);
        let l6 = node(&mut g, "l6", OpKind::Conv, &[l3]);
        let l7 = node(&mut g, "l7", OpKind::Conv, &[l4]);
        let l8 = node(&mut g, "l8", OpKind::Conv, &[l7]);
        let l9 = node(&mut g, "l9", OpKind::Concat, &[l5, l2, l6, l8]);
        (g, vec![0, l0, l1, l5, l2, l3, l6, l4, l7, l8, l9])
    }

    #[test]
    fn an_activation_runs_in_place_only_over_an_input_it_alone_reads() {
        let mut g = OpGraph::with_input(10);
        let conv = node(&mut g, "conv", OpKind::Conv, &[0]);
        let relu = node(&mut g, "relu", OpKind::Activation, &[conv]);
        let fork = node(&mut g, "fork", OpKind::Conv, &[relu]);
        let shared = node(&mut g, "shared-relu", OpKind::Activation, &[fork]);
        let add = node(&mut g, "add", OpKind::Add, &[shared, fork]);
        // The first ReLU overwrites the conv's output; the second cannot: the add reads its input.
        assert_eq!(g.kept_elems(conv..relu + 1), 10);
        assert_eq!(g.kept_elems(fork..add + 1), 30);
        assert_eq!(g.kept_elems(1..add + 1), 40);
        // The input's storage is not the nodes'.
        assert_eq!(g.kept_elems(0..1), 10);
        assert_eq!(g.kept_elems(1..1), 0);
    }

    #[test]
    fn inception_block_runs_branch_by_branch() {
        let (g, expected) = inception_a();
        g.validate().unwrap();
        assert_eq!(g.exec_order(), expected);
    }

    #[test]
    fn residual_block_runs_the_long_branch_before_the_join() {
        let mut g = OpGraph::with_input(10);
        let a = node(&mut g, "a", OpKind::Conv, &[0]);
        let add = node(&mut g, "add", OpKind::Add, &[a, 0]);
        let out = node(&mut g, "out", OpKind::Activation, &[add]);
        g.validate().unwrap();
        assert_eq!(g.exec_order(), vec![0, a, add, out]);
        assert_eq!(g.consumers()[0], vec![a, add]);
    }

    #[test]
    fn a_node_reading_the_same_input_twice_waits_for_it_once() {
        let mut g = OpGraph::with_input(10);
        let a = node(&mut g, "a", OpKind::Conv, &[0]);
        let sq = node(&mut g, "square", OpKind::Add, &[a, a]);
        assert_eq!(g.exec_order(), vec![0, a, sq]);
        assert_eq!(g.consumers()[a], vec![sq]);
    }

    #[test]
    fn every_node_is_emitted_once_and_after_its_inputs() {
        let (g, _) = inception_a();
        let order = g.exec_order();
        assert_eq!(order.len(), g.len());
        let pos: Vec<usize> = (0..g.len())
            .map(|n| order.iter().position(|&o| o == n).unwrap())
            .collect();
        for (i, n) in g.nodes.iter().enumerate() {
            for &input in &n.inputs {
                assert!(pos[input] < pos[i], "{} before {}", input, i);
            }
        }
    }

    #[test]
    fn malformed_graphs_are_named() {
        assert_eq!(OpGraph::default().validate(), Err(GraphError::Empty));
        let mut g = OpGraph::with_input(4);
        node(&mut g, "a", OpKind::Conv, &[0]);
        node(&mut g, "b", OpKind::Conv, &[0]);
        assert!(matches!(
            g.validate(),
            Err(GraphError::Dangling { index: 1, .. })
        ));
        let mut g = OpGraph::with_input(4);
        g.push("a", OpKind::Conv, vec![2], 1, 0, LayerCost::default());
        g.push("b", OpKind::Conv, vec![1], 1, 0, LayerCost::default());
        let e = g.validate().unwrap_err();
        assert!(e.to_string().contains("(`a`) reads node 2"), "{e}");
        let mut g = OpGraph::with_input(4);
        node(&mut g, "a", OpKind::Conv, &[0]);
        node(&mut g, "a", OpKind::Conv, &[1]);
        assert_eq!(g.validate(), Err(GraphError::DuplicateName("a".into())));
    }
}
