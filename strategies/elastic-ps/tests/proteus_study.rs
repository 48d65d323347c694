//! The cost study's accounting on tiny hand-made traces: hourly billing at the hour's start
//! price, refunds on eviction, the pro rata last hour, and the work done adding up to the job.

use concord_elastic_ps::proteus::{
    AppParams, InstanceType, Market, PriceTrace, Scheme, Study, StudyParams,
};

const H: f64 = 3600.0;
/// Jobs start 30 h into a 100 h trace (the first 25 h train β and the MTTF).
const START: f64 = 30.0 * H;

/// One type `a` (4 vCPUs, on-demand $1/h) whose spot price follows `points` after a flat
/// $0.25 history.
fn market(points: &[(f64, f64)]) -> Market {
    let mut all = vec![(0.0, 0.25)];
    all.extend(points.iter().map(|&(t, p)| (START + t, p)));
    all.push((100.0 * H, 0.25));
    let types = vec![InstanceType {
        name: "a".into(),
        vcpus: 4,
        on_demand: 1.0,
    }];
    Market::new(types, vec![PriceTrace::new(all).unwrap()]).unwrap()
}

/// Reference 2 × `a`; AgileML schemes hold 1 of them on demand.
fn params(hours: f64) -> StudyParams {
    StudyParams {
        hours,
        reference_type: "a".into(),
        reference_count: 2,
        reliable_count: 1,
        app: AppParams {
            phi: 1.0,
            sigma_min: 1.0,
            lambda_min: 2.0,
        },
        starts: 4,
        ..StudyParams::default()
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9 * (1.0 + b.abs())
}

#[test]
fn on_demand_costs_the_reference_with_a_pro_rata_last_hour() {
    let study = Study::new(market(&[]), params(1.5)).unwrap();
    let o = study.run_job(Scheme::OnDemand, START).unwrap();
    // 2 instances × $1/h × 1.5 h: the half hour is charged by half.
    assert!(close(o.cost, 3.0), "{o:?}");
    assert!(close(study.reference_cost(), 3.0));
    assert!(close(o.runtime_h, 1.5));
    assert!(close(o.on_demand_h, 3.0));
    assert_eq!((o.spot_h, o.free_h, o.evictions), (0.0, 0.0, 0));
    let s = study.summarize(Scheme::OnDemand).unwrap();
    assert!(close(s.cost_relative, 1.0));
}

#[test]
fn spot_hours_are_billed_at_the_price_of_their_start() {
    // The price doubles 20 minutes in but stays below the bid (on-demand): no eviction.
    let study = Study::new(market(&[(1200.0, 0.5)]), params(2.25)).unwrap();
    let o = study.run_job(Scheme::StandardAgileml, START).unwrap();
    // Work 8 vCPUs × 2.25 h = 18. 1 reliable + 2 spot (the reference's 8 vCPUs in spot; at
    // 2:1 the reliable one runs workers too): 12 vCPUs, done in 1.5 h. Reliable: $1 + $0.5.
    // Spot: the first hour at its start price 2 × $0.25, then half an hour at 2 × $0.5.
    assert!(close(o.runtime_h, 1.5), "{o:?}");
    assert!(close(o.cost, 1.5 + 0.5 + 0.5), "{o:?}");
    assert!(close(o.on_demand_h, 1.5) && close(o.spot_h, 3.0));
    assert_eq!((o.free_h, o.evictions), (0.0, 0));
}

#[test]
fn an_eviction_refunds_its_hour_and_costs_lambda_then_sigma() {
    // The price jumps above on-demand from 30 to 40 minutes.
    let study = Study::new(market(&[(1800.0, 2.0), (2400.0, 0.25)]), params(2.0)).unwrap();
    let o = study.run_job(Scheme::StandardAgileml, START).unwrap();
    // Work 2 × 4 × 2 = 16 vCPU-h. 0–30 min at 12/h: 6. 30–32 min: λ, nothing. 32–40 min: the
    // reliable one alone (4/h): 8/15. 40 min: a new spot allocation, σ until 41 min. From
    // 41 min at 12/h until the rest is done.
    let end_min = 41.0 + (16.0 - 6.0 - 8.0 / 15.0) / 12.0 * 60.0;
    assert!(close(o.runtime_h * 60.0, end_min), "{o:?} vs {end_min} min");
    assert_eq!(o.evictions, 1);
    // The evicted half hour of 2 instances is free.
    assert!(close(o.free_h, 1.0));
    // Reliable: one hour, then the rest pro rata at $1. Second spot allocation from 40 min,
    // its first hour not over: pro rata at 2 × $0.25.
    let cost = 1.0 + (end_min - 60.0) / 60.0 + 0.5 * (end_min - 40.0) / 60.0;
    assert!(close(o.cost, cost), "{} vs {cost}", o.cost);
    assert!(close(o.on_demand_h, end_min / 60.0));
    assert!(close(o.spot_h, 2.0 * (end_min - 40.0) / 60.0));
}

#[test]
fn checkpointing_rolls_back_to_the_last_checkpoint_on_eviction() {
    let mut p = params(2.0);
    p.checkpoint_write_min = 0.1;
    p.restart_min = 5.0;
    let study = Study::new(market(&[(1800.0, 2.0), (2400.0, 0.25)]), p).unwrap();
    // No rise above on-demand in the 25 h of training: MTTF = 25 h; τ = √(2 · 6 s · 25 h).
    assert!(close(study.mttf_h, 25.0));
    let tau = (2.0 * 6.0 * 25.0 * H).sqrt();
    assert!(close(study.checkpoint_interval_s(), tau));
    let o = study.run_job(Scheme::StandardCheckpoint, START).unwrap();
    // 2 spot instances (8 vCPUs). Progress τ, write 6 s (saving 8·τ), progress again until
    // the eviction at 30 min, which rolls back to the checkpoint. The price is back at 40 min
    // (after the 5 min restart): from there, τ of progress then 6 s of writing, repeatedly,
    // until the remaining work is done.
    assert!(tau + 6.0 < 1800.0 && 2.0 * tau + 6.0 > 1800.0);
    let mut left_s = 2.0 * H - tau; // seconds of full-rate progress still needed
    let mut t = 2400.0;
    while left_s > tau + 1e-9 {
        t += tau + 6.0;
        left_s -= tau;
    }
    t += left_s;
    assert!(close(o.runtime_h * H, t), "{} vs {t}", o.runtime_h * H);
    assert_eq!(o.evictions, 1);
    assert!(close(o.free_h, 2.0 * 0.5));
    // Second allocation from 40 min: whole hours at $0.25 × 2, the last pro rata.
    let hours = (t - 2400.0) / H;
    assert!(close(o.cost, 0.5 * hours), "{o:?}");
    assert!(close(o.spot_h, 2.0 * hours));
}

#[test]
fn every_scheme_does_the_whole_work_and_pays_for_what_it_used() {
    let study = Study::new(
        market(&[
            (1800.0, 2.0),
            (2400.0, 0.3),
            (4000.0, 0.26),
            (5000.0, 0.9),
            (6000.0, 0.27),
        ]),
        params(2.0),
    )
    .unwrap();
    for scheme in concord_elastic_ps::proteus::SCHEMES {
        let o = study.run_job(scheme, START).unwrap();
        // No scheme beats the reference footprint's speed by more than its largest footprint.
        assert!(o.runtime_h * 1.5 + 1e-9 >= 2.0, "{scheme}: {o:?}");
        // Instance-hours paid and free cover at least the work (vCPU-h / 4 per instance).
        let instance_h = o.on_demand_h + o.spot_h + o.free_h;
        assert!(instance_h * 4.0 + 1e-9 >= 16.0, "{scheme}: {o:?}");
        // Nothing costs more than on-demand per paid hour, and never less than the cheapest
        // spot price per paid spot hour.
        assert!(
            o.cost <= o.on_demand_h * 1.0 + o.spot_h * 2.0 + 1e-9,
            "{scheme}: {o:?}"
        );
        assert!(
            o.cost + 1e-9 >= o.on_demand_h + o.spot_h * 0.25,
            "{scheme}: {o:?}"
        );
    }
}

#[test]
fn bad_settings_are_named() {
    let mut p = params(2.0);
    p.reference_type = "zz".into();
    let e = Study::new(market(&[]), p).unwrap_err().to_string();
    assert!(e.contains("reference_type") && e.contains("zz"), "{e}");
    let e = Study::new(market(&[]), params(90.0))
        .unwrap_err()
        .to_string();
    assert!(e.contains("hours"), "{e}");
}
