//! Workers that each hold part of the model: the run evaluates and checkpoints the union of their
//! parts, and a part missing or held twice is an error naming the block. The same test workers,
//! one joining after the first clocks, show rows merged by clock.

mod common;

use common::*;
use concord::engine::config::RunConfig;
use concord::engine::context::RoleContext;
use concord::engine::contract::{Assembly, ModelState, Slot, Strategy, Worker, WorkerReport};
use concord::engine::error::{EngineError, Result};
use concord::engine::ids::{RoleId, WorkerId};
use concord::engine::job::Job;
use concord::engine::metrics::IterRecord;
use concord::engine::model::ModelSpec;
use concord::engine::optim::OptState;
use concord::engine::payload::{BlockId, BlockPayload, Payload};
use concord::engine::ps::{ParamLayout, RoundRobinPlacement, Snapshot, TimedSnapshot};
use concord::engine::run::{RunOptions, RunResult};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// How the two workers split the model.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Split {
    /// Worker 0 the first half of the parameters' blocks, worker 1 the second half.
    Halves,
    /// Worker 0 every block.
    Whole,
    /// As `Halves`, without the first block of the second half.
    Missing,
    /// As `Halves`, with worker 1 also reporting block 0.
    Doubled,
}

/// Parameters at or after this index belong to worker 1's half.
fn second_half(job: &Job) -> usize {
    job.layout.params().len() / 2
}

/// The blocks worker `w` holds under `split`.
fn blocks_of(job: &Job, split: Split, w: WorkerId) -> Vec<BlockId> {
    let half = second_half(job);
    let mut ids: Vec<BlockId> = job
        .layout
        .blocks()
        .iter()
        .filter(|b| match split {
            Split::Whole => w == 0,
            _ => (b.param >= half) == (w == 1),
        })
        .map(|b| b.id)
        .collect();
    if w == 1 {
        match split {
            Split::Missing => {
                ids.remove(0);
            }
            Split::Doubled => ids.insert(0, 0),
            _ => {}
        }
    }
    ids
}

/// The value a holder reports for element `i` of block `block`: the job's initial value moved by
/// an amount that depends on the block, so the union is told apart from the initial model.
fn held_value(init: f32, block: BlockId) -> f32 {
    init * 0.5 + 0.01 * (block % 7) as f32
}

/// A worker that trains nothing: it keeps clocks and reports its part of the model.
struct PartHolder {
    job: Arc<Job>,
    id: WorkerId,
    split: Split,
    /// Worker 1's first clock (it joins the job then).
    joins_at: u64,
}

impl PartHolder {
    /// Block `id` with the job's initial values (`moved`: the values the holder ends with).
    fn block(&self, id: BlockId, moved: bool) -> BlockPayload {
        let mut b = self
            .job
            .layout
            .block_payload(id, self.job.init.as_deref())
            .expect("a block of the layout");
        if let (true, Payload::Real(v)) = (moved, &mut b.data) {
            for x in v.iter_mut() {
                *x = held_value(*x, id);
            }
        }
        b
    }

    fn part(&self, clocks: u64, end_s: f64) -> ModelState {
        let ids = blocks_of(&self.job, self.split, self.id);
        let blocks: Vec<BlockPayload> = ids.iter().map(|&b| self.block(b, true)).collect();
        ModelState {
            opt_state: blocks
                .iter()
                .map(|b| {
                    let state = OptState {
                        step: clocks,
                        slots: vec![vec![0.25 + self.id as f32; b.data.elems() as usize]],
                    };
                    (b.block, state)
                })
                .collect(),
            snapshots: vec![Snapshot {
                iterations: clocks,
                time_s: end_s,
                blocks: blocks.clone(),
            }],
            // At run time 0 the part still had the initial values.
            timed: Some(vec![TimedSnapshot {
                indices: 0..1,
                blocks: ids.iter().map(|&b| self.block(b, false)).collect(),
            }]),
            blocks,
        }
    }

    async fn work(&mut self, ctx: &mut RoleContext) -> Result<WorkerReport> {
        let clocks = self.job.config.iterations;
        let mut records = Vec::new();
        let first = if self.id == 1 { self.joins_at } else { 0 };
        for clock in first..clocks {
            ctx.set_iter(clock);
            let start = ctx.now();
            ctx.sleep(0.1 * (1 + self.id) as f64).await;
            records.push(IterRecord {
                clock,
                start_s: start,
                end_s: ctx.now(),
                wall_s: ctx.wall_now(),
                samples: self.job.config.batch,
                compute_s: 0.0,
                wait_s: ctx.now() - start,
                comm_s: 0.0,
                loss: 1.0,
                version_read: clock as i64 - 1,
                bytes_sent: 0,
            });
            self.job.observe(self.id, clock + 1);
        }
        let holds = !blocks_of(&self.job, self.split, self.id).is_empty();
        Ok(WorkerReport {
            state: None,
            iterations: records,
            model: holds.then(|| self.part(clocks, ctx.now())),
        })
    }
}

impl Worker for PartHolder {
    fn run<'a, 'b, 'f>(
        &'a mut self,
        ctx: &'b mut RoleContext,
    ) -> Pin<Box<dyn Future<Output = Result<WorkerReport>> + Send + 'f>>
    where
        'a: 'f,
        'b: 'f,
        Self: 'f,
    {
        Box::pin(self.work(ctx))
    }
}

/// The test strategy: fills the worker slot with part holders.
struct PartHolders(Split, u64);

impl Strategy for PartHolders {
    fn name(&self) -> &'static str {
        "part-holders"
    }
    fn summary(&self) -> &'static str {
        "Test strategy: workers that each hold part of the model"
    }
    fn slots(&self) -> &'static [Slot] {
        &[Slot::Worker]
    }
    fn install(
        &self,
        _options: Option<&toml::Value>,
        _config: &RunConfig,
        asm: &mut Assembly,
    ) -> Result<()> {
        let (split, joins_at) = (self.0, self.1);
        asm.worker = Some(Arc::new(move |job, id| {
            Ok(Box::new(PartHolder {
                job,
                id,
                split,
                joins_at,
            }) as Box<dyn Worker>)
        }));
        Ok(())
    }
}

/// Two workers, several blocks per parameter, a timed evaluation every 0.1 s.
fn config() -> RunConfig {
    let mut cfg = small(2, 8, 3);
    cfg.block_bytes = 1024;
    cfg.eval_every_s = Some(0.1);
    cfg.strategies = vec!["bsp".into(), "part-holders".into()];
    cfg
}

fn run_split(split: Split) -> Result<RunResult> {
    run_joining(split, 0)
}

/// As [`run_split`], with worker 1 joining at clock `joins_at`.
fn run_joining(split: Split, joins_at: u64) -> Result<RunResult> {
    let mut registry = concord::registry();
    registry.register(Arc::new(PartHolders(split, joins_at)))?;
    let cfg = config();
    let asm = registry.compose(&cfg)?;
    concord::engine::run(&cfg, &asm, RunOptions::default())
}

/// The job's model, initial values and parameter layout, as the run builds them from `cfg`.
fn model_of(cfg: &RunConfig) -> (Vec<Vec<f32>>, ParamLayout) {
    let train = cfg.data.load(cfg.seed).unwrap().train;
    let spec = ModelSpec::resolve_for_data(&cfg.model, &cfg.data, &train).unwrap();
    let layout = ParamLayout::new(
        spec.params(),
        (cfg.block_bytes / 4) as usize,
        &RoundRobinPlacement,
        cfg.servers,
    );
    (spec.init_values(cfg.seed).unwrap(), layout)
}

/// The model the holders end with, per parameter, from the job's initial values.
fn expected_params(cfg: &RunConfig) -> Vec<(String, Vec<f32>)> {
    let (mut values, layout) = model_of(cfg);
    for b in layout.blocks() {
        for x in &mut values[b.param][b.offset..b.offset + b.len] {
            *x = held_value(*x, b.id);
        }
    }
    layout
        .params()
        .iter()
        .map(|p| p.name.clone())
        .zip(values)
        .collect()
}

/// The tensors of a safetensors file by name: (shape, f32 values).
fn read_checkpoint(path: &std::path::Path) -> Vec<(String, Vec<u64>, Vec<f32>)> {
    let bytes = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let data = &bytes[8 + n..];
    header
        .iter()
        .filter(|(name, _)| *name != "__metadata__")
        .map(|(name, t)| {
            assert_eq!(t["dtype"], "F32");
            let shape = t["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap())
                .collect();
            let at = |i: usize| t["data_offsets"][i].as_u64().unwrap() as usize;
            let values = data[at(0)..at(1)]
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            (name.clone(), shape, values)
        })
        .collect()
}

#[test]
fn the_run_evaluates_and_checkpoints_the_union_of_the_workers_parts() {
    let r = run_split(Split::Halves).expect("two halves make the model");
    let layout = &r.model.layout;
    assert!(
        layout.blocks().len() > layout.params().len() && layout.params().len() >= 2,
        "several parameters, several blocks each"
    );
    assert_eq!(model_of(&config()).1.blocks(), layout.blocks());
    let expected = expected_params(&config());
    assert_eq!(r.params.as_ref(), Some(&expected));

    // The same model held whole by one worker evaluates identically, at every point.
    let whole = run_split(Split::Whole).expect("one worker holds the whole model");
    assert_eq!(whole.params, r.params);
    assert!(r.summary.final_test_loss.is_some());
    assert_eq!(whole.summary.final_test_loss, r.summary.final_test_loss);
    assert_eq!(
        whole.summary.final_test_accuracy,
        r.summary.final_test_accuracy
    );
    let last = r.rows.last().unwrap();
    assert_eq!(last.test_loss, r.summary.final_test_loss);
    // The timed series: the initial model at time 0, the held one after.
    assert!(r.evaluations.len() >= 2, "{:?}", r.evaluations);
    assert_eq!(
        r.evaluations
            .iter()
            .map(|e| e.test_loss)
            .collect::<Vec<_>>(),
        whole
            .evaluations
            .iter()
            .map(|e| e.test_loss)
            .collect::<Vec<_>>()
    );
    assert_ne!(r.evaluations[0].test_loss, r.evaluations[1].test_loss);
    assert_eq!(
        r.evaluations.last().map(|e| e.test_loss),
        r.summary.final_test_loss
    );

    // The checkpoint holds the union, with each part's optimizer state.
    let dir = tempfile::tempdir().unwrap();
    concord::engine::output::write_run_folder(dir.path(), &r).unwrap();
    let tensors = read_checkpoint(&dir.path().join("checkpoint.safetensors"));
    let get = |name: &str| {
        tensors
            .iter()
            .find(|(n, ..)| n == name)
            .unwrap_or_else(|| panic!("{name} in the checkpoint"))
    };
    let half = layout.params().len() / 2;
    for (i, (p, (name, values))) in layout.params().iter().zip(&expected).enumerate() {
        let (_, shape, got) = get(name);
        let dims: Vec<u64> = p.shape.iter().map(|&d| d as u64).collect();
        assert_eq!((shape, got), (&dims, values), "{name}");
        let holder = u32::from(i >= half);
        let (_, _, momentum) = get(&format!("{name}.opt0"));
        assert!(
            momentum.iter().all(|&m| m == 0.25 + holder as f32),
            "{name}.opt0 from worker {holder}"
        );
        assert_eq!(get(&format!("{name}.step")).2, vec![3.0], "{name}.step");
    }
    assert_eq!(tensors.len(), 3 * layout.params().len());
}

#[test]
fn a_block_no_worker_holds_is_named() {
    let e = run_split(Split::Missing).expect_err("a block is missing");
    let text = e.to_string();
    match e {
        EngineError::MissingBlock {
            block,
            param,
            holders,
        } => {
            let (_, layout) = model_of(&config());
            let first = layout
                .blocks()
                .iter()
                .find(|b| b.param == layout.params().len() / 2)
                .unwrap();
            assert_eq!(block, first.id);
            assert_eq!(param, layout.params()[first.param].name);
            assert_eq!(holders, vec![RoleId::Worker(0), RoleId::Worker(1)]);
            assert!(
                text.contains(&format!("block {block}")) && text.contains(&param),
                "{text}"
            );
        }
        other => panic!("expected a missing block, got {other}"),
    }
}

#[test]
fn a_block_two_workers_hold_is_named() {
    let e = run_split(Split::Doubled).expect_err("block 0 is held twice");
    let text = e.to_string();
    match e {
        EngineError::DoubledBlock {
            block,
            param,
            holders,
        } => {
            let (_, layout) = model_of(&config());
            assert_eq!(block, 0);
            assert_eq!(param, layout.params()[layout.blocks()[0].param].name);
            assert_eq!(holders, vec![RoleId::Worker(0), RoleId::Worker(1)]);
            assert!(
                text.contains("block 0")
                    && text.contains(&param)
                    && text.contains("worker-0")
                    && text.contains("worker-1"),
                "{text}"
            );
        }
        other => panic!("expected a doubled block, got {other}"),
    }
}

#[test]
fn a_worker_joining_later_is_absent_from_the_first_rows_and_counts_once_active() {
    let r = run_joining(Split::Whole, 1).unwrap();
    let n = config().iterations;
    assert_eq!(r.rows.len() as u64, n, "every clock the job ran has a row");
    assert_eq!(r.rows[0].workers, Some(vec![0]));
    assert_eq!(r.rows[0].wait_s.len(), 1);
    assert_eq!(r.rows[0].samples, config().batch);
    assert!(r.rows[1..].iter().all(|row| row.workers.is_none()));
    assert_eq!(r.rows[1].samples, 2 * config().batch);
    let records: u64 = r.worker_records.iter().map(|w| w.len() as u64).sum();
    assert_eq!(records, 2 * n - 1);
    let wait: f64 = r.worker_records.iter().flatten().map(|x| x.wait_s).sum();
    let s = &r.summary;
    assert_eq!(s.wait_share, wait / (s.run_time_s * 2.0));

    // A worker with no clock at all is not active: the shares count worker 0 alone.
    let alone = run_joining(Split::Whole, n).unwrap();
    assert!(alone.worker_records[1].is_empty());
    assert!(alone.rows.iter().all(|row| row.workers == Some(vec![0])));
    let wait: f64 = alone.worker_records[0].iter().map(|x| x.wait_s).sum();
    let s = &alone.summary;
    assert_eq!(s.wait_share, wait / s.run_time_s);
    assert!(
        (s.wait_share - 1.0).abs() < 1e-12,
        "worker 0 only sleeps: {}",
        s.wait_share
    );
}
