//! The trainer side of a Fela worker: running a token's forward pass (with the loss and the
//! backward pass for the last level), the backward passes gradients bring, and booking what they
//! produce — outputs kept for the tokens that depend on them, gradient sums per sub-model, input
//! gradients sent back to the holders of the rows.

use super::FelaWorker;
use crate::protocol::{BackwardDone, Grad, Request};
use crate::server::{Token, TokenId};
use candle_core::Tensor;
use concord_engine::prelude::*;
use concord_engine::submodel::math::{self, accumulate, Grads};
use concord_engine::submodel::{activations, Rows};

/// Each dependency of a token, its holder and its rows.
pub(super) type DepRows = Vec<(TokenId, WorkerId, u64)>;
/// A gradient with respect to a token's input, and the dependencies its rows belong to.
pub(super) type InputGrad = Option<(Rows, DepRows)>;
/// What a token's forward math gives: its output, the stage inputs it kept, and for the last
/// level the loss sum, the parameter gradients and the input gradient.
pub(super) type ForwardOut = (Option<Rows>, Vec<Tensor>, Option<f64>, Grads, Option<Rows>);

/// What a token's forward pass kept for its backward pass.
pub(super) struct Saved {
    pub(super) level: usize,
    /// Each dependency, its holder and its rows (empty at level 0).
    pub(super) deps: DepRows,
    /// Every stage's input (real models).
    pub(super) inputs: Vec<Tensor>,
    pub(super) rows: u64,
}

/// Work on the trainer.
pub(super) enum Task {
    Forward(Token, Vec<(TokenId, WorkerId)>),
    Backward(TokenId, Rows),
}

/// What the trainer finishes at `ready_at`.
pub(super) struct InFlight {
    pub(super) ready_at: f64,
    pub(super) done: Done,
}

pub(super) enum Done {
    /// A forward pass (with loss and backward for the last level).
    Forward {
        token: Token,
        saved: Option<Saved>,
        output: Option<Rows>,
        loss_sum: Option<f64>,
        grads: Grads,
        grad_in: InputGrad,
    },
    /// A backward pass.
    Backward {
        token: TokenId,
        level: usize,
        grads: Grads,
        grad_in: InputGrad,
    },
}

impl FelaWorker {
    /// Starts `work` on the trainer, telling the memory policy about the activations it keeps
    /// (a forward pass) or frees (a backward pass; the last level's token does both at once).
    pub(super) async fn start(&mut self, ctx: &mut RoleContext, work: Task) -> Result<()> {
        let t0 = ctx.now();
        let (level, rows, forward, backward) = match &work {
            Task::Forward(token, _) => {
                let last = token.level + 1 == self.levels();
                (token.level, token.batch(), true, last)
            }
            Task::Backward(token, _) => match self.saved.get(token) {
                Some(s) => (s.level, s.rows, false, true),
                None => (0, 0, false, false),
            },
        };
        let stages = self.opts.submodels.stages(level);
        let job = self.job.clone();
        if forward {
            activations(ctx, &job, stages.clone(), rows, true).await?;
        }
        if backward {
            activations(ctx, &job, stages, rows, false).await?;
        }
        let (done, ready_at) = match work {
            Task::Forward(token, holders) => self.forward(ctx, token, holders)?,
            Task::Backward(token, grad) => self.backward_pass(ctx, token, grad)?,
        };
        self.compute_s += ready_at - t0;
        self.in_flight = Some(InFlight { ready_at, done });
        Ok(())
    }

    pub(super) fn forward(
        &mut self,
        ctx: &mut RoleContext,
        token: Token,
        holders: Vec<(TokenId, WorkerId)>,
    ) -> Result<(Done, f64)> {
        let level = token.level;
        let last = level + 1 == self.levels();
        let rows = token.batch();
        let mut deps = Vec::new();
        let mut parts = Vec::new();
        for (d, h) in &holders {
            let r = if *h == self.id {
                self.outputs.remove(d)
            } else {
                self.fetched.remove(d)
            };
            let r = r.ok_or_else(|| {
                EngineError::protocol(ctx.id(), format!("input {d} of token {} missing", token.id))
            })?;
            if *h != self.id {
                self.stats.remote_fetch_bytes +=
                    r.rows()? * self.opts.submodels.output_bytes(level - 1);
            }
            deps.push((*d, *h, r.rows()?));
            parts.push(r);
        }
        let x = (level > 0).then(|| Rows::concat(&parts)).transpose()?;
        let share = if last { 1.0 } else { StepPart::FORWARD };
        let work = self.opts.submodels.work(level, rows, share);
        let step = self.forward_math(&token, x)?;
        let (out, ready_at) = ctx.compute_deferred("token", work, step);
        let (output, inputs, loss_sum, grads, grad_in) = out?;
        let grad_in = grad_in.map(|g| (g, deps.clone()));
        let saved = (!last).then(|| Saved {
            level,
            deps,
            inputs,
            rows,
        });
        Ok((
            Done::Forward {
                token,
                saved,
                output,
                loss_sum,
                grads,
                grad_in,
            },
            ready_at,
        ))
    }

    /// The forward math of a token as a closure for the charge: its output and the stage inputs
    /// (and for the last level the loss sum, parameter gradients and input gradient). A level-0
    /// token's input is its samples of the iteration's global batch; `x` is a deeper token's.
    pub(super) fn forward_math<'a>(
        &'a self,
        token: &Token,
        x: Option<Rows>,
    ) -> Result<impl FnOnce() -> Result<ForwardOut> + 'a> {
        let level = token.level;
        let last = level + 1 == self.levels();
        let rows = token.batch();
        let stages = self.opts.submodels.stages(level);
        let (job, net, total) = (&self.job, self.net(), self.opts.total_batch);
        let x = match x {
            Some(x) => x,
            None => {
                let (offset, n) = token.spans.first().copied().unwrap_or((0, rows));
                math::samples(job, net, total, self.iter, offset, n)?.0
            }
        };
        // The labels of a last-level token's rows, span by span.
        let labels: Option<Vec<u32>> = if last {
            let spans = token.spans.iter();
            spans
                .map(|&(o, n)| math::labels_of(job, total, self.iter, o, n))
                .collect::<Option<Vec<_>>>()
                .map(|parts| parts.concat())
        } else {
            None
        };
        Ok(move || {
            let (y, inputs) = math::forward(net, stages.clone(), &x)?;
            if !last {
                return Ok((Some(y), inputs, None, None, None));
            }
            let scale = rows as f64 / total as f64;
            let (loss, seed) = math::loss_seed(net, &y, labels.as_deref(), scale)?;
            let (grads, gx) = math::backward(net, stages, &inputs, &seed)?;
            let gin = (level > 0).then_some(gx);
            Ok((None, Vec::new(), loss.map(|l| l * rows as f64), grads, gin))
        })
    }

    pub(super) fn backward_pass(
        &mut self,
        ctx: &mut RoleContext,
        token: TokenId,
        grad: Rows,
    ) -> Result<(Done, f64)> {
        let saved = self.saved.remove(&token).ok_or_else(|| {
            EngineError::protocol(ctx.id(), format!("no activations kept for token {token}"))
        })?;
        let work = self
            .opts
            .submodels
            .work(saved.level, saved.rows, StepPart::BACKWARD);
        let stages = self.opts.submodels.stages(saved.level);
        let net = self.net();
        let inputs = saved.inputs;
        let level = saved.level;
        let step = move || -> Result<(Grads, Option<Rows>)> {
            let (grads, gx) = math::backward(net, stages, &inputs, &grad)?;
            Ok((grads, (level > 0).then_some(gx)))
        };
        let (out, ready_at) = ctx.compute_deferred("backward", work, step);
        let (grads, gin) = out?;
        let grad_in = gin.map(|g| (g, saved.deps));
        Ok((
            Done::Backward {
                token,
                level,
                grads,
                grad_in,
            },
            ready_at,
        ))
    }

    /// Sends each dependency's slice of an input gradient to its holder.
    pub(super) fn send_grads(
        &mut self,
        ctx: &RoleContext,
        level: usize,
        grad: Rows,
        deps: DepRows,
    ) -> Result<()> {
        let mut at = 0;
        for (d, h, rows) in deps {
            let slice = grad.slice(at, rows)?;
            at += rows;
            if h == self.id {
                self.backward.push_back((d, slice));
            } else {
                let body = Grad {
                    iter: self.iter,
                    token: d,
                    rows,
                };
                let per_row = self.opts.submodels.output_bytes(level - 1);
                self.send_rows(ctx, h, &body, &slice, per_row)?;
            }
        }
        Ok(())
    }

    /// Books what the trainer finished.
    pub(super) fn finish(&mut self, ctx: &mut RoleContext, done: Done) -> Result<()> {
        match done {
            Done::Forward {
                token,
                saved,
                output,
                loss_sum,
                grads,
                grad_in,
            } => {
                if let Some(l) = loss_sum {
                    check_loss(ctx, &self.job, self.iter, l)?;
                }
                self.rows_done += token.batch();
                if let Some(o) = output {
                    self.outputs.insert(token.id, o);
                }
                if let Some(s) = saved {
                    self.saved.insert(token.id, s);
                }
                accumulate(&mut self.grads[token.level], grads)?;
                if let Some((g, deps)) = grad_in {
                    self.send_grads(ctx, token.level, g, deps)?;
                }
                let req = Request {
                    iter: self.iter,
                    completed: Some(token.id),
                    loss_sum,
                };
                ctx.send(RoleId::Coordinator, Message::strategy(&req)?);
            }
            Done::Backward {
                token,
                level,
                grads,
                grad_in,
            } => {
                accumulate(&mut self.grads[level], grads)?;
                if let Some((g, deps)) = grad_in {
                    self.send_grads(ctx, level, g, deps)?;
                }
                let msg = BackwardDone {
                    iter: self.iter,
                    token,
                };
                ctx.send(RoleId::Coordinator, Message::strategy(&msg)?);
            }
        }
        Ok(())
    }
}
