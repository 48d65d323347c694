//! SSP: every read reflects all updates through clock c − s − 1, and slack absorbs stragglers.

mod common;

use common::*;

fn slow_worker(cfg: &mut concord::engine::RunConfig) {
    // FlexRR's Slow Worker pattern at 200% delay, made frequent so that 60 iterations see many.
    cfg.stragglers = vec![straggler(
        "pattern = \"slow-worker\"\ndelay = 2.0\nprobability = 0.05",
    )];
}

fn ssp(slack: u64) -> concord::engine::RunConfig {
    let mut cfg = on_slow_devices(small(8, 16, 60));
    cfg.strategies = vec!["ssp".into()];
    cfg.strategy.insert(
        "ssp".into(),
        toml::from_str(&format!("slack = {slack}")).unwrap(),
    );
    slow_worker(&mut cfg);
    cfg
}

#[test]
fn no_read_is_staler_than_the_bound() {
    for slack in [0u64, 1, 3] {
        let r = run(&ssp(slack));
        assert!(!r.reads.is_empty());
        let mut stale_reads = 0;
        for read in &r.reads {
            let required = read.clock as i64 - slack as i64 - 1;
            assert_eq!(read.min_version, Some(required));
            assert!(
                read.version >= required,
                "slack {slack}: {read:?} violates the bound"
            );
            if read.version < read.clock as i64 - 1 {
                stale_reads += 1;
            }
        }
        // Worker-side records agree, and the clock spread never exceeds the slack.
        for records in &r.worker_records {
            for rec in records {
                assert!(rec.version_read >= rec.clock as i64 - slack as i64 - 1);
            }
        }
        let ends: Vec<Vec<f64>> = r
            .worker_records
            .iter()
            .map(|w| w.iter().map(|x| x.end_s).collect())
            .collect();
        for (w, mine) in ends.iter().enumerate() {
            for (c, &t) in mine.iter().enumerate() {
                // When worker w finishes clock c, every other worker has finished clock c - slack - 1.
                if let Some(back) = c.checked_sub(slack as usize + 1) {
                    for (v, theirs) in ends.iter().enumerate() {
                        assert!(
                            theirs[back] <= t + 1e-12,
                            "worker {w} clock {c} ran more than {slack} ahead of worker {v}"
                        );
                    }
                }
            }
        }
        if slack > 0 {
            assert!(
                stale_reads > 0,
                "with slack {slack} some reads should use the slack"
            );
        } else {
            assert_eq!(stale_reads, 0);
        }
    }
}

#[test]
fn ssp_is_faster_than_bsp_under_the_slow_worker_pattern() {
    let mut bsp = on_slow_devices(small(8, 16, 60));
    slow_worker(&mut bsp);
    let bsp = run(&bsp).summary;
    let ssp = run(&ssp(1)).summary;
    assert!(
        ssp.time_per_iteration_s < bsp.time_per_iteration_s,
        "SSP {} s/it should beat BSP {} s/it",
        ssp.time_per_iteration_s,
        bsp.time_per_iteration_s
    );
}

#[test]
fn asp_never_waits_for_freshness() {
    let mut cfg = on_slow_devices(small(4, 16, 20));
    cfg.strategies = vec!["asp".into()];
    let r = run(&cfg);
    assert!(r.reads.iter().all(|x| x.min_version.is_none()));
    assert!(r.summary.final_loss.is_finite());
}

/// The servers keep their record of reads only when the run asks for it, and keeping it changes
/// nothing else: the same parameters and run time to the bit. Each worker reads every server
/// once a clock.
#[test]
fn reads_are_recorded_only_when_asked_and_change_nothing_else() {
    use concord::engine::run::RunOptions;
    let cfg = ssp(1);
    let asm = concord::registry().compose(&cfg).expect("composes");
    let plain = concord::engine::run(&cfg, &asm, RunOptions::default()).expect("runs");
    let recorded = run(&cfg);
    assert!(plain.reads.is_empty());
    let reads_a_clock = (cfg.workers * cfg.servers) as usize;
    assert_eq!(
        recorded.reads.len(),
        reads_a_clock * cfg.iterations as usize
    );
    assert_eq!(
        concord_test_support::param_bits(&plain),
        concord_test_support::param_bits(&recorded)
    );
    assert_eq!(
        plain.summary.run_time_s.to_bits(),
        recorded.summary.run_time_s.to_bits()
    );
}
