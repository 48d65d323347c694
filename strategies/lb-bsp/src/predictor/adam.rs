//! Adam with decoupled weight decay over candle variables — the update candle-nn's `AdamW`
//! makes, operation for operation — with its moments open to checkpoints, which `AdamW` keeps
//! private.

use candle_core::{Result, Tensor, Var};
use serde::{Deserialize, Serialize};

/// One variable with its first and second moments.
struct Moments {
    var: Var,
    m: Var,
    v: Var,
}

/// Adam (β₁ 0.9, β₂ 0.999, ε 1e-8) with decoupled weight decay.
pub(super) struct Adam {
    vars: Vec<Moments>,
    lr: f64,
    weight_decay: f64,
    beta1: f64,
    beta2: f64,
    eps: f64,
    step_t: usize,
}

/// The optimizer's state: steps taken and each variable's moments, flattened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct AdamState {
    step_t: usize,
    m: Vec<Vec<f64>>,
    v: Vec<Vec<f64>>,
}

impl Adam {
    /// An optimizer for `vars` (f64), with zero moments.
    pub fn new(vars: Vec<Var>, lr: f64, weight_decay: f64) -> Result<Adam> {
        let vars = vars
            .into_iter()
            .map(|var| {
                let zeros = || Var::zeros(var.shape(), var.dtype(), var.device());
                Ok(Moments {
                    m: zeros()?,
                    v: zeros()?,
                    var,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Adam {
            vars,
            lr,
            weight_decay,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            step_t: 0,
        })
    }

    /// Backpropagates `loss` and takes one step.
    pub fn backward_step(&mut self, loss: &Tensor) -> Result<()> {
        let grads = loss.backward()?;
        self.step_t += 1;
        let lr_lambda = self.lr * self.weight_decay;
        let (beta1, beta2) = (self.beta1, self.beta2);
        let scale_m = 1f64 / (1f64 - beta1.powi(self.step_t as i32));
        let scale_v = 1f64 / (1f64 - beta2.powi(self.step_t as i32));
        for Moments { var, m, v } in &self.vars {
            let Some(g) = grads.get(var) else {
                continue;
            };
            let next_m = ((m.as_tensor() * beta1)? + (g * (1.0 - beta1))?)?;
            let next_v = ((v.as_tensor() * beta2)? + (g.sqr()? * (1.0 - beta2))?)?;
            let m_hat = (&next_m * scale_m)?;
            let v_hat = (&next_v * scale_v)?;
            let next_theta = (var.as_tensor() * (1f64 - lr_lambda))?;
            let adjusted = (m_hat / (v_hat.sqrt()? + self.eps)?)?;
            let next_theta = (next_theta - (adjusted * self.lr)?)?;
            m.set(&next_m)?;
            v.set(&next_v)?;
            var.set(&next_theta)?;
        }
        Ok(())
    }

    /// Its state, for a checkpoint.
    pub fn state(&self) -> Result<AdamState> {
        let flat = |x: &Var| x.as_tensor().flatten_all()?.to_vec1::<f64>();
        Ok(AdamState {
            step_t: self.step_t,
            m: self
                .vars
                .iter()
                .map(|x| flat(&x.m))
                .collect::<Result<_>>()?,
            v: self
                .vars
                .iter()
                .map(|x| flat(&x.v))
                .collect::<Result<_>>()?,
        })
    }

    /// Restores [`Adam::state`] (the variables' own values are restored by their owner).
    pub fn restore(&mut self, state: &AdamState) -> Result<()> {
        if state.m.len() != self.vars.len() || state.v.len() != self.vars.len() {
            return Err(candle_core::Error::Msg(format!(
                "optimizer state for {} variables, the network has {}",
                state.m.len(),
                self.vars.len()
            )));
        }
        for (x, (m, v)) in self.vars.iter().zip(state.m.iter().zip(&state.v)) {
            let shape = x.var.shape().clone();
            let device = x.var.device().clone();
            x.m.set(&Tensor::from_vec(m.clone(), shape.clone(), &device)?)?;
            x.v.set(&Tensor::from_vec(v.clone(), shape, &device)?)?;
        }
        self.step_t = state.step_t;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;
    use candle_nn::optim::{AdamW, Optimizer, ParamsAdamW};

    fn problem() -> (Vec<Var>, Tensor, Tensor) {
        let dev = Device::Cpu;
        let w = Var::from_tensor(&Tensor::new(&[[0.3f64], [-0.7], [0.1]], &dev).unwrap()).unwrap();
        let b = Var::from_tensor(&Tensor::new(&[0.5f64], &dev).unwrap()).unwrap();
        let x = Tensor::new(&[[1.0f64, 2.0, 3.0], [0.5, -1.0, 2.0]], &dev).unwrap();
        let y = Tensor::new(&[[1.0f64], [-2.0]], &dev).unwrap();
        (vec![w, b], x, y)
    }

    fn loss(vars: &[Var], x: &Tensor, y: &Tensor) -> Tensor {
        let out = x
            .matmul(vars[0].as_tensor())
            .and_then(|o| o.broadcast_add(vars[1].as_tensor()))
            .unwrap();
        out.sub(y).unwrap().sqr().unwrap().mean_all().unwrap()
    }

    fn values(vars: &[Var]) -> Vec<u64> {
        vars.iter()
            .flat_map(|v| {
                v.as_tensor()
                    .flatten_all()
                    .unwrap()
                    .to_vec1::<f64>()
                    .unwrap()
            })
            .map(f64::to_bits)
            .collect()
    }

    /// The same steps as candle-nn's AdamW, bit for bit.
    #[test]
    fn matches_candle_adamw_bit_for_bit() {
        let (ours, x, y) = problem();
        let (theirs, _, _) = problem();
        let mut a = Adam::new(ours.clone(), 0.01, 0.0).unwrap();
        let params = ParamsAdamW {
            lr: 0.01,
            weight_decay: 0.0,
            ..ParamsAdamW::default()
        };
        let mut b = AdamW::new(theirs.clone(), params).unwrap();
        for _ in 0..20 {
            a.backward_step(&loss(&ours, &x, &y)).unwrap();
            b.backward_step(&loss(&theirs, &x, &y)).unwrap();
        }
        assert_eq!(values(&ours), values(&theirs));
    }

    /// Stopping after 7 steps and restoring the state into a fresh optimizer continues exactly.
    #[test]
    fn restored_state_continues_exactly() {
        let (vars, x, y) = problem();
        let mut whole = Adam::new(vars.clone(), 0.01, 0.0).unwrap();
        for _ in 0..12 {
            whole.backward_step(&loss(&vars, &x, &y)).unwrap();
        }
        let (first, _, _) = problem();
        let mut a = Adam::new(first.clone(), 0.01, 0.0).unwrap();
        for _ in 0..7 {
            a.backward_step(&loss(&first, &x, &y)).unwrap();
        }
        let state = a.state().unwrap();
        let (second, _, _) = problem();
        for (to, from) in second.iter().zip(&first) {
            to.set(from.as_tensor()).unwrap();
        }
        let mut b = Adam::new(second.clone(), 0.01, 0.0).unwrap();
        b.restore(&state).unwrap();
        for _ in 0..5 {
            b.backward_step(&loss(&second, &x, &y)).unwrap();
        }
        assert_eq!(values(&vars), values(&second));
    }
}
