//! A rank's batches: where their ids come from (the job's data or a Zipf sampler) and what the
//! rank keeps of each until its tasks are done.

use super::SvenWorker;
use crate::shards::{self, BatchIds};
use concord_engine::model::DenseStep;
use concord_engine::prelude::*;
use std::sync::Arc;

/// What a rank keeps of one batch until its tasks are done.
#[derive(Default)]
pub(super) struct BatchState {
    pub(super) ids: Option<Arc<BatchIds>>,
    pub(super) clicks: Vec<bool>,
    pub(super) lookups: super::residency::Lookups,
    pub(super) dense_x: Vec<f32>,
    pub(super) labels: Vec<u32>,
    pub(super) fwd_splits: Option<Vec<Payload>>,
    pub(super) emb: Option<Vec<f32>>,
    pub(super) step: Option<DenseStep>,
    pub(super) bwd_splits: Option<Vec<Payload>>,
    pub(super) grads_from: Option<Vec<Payload>>,
    pub(super) dense_sum: Option<Payload>,
    pub(super) started: Option<f64>,
    pub(super) compute_s: f64,
    pub(super) comm_s: f64,
    pub(super) bytes_sent: u64,
}

impl SvenWorker {
    /// The global batch `b`: its ids, and this rank's samples' dense features and labels.
    pub(super) fn load_batch(&mut self, b: u64) -> Result<()> {
        let global = self.per * self.ranks;
        let k = self.tables();
        let job = self.job.clone();
        let samples = self.source.take(
            &job,
            "sven",
            RoleId::Worker(self.id),
            u128::from(b) * global as u128,
            global,
            k,
        )?;
        let mine = shards::owned(self.rank, self.per);
        let dense = samples.dense_x.len() / global;
        let state = BatchState {
            dense_x: samples.dense_x[mine.start * dense..mine.end * dense].to_vec(),
            clicks: samples.labels.iter().map(|&l| l == 1).collect(),
            labels: samples
                .labels
                .get(mine)
                .map(<[u32]>::to_vec)
                .unwrap_or_default(),
            ids: Some(Arc::new(BatchIds {
                ids: samples.ids,
                fields: k,
            })),
            ..BatchState::default()
        };
        self.batches.insert(b, state);
        Ok(())
    }

    pub(super) fn batch(&mut self, b: u64) -> Result<&mut BatchState> {
        let id = self.id;
        self.batches.get_mut(&b).ok_or_else(|| {
            EngineError::protocol(RoleId::Worker(id), format!("batch {b} is not loaded"))
        })
    }
}
