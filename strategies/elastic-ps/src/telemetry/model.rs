//! The per-server cost model the scheduler reads: a [`ServerModel`] (`α·s + β` with the standard
//! error of that prediction) per server, all of them together the profile [`Pred`].

use concord_engine::prelude::*;
use std::collections::BTreeMap;

/// Variance of a prediction as a quadratic in the size: `Var(s) = a·s² + 2b·s + c`.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub(super) struct VarQuad {
    pub(super) a: f64,
    pub(super) b: f64,
    pub(super) c: f64,
}

impl VarQuad {
    /// The standard error at size `s` (0 where the variance is not positive).
    fn sem(&self, s: f64) -> f64 {
        let v = self.a * s * s + 2.0 * self.b * s + self.c;
        if v.is_finite() && v > 0.0 {
            v.sqrt()
        } else {
            0.0
        }
    }
}

/// A server's fitted model with its uncertainty.
///
/// `mean(s) = α·s + β` is the predicted time of exchanging `s` bytes with the server in one
/// iteration; `sem(s)` is the standard error of that prediction, from which the confidence bounds
/// of Algorithm 1 are built.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ServerModel {
    pub(super) alpha: f64,
    pub(super) beta: f64,
    /// The SEM is the weighted sum of the square roots of these variance quadratics: one part
    /// for a fitted model, one per averaged server for [`Pred::average_model`] (so the average
    /// of SEMs is exact at every size).
    pub(super) sem_parts: Vec<(f64, VarQuad)>,
}

impl ServerModel {
    /// A model with the given α (s/byte), β (s) and a SEM that does not depend on the size (for
    /// the worked example and tests). Negative or non-finite inputs are taken as 0.
    pub fn fixed(alpha: f64, beta: f64, sem: f64) -> ServerModel {
        let sem = non_negative(sem);
        ServerModel {
            alpha: non_negative(alpha),
            beta: non_negative(beta),
            sem_parts: vec![(
                1.0,
                VarQuad {
                    a: 0.0,
                    b: 0.0,
                    c: sem * sem,
                },
            )],
        }
    }

    /// Time per byte (s/byte).
    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// Fixed time per exchange (s): update and acknowledgement latency.
    pub fn beta(&self) -> f64 {
        self.beta
    }

    /// `Pred_mean(r, s)`: predicted seconds for a load of `s` bytes.
    pub fn mean(&self, s: f64) -> f64 {
        self.alpha * s + self.beta
    }

    /// `Pred_SEM(r, s)`: standard error of [`ServerModel::mean`] at `s` bytes.
    pub fn sem(&self, s: f64) -> f64 {
        self.sem_parts.iter().map(|(w, q)| w * q.sem(s)).sum()
    }

    /// `Pred_lower(r, s) = mean − z·SEM` (z = 1.645 for the paper's 90% bound).
    pub fn lower(&self, s: f64, z: f64) -> f64 {
        self.mean(s) - z * self.sem(s)
    }

    /// `Pred_upper(r, s) = mean + z·SEM`.
    pub fn upper(&self, s: f64, z: f64) -> f64 {
        self.mean(s) + z * self.sem(s)
    }
}

/// `x` when it is finite and positive, 0 otherwise: α, β and SEMs are never negative.
pub(super) fn non_negative(x: f64) -> f64 {
    if x.is_finite() && x > 0.0 {
        x
    } else {
        0.0
    }
}

/// The scheduler's profile of every server.
///
/// Servers are kept in id order so every iteration over the profile is deterministic.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Pred {
    pub(super) models: BTreeMap<ServerId, ServerModel>,
}

impl Pred {
    /// The model of server `r`, if it has one.
    pub fn get(&self, r: ServerId) -> Option<&ServerModel> {
        self.models.get(&r)
    }

    /// Sets (or replaces) the model of server `r`.
    pub fn insert(&mut self, r: ServerId, m: ServerModel) {
        self.models.insert(r, m);
    }

    /// Servers with a model, ascending.
    pub fn servers(&self) -> Vec<ServerId> {
        self.models.keys().copied().collect()
    }

    /// Model for a newly added server: the average α, β and SEM of the existing ones (§1.4, A9/A10).
    /// The SEM of the result is, at every size, the mean of the existing servers' SEMs. `None`
    /// when no server has a model.
    pub fn average_model(&self) -> Option<ServerModel> {
        if self.models.is_empty() {
            return None;
        }
        let k = self.models.len() as f64;
        let alpha = self.models.values().map(|m| m.alpha).sum::<f64>() / k;
        let beta = self.models.values().map(|m| m.beta).sum::<f64>() / k;
        let sem_parts = self
            .models
            .values()
            .flat_map(|m| m.sem_parts.iter().map(move |&(w, q)| (w / k, q)))
            .collect();
        Some(ServerModel {
            alpha,
            beta,
            sem_parts,
        })
    }

    /// Model-based speed `s_ref / Pred_mean(r, s_ref)` (A6); None without a model.
    /// Also `None` when the predicted time is not positive (no usable estimate), so a detector
    /// never divides by zero.
    pub fn speed(&self, r: ServerId, s_ref: f64) -> Option<f64> {
        let t = self.get(r)?.mean(s_ref);
        (t.is_finite() && t > 0.0).then(|| s_ref / t)
    }
}
