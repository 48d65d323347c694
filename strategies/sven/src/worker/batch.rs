//! A rank's batches: where their ids come from (the job's data or a Zipf sampler) and what the
//! rank keeps of each until its tasks are done.

use super::SvenWorker;
use crate::shards::{self, BatchIds};
use concord_engine::data::{split_ctr, ZipfIds};
use concord_engine::model::DenseStep;
use concord_engine::prelude::*;
use std::sync::Arc;

/// Where a batch's ids come from: the job's data (a real run) or a Zipf sampler (throughput).
pub(super) enum Ids {
    Data,
    Zipf(Box<ZipfIds>),
}

/// What a rank keeps of one batch until its tasks are done.
#[derive(Default)]
pub(super) struct BatchState {
    pub(super) ids: Option<Arc<BatchIds>>,
    pub(super) clicks: Vec<bool>,
    pub(super) lookups: super::residency::Lookups,
    pub(super) dense_x: Vec<f32>,
    pub(super) labels: Vec<u32>,
    pub(super) fwd_splits: Option<Vec<Payload>>,
    pub(super) host_elems: u64,
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
        let mut state = BatchState::default();
        match (&mut self.ids, &self.job.data) {
            (Ids::Data, Some(data)) => {
                let schema = data.train.ctr.as_ref().ok_or_else(|| {
                    EngineError::Composition(
                        "`sven` needs click-through data (`[data] kind = \"ctr\"` or \"ctr-file\")"
                            .into(),
                    )
                })?;
                let idx = self
                    .job
                    .stream
                    .range(u128::from(b) * global as u128, global);
                let (features, labels) = data.train.gather(&idx);
                let (dense, ids) = split_ctr(schema, &features);
                let mine = shards::owned(self.rank, self.per);
                state.dense_x = dense[mine.start * schema.dense..mine.end * schema.dense].to_vec();
                state.clicks = labels.iter().map(|&l| l == 1).collect();
                state.labels = labels[mine].to_vec();
                state.ids = Some(Arc::new(BatchIds { ids, fields: k }));
            }
            (Ids::Zipf(z), _) => {
                let mut ids = Vec::with_capacity(global * k);
                z.fill_batch(global, &mut ids);
                state.ids = Some(Arc::new(BatchIds { ids, fields: k }));
            }
            (Ids::Data, None) => {
                return Err(EngineError::protocol(
                    RoleId::Worker(self.id),
                    "a real DLRM run without data",
                ))
            }
        }
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
