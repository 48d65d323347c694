//! The checkpoint file, `checkpoint.safetensors`: the model for people and tools, and the
//! [`ResumePoint`] for the engine, in one file written atomically.
//!
//! - Each parameter under its name (`<name>`), with its optimizer state (`<name>.opt<k>`,
//!   `<name>.step`): the model as a whole, for any safetensors reader (real models only).
//! - For a run that can resume: each role's blocks (`~<role>/<block>`) and their optimizer slots
//!   (`~<role>/<block>/opt<k>`), and one byte tensor `~resume` holding everything else as
//!   MessagePack (clock, role times and states, straggler states, the run's history, and the
//!   resolved config it was written under).

use crate::contract::ModelState;
use crate::error::{EngineError, Result};
use crate::ids::RoleId;
use crate::metrics;
use crate::optim::OptState;
use crate::payload::{BlockId, BlockPayload, Payload};
use crate::resume::{History, ResumePoint, RoleCheckpoint, RoleState};
use crate::run::FinalModel;
use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// The file's name in a run folder.
pub const FILE_NAME: &str = "checkpoint.safetensors";

/// The version of the resume section's layout; a reader refuses others.
const FORMAT: u32 = 1;

/// The name of the byte tensor holding the resume section.
const RESUME_TENSOR: &str = "~resume";

/// A checkpoint read back: where the run stopped, and under which configuration.
#[derive(Clone, Debug)]
pub struct Checkpoint {
    /// The resolved configuration (TOML) of the run that wrote it.
    pub config: String,
    /// The strategies that run used, in config order.
    pub strategies: Vec<String>,
    /// Where to continue.
    pub point: ResumePoint,
}

/// The resume section's non-tensor part.
#[derive(Serialize, Deserialize)]
struct Meta {
    format: u32,
    config: String,
    strategies: Vec<String>,
    clock: u64,
    roles: Vec<(RoleId, RoleMeta)>,
    history: History,
}

#[derive(Serialize, Deserialize)]
struct RoleMeta {
    at_s: f64,
    state: Option<RoleState>,
    stragglers: Vec<Option<serde_json::Value>>,
    model: Option<Vec<BlockMeta>>,
}

/// A block of a role's model part: a real block's values are a tensor of the file; a virtual
/// block is only its size. `opt`: the optimizer's step and slot count, when it keeps state.
#[derive(Serialize, Deserialize)]
struct BlockMeta {
    block: BlockId,
    virtual_elems: Option<u64>,
    opt: Option<(u64, usize)>,
}

/// What goes into a checkpoint beside the model.
pub struct Resumable<'a> {
    /// Where the run stopped.
    pub point: &'a ResumePoint,
    /// The resolved configuration, as TOML.
    pub config: &'a str,
    /// The strategies of the run.
    pub strategies: &'a [String],
}

/// Writes the checkpoint at `path` atomically: `model` (when real) for readers, and `resume`
/// when the run can continue from it.
pub fn write(path: &Path, model: Option<&FinalModel>, resume: Option<Resumable<'_>>) -> Result<()> {
    let mut named: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    if let Some(model) = model {
        named_parameters(model, &mut named);
    }
    if let Some(r) = resume {
        let mut roles = Vec::new();
        for (&role, cp) in &r.point.roles {
            let model = cp.model.as_ref().map(|m| role_tensors(role, m, &mut named));
            roles.push((
                role,
                RoleMeta {
                    at_s: cp.at_s,
                    state: cp.state.clone(),
                    stragglers: cp.stragglers.clone(),
                    model,
                },
            ));
        }
        let meta = Meta {
            format: FORMAT,
            config: r.config.to_string(),
            strategies: r.strategies.to_vec(),
            clock: r.point.clock,
            roles,
            history: r.point.history.clone(),
        };
        let bytes = rmp_serde::to_vec_named(&meta).map_err(|e| bad(path, e))?;
        named.push((RESUME_TENSOR.to_string(), vec![bytes.len()], bytes));
    }
    if named.is_empty() {
        return Ok(());
    }
    let views: Vec<(String, TensorView<'_>)> = named
        .iter()
        .map(|(n, shape, bytes)| {
            let dtype = if n == RESUME_TENSOR {
                Dtype::U8
            } else {
                Dtype::F32
            };
            TensorView::new(dtype, shape.clone(), bytes)
                .map(|v| (n.clone(), v))
                .map_err(|e| bad(path, format!("tensor {n}: {e}")))
        })
        .collect::<Result<_>>()?;
    let data = safetensors::tensor::serialize(views, &None).map_err(|e| bad(path, e))?;
    metrics::write_atomic(path, &data)
}

/// Reads the resume section of the checkpoint at `path`.
pub fn read(path: &Path) -> Result<Checkpoint> {
    let bytes = std::fs::read(path).map_err(|source| EngineError::Io {
        path: path.display().to_string(),
        source,
    })?;
    let file = SafeTensors::deserialize(&bytes).map_err(|e| {
        bad(
            path,
            format!(
                "not a readable safetensors file ({e:?}, {} bytes): truncated or corrupt",
                bytes.len()
            ),
        )
    })?;
    let meta = file.tensor(RESUME_TENSOR).map_err(|_| {
        bad(
            path,
            "it holds the model only, not the state a run resumes from (its strategies cannot \
             resume, or it was written by an older version)",
        )
    })?;
    let meta: Meta = rmp_serde::from_slice(meta.data()).map_err(|e| bad(path, e))?;
    if meta.format != FORMAT {
        return Err(bad(
            path,
            format!("format {} (this version reads {FORMAT})", meta.format),
        ));
    }
    let mut roles = BTreeMap::new();
    for (role, m) in meta.roles {
        let model = match m.model {
            Some(blocks) => Some(read_model(path, &file, role, blocks)?),
            None => None,
        };
        roles.insert(
            role,
            RoleCheckpoint {
                at_s: m.at_s,
                model,
                state: m.state,
                stragglers: m.stragglers,
            },
        );
    }
    Ok(Checkpoint {
        config: meta.config,
        strategies: meta.strategies,
        point: ResumePoint {
            clock: meta.clock,
            roles,
            history: meta.history,
        },
    })
}

/// The parameters (`<name>`) and optimizer state (`<name>.opt<k>`, `<name>.step`) of `model`. A
/// parameter's step is the largest of its blocks' steps (they agree when every block received
/// every update).
fn named_parameters(model: &FinalModel, named: &mut Vec<(String, Vec<usize>, Vec<u8>)>) {
    let layout = &model.layout;
    let mut values = layout.zeros();
    layout.write_into(&model.blocks, &mut values);
    let slots = model
        .opt_state
        .values()
        .map(|s| s.slots.len())
        .max()
        .unwrap_or(0);
    let mut opt = vec![layout.zeros(); slots];
    let mut steps = vec![0f32; layout.params().len()];
    for (&block, state) in &model.opt_state {
        let Some(b) = layout.blocks().get(block as usize) else {
            continue;
        };
        steps[b.param] = steps[b.param].max(state.step as f32);
        for (k, slot) in state.slots.iter().enumerate() {
            opt[k][b.param][b.offset..b.offset + b.len].copy_from_slice(slot);
        }
    }
    for (i, p) in layout.params().iter().enumerate() {
        named.push((p.name.clone(), p.shape.clone(), to_bytes(&values[i])));
        for (k, slot) in opt.iter().enumerate() {
            named.push((
                format!("{}.opt{k}", p.name),
                p.shape.clone(),
                to_bytes(&slot[i]),
            ));
        }
        if slots > 0 {
            named.push((format!("{}.step", p.name), vec![1], to_bytes(&[steps[i]])));
        }
    }
}

/// Adds `role`'s real blocks and optimizer slots to `named`; the blocks' descriptions.
fn role_tensors(
    role: RoleId,
    model: &ModelState,
    named: &mut Vec<(String, Vec<usize>, Vec<u8>)>,
) -> Vec<BlockMeta> {
    let label = role.label();
    model
        .blocks
        .iter()
        .map(|bp| {
            let virtual_elems = match &bp.data {
                Payload::Real(v) => {
                    named.push((format!("~{label}/{}", bp.block), vec![v.len()], to_bytes(v)));
                    None
                }
                Payload::Virtual { elems } => Some(*elems),
            };
            let opt = model.opt_state.get(&bp.block).map(|o| {
                for (k, slot) in o.slots.iter().enumerate() {
                    named.push((
                        format!("~{label}/{}/opt{k}", bp.block),
                        vec![slot.len()],
                        to_bytes(slot),
                    ));
                }
                (o.step, o.slots.len())
            });
            BlockMeta {
                block: bp.block,
                virtual_elems,
                opt,
            }
        })
        .collect()
}

/// A role's model part back from the file.
fn read_model(
    path: &Path,
    file: &SafeTensors<'_>,
    role: RoleId,
    blocks: Vec<BlockMeta>,
) -> Result<ModelState> {
    let label = role.label();
    let values = |name: String| -> Result<Vec<f32>> {
        let t = file
            .tensor(&name)
            .map_err(|e| bad(path, format!("tensor {name}: {e}")))?;
        if t.dtype() != Dtype::F32 {
            return Err(bad(path, format!("tensor {name} is not f32")));
        }
        Ok(t.data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    };
    let mut state = ModelState::default();
    for b in blocks {
        let data = match b.virtual_elems {
            Some(elems) => Payload::Virtual { elems },
            None => Payload::Real(values(format!("~{label}/{}", b.block))?),
        };
        if let Some((step, slots)) = b.opt {
            let slots = (0..slots)
                .map(|k| values(format!("~{label}/{}/opt{k}", b.block)))
                .collect::<Result<_>>()?;
            state.opt_state.insert(b.block, OptState { step, slots });
        }
        state.blocks.push(BlockPayload {
            block: b.block,
            data,
        });
    }
    Ok(state)
}

fn to_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn bad(path: &Path, reason: impl ToString) -> EngineError {
    EngineError::Checkpoint {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}
