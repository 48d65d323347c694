//! Running cells: the parallel runner that takes what it can from the cache and runs the rest.
//!
//! Layers, each file using only those above it: [`result`] (what a run produced), [`cache`]
//! (code version, cache key, cache files), then this file (running a cell, running a suite).

pub mod cache;
pub mod result;

use crate::bench::error::BenchError;
use crate::bench::suite::expand::{Cell, MarketCell, Scenario};
use crate::bench::suite::schema::Suite;
use cache::{cache_key, read_cache, write_cache};
use concord_engine::config::RunConfig;
use concord_engine::run::RunOptions;
use indicatif::{ProgressBar, ProgressStyle};
use result::CellResult;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Runs one cell: its market study, or its config to completion (in `sim`, as the suite
/// resolved it).
pub fn run_any(cell: &Cell) -> anyhow::Result<CellResult> {
    match &cell.market {
        Some(m) => run_market(m),
        None => run_cell(&cell.config),
    }
}

/// Runs a market cell: the study of its scheme over its start points.
pub fn run_market(m: &MarketCell) -> anyhow::Result<CellResult> {
    use concord_elastic_ps::proteus::{Market, Scheme, Study, StudyParams};
    let scheme: Scheme = m.scheme.parse().map_err(|e: String| anyhow::anyhow!(e))?;
    let path = crate::bench::suite::load::workspace_root().join(&m.file);
    let market = Market::load(&path)?;
    let params = StudyParams {
        hours: m.hours,
        starts: m.starts,
        seed: m.seed,
        ..StudyParams::default()
    };
    let s = Study::new(market, params)?.summarize(scheme)?;
    Ok(CellResult::from_market(&s))
}

/// Runs one cell's config to completion (in `sim`, as the suite resolved it).
pub fn run_cell(config: &RunConfig) -> anyhow::Result<CellResult> {
    let asm = concord::registry().compose(config)?;
    let result = concord_engine::run(config, &asm, RunOptions::default())?;
    Ok(CellResult::from_run(&result))
}

/// How to run a suite.
#[derive(Clone, Debug)]
pub struct RunSettings {
    /// Threads running cells at once.
    pub jobs: usize,
    /// Rerun cells even if cached.
    pub force: bool,
    /// Show a progress bar.
    pub progress: bool,
}

/// What a suite run did, and each cell's result (`None` where a cell was filtered out and not
/// cached, or failed).
#[derive(Debug)]
pub struct Outcome {
    /// One entry per cell, in cell order.
    pub results: Vec<Option<CellResult>>,
    /// Cells run now.
    pub ran: usize,
    /// Cells taken from the cache.
    pub cached: usize,
    /// Cells that failed: id and error.
    pub failed: Vec<(String, String)>,
    /// Wall-clock seconds the run took.
    pub wall_s: f64,
}

/// Runs the `selected` cells of a suite that are not cached (all of them with `force`), in
/// parallel, and gathers every cell's result that is available (cached cells outside the
/// selection too, so that filtered runs add up to the whole report).
pub fn run_suite(
    suite: &Suite,
    scenarios: &[Scenario],
    cells: &[Cell],
    selected: &[bool],
    fingerprint: Option<&str>,
    out_dir: &Path,
    settings: &RunSettings,
) -> Result<Outcome, BenchError> {
    let start = Instant::now();
    let cache_dir = out_dir.join("cache");
    std::fs::create_dir_all(&cache_dir).map_err(|source| BenchError::Io {
        path: cache_dir.clone(),
        source,
    })?;
    let keys: Vec<String> = cells
        .iter()
        .map(|c| match &c.market {
            Some(m) => cache::market_cache_key(fingerprint.unwrap_or_default(), m),
            None => cache_key(fingerprint.unwrap_or_default(), &c.config),
        })
        .collect();
    let mut results: Vec<Option<CellResult>> = vec![None; cells.len()];
    let mut todo = Vec::new();
    let mut cached = 0;
    for (i, key) in keys.iter().enumerate() {
        let path = cache_dir.join(format!("{key}.json"));
        let hit = match fingerprint {
            Some(f) if !(settings.force && selected[i]) => read_cache(&path, key, f),
            _ => None,
        };
        match hit {
            Some(r) => {
                results[i] = Some(r);
                cached += 1;
            }
            // Two cells with the same key (the same resolved config) run once.
            None if selected[i] && !todo.iter().any(|&t: &usize| keys[t] == *key) => todo.push(i),
            None => {}
        }
    }

    let bar = if settings.progress && !todo.is_empty() {
        let bar = ProgressBar::new(todo.len() as u64);
        if let Ok(style) = ProgressStyle::with_template(
            "{prefix} [{bar:30}] {pos}/{len} cells, {elapsed} (eta {eta}) {wide_msg}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(format!("bench {}", suite.name));
        bar
    } else {
        ProgressBar::hidden()
    };
    let next = AtomicUsize::new(0);
    let done = Mutex::new(Vec::new());
    let jobs = settings.jobs.max(1).min(todo.len().max(1));
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| loop {
                let n = next.fetch_add(1, Ordering::SeqCst);
                let Some(&i) = todo.get(n) else { break };
                let cell = &cells[i];
                let id = cell.id(suite, scenarios);
                bar.set_message(id.clone());
                let outcome =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_any(cell)))
                        .unwrap_or_else(|p| {
                            let what = p
                                .downcast_ref::<String>()
                                .cloned()
                                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                                .unwrap_or_else(|| "panic".into());
                            Err(anyhow::anyhow!("panicked: {what}"))
                        });
                let outcome = outcome.and_then(|r| {
                    if let Some(f) = fingerprint {
                        write_cache(&cache_dir, &keys[i], f, &cell.config, &r)?;
                    }
                    Ok(r)
                });
                if let Err(e) = &outcome {
                    bar.println(format!("FAILED {id}: {e:#}"));
                }
                bar.inc(1);
                if let Ok(mut d) = done.lock() {
                    d.push((i, id, outcome.map_err(|e| format!("{e:#}"))));
                }
            });
        }
    });
    bar.finish_and_clear();
    let mut failed = Vec::new();
    let mut ran = 0;
    let done = done.into_inner().unwrap_or_else(|p| p.into_inner());
    for (i, id, outcome) in done {
        match outcome {
            Ok(r) => {
                for (j, key) in keys.iter().enumerate() {
                    if *key == keys[i] && selected[j] && results[j].is_none() {
                        results[j] = Some(r.clone());
                        ran += 1;
                    }
                }
            }
            Err(e) => failed.push((id, e)),
        }
    }
    failed.sort();
    Ok(Outcome {
        results,
        ran,
        cached,
        failed,
        wall_s: start.elapsed().as_secs_f64(),
    })
}
