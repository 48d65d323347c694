//! Optimizers over parameter blocks, with state that can be exported and imported.
//!
//! candle's optimizers keep their state private; elastic servers and checkpoints must move it with
//! the parameters it belongs to. These optimizers work on one flat block at a time (every rule here
//! is element-wise), so a block migrates with exactly its own slice of state.

use crate::error::{EngineError, Result};
use candle_core::Tensor;
use serde::{Deserialize, Serialize};

/// Optimizer section of the config (`[optimizer]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum OptimizerConfig {
    /// Stochastic gradient descent with (heavy-ball) momentum and L2 weight decay.
    Sgd {
        /// Learning rate.
        lr: f64,
        /// Momentum coefficient in [0, 1).
        #[serde(default)]
        momentum: f64,
        /// L2 weight decay added to the gradient.
        #[serde(default)]
        weight_decay: f64,
    },
    /// Adam (Kingma & Ba) with bias correction and L2 weight decay.
    Adam {
        /// Learning rate.
        lr: f64,
        /// First-moment decay.
        #[serde(default = "beta1")]
        beta1: f64,
        /// Second-moment decay.
        #[serde(default = "beta2")]
        beta2: f64,
        /// Denominator epsilon.
        #[serde(default = "eps")]
        eps: f64,
        /// L2 weight decay added to the gradient.
        #[serde(default)]
        weight_decay: f64,
    },
}

fn beta1() -> f64 {
    0.9
}
fn beta2() -> f64 {
    0.999
}
fn eps() -> f64 {
    1e-8
}

impl Default for OptimizerConfig {
    fn default() -> Self {
        OptimizerConfig::Sgd {
            lr: 0.1,
            momentum: 0.9,
            weight_decay: 0.0,
        }
    }
}

impl OptimizerConfig {
    /// Checks ranges; errors name the key.
    pub fn validate(&self) -> Result<()> {
        let check = |key: &str, v: f64, ok: bool, allowed: &str| {
            if ok && v.is_finite() {
                Ok(())
            } else {
                Err(EngineError::config(format!("optimizer.{key}"), v, allowed))
            }
        };
        match *self {
            OptimizerConfig::Sgd {
                lr,
                momentum,
                weight_decay,
            } => {
                check("lr", lr, lr > 0.0, "must be > 0")?;
                check(
                    "momentum",
                    momentum,
                    (0.0..1.0).contains(&momentum),
                    "must be in [0, 1)",
                )?;
                check(
                    "weight_decay",
                    weight_decay,
                    weight_decay >= 0.0,
                    "must be >= 0",
                )
            }
            OptimizerConfig::Adam {
                lr,
                beta1,
                beta2,
                eps,
                weight_decay,
            } => {
                check("lr", lr, lr > 0.0, "must be > 0")?;
                check(
                    "beta1",
                    beta1,
                    (0.0..1.0).contains(&beta1),
                    "must be in [0, 1)",
                )?;
                check(
                    "beta2",
                    beta2,
                    (0.0..1.0).contains(&beta2),
                    "must be in [0, 1)",
                )?;
                check("eps", eps, eps > 0.0, "must be > 0")?;
                check(
                    "weight_decay",
                    weight_decay,
                    weight_decay >= 0.0,
                    "must be >= 0",
                )
            }
        }
    }

    /// Fresh state for a block of `len` elements.
    pub fn init_state(&self, len: usize) -> OptState {
        match self {
            OptimizerConfig::Sgd { momentum, .. } => OptState {
                step: 0,
                slots: if *momentum > 0.0 {
                    vec![vec![0.0; len]]
                } else {
                    Vec::new()
                },
            },
            OptimizerConfig::Adam { .. } => OptState {
                step: 0,
                slots: vec![vec![0.0; len], vec![0.0; len]],
            },
        }
    }

    /// Copies of every parameter the optimizer keeps as state (0 for plain SGD, 1 with
    /// momentum, 2 for Adam): what its state costs in memory, per parameter byte.
    pub fn state_slots(&self) -> usize {
        self.init_state(0).slots.len()
    }

    /// The learning rate (what a strategy applies to parameters it updates outside this
    /// optimizer, e.g. row-wise SGD on embedding rows).
    pub fn lr(&self) -> f64 {
        match self {
            OptimizerConfig::Sgd { lr, .. } | OptimizerConfig::Adam { lr, .. } => *lr,
        }
    }

    /// The same optimizer with its learning rate multiplied by `k` (RNA's γ_k = Σw·γ); `k = 1`
    /// gives an identical copy.
    pub fn with_lr_scale(&self, k: f64) -> OptimizerConfig {
        let mut out = self.clone();
        match &mut out {
            OptimizerConfig::Sgd { lr, .. } | OptimizerConfig::Adam { lr, .. } => *lr *= k,
        }
        out
    }

    /// FLOPs per element of one update (for the server's service-time model).
    pub fn flops_per_elem(&self) -> f64 {
        match self {
            OptimizerConfig::Sgd { .. } => 4.0,
            OptimizerConfig::Adam { .. } => 12.0,
        }
    }

    /// Applies one update to `param` from `grad` (same length), advancing `state`.
    pub fn step(&self, param: &mut [f32], grad: &[f32], state: &mut OptState) {
        state.step += 1;
        match *self {
            OptimizerConfig::Sgd {
                lr,
                momentum,
                weight_decay,
            } => {
                let (lr, mu, wd) = (lr as f32, momentum as f32, weight_decay as f32);
                if let Some(buf) = state.slots.first_mut() {
                    for ((p, &g), v) in param.iter_mut().zip(grad).zip(buf.iter_mut()) {
                        *v = mu * *v + g + wd * *p;
                        *p -= lr * *v;
                    }
                } else {
                    for (p, &g) in param.iter_mut().zip(grad) {
                        *p -= lr * (g + wd * *p);
                    }
                }
            }
            OptimizerConfig::Adam {
                lr,
                beta1,
                beta2,
                eps,
                weight_decay,
            } => {
                let (step_size, eps_hat) = adam_scalars(lr, beta1, beta2, eps, state.step);
                let (b1, b2, wd) = (beta1 as f32, beta2 as f32, weight_decay as f32);
                let (m, rest) = state.slots.split_at_mut(1);
                for (((p, &g), m), v) in param
                    .iter_mut()
                    .zip(grad)
                    .zip(m[0].iter_mut())
                    .zip(rest[0].iter_mut())
                {
                    let g = g + wd * *p;
                    *m = b1 * *m + (1.0 - b1) * g;
                    *v = b2 * *v + (1.0 - b2) * g * g;
                    *p -= step_size * *m / (v.sqrt() + eps_hat);
                }
            }
        }
    }
}

impl OptimizerConfig {
    /// [`OptimizerConfig::step`] on tensors where they live, for parameters kept on a GPU: the
    /// updated value of `param` from `grad` (same shape), with `slots` (the state's per-element
    /// vectors, as [`OptimizerConfig::init_state`] lays them out) replaced by their updated
    /// values, and `step` the state's update count after this update.
    ///
    /// The arithmetic is the host rule's, operation for operation in f32 (no fused
    /// multiply-add), so on the CPU it gives the host rule's bits.
    pub fn step_tensor(
        &self,
        param: &Tensor,
        grad: &Tensor,
        slots: &mut [Tensor],
        step: u64,
    ) -> candle_core::Result<Tensor> {
        let scaled = |t: &Tensor, k: f32| t.broadcast_mul(&Tensor::new(k, t.device())?);
        match *self {
            OptimizerConfig::Sgd {
                lr,
                momentum,
                weight_decay,
            } => {
                let (lr, mu, wd) = (lr as f32, momentum as f32, weight_decay as f32);
                let decay = scaled(param, wd)?;
                match slots.first_mut() {
                    Some(buf) => {
                        // v = mu·v + g + wd·p; p -= lr·v
                        *buf = scaled(buf, mu)?.add(grad)?.add(&decay)?;
                        param.sub(&scaled(buf, lr)?)
                    }
                    // p -= lr·(g + wd·p)
                    None => param.sub(&scaled(&grad.add(&decay)?, lr)?),
                }
            }
            OptimizerConfig::Adam {
                lr,
                beta1,
                beta2,
                eps,
                weight_decay,
            } => {
                let (step_size, eps_hat) = adam_scalars(lr, beta1, beta2, eps, step);
                let (b1, b2, wd) = (beta1 as f32, beta2 as f32, weight_decay as f32);
                let [m, v] = slots else {
                    return Err(candle_core::Error::Msg(format!(
                        "Adam keeps 2 state slots per parameter, not {}",
                        slots.len()
                    )));
                };
                let g = grad.add(&scaled(param, wd)?)?;
                *m = scaled(m, b1)?.add(&scaled(&g, 1.0 - b1)?)?;
                *v = scaled(v, b2)?.add(&scaled(&g, 1.0 - b2)?.mul(&g)?)?;
                let denom = v
                    .sqrt()?
                    .broadcast_add(&Tensor::new(eps_hat, v.device())?)?;
                param.sub(&scaled(m, step_size)?.div(&denom)?)
            }
        }
    }
}

/// Adam's bias-corrected step size and epsilon after `step` updates, in f32 as the update uses
/// them.
fn adam_scalars(lr: f64, beta1: f64, beta2: f64, eps: f64, step: u64) -> (f32, f32) {
    let t = step as i32;
    let c1 = 1.0 - beta1.powi(t);
    let c2 = 1.0 - beta2.powi(t);
    ((lr * c2.sqrt() / c1) as f32, (eps * c2.sqrt()) as f32)
}

/// Optimizer state of one block: a step counter and per-element slots (momentum; Adam's m and v).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OptState {
    /// Updates applied so far.
    pub step: u64,
    /// Per-element state vectors, each the block's length.
    pub slots: Vec<Vec<f32>>,
}

impl OptState {
    /// Bytes of state (for memory accounting and migration cost).
    pub fn bytes(&self) -> u64 {
        self.slots.iter().map(|s| s.len() as u64 * 4).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sgd_momentum_matches_hand_computation() {
        let opt = OptimizerConfig::Sgd {
            lr: 0.1,
            momentum: 0.5,
            weight_decay: 0.0,
        };
        let mut p = vec![1.0f32];
        let mut st = opt.init_state(1);
        opt.step(&mut p, &[2.0], &mut st);
        assert!((p[0] - 0.8).abs() < 1e-7); // v = 2, p = 1 - 0.2
        opt.step(&mut p, &[2.0], &mut st);
        assert!((p[0] - 0.5).abs() < 1e-6); // v = 3, p = 0.8 - 0.3
        assert_eq!(st.step, 2);
    }

    #[test]
    fn adam_first_step_moves_by_lr_times_sign() {
        let opt = OptimizerConfig::Adam {
            lr: 0.01,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        };
        let mut p = vec![0.0f32, 0.0];
        let mut st = opt.init_state(2);
        opt.step(&mut p, &[3.0, -0.5], &mut st);
        assert!(
            (p[0] + 0.01).abs() < 1e-6 && (p[1] - 0.01).abs() < 1e-6,
            "{p:?}"
        );
    }

    #[test]
    fn state_split_across_blocks_equals_whole() {
        let opt = OptimizerConfig::Adam {
            lr: 0.01,
            beta1: 0.9,
            beta2: 0.99,
            eps: 1e-8,
            weight_decay: 0.01,
        };
        let grads: Vec<f32> = (0..8).map(|i| (i as f32 - 3.5) * 0.3).collect();
        let mut whole = vec![0.5f32; 8];
        let mut sw = opt.init_state(8);
        let (mut a, mut b) = (vec![0.5f32; 3], vec![0.5f32; 5]);
        let (mut sa, mut sb) = (opt.init_state(3), opt.init_state(5));
        for _ in 0..3 {
            opt.step(&mut whole, &grads, &mut sw);
            opt.step(&mut a, &grads[..3], &mut sa);
            opt.step(&mut b, &grads[3..], &mut sb);
        }
        assert_eq!(&whole[..3], &a[..]);
        assert_eq!(&whole[3..], &b[..]);
    }

    #[test]
    fn bad_hyperparameters_name_the_key() {
        let e = OptimizerConfig::Sgd {
            lr: -1.0,
            momentum: 0.0,
            weight_decay: 0.0,
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("optimizer.lr"), "{e}");
        let e = OptimizerConfig::Sgd {
            lr: 0.1,
            momentum: 1.0,
            weight_decay: 0.0,
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("optimizer.momentum"), "{e}");
    }
}
