//! Matrix factorization (MF): `X ≈ L Rᵀ`, trained by SGD on observed entries.
//!
//! Each sample is one observed entry `(i, j, x_ij)`, encoded as the features
//! `[i, j, x_ij]` (see [`crate::data::ratings`]). The per-entry objective is
//! the thesis's MF objective,
//!
//! ```text
//! f(i, j) = (L_i · R_j − x_ij)² + λ (|L_i|² + |R_j|²)
//! ```
//!
//! and a batch's loss is its mean. Its gradient touches only row `i` of `L`
//! and row `j` of `R`; [`MfModel::step`] nevertheless returns dense gradients
//! (zero on untouched rows) so MF goes through the engine's generic gradient
//! exchange exactly like the classification models. The math is written out
//! by hand (closed-form gradients, accumulated in `f64`), which is exact and
//! far cheaper than a tensor graph for rank-sized dot products.

use super::{ParamInfo, StageFacts};
use crate::error::{Result, WorkloadError};
use std::sync::RwLock;

/// Name of the row factor `L` (`rows × rank`) in the parameter layout.
pub const MF_LEFT: &str = "mf.L";
/// Name of the column factor `R` (`cols × rank`) in the parameter layout.
pub const MF_RIGHT: &str = "mf.R";

/// A resolved MF model: matrix sizes from the ratings data, rank and L2 from the config.
#[derive(Clone, Debug, PartialEq)]
pub struct MfSpec {
    /// Rows of the matrix (rows of `L`).
    pub rows: usize,
    /// Columns of the matrix (rows of `R`).
    pub cols: usize,
    /// Rank of the factorization.
    pub rank: usize,
    /// L2 regularization weight λ on the touched rows of `L` and `R`.
    pub l2: f64,
}

impl MfSpec {
    /// The two parameters, `mf.L` then `mf.R` (the canonical, name-sorted order).
    pub fn params(&self) -> Vec<ParamInfo> {
        vec![
            ParamInfo {
                name: MF_LEFT.into(),
                shape: vec![self.rows, self.rank],
                fan_in: self.rank,
            },
            ParamInfo {
                name: MF_RIGHT.into(),
                shape: vec![self.cols, self.rank],
                fan_in: self.rank,
            },
        ]
    }

    /// One stage, `mf`: forward is the dot product (2·rank FLOPs), the two squared norms of
    /// the regularizer (4·rank) and the residual and its square (2); the output is one `f32`
    /// prediction per sample. With the engine's "backward = 2 × forward" convention, a training
    /// step costs 18·rank + 6 FLOPs per sample, an honest small count for the real work
    /// (forward 6·rank, gradients of both rows 8·rank).
    pub fn stage_facts(&self) -> Vec<StageFacts> {
        vec![StageFacts {
            name: "mf".into(),
            forward_flops: (6 * self.rank + 2) as f64,
            activation_bytes: 4,
            kept_bytes: 4,
        }]
    }

    /// Bound of the uniform initialisation: `rank^(-1/4)`, so entries have a third of the
    /// variance of the ratings generator's true factors and initial predictions have variance
    /// 1/9: far enough from the saddle point `L = R = 0` (where every gradient vanishes) for SGD
    /// to leave it quickly, small against the data's unit variance.
    pub fn init_bound(&self) -> f32 {
        (self.rank as f32).powf(-0.25)
    }
}

/// An MF replica: the two factors, set from the servers' values before each step.
pub struct MfModel {
    spec: MfSpec,
    /// `L` then `R`, row-major.
    params: RwLock<[Vec<f32>; 2]>,
}

impl MfModel {
    /// A replica of `spec` with zero factors (values are loaded from the servers).
    pub fn new(spec: &MfSpec) -> MfModel {
        MfModel {
            spec: spec.clone(),
            params: RwLock::new([
                vec![0.0; spec.rows * spec.rank],
                vec![0.0; spec.cols * spec.rank],
            ]),
        }
    }

    /// The resolved spec.
    pub fn spec(&self) -> &MfSpec {
        &self.spec
    }

    /// Sets `L` and `R` from flat values in layout order.
    pub fn set_params(&self, values: &[Vec<f32>]) -> Result<()> {
        let sizes = [
            self.spec.rows * self.spec.rank,
            self.spec.cols * self.spec.rank,
        ];
        if values.len() != 2 || values.iter().zip(sizes).any(|(v, n)| v.len() != n) {
            return Err(mf_err(
                "load parameters",
                format!(
                    "expected 2 parameters of {sizes:?} values, got {:?}",
                    values.iter().map(Vec::len).collect::<Vec<_>>()
                ),
            ));
        }
        let mut p = self.params.write().map_err(|_| poisoned())?;
        p[0].copy_from_slice(&values[0]);
        p[1].copy_from_slice(&values[1]);
        Ok(())
    }

    /// Mean objective over the batch and its dense mean gradients `[dL, dR]`.
    pub fn step(&self, features: &[f32]) -> Result<(f64, Vec<Vec<f32>>)> {
        let entries = self.entries(features, "mf step")?;
        let MfSpec { rank, l2, .. } = self.spec;
        let p = self.params.read().map_err(|_| poisoned())?;
        let (l, r) = (&p[0], &p[1]);
        let mut gl = vec![0.0f64; l.len()];
        let mut gr = vec![0.0f64; r.len()];
        let scale = 1.0 / entries.len().max(1) as f64;
        let mut loss = 0.0f64;
        for (i, j, x) in entries {
            let (li, rj) = (&l[i * rank..(i + 1) * rank], &r[j * rank..(j + 1) * rank]);
            let e = dot(li, rj) - x as f64;
            loss += e * e + l2 * (norm2(li) + norm2(rj));
            let (gli, grj) = (
                &mut gl[i * rank..(i + 1) * rank],
                &mut gr[j * rank..(j + 1) * rank],
            );
            for k in 0..rank {
                let (a, b) = (li[k] as f64, rj[k] as f64);
                gli[k] += scale * (2.0 * e * b + 2.0 * l2 * a);
                grj[k] += scale * (2.0 * e * a + 2.0 * l2 * b);
            }
        }
        let to_f32 = |g: Vec<f64>| g.into_iter().map(|v| v as f32).collect();
        Ok((loss * scale, vec![to_f32(gl), to_f32(gr)]))
    }

    /// Mean squared error `(L_i · R_j − x_ij)²` over the entries (no regularization term).
    pub fn mse(&self, features: &[f32]) -> Result<f64> {
        let entries = self.entries(features, "mf evaluate")?;
        if entries.is_empty() {
            return Ok(0.0);
        }
        let rank = self.spec.rank;
        let p = self.params.read().map_err(|_| poisoned())?;
        let sum: f64 = entries
            .iter()
            .map(|&(i, j, x)| {
                let e = dot(
                    &p[0][i * rank..(i + 1) * rank],
                    &p[1][j * rank..(j + 1) * rank],
                ) - x as f64;
                e * e
            })
            .sum();
        Ok(sum / entries.len() as f64)
    }

    /// Decodes `[row, col, value]` triples, checking indices are integers in range.
    fn entries(&self, features: &[f32], context: &str) -> Result<Vec<(usize, usize, f32)>> {
        if !features.len().is_multiple_of(3) {
            return Err(mf_err(
                context,
                format!(
                    "{} features is not a whole number of [row, col, value] entries",
                    features.len()
                ),
            ));
        }
        let index = |v: f32, n: usize, what: &str| -> Result<usize> {
            if v >= 0.0 && v.fract() == 0.0 && (v as usize) < n {
                Ok(v as usize)
            } else {
                Err(mf_err(
                    context,
                    format!("{what} index {v} is not an integer in 0..{n}"),
                ))
            }
        };
        features
            .chunks_exact(3)
            .map(|c| {
                Ok((
                    index(c[0], self.spec.rows, "row")?,
                    index(c[1], self.spec.cols, "column")?,
                    c[2],
                ))
            })
            .collect()
    }
}

fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum()
}

fn norm2(a: &[f32]) -> f64 {
    a.iter().map(|&x| x as f64 * x as f64).sum()
}

fn mf_err(context: &str, msg: String) -> WorkloadError {
    WorkloadError::Tensor {
        context: context.to_string(),
        source: candle_core::Error::Msg(msg),
    }
}

fn poisoned() -> WorkloadError {
    mf_err("mf parameters", "parameter lock poisoned".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ModelConfig, ModelSpec, Replica};

    fn tiny(l2: f64) -> (MfSpec, Vec<Vec<f32>>) {
        let spec = MfSpec {
            rows: 5,
            cols: 4,
            rank: 3,
            l2,
        };
        let values = ModelSpec::Mf(spec.clone()).init_values(7).unwrap();
        (spec, values)
    }

    /// Entries (row, col, value); row 0 twice, rows 1 and 4 never (col 2 never).
    const BATCH: [f32; 12] = [0., 1., 0.7, 2., 3., -0.4, 0., 0., 1.3, 3., 1., 0.2];

    /// The analytic gradients match central finite differences of the batch loss.
    #[test]
    fn gradients_match_finite_differences() {
        let (spec, values) = tiny(0.1);
        let model = MfModel::new(&spec);
        model.set_params(&values).unwrap();
        let (_, grads) = model.step(&BATCH).unwrap();
        let h = 1e-3f32;
        let mut worst = 0.0f64;
        for p in 0..2 {
            for k in 0..values[p].len() {
                let mut plus = values.clone();
                let mut minus = values.clone();
                plus[p][k] += h;
                minus[p][k] -= h;
                let step = plus[p][k] as f64 - minus[p][k] as f64;
                model.set_params(&plus).unwrap();
                let (lp, _) = model.step(&BATCH).unwrap();
                model.set_params(&minus).unwrap();
                let (lm, _) = model.step(&BATCH).unwrap();
                let fd = (lp - lm) / step;
                worst = worst.max((fd - grads[p][k] as f64).abs());
            }
        }
        assert!(worst < 1e-4, "finite differences differ by {worst}");
    }

    /// Rows of L and R the batch does not touch get exactly zero gradient, touched ones do not.
    #[test]
    fn untouched_rows_get_exactly_zero_gradient() {
        let (spec, values) = tiny(0.1);
        let model = MfModel::new(&spec);
        model.set_params(&values).unwrap();
        let (_, g) = model.step(&BATCH).unwrap();
        let row = |v: &[f32], r: usize| v[r * 3..(r + 1) * 3].to_vec();
        for r in [1, 4] {
            assert_eq!(row(&g[0], r), vec![0.0; 3], "L row {r}");
        }
        assert_eq!(row(&g[1], 2), vec![0.0; 3], "R row 2");
        for r in [0, 2, 3] {
            assert!(row(&g[0], r).iter().any(|&x| x != 0.0), "L row {r}");
        }
        for c in [0, 1, 3] {
            assert!(row(&g[1], c).iter().any(|&x| x != 0.0), "R row {c}");
        }
    }

    /// The loss is the closed-form objective: mean of squared error plus λ times the row norms.
    #[test]
    fn loss_is_the_per_entry_objective() {
        let (spec, _) = tiny(0.5);
        let model = MfModel::new(&spec);
        let mut values = vec![vec![0.0; 15], vec![0.0; 12]];
        values[0][..3].copy_from_slice(&[1.0, 2.0, 0.0]); // L_0
        values[1][3..6].copy_from_slice(&[0.5, 1.0, 1.0]); // R_1
        model.set_params(&values).unwrap();
        // (1·0.5 + 2·1 − 1)² + 0.5 (5 + 2.25) = 2.25 + 3.625.
        let (loss, g) = model.step(&[0., 1., 1.]).unwrap();
        assert!((loss - 5.875).abs() < 1e-9, "{loss}");
        // dL_0 = 2e R_1 + 2λ L_0 with e = 1.5.
        assert_eq!(&g[0][..3], &[2.5, 5.0, 3.0]);
        assert!((model.mse(&[0., 1., 1.]).unwrap() - 2.25).abs() < 1e-9);
    }

    /// Through the generic replica: MF reports no accuracy, and bad entries are errors.
    #[test]
    fn replica_reports_mse_and_rejects_bad_entries() {
        let (spec, values) = tiny(0.0);
        let replica = Replica::new(&ModelSpec::Mf(spec), &candle_core::Device::Cpu)
            .unwrap()
            .unwrap();
        assert!(replica.model().is_none());
        replica.set_params(&values).unwrap();
        let (acc, mse) = replica.evaluate(&BATCH, &[0; 4]).unwrap();
        assert_eq!(acc, None);
        let loss = replica.step(BATCH.to_vec(), &[0; 4]).unwrap().loss;
        assert!((mse - loss).abs() < 1e-9, "λ = 0: MSE {mse} = loss {loss}");
        for bad in [[5., 0., 1.], [0., 4., 1.], [-1., 0., 1.], [0.5, 0., 1.]] {
            let e = replica.step(bad.to_vec(), &[0]).unwrap_err().to_string();
            assert!(e.contains("index"), "{e}");
        }
        assert!(replica.set_params(&values[..1]).is_err());
    }

    /// Model config errors name the key.
    #[test]
    fn bad_model_config_names_the_key() {
        let e = ModelSpec::mf(10, 10, 0, 0.1).unwrap_err().to_string();
        assert!(e.contains("model.rank"), "{e}");
        let e = ModelSpec::mf(10, 10, 2, -1.0).unwrap_err().to_string();
        assert!(e.contains("model.l2"), "{e}");
        let e = ModelSpec::resolve(&ModelConfig::Mf { rank: 2, l2: 0.0 }, &[3], 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("model.kind"), "{e}");
    }
}
