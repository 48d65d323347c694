//! The model cut into sub-models: contiguous runs of its stages (a real network's stages, a
//! profile's layers), each with its own parameters, run forward and backward on any batch size.
//!
//! A sub-model is what one token trains (Fela), what one pipeline stage holds (PipeDream,
//! GPipe, model parallelism) and what one worker of a hybrid split holds. On a real model its math runs on the worker's staged candle
//! network; in throughput mode only its cost is charged. Costs come from the device model
//! restricted to the sub-model's layers ([`Work::step_part`]): a forward pass is a third of their
//! training step, a backward pass two thirds.

use crate::memory::MemEvent;
use crate::model::{ModelSpec, StageSpec, StagedModel};
use crate::prelude::*;
use candle_core::{Device, Tensor};
use std::ops::Range;

pub mod held;
pub mod math;

pub use held::Held;

/// The sub-models of a job's model: which stages and which parameter tensors each owns.
#[derive(Clone, Debug, PartialEq)]
pub struct SubModels {
    stages: Vec<Range<usize>>,
    params: Vec<Range<usize>>,
    /// Training FLOPs per sample of each sub-model.
    flops: Vec<f64>,
    /// Bytes per sample of each sub-model's output activation.
    output_bytes: Vec<u64>,
    /// Parameter bytes of each sub-model.
    param_bytes: Vec<u64>,
}

impl SubModels {
    /// Cuts `model` before each stage index of `boundaries` (ascending, inside `1..stages`);
    /// `key` names the option the boundaries came from in errors.
    pub fn new(model: &ModelSpec, boundaries: &[usize], key: &str) -> Result<SubModels> {
        let facts = model.stage_facts();
        let n = facts.len();
        if boundaries.len() + 1 > n {
            return Err(EngineError::config(
                key,
                format!("{boundaries:?}"),
                format!(
                    "{} sub-models, but the model has only {n} stage{}",
                    boundaries.len() + 1,
                    if n == 1 { "" } else { "s" }
                ),
            ));
        }
        let mut cuts = vec![0];
        for &b in boundaries {
            if b <= *cuts.last().unwrap_or(&0) || b >= n {
                return Err(EngineError::config(
                    key,
                    format!("{boundaries:?}"),
                    format!("must be ascending stage indices inside 1..{n}"),
                ));
            }
            cuts.push(b);
        }
        cuts.push(n);
        let stage_params = model.stage_param_ranges();
        let infos = model.params();
        let mut out = SubModels {
            stages: Vec::new(),
            params: Vec::new(),
            flops: Vec::new(),
            output_bytes: Vec::new(),
            param_bytes: Vec::new(),
        };
        for w in cuts.windows(2) {
            let (s, e) = (w[0], w[1]);
            let params = stage_params[s].start..stage_params[e - 1].end;
            out.flops
                .push(3.0 * facts[s..e].iter().map(|f| f.forward_flops).sum::<f64>());
            out.output_bytes.push(facts[e - 1].activation_bytes);
            out.param_bytes.push(
                infos[params.clone()]
                    .iter()
                    .map(|p| p.elems() as u64 * 4)
                    .sum(),
            );
            out.stages.push(s..e);
            out.params.push(params);
        }
        Ok(out)
    }

    /// Number of sub-models.
    pub fn len(&self) -> usize {
        self.stages.len()
    }

    /// Whether there are none (never, for a built split).
    pub fn is_empty(&self) -> bool {
        self.stages.is_empty()
    }

    /// The stages sub-model `i` runs.
    pub fn stages(&self, i: usize) -> Range<usize> {
        self.stages[i].clone()
    }

    /// The parameter tensors (indices into the job's layout order) sub-model `i` owns.
    pub fn params(&self, i: usize) -> Range<usize> {
        self.params[i].clone()
    }

    /// Bytes per sample of sub-model `i`'s output: what crosses to the next sub-model.
    pub fn output_bytes(&self, i: usize) -> u64 {
        self.output_bytes[i]
    }

    /// Parameter bytes of sub-model `i`: what one replica of it synchronizes per iteration.
    pub fn param_bytes(&self, i: usize) -> u64 {
        self.param_bytes[i]
    }

    /// The work of sub-model `i`'s forward (`share` = [`StepPart::FORWARD`]) or backward
    /// ([`StepPart::BACKWARD`]) pass on `batch` samples.
    pub fn work(&self, i: usize, batch: u64, share: f64) -> Work {
        let r = &self.stages[i];
        let part = StepPart {
            first: r.start,
            end: r.end,
            share,
        };
        Work::step_part(part, self.flops[i], batch as f64)
    }
}

/// Activations and gradients between sub-models: a tensor with its rows (samples) first, or, in
/// throughput mode, only its size.
#[derive(Clone, Debug)]
pub enum Rows {
    /// Real values.
    Real(Tensor),
    /// Throughput mode: `rows` samples of a known per-sample size.
    Virtual {
        /// Samples.
        rows: u64,
    },
}

impl Rows {
    /// Number of samples.
    pub fn rows(&self) -> Result<u64> {
        match self {
            Rows::Real(t) => t
                .dim(0)
                .map(|d| d as u64)
                .map_err(|e| tensor_error("rows", e)),
            Rows::Virtual { rows } => Ok(*rows),
        }
    }

    /// The payload that carries these rows on the wire (`bytes_per_row` for virtual rows).
    pub fn to_payload(&self, bytes_per_row: u64) -> Result<Payload> {
        match self {
            Rows::Real(t) => Ok(Payload::Real(
                StagedModel::flat_values(t).map_err(|e| tensor_error("flatten rows", e))?,
            )),
            Rows::Virtual { rows } => Ok(Payload::Virtual {
                elems: rows * bytes_per_row / 4,
            }),
        }
    }

    /// Rows back from a payload: real values shaped `[rows, sample_shape..]`, or virtual.
    pub fn from_payload(
        payload: Payload,
        rows: u64,
        sample_shape: Option<&[usize]>,
        device: &Device,
    ) -> Result<Rows> {
        match (payload, sample_shape) {
            (Payload::Real(v), Some(shape)) => {
                let mut dims = vec![rows as usize];
                dims.extend_from_slice(shape);
                Tensor::from_vec(v, dims, device)
                    .map(Rows::Real)
                    .map_err(|e| tensor_error("rows from payload", e))
            }
            _ => Ok(Rows::Virtual { rows }),
        }
    }

    /// The rows of several pieces, one after another (a token's inputs in dependency order).
    pub fn concat(parts: &[Rows]) -> Result<Rows> {
        let real: Vec<&Tensor> = parts
            .iter()
            .filter_map(|p| match p {
                Rows::Real(t) => Some(t),
                Rows::Virtual { .. } => None,
            })
            .collect();
        if real.len() == parts.len() && !real.is_empty() {
            return Tensor::cat(&real, 0)
                .map(Rows::Real)
                .map_err(|e| tensor_error("concatenate inputs", e));
        }
        let mut rows = 0;
        for p in parts {
            rows += p.rows()?;
        }
        Ok(Rows::Virtual { rows })
    }

    /// Rows `start..start + len`.
    pub fn slice(&self, start: u64, len: u64) -> Result<Rows> {
        match self {
            Rows::Real(t) => t
                .narrow(0, start as usize, len as usize)
                .map(Rows::Real)
                .map_err(|e| tensor_error("slice rows", e)),
            Rows::Virtual { .. } => Ok(Rows::Virtual { rows: len }),
        }
    }
}

/// The per-sample shape of the input of each stage of a real model, plus the model's output
/// (`[classes]`) at the end; `None` in throughput mode.
pub fn stage_input_shapes(model: &ModelSpec) -> Option<Vec<Vec<usize>>> {
    match model {
        ModelSpec::Real {
            stages, classes, ..
        } => {
            let mut shapes: Vec<Vec<usize>> = stages.iter().map(StageSpec::input_shape).collect();
            shapes.push(vec![*classes]);
            Some(shapes)
        }
        _ => None,
    }
}

/// The per-sample shape of each stage's output of a real model (`None` in throughput mode):
/// what the gradient of a stage range's output is shaped like.
pub fn stage_output_shapes(model: &ModelSpec) -> Option<Vec<Vec<usize>>> {
    let ModelSpec::Real { stages, .. } = model else {
        return None;
    };
    Some(stages.iter().map(StageSpec::output_shape).collect())
}

/// Forward of sub-model stages `stages` on `x`: the output, and every stage's input (kept for
/// the backward pass).
pub fn forward(
    net: &StagedModel,
    stages: Range<usize>,
    x: &Tensor,
) -> Result<(Tensor, Vec<Tensor>)> {
    let mut inputs = Vec::with_capacity(stages.len());
    let mut h = x.clone();
    for s in stages {
        inputs.push(h.clone());
        h = net
            .forward_stage(s, &h)
            .map_err(|e| tensor_error("sub-model forward", e))?;
    }
    Ok((h, inputs))
}

/// Backward of sub-model stages `stages` from the gradient of its output, given the inputs its
/// forward kept: the gradients of its parameters (in layout order: per stage bias, then weight,
/// each shaped as its parameter, on the model's device) and of its input.
pub fn backward(
    net: &StagedModel,
    stages: Range<usize>,
    inputs: &[Tensor],
    grad_out: &Tensor,
) -> Result<(Vec<Tensor>, Tensor)> {
    let mut per_stage = Vec::with_capacity(stages.len());
    let mut g = grad_out.clone();
    for (k, s) in stages.clone().enumerate().rev() {
        let (grads, gx) = net
            .backward_stage(s, &inputs[k], &g)
            .map_err(|e| tensor_error("sub-model backward", e))?;
        per_stage.push(grads);
        g = gx;
    }
    per_stage.reverse();
    Ok((per_stage.into_iter().flatten().collect(), g))
}

/// A tensor operation's failure as an engine error.
pub fn tensor_error(context: &str, source: candle_core::Error) -> EngineError {
    EngineError::Tensor {
        context: context.to_string(),
        source,
    }
}

/// Rows out of a received payload, shaped `[rows, shape..]` on `net`'s device (virtual in
/// throughput mode).
pub fn rows_from(
    payloads: Vec<Payload>,
    rows: u64,
    shape: Option<&[usize]>,
    net: Option<&StagedModel>,
) -> Result<Rows> {
    let device = net
        .map(|n| n.device().clone())
        .unwrap_or(candle_core::Device::Cpu);
    let payload = payloads
        .into_iter()
        .next()
        .unwrap_or(Payload::Virtual { elems: 0 });
    Rows::from_payload(payload, rows, shape, &device)
}

/// Tells the memory policy that stages `stages` ran forward on `rows` samples and keep their
/// activations for the backward pass (`kept`), or ran backward and free them. A pipeline stage
/// keeps every micro-batch's activations until its backward pass (no recomputation).
pub async fn activations(
    ctx: &mut RoleContext,
    job: &Job,
    stages: Range<usize>,
    rows: u64,
    kept: bool,
) -> Result<()> {
    let per_sample = &job.stage_kept_bytes;
    let mut order: Vec<usize> = stages.collect();
    if !kept {
        order.reverse();
    }
    for stage in order {
        let bytes = per_sample.get(stage).copied().unwrap_or(0) * rows;
        let event = if kept {
            MemEvent::Forward { stage, bytes }
        } else {
            MemEvent::Backward { stage, bytes }
        };
        ctx.memory_event(event).await?;
    }
    Ok(())
}
