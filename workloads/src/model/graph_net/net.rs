//! A graph network's trainable parameters and its whole-graph step (plain candle autograd).

use super::ops;
use super::spec::GraphNetSpec;
use crate::error::{Result, TensorContext};
use crate::model::StepOutput;
use candle_core::{DType, Device, Tensor, Var};

/// A graph network built from a [`GraphNetSpec`]: per node, its parameters as candle `Var`s.
pub struct GraphNet {
    spec: GraphNetSpec,
    /// Per node, its parameters in layout order.
    params: Vec<Vec<Var>>,
    device: Device,
}

impl GraphNet {
    /// Builds the network with zero parameters (values are loaded with
    /// [`GraphNet::set_params`]).
    pub fn new(spec: &GraphNetSpec, device: &Device) -> Result<GraphNet> {
        let params = spec
            .nodes
            .iter()
            .map(|n| {
                n.params()
                    .iter()
                    .map(|p| Var::zeros(p.shape.as_slice(), DType::F32, device))
                    .collect::<candle_core::Result<Vec<_>>>()
            })
            .collect::<candle_core::Result<Vec<_>>>()
            .ctx("init graph network parameters")?;
        Ok(GraphNet {
            spec: spec.clone(),
            params,
            device: device.clone(),
        })
    }

    /// The network's description.
    pub fn spec(&self) -> &GraphNetSpec {
        &self.spec
    }

    /// The device its tensors live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Parameter variables in layout order ([`GraphNetSpec::params`]).
    pub fn vars(&self) -> Vec<&Var> {
        self.params.iter().flatten().collect()
    }

    /// The parameters of node `i`, in layout order.
    pub(crate) fn node_vars(&self, i: usize) -> &[Var] {
        &self.params[i]
    }

    /// Sets every parameter from flat values in layout order.
    pub fn set_params(&self, values: &[Vec<f32>]) -> Result<()> {
        crate::model::load_vars(&self.vars(), values)
    }

    /// A flat batch of samples as the input tensor `[batch, c, h, w]`.
    pub fn input(&self, features: Vec<f32>, batch: usize) -> candle_core::Result<Tensor> {
        let mut shape = vec![batch];
        shape.extend(self.spec.input_shape());
        Tensor::from_vec(features, shape, &self.device)
    }

    /// Forward through every node in declaration order; the logits (the last node's output).
    /// With `track` the parameters enter as `Var`s (an autograd graph is built), otherwise
    /// detached.
    pub fn logits(&self, x: &Tensor, track: bool) -> candle_core::Result<Tensor> {
        let mut outs: Vec<Tensor> = Vec::with_capacity(self.spec.nodes.len());
        outs.push(x.clone());
        for (i, node) in self.spec.nodes.iter().enumerate().skip(1) {
            let inputs: Vec<&Tensor> = node.inputs.iter().map(|&j| &outs[j]).collect();
            let detached: Vec<Tensor>;
            let params: Vec<&Tensor> = if track {
                self.params[i].iter().map(|v| v.as_tensor()).collect()
            } else {
                detached = self.params[i]
                    .iter()
                    .map(|v| v.as_tensor().detach())
                    .collect();
                detached.iter().collect()
            };
            let y = ops::forward(&node.op, &inputs, &params)?;
            outs.push(y);
        }
        outs.pop()
            .ok_or_else(|| candle_core::Error::Msg("the network has no nodes".into()))
    }

    /// One training step with candle autograd over the whole graph: mean softmax
    /// cross-entropy over the batch and the gradients of every parameter in layout order.
    pub fn step(&self, features: Vec<f32>, labels: &[u32]) -> Result<StepOutput> {
        let batch = labels.len();
        let x = self.input(features, batch).ctx("batch input")?;
        let y = Tensor::from_slice(labels, batch, &self.device).ctx("batch labels")?;
        let logits = self.logits(&x, true).ctx("forward")?;
        let loss = candle_nn::loss::cross_entropy(&logits, &y).ctx("loss")?;
        let grads = loss.backward().ctx("backward")?;
        let loss = loss.to_scalar::<f32>().ctx("loss value")? as f64;
        let mut out = Vec::new();
        for var in self.vars() {
            out.push(match grads.get(var.as_tensor()) {
                Some(g) => g
                    .flatten_all()
                    .and_then(|g| g.to_vec1::<f32>())
                    .ctx("gradient")?,
                None => vec![0.0; var.elem_count()],
            });
        }
        Ok(StepOutput { loss, grads: out })
    }
}
