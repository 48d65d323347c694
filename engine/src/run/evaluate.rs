//! Offline evaluation of the model, as the thesis does it: measuring must not perturb the run, so
//! the model is put together from the holders' parts after the run and scored on the test set —
//! per iteration (from the holders' snapshots, onto the metrics rows), at fixed run times
//! (`eval_every_s`, from the holders' timed snapshots), and at the end.

use super::parts::Part;
use crate::error::Result;
use crate::job::Job;
use crate::metrics::{IterationRow, TimedEvaluation};
use crate::model::Replica;
use crate::payload::BlockPayload;
use crate::ps;
use std::collections::BTreeSet;

/// Test-set accuracy (none for regression models such as MF) and loss of a parameter set, and the
/// values evaluated.
pub(super) struct Evaluation {
    /// Test accuracy (classifiers only).
    pub accuracy: Option<f64>,
    /// Test loss (cross-entropy; MF: the test MSE).
    pub loss: f64,
    /// Test AUC (DLRM click-through models only).
    pub auc: Option<f64>,
    /// The parameters evaluated, per parameter in layout order.
    pub values: Vec<Vec<f32>>,
}

/// Scores parameter sets of a job's model on its test set.
pub(super) struct Evaluator<'a> {
    job: &'a Job,
    replica: Option<Replica>,
}

impl<'a> Evaluator<'a> {
    /// An evaluator for `job`'s model (one that evaluates nothing in throughput mode).
    pub fn new(job: &'a Job) -> Result<Evaluator<'a>> {
        Ok(Evaluator {
            job,
            // On worker 0's device: a GPU run evaluates on the GPU too.
            replica: job.replica(crate::ids::RoleId::Worker(0))?,
        })
    }

    /// The model made of `blocks` (blocks not given are zero; a block given twice takes its last
    /// copy) on the test set; `None` without a real model and data.
    pub fn evaluate(&self, blocks: &[BlockPayload]) -> Result<Option<Evaluation>> {
        let (Some(replica), Some(data)) = (&self.replica, &self.job.data) else {
            return Ok(None);
        };
        let mut values = self.job.layout.zeros();
        self.job.layout.write_into(blocks, &mut values);
        replica.set_params(&values)?;
        let e = replica.evaluation(&data.test.features, &data.test.labels)?;
        Ok(Some(Evaluation {
            accuracy: e.accuracy,
            loss: e.loss,
            auc: e.auc,
            values,
        }))
    }

    /// Evaluates the parts' per-iteration snapshots onto `rows` (numbered 1.. consecutively): an
    /// iteration is evaluated once its parts' snapshots cover every block (elastic servers hand
    /// blocks to each other, so which holders have a part of it varies); others are skipped.
    pub fn snapshots_onto(&self, parts: &[Part], rows: &mut [IterationRow]) -> Result<()> {
        let iterations: BTreeSet<u64> = parts
            .iter()
            .flat_map(|p| p.model.snapshots.iter().map(|s| s.iterations))
            .collect();
        for it in iterations {
            let blocks: Vec<BlockPayload> = parts
                .iter()
                .filter_map(|p| p.model.snapshots.iter().find(|s| s.iterations == it))
                .flat_map(|s| s.blocks.iter().cloned())
                .collect();
            let covered: BTreeSet<_> = blocks.iter().map(|b| b.block).collect();
            if covered.len() != self.job.layout.blocks().len() {
                continue;
            }
            if let Some(e) = self.evaluate(&blocks)? {
                if let Some(row) = rows.get_mut(it as usize - 1) {
                    row.test_accuracy = e.accuracy;
                    row.test_loss = Some(e.loss);
                    row.test_auc = e.auc;
                }
            }
        }
        Ok(())
    }

    /// Evaluates the model at run times 0, Δ, 2Δ, … up to the run's end (Δ = `period`; only those
    /// after `after`, the checkpoint a resumed run started from) from the
    /// parts' timed snapshots; consecutive times with the same values are evaluated once, and
    /// times whose records do not cover every block are skipped. Parts that record no timed
    /// snapshots make the series empty, with a warning.
    pub fn over_time(
        &self,
        parts: &[Part],
        rows: &[IterationRow],
        period: f64,
        after: Option<f64>,
    ) -> Result<Vec<TimedEvaluation>> {
        let mut timed = Vec::with_capacity(parts.len());
        for p in parts {
            match &p.model.timed {
                Some(t) => timed.push(t),
                None => {
                    tracing::warn!(
                        "eval_every_s: this strategy's model holders keep no timed snapshots; \
                         no time-indexed evaluation"
                    );
                    return Ok(Vec::new());
                }
            }
        }
        let holders: Vec<ps::Holder<'_>> = timed
            .iter()
            .zip(parts)
            .map(|(t, p)| (t.as_slice(), p.model.blocks.as_slice()))
            .collect();
        let end = rows.last().map_or(0.0, |r| r.time_s);
        let mut out: Vec<TimedEvaluation> = Vec::new();
        // The records the last evaluation was built from, and its (accuracy, loss).
        let mut last: Option<(Vec<(usize, usize)>, AccuracyLoss)> = None;
        // A resumed run evaluates only the times after its checkpoint: those before are in the
        // run's history.
        let mut k = after.map_or(0, |a| (a / period).floor().max(0.0) as u64);
        while (k as f64) * period <= end {
            let time_s = k as f64 * period;
            k += 1;
            if after.is_some_and(|a| time_s <= a) {
                continue;
            }
            let used = ps::records_at(&holders, k - 1);
            let iterations = rows.iter().take_while(|r| r.time_s <= time_s).count() as u64;
            let (test_accuracy, test_loss) = match &last {
                Some((prev, result)) if *prev == used => *result,
                _ => {
                    let blocks = ps::model_from(&holders, &used);
                    if blocks.len() != self.job.layout.blocks().len() {
                        continue;
                    }
                    let Some(e) = self.evaluate(&blocks)? else {
                        return Ok(Vec::new());
                    };
                    last = Some((used, (e.accuracy, e.loss)));
                    (e.accuracy, e.loss)
                }
            };
            out.push(TimedEvaluation {
                time_s,
                iterations,
                test_accuracy,
                test_loss,
            });
        }
        Ok(out)
    }
}

/// Test accuracy (classifiers only) and test loss of one evaluation.
type AccuracyLoss = (Option<f64>, f64);
