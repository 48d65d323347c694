//! What a worker's clock record says it spent: computing, waiting, communicating. The three are
//! disjoint parts of the clock for every strategy whose workers keep a clock (RNA's compute side
//! runs beside its rounds, and AD-PSGD's workers keep no common clock, so they are left out), and
//! a strategy whose workers idle records that as waiting, so that `wait_share` compares across
//! strategies.

use concord::engine::metrics::IterRecord;

mod common;
use common::{config_with, SMALL_CNN};

fn records(strategy: &str, more: &[&str]) -> Vec<Vec<IterRecord>> {
    let list = format!("strategies=[\"{strategy}\"]");
    let mut sets = vec![list.as_str(), "iterations=30", "optimizer.momentum=0"];
    sets.extend(more);
    let cfg = config_with("default.toml", &sets);
    let asm = concord::registry().compose(&cfg).unwrap();
    concord::engine::run(&cfg, &asm, Default::default())
        .unwrap()
        .worker_records
}

#[test]
fn compute_wait_and_communication_are_disjoint_parts_of_a_clock() {
    let mut cases: Vec<(&str, Vec<&str>)> = [
        "bsp",
        "ssp",
        "lb-bsp",
        "flexrr",
        "elastic-ps",
        "allreduce",
        "pipedream",
        "gpipe",
        "fela",
    ]
    .iter()
    .map(|&s| (s, vec!["workers=4"]))
    .collect();
    cases.push(("fela-mp", SMALL_CNN.to_vec()));
    cases.push(("fela-hp", SMALL_CNN.to_vec()));
    for (strategy, more) in cases {
        let mut waited = 0.0;
        for (w, recs) in records(strategy, &more).iter().enumerate() {
            for r in recs {
                let clock = r.end_s - r.start_s;
                let parts = r.compute_s + r.wait_s + r.comm_s;
                assert!(
                    parts <= clock * (1.0 + 1e-9) + 1e-12,
                    "{strategy}: worker {w} clock {}: compute {} + wait {} + comm {} > {clock}",
                    r.clock,
                    r.compute_s,
                    r.wait_s,
                    r.comm_s
                );
                waited += r.wait_s;
            }
        }
        // These jobs have their workers wait (a barrier, a slack, a bubble, a token): one that
        // recorded none counted its idle time nowhere. A ring's members (allreduce, and the
        // pipelines' one replicated stage here) count waiting for a peer as the ring's time.
        if !["allreduce", "pipedream", "gpipe"].contains(&strategy) {
            assert!(waited > 0.0, "{strategy} records no wait");
        }
    }
}
