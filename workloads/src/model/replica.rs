//! A worker's model replica: load parameters, take a training step, evaluate.

use super::{DlrmModel, GraphNet, MfModel, ModelSpec, PlanError, StagedModel};
use crate::error::{Result, TensorContext, WorkloadError};
use crate::graph::MovePlan;
use candle_core::{Device, Tensor, Var};
use std::ops::Range;

/// Result of one training step: the mean loss and one gradient per parameter, as host vectors
/// (`G = Vec<f32>`, what a step sends to servers or a ring) or as tensors where the backward pass
/// left them (`G = Tensor`, [`Replica::step_on_device`]).
#[derive(Clone, Debug)]
pub struct StepOutput<G = Vec<f32>> {
    /// Mean loss over the batch: cross-entropy for classifiers, the regularized squared error
    /// for MF.
    pub loss: f64,
    /// Mean gradient over the batch, one per parameter in layout order (a flat vector, or a
    /// tensor shaped like its parameter).
    pub grads: Vec<G>,
}

impl StepOutput {
    /// The host gradients as flat CPU tensors, taking their vectors without a copy: the form of
    /// [`Replica::step_on_device`] for a step that computed on the host.
    pub fn into_cpu_tensors(self) -> Result<StepOutput<Tensor>> {
        let grads = self
            .grads
            .into_iter()
            .map(|g| {
                let n = g.len();
                Tensor::from_vec(g, n, &Device::Cpu)
            })
            .collect::<candle_core::Result<_>>()
            .ctx("gradient")?;
        Ok(StepOutput {
            loss: self.loss,
            grads,
        })
    }
}

/// A trainable copy of a real model.
///
/// Every kind of real model trains through the same calls ([`Replica::set_params`],
/// [`Replica::step`], [`Replica::evaluate`]), so strategies need no model-specific code.
pub struct Replica {
    inner: Inner,
}

enum Inner {
    Staged(StagedModel),
    Graph(GraphNet),
    Mf(MfModel),
    Dlrm(DlrmModel),
}

/// Test-set scores of a parameter set.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EvalOutput {
    /// Accuracy (classifiers, a DLRM at the 0.5 threshold); `None` for MF.
    pub accuracy: Option<f64>,
    /// Mean loss: cross-entropy (binary for a DLRM), MF's test MSE.
    pub loss: f64,
    /// Area under the ROC curve (a DLRM only, and only with both classes present).
    pub auc: Option<f64>,
}

impl Replica {
    /// Builds a replica of `spec` whose staged network computes on `device` (the CPU or a CUDA
    /// GPU; MF always computes on the host); `None` for throughput-mode profiles.
    pub fn new(spec: &ModelSpec, device: &Device) -> Result<Option<Replica>> {
        Replica::build(spec, device, None)
    }

    /// A replica that holds the parameters of stages `stages` alone, for a worker that computes
    /// only those (a pipeline stage): a staged network keeps no tensors for the others, and a
    /// pass through one of them is an error naming it. Other kinds of model are not chains of
    /// stages and come whole; `None` for throughput-mode profiles.
    pub fn part(
        spec: &ModelSpec,
        device: &Device,
        stages: Range<usize>,
    ) -> Result<Option<Replica>> {
        Replica::build(spec, device, Some(stages))
    }

    /// A replica of `spec` on `device` holding the parameters of `stages` of a staged network
    /// (`None`: every stage; other kinds of model come whole).
    fn build(
        spec: &ModelSpec,
        device: &Device,
        stages: Option<Range<usize>>,
    ) -> Result<Option<Replica>> {
        let inner = match spec {
            ModelSpec::Real {
                stages: specs,
                input_shape,
                ..
            } => {
                let held = stages.unwrap_or(0..specs.len());
                Inner::Staged(StagedModel::part(specs, input_shape, device, held)?)
            }
            ModelSpec::Graph(g) => Inner::Graph(GraphNet::new(g, device)?),
            ModelSpec::Mf(m) => Inner::Mf(MfModel::new(m)),
            ModelSpec::Dlrm(d) => Inner::Dlrm(DlrmModel::new(d, device)?),
            ModelSpec::Profile(_) => return Ok(None),
        };
        Ok(Some(Replica { inner }))
    }

    /// [`Replica::new`] on the CPU.
    pub fn cpu(spec: &ModelSpec) -> Result<Option<Replica>> {
        Replica::new(spec, &Device::Cpu)
    }

    /// The staged network (for strategies that run stages one by one); `None` for MF and graph
    /// networks, which are not stacks of stages.
    pub fn model(&self) -> Option<&StagedModel> {
        match &self.inner {
            Inner::Staged(m) => Some(m),
            Inner::Graph(_) | Inner::Mf(_) | Inner::Dlrm(_) => None,
        }
    }

    /// The graph network (for executors that run it node by node); `None` for other models.
    pub fn graph_net(&self) -> Option<&GraphNet> {
        match &self.inner {
            Inner::Graph(g) => Some(g),
            Inner::Staged(_) | Inner::Mf(_) | Inner::Dlrm(_) => None,
        }
    }

    /// A training step of a graph network run layer by layer, following a memory manager's
    /// move plan ([`GraphNet::step_layerwise`]); an error for other models.
    pub fn step_with_plan(
        &self,
        features: Vec<f32>,
        labels: &[u32],
        plan: &MovePlan,
    ) -> Result<StepOutput> {
        match &self.inner {
            Inner::Graph(g) => g.step_layerwise(features, labels, plan),
            Inner::Staged(_) => Err(PlanError::NotAGraph { kind: "staged" }.into()),
            Inner::Mf(_) => Err(PlanError::NotAGraph { kind: "mf" }.into()),
            Inner::Dlrm(_) => Err(PlanError::NotAGraph { kind: "dlrm" }.into()),
        }
    }

    /// The model's own parameter variables in layout order, on its device, for a holder that
    /// keeps the parameters there between steps and updates them in place: those of
    /// [`Replica::held_params`] (every parameter but for a [`Replica::part`]); `None` for models
    /// whose parameters are not variables of their own (MF, DLRM).
    pub fn param_vars(&self) -> Option<Vec<Var>> {
        match &self.inner {
            Inner::Staged(m) => Some(m.vars().into_iter().cloned().collect()),
            Inner::Graph(g) => Some(g.vars().into_iter().cloned().collect()),
            Inner::Mf(_) | Inner::Dlrm(_) => None,
        }
    }

    /// The parameters this replica holds: indices into the model's parameter list, which
    /// [`Replica::param_vars`] follows. Every parameter, but a [`Replica::part`]'s stages' for a
    /// staged network; `None` for models whose parameters are not variables of their own.
    pub fn held_params(&self) -> Option<Range<usize>> {
        match &self.inner {
            Inner::Staged(m) => Some(m.held_params()),
            Inner::Graph(g) => Some(0..g.vars().len()),
            Inner::Mf(_) | Inner::Dlrm(_) => None,
        }
    }

    /// Sets the parameters from flat values of every parameter in layout order (a
    /// [`Replica::part`] takes those of its own stages from them).
    pub fn set_params(&self, values: &[Vec<f32>]) -> Result<()> {
        let model = match &self.inner {
            Inner::Staged(m) => m,
            Inner::Graph(g) => return g.set_params(values),
            Inner::Mf(m) => return m.set_params(values),
            Inner::Dlrm(d) => return d.set_params(values),
        };
        let count = model.params().len();
        if values.len() != count {
            return Err(WorkloadError::Tensor {
                context: "load parameters".into(),
                source: candle_core::Error::Msg(format!(
                    "{} values for a model of {count} parameters",
                    values.len()
                )),
            });
        }
        super::load_vars(&model.vars(), &values[model.held_params()])?;
        Ok(())
    }

    /// Forward and backward on one batch: mean loss and dense mean gradients, one vector per
    /// parameter in layout order (MF: zero on the factor rows the batch does not touch).
    ///
    /// A DLRM has no such step (it would need dense whole-table gradients): it is an error
    /// saying which strategies train it, row-wise.
    pub fn step(&self, features: Vec<f32>, labels: &[u32]) -> Result<StepOutput> {
        let model = match &self.inner {
            Inner::Staged(m) => m,
            // Layer by layer, as under a memory policy's moves (with none here): the same
            // computation whether or not a policy moves feature maps, so a run under any policy
            // gives the same bits.
            Inner::Graph(g) => return g.step_layerwise(features, labels, &MovePlan::default()),
            Inner::Mf(m) => {
                let (loss, grads) = m.step(&features)?;
                return Ok(StepOutput { loss, grads });
            }
            Inner::Dlrm(_) => return Err(no_dense_step()),
        };
        let out = staged_step(model, features, labels)?;
        let grads = super::host_values(&out.grads).ctx("gradient")?;
        Ok(StepOutput {
            loss: out.loss,
            grads,
        })
    }

    /// [`Replica::step`] with the gradients left where the backward pass computed them: tensors
    /// on the replica's device, each shaped like its parameter, with the same values as
    /// `step`'s. For a worker whose gradients are summed or applied on the device (NCCL, an
    /// update where nothing is sent), so they need not cross to the host. Models whose steps
    /// compute on the host (MF, and a graph network, which runs layer by layer) give their host
    /// gradients as flat CPU tensors.
    pub fn step_on_device(&self, features: Vec<f32>, labels: &[u32]) -> Result<StepOutput<Tensor>> {
        match &self.inner {
            Inner::Staged(m) => staged_step(m, features, labels),
            Inner::Dlrm(_) => Err(no_dense_step()),
            Inner::Graph(_) | Inner::Mf(_) => self.step(features, labels)?.into_cpu_tensors(),
        }
    }

    /// Accuracy and mean loss on a labelled set, in chunks.
    ///
    /// Classifiers report `(Some(accuracy), mean cross-entropy)`; MF, a regression model, reports
    /// `(None, test MSE)` (the squared error alone, without the regularization term).
    /// A DLRM reports its accuracy at the 0.5 threshold and its mean binary cross-entropy
    /// ([`Replica::evaluation`] adds its AUC).
    pub fn evaluate(&self, features: &[f32], labels: &[u32]) -> Result<(Option<f64>, f64)> {
        let e = self.evaluation(features, labels)?;
        Ok((e.accuracy, e.loss))
    }

    /// [`Replica::evaluate`] with the AUC too (a DLRM's; `None` for other models).
    pub fn evaluation(&self, features: &[f32], labels: &[u32]) -> Result<EvalOutput> {
        let device = match &self.inner {
            Inner::Staged(m) => m.device().clone(),
            Inner::Graph(g) => g.device().clone(),
            Inner::Mf(m) => {
                return Ok(EvalOutput {
                    accuracy: None,
                    loss: m.mse(features)?,
                    auc: None,
                })
            }
            Inner::Dlrm(d) => {
                let e = d.evaluate(features, labels)?;
                return Ok(EvalOutput {
                    accuracy: Some(e.accuracy),
                    loss: e.loss,
                    auc: e.auc,
                });
            }
        };
        let n = labels.len();
        if n == 0 {
            return Ok(EvalOutput {
                accuracy: Some(0.0),
                loss: 0.0,
                auc: None,
            });
        }
        let per = features.len() / n;
        let (mut correct, mut loss_sum) = (0usize, 0.0f64);
        for start in (0..n).step_by(1024) {
            let end = (start + 1024).min(n);
            let y =
                Tensor::from_slice(&labels[start..end], end - start, &device).ctx("eval labels")?;
            let logits = self
                .logits(features[start * per..end * per].to_vec(), end - start)
                .ctx("eval forward")?;
            let loss = candle_nn::loss::cross_entropy(&logits, &y).ctx("eval loss")?;
            loss_sum += loss.to_scalar::<f32>().ctx("eval loss")? as f64 * (end - start) as f64;
            let pred = logits
                .argmax(1)
                .and_then(|p| p.to_vec1::<u32>())
                .ctx("eval argmax")?;
            correct += pred
                .iter()
                .zip(&labels[start..end])
                .filter(|(p, l)| p == l)
                .count();
        }
        Ok(EvalOutput {
            accuracy: Some(correct as f64 / n as f64),
            loss: loss_sum / n as f64,
            auc: None,
        })
    }

    /// A classifier's logits for `rows` samples (MF has none).
    fn logits(&self, features: Vec<f32>, rows: usize) -> candle_core::Result<Tensor> {
        match &self.inner {
            Inner::Staged(m) => m.forward(&m.input(features, rows)?),
            Inner::Graph(g) => g.logits(&g.input(features, rows)?, false),
            Inner::Mf(_) => candle_core::bail!("matrix factorization has no logits"),
            Inner::Dlrm(_) => candle_core::bail!("a DLRM scores through its own evaluation"),
        }
    }
}

/// A staged network's forward and backward on one batch: the mean loss and each parameter's
/// gradient as the backward pass left it, on the model's device (zeros for a parameter the loss
/// does not reach).
fn staged_step(
    model: &StagedModel,
    features: Vec<f32>,
    labels: &[u32],
) -> Result<StepOutput<Tensor>> {
    let batch = labels.len();
    let x = model.input(features, batch).ctx("batch input")?;
    let y = Tensor::from_slice(labels, batch, model.device()).ctx("batch labels")?;
    let logits = model.forward(&x).ctx("forward")?;
    let loss = candle_nn::loss::cross_entropy(&logits, &y).ctx("loss")?;
    let grads = loss.backward().ctx("backward")?;
    let loss = loss.to_scalar::<f32>().ctx("loss value")? as f64;
    let mut out = Vec::new();
    for var in model.vars() {
        let g = match grads.get(var.as_tensor()) {
            Some(g) => g.clone(),
            None => var.zeros_like().ctx("gradient")?,
        };
        out.push(g);
    }
    Ok(StepOutput { loss, grads: out })
}

/// The error for a dense step of a DLRM, naming the strategies that train one.
fn no_dense_step() -> WorkloadError {
    WorkloadError::config(
        "model.kind",
        "\"dlrm\"",
        "a DLRM trains with a strategy that updates embeddings row-wise (`sven`, `dlrm-async-ps`), not through dense whole-model gradients",
    )
}
