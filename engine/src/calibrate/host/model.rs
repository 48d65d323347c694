//! A model to measure on the host: a config's real network with its data, or a named MLP on
//! synthetic inputs; with what a worker and a server of such a job hold.

use super::HostError;
use crate::config::RunConfig;
use crate::cost::LayerCost;
use crate::data::Dataset;
use crate::model::{ModelConfig, ModelSpec};
use crate::optim::OptimizerConfig;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;

/// Where a measured step's samples come from.
#[derive(Clone, Debug)]
enum Samples {
    /// The job's training set (its first samples).
    Data(Arc<Dataset>),
    /// Gaussian features of `len` values per sample, labels cycling through `classes`.
    Synthetic {
        /// Feature values per sample.
        len: usize,
        /// Classes of the labels.
        classes: usize,
    },
}

/// A real model to measure, with the job facts the measurement needs.
#[derive(Clone, Debug)]
pub struct HostModel {
    /// Its name in tables and errors (a config file, or a description).
    pub name: String,
    /// The resolved network.
    pub spec: ModelSpec,
    /// The optimizer a server (or an allreduce worker) applies updates with.
    pub optimizer: OptimizerConfig,
    /// Workers of the job: the pushes a server aggregates per clock.
    pub workers: u32,
    /// Seed of the initial parameters.
    pub seed: u64,
    samples: Samples,
}

impl HostModel {
    /// The model of `config` (named `name`), on its own data; an error for a throughput-mode
    /// profile (no real network) or matrix factorization (no per-layer facts to fit).
    pub fn from_config(name: &str, config: &RunConfig) -> Result<HostModel, HostError> {
        let refuse = |reason: &str| HostError::Model {
            model: name.to_owned(),
            reason: reason.to_owned(),
        };
        match &config.model {
            ModelConfig::Profile { .. } => {
                return Err(refuse(
                    "a throughput-mode profile has no real network to time on this machine",
                ))
            }
            ModelConfig::Mf { .. } => return Err(refuse(
                "matrix factorization is charged by FLOPs, not per layer: it has no layers to fit",
            )),
            _ => {}
        }
        let setup = |e: crate::EngineError| HostError::Setup {
            model: name.to_owned(),
            source: Box::new(e),
        };
        config
            .model
            .check_data(&config.data)
            .map_err(|e| setup(e.into()))?;
        let split = config.data.load(config.seed).map_err(|e| setup(e.into()))?;
        let spec = ModelSpec::resolve_for_data(&config.model, &config.data, &split.train)
            .map_err(|e| setup(e.into()))?;
        if split.train.is_empty() {
            return Err(refuse("its training set is empty"));
        }
        Ok(HostModel {
            name: name.to_owned(),
            spec,
            optimizer: config.optimizer.clone(),
            workers: config.workers,
            seed: config.seed,
            samples: Samples::Data(Arc::new(split.train)),
        })
    }

    /// An MLP of `inputs` features, `hidden` ReLU layers and `classes` outputs on synthetic
    /// inputs, trained with `optimizer` by `workers` workers.
    pub fn mlp(
        name: &str,
        inputs: usize,
        hidden: &[usize],
        classes: usize,
        optimizer: OptimizerConfig,
        workers: u32,
    ) -> Result<HostModel, HostError> {
        let cfg = ModelConfig::Mlp {
            hidden: hidden.to_vec(),
        };
        let spec = ModelSpec::resolve(&cfg, &[inputs], classes).map_err(|e| HostError::Setup {
            model: name.to_owned(),
            source: Box::new(e.into()),
        })?;
        Ok(HostModel {
            name: name.to_owned(),
            spec,
            optimizer,
            workers,
            seed: 42,
            samples: Samples::Synthetic {
                len: inputs,
                classes,
            },
        })
    }

    /// The per-layer cost facts a calibrated device charges the model's steps by.
    pub fn layers(&self) -> Vec<LayerCost> {
        self.spec.layer_costs()
    }

    /// Parameter elements of the model (what a server holds and updates).
    pub fn param_elems(&self) -> usize {
        self.spec.params().iter().map(|p| p.elems()).sum()
    }

    /// Training FLOPs per sample (forward and backward), by the model's own count.
    pub fn training_flops_per_sample(&self) -> f64 {
        self.spec.training_flops_per_sample()
    }

    /// The features and labels of a batch of `batch` samples, as a worker gathers them.
    pub fn batch(&self, batch: usize) -> (Vec<f32>, Vec<u32>) {
        match &self.samples {
            Samples::Data(train) => {
                let idx: Vec<usize> = (0..batch).map(|i| i % train.len()).collect();
                train.gather(&idx)
            }
            Samples::Synthetic { len, classes } => {
                let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
                let features = (0..batch * len)
                    .map(|_| rng.gen_range(-1.0f32..1.0))
                    .collect();
                let labels = (0..batch).map(|i| (i % (*classes).max(1)) as u32).collect();
                (features, labels)
            }
        }
    }
}
