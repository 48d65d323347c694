//! Where a DLRM strategy's samples come from: the job's click-through data (a real run), or a
//! Zipf sampler of feature ids (throughput mode: no dense features, no labels).

use concord_engine::data::{split_ctr, ZipfIds};
use concord_engine::prelude::*;

/// A run of samples: dense features `[n, dense]`, ids `[n, fields]`, labels (the last and the
/// first empty in throughput mode).
pub struct Samples {
    /// Dense features, sample-major.
    pub dense_x: Vec<f32>,
    /// Feature ids, sample-major.
    pub ids: Vec<u32>,
    /// Click (1) or not (0) per sample.
    pub labels: Vec<u32>,
}

/// The source of a role's samples.
pub enum SampleSource {
    /// The job's data, read by stream position.
    Data,
    /// Draws in order from a Zipf sampler.
    Zipf(Box<ZipfIds>),
}

impl SampleSource {
    /// The job's data when it has some, else the sampler `zipf` builds.
    pub fn for_job(job: &Job, zipf: impl FnOnce() -> Result<ZipfIds>) -> Result<SampleSource> {
        Ok(match &job.data {
            Some(_) => SampleSource::Data,
            None => SampleSource::Zipf(Box::new(zipf()?)),
        })
    }

    /// Where the sampler's draws stand (`None` for the job's data, read by stream position):
    /// what a role saves at a checkpoint to continue its draws.
    pub fn position(&self) -> Option<u128> {
        match self {
            SampleSource::Data => None,
            SampleSource::Zipf(z) => Some(z.draw_position()),
        }
    }

    /// Continues the sampler's draws from `position` ([`SampleSource::position`]); nothing for
    /// the job's data.
    pub fn set_position(&mut self, position: Option<u128>) {
        if let (SampleSource::Zipf(z), Some(p)) = (self, position) {
            z.set_draw_position(p);
        }
    }

    /// `count` samples of `fields` ids each: those at stream positions `start..` of the job's
    /// data, or the sampler's next draws. `strategy` and `role` name who asks, for errors.
    pub fn take(
        &mut self,
        job: &Job,
        strategy: &str,
        role: RoleId,
        start: u128,
        count: usize,
        fields: usize,
    ) -> Result<Samples> {
        match (self, &job.data) {
            (SampleSource::Data, Some(data)) => {
                let schema = data.train.ctr.as_ref().ok_or_else(|| {
                    EngineError::Composition(format!(
                        "`{strategy}` needs click-through data (`[data] kind = \"ctr\"` or \"ctr-file\")"
                    ))
                })?;
                let idx = job.stream.range(start, count);
                let (features, labels) = data.train.gather(&idx);
                let (dense_x, ids) = split_ctr(schema, &features);
                Ok(Samples {
                    dense_x,
                    ids,
                    labels,
                })
            }
            (SampleSource::Zipf(z), _) => {
                let mut ids = Vec::with_capacity(count * fields);
                z.fill_batch(count, &mut ids);
                Ok(Samples {
                    dense_x: Vec::new(),
                    ids,
                    labels: Vec::new(),
                })
            }
            (SampleSource::Data, None) => {
                Err(EngineError::protocol(role, "a real DLRM run without data"))
            }
        }
    }
}
