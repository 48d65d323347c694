//! Graph networks: candle models whose layers form a graph with forks and joins rather than a
//! chain of stages, for training the nonlinear networks a GPU memory manager such as Dymem is
//! designed for (ResNets, Inception) with real math.
//!
//! A [`GraphNetSpec`] lists nodes, one candle operation each (convolution, batch-norm, ReLU,
//! pooling, residual add, channel concatenation, fully-connected), with the nodes they read;
//! [`GraphNetSpec::op_graph`] is the matching [`OpGraph`](crate::graph::OpGraph), node for
//! node, which a memory manager plans its moves on. [`GraphNet`] holds the parameters and
//! trains two ways: [`GraphNet::step`], plain candle autograd over the whole graph, and
//! [`GraphNet::step_layerwise`], node by node in Dymem's execution order, following a
//! [`MovePlan`](crate::graph::MovePlan) of offloads, frees and prefetches of feature maps.
//! A [`Replica`](crate::model::Replica) trains layer by layer, with or without a plan, so that a
//! run gives the same bits under any memory policy; whole-graph autograd is the reference the
//! layer-by-layer step is checked against.

mod build;
mod layerwise;
mod net;
mod ops;
mod spec;

#[cfg(test)]
mod tests;

pub use layerwise::PlanError;
pub use net::GraphNet;
pub use spec::{GraphNetSpec, NetNode, NetOp, BN_EPS};
