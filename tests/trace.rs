//! Timelines: `trace = "full" | "sampled" | "off"`, kept in memory or streamed to the run
//! folder while the run goes; whatever the mode, the run's results are the same.

mod common;

use concord::engine::config::RunConfig;
use concord::engine::ids::RoleId;
use concord::engine::model::ModelConfig;
use concord::engine::output::write_run_folder;
use concord::engine::run::{RunOptions, RunResult};
use concord::engine::trace::{Sampling, TraceMode};
use std::collections::BTreeMap;
use std::path::Path;

fn run(cfg: &RunConfig, trace_dir: Option<&Path>) -> RunResult {
    let asm = concord::registry().compose(cfg).expect("composes");
    let options = RunOptions {
        trace_dir: trace_dir.map(Path::to_path_buf),
        record_reads: true,
        ..RunOptions::default()
    };
    concord::engine::run(cfg, &asm, options).expect("runs")
}

fn with_trace(cfg: &RunConfig, trace: TraceMode) -> RunConfig {
    RunConfig {
        trace,
        ..cfg.clone()
    }
}

/// A real model under a straggler pattern: spans of every kind, results that depend on timing.
fn real() -> RunConfig {
    RunConfig {
        stragglers: vec![common::straggler(
            r#"pattern = "slow-worker"
delay = 1.0"#,
        )],
        ..common::on_slow_devices(common::small(4, 16, 12))
    }
}

/// Throughput mode (no math): many workers and clocks stay cheap.
fn profile(workers: u32, iterations: u64) -> RunConfig {
    RunConfig {
        workers,
        servers: 4,
        iterations,
        eval_every: iterations,
        model: ModelConfig::Profile {
            name: "resnet-32".into(),
        },
        ..RunConfig::default()
    }
}

/// The files of a folder, by name, with their bytes; empty when the folder does not exist.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    entries
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

fn events_in(doc: &[u8]) -> Vec<serde_json::Value> {
    let doc: serde_json::Value = serde_json::from_slice(doc).expect("a trace file is JSON");
    doc["traceEvents"].as_array().expect("traceEvents").clone()
}

fn event_count(r: &RunResult) -> usize {
    r.traces.iter().map(|(_, e)| e.len()).sum()
}

#[test]
fn off_keeps_no_events_and_writes_no_trace_files() {
    let cfg = with_trace(&real(), TraceMode::Off);
    let in_memory = run(&cfg, None);
    assert!(in_memory.traces.is_empty(), "{:?}", in_memory.traces);
    let dir = tempfile::tempdir().unwrap();
    let streamed = run(&cfg, Some(&dir.path().join("trace")));
    assert!(streamed.traces.is_empty());
    write_run_folder(dir.path(), &streamed).unwrap();
    assert!(dir.path().join("metrics.jsonl").exists());
    assert!(
        files(&dir.path().join("trace")).is_empty(),
        "no trace files with trace = off"
    );
}

#[test]
fn full_streamed_files_hold_the_same_events_as_the_in_memory_path() {
    let cfg = real();
    let memory_dir = tempfile::tempdir().unwrap();
    let in_memory = run(&cfg, None);
    assert_eq!(
        in_memory.traces.len(),
        4 + 2 + 1,
        "every role has a timeline"
    );
    write_run_folder(memory_dir.path(), &in_memory).unwrap();

    let stream_dir = tempfile::tempdir().unwrap();
    let streamed = run(&cfg, Some(&stream_dir.path().join("trace")));
    assert!(
        streamed.traces.is_empty(),
        "streamed timelines are not also kept"
    );
    write_run_folder(stream_dir.path(), &streamed).unwrap();

    let expected = files(&memory_dir.path().join("trace"));
    let got = files(&stream_dir.path().join("trace"));
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>(),
        "one file per role, nothing left half-written"
    );
    for (role, events) in &in_memory.traces {
        let name = format!("{}.json", role.label());
        let parsed = events_in(&got[&name]);
        assert_eq!(parsed.len(), events.len(), "{name}");
        for (p, e) in parsed.iter().zip(events) {
            assert_eq!(p["name"], e.name.as_str());
            assert_eq!(p["cat"], e.category.as_str());
            assert_eq!(p["tid"], role.label().as_str());
            let ts = p["ts"].as_f64().unwrap();
            assert!(
                (ts - e.start_s * 1e6).abs() <= 1e-9 * ts.abs().max(1.0),
                "{ts} {e:?}"
            );
        }
        assert_eq!(got[&name], expected[&name], "{name}: the same bytes");
    }
    assert!(event_count(&in_memory) > 12 * 4 * 3, "spans of every clock");
}

#[test]
fn sampled_keeps_a_bounded_number_of_events_whatever_the_iterations() {
    let short = run(&with_trace(&profile(64, 20), TraceMode::Sampled), None);
    let long_cfg = profile(64, 400);
    let long = run(&with_trace(&long_cfg, TraceMode::Sampled), None);
    let full = run(&long_cfg, None);
    let roles: Vec<RoleId> = long.traces.iter().map(|(r, _)| *r).collect();
    let sample = Sampling::new(64, 4, 400);
    assert_eq!(roles.len(), 8 + 4 + 1);
    assert!(roles.iter().all(|&r| sample.traces(r)), "{roles:?}");
    let (short, long_n) = (event_count(&short), event_count(&long));
    assert!(long_n <= Sampling::max_events());
    assert!(
        long_n.abs_diff(short) * 100 <= short,
        "about the same clocks' worth of events for 20 and 400 iterations: {short}, {long_n}"
    );
    assert!(event_count(&full) > 10 * long_n);
    // A worker computes once per clock: its sampled timeline holds the 8 sampled clocks' steps.
    for (role, events) in &long.traces {
        if let RoleId::Worker(_) = role {
            let steps = events.iter().filter(|e| e.category == "compute").count();
            assert_eq!(steps, sample.clocks().len(), "{role}");
        }
    }
}

#[test]
fn sampled_streamed_files_match_the_sampled_timelines_in_memory() {
    let cfg = with_trace(&profile(32, 30), TraceMode::Sampled);
    let in_memory = run(&cfg, None);
    let dir = tempfile::tempdir().unwrap();
    run(&cfg, Some(dir.path()));
    let got = files(dir.path());
    assert_eq!(got.len(), in_memory.traces.len());
    for (role, events) in &in_memory.traces {
        let parsed = events_in(&got[&format!("{}.json", role.label())]);
        assert_eq!(parsed.len(), events.len(), "{role}");
    }
}

/// What must not depend on the trace mode: everything but the wall-clock readings.
fn results(r: &RunResult) -> String {
    let mut summary = r.summary.clone();
    summary.wall_time_s = 0.0;
    let mut rows = r.rows.clone();
    for row in &mut rows {
        row.wall_s = 0.0;
    }
    let mut records = r.worker_records.clone();
    for rec in records.iter_mut().flatten() {
        rec.wall_s = 0.0;
    }
    format!(
        "{}\n{}\n{}\n{:?}\n{:?}",
        serde_json::to_string(&summary).unwrap(),
        serde_json::to_string(&rows).unwrap(),
        serde_json::to_string(&records).unwrap(),
        r.params,
        r.reads
    )
}

#[test]
fn results_are_identical_across_the_three_modes() {
    for cfg in [real(), profile(16, 10)] {
        let full = results(&run(&cfg, None));
        let dir = tempfile::tempdir().unwrap();
        for mode in [TraceMode::Full, TraceMode::Sampled, TraceMode::Off] {
            let cfg = with_trace(&cfg, mode);
            assert_eq!(results(&run(&cfg, None)), full, "{mode:?} in memory");
            let streamed = run(&cfg, Some(&dir.path().join(format!("{mode:?}"))));
            assert_eq!(results(&streamed), full, "{mode:?} streamed");
        }
    }
}

#[test]
fn the_command_line_streams_timelines_into_the_run_folder_and_can_turn_them_off() {
    let dir = tempfile::tempdir().unwrap();
    let train = |out: &str, trace: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_concord"))
            .args([
                "train",
                "--quiet",
                "--set",
                "iterations=3",
                "--set",
                "workers=3",
            ])
            .args(["--set", &format!("trace=\"{trace}\""), "--out", out])
            .current_dir(dir.path())
            .output()
            .expect("runs the binary");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    train("full", "full");
    let traces = files(&dir.path().join("full/trace"));
    let names: Vec<&str> = traces.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "coordinator.json",
            "server-0.json",
            "server-1.json",
            "worker-0.json",
            "worker-1.json",
            "worker-2.json"
        ]
    );
    assert!(!events_in(&traces["worker-2.json"]).is_empty());
    let resolved = std::fs::read_to_string(dir.path().join("full/config.toml")).unwrap();
    assert!(resolved.contains("trace = \"full\""), "{resolved}");
    train("off", "off");
    assert!(dir.path().join("off/summary.json").exists());
    assert!(!dir.path().join("off/trace").exists());
}

/// In real time a parameter server's work is its math's real time: booked as its compute and on
/// its timeline, not only what `sim` would charge for it.
#[test]
fn a_real_time_server_books_and_traces_the_time_its_math_took() {
    let cfg = RunConfig {
        runtime: concord::engine::config::RuntimeKind::Wall,
        trace: TraceMode::Full,
        ..common::small(2, 16, 6)
    };
    let r = run(&cfg, None);
    let applies: Vec<_> = r
        .traces
        .iter()
        .filter(|(role, _)| matches!(role, RoleId::Server(_)))
        .flat_map(|(_, events)| events.iter().filter(|e| e.name == "apply"))
        .collect();
    // Every server applies once per clock.
    assert_eq!(applies.len(), 6 * cfg.servers as usize, "{applies:?}");
    assert!(applies.iter().all(|e| e.end_s > e.start_s), "{applies:?}");
}
