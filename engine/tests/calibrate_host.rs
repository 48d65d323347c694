//! Calibrating this machine: the fit on real models' cost sheets, the measurements' shapes, and
//! the device profile they make.

use concord_engine::calibrate::host::{self, HostModel, HostProfile, Loopback, Repeats};
use concord_engine::calibrate::{self, Measurement};
use concord_engine::cluster::{Cluster, ClusterConfig, DeviceProfile, WakeCurve};
use concord_engine::config::RunConfig;
use concord_engine::layer_model::{LayerRates, Precision};
use concord_engine::model::ModelConfig;
use concord_engine::optim::OptimizerConfig;
use std::collections::BTreeMap;
use std::sync::Arc;

fn sgd() -> OptimizerConfig {
    RunConfig::default().optimizer
}

/// The default config's model (32-64-10 on the teacher data) and the larger MLP.
fn models() -> Vec<HostModel> {
    vec![
        HostModel::from_config("default", &RunConfig::default()).unwrap(),
        HostModel::mlp("large", 784, &[1024, 1024], 10, sgd(), 8).unwrap(),
    ]
}

/// Step times the per-layer model itself gives with `truth`, for `models` at 8 to 256.
fn synthetic(truth: &LayerRates, models: &[HostModel]) -> Vec<Measurement> {
    let mut out = Vec::new();
    for m in models {
        let sheet = Arc::new(m.layers());
        for batch in host::batches(false) {
            let ms = 1e3 * truth.step_seconds(&sheet, f64::from(batch));
            out.push(Measurement::of_sheet(
                &m.name,
                Precision::Fp32,
                batch,
                ms,
                sheet.clone(),
            ));
        }
    }
    out
}

#[test]
fn the_fit_recovers_a_cpus_rates_from_real_models_cost_sheets() {
    // A CPU core: 80 GFLOP/s matrix products reached half at batch 24, 5 GB/s, 3 µs an
    // operation; the host side (dispatch) below the work, as on a CPU where one thread does both.
    let truth = LayerRates {
        conv3x3_tflops: 0.08,
        conv_tflops: 0.08,
        pointwise_tflops: 0.08,
        matmul_tflops: 0.08,
        half_batch: 24.0,
        memory_tbps: 0.005,
        kernel_us: 3.0,
        dispatch_us: 0.5,
        step_us: 0.0,
    };
    let points = synthetic(&truth, &models());
    let got = host::fit(&points).expect("fp32 points");
    // Only matrix products are measured (MLPs), and the dispatch side never binds: the
    // identifiable rates are these.
    for (name, want, have) in [
        ("matmul_tflops", truth.matmul_tflops, got.matmul_tflops),
        ("half_batch", truth.half_batch, got.half_batch),
        ("memory_tbps", truth.memory_tbps, got.memory_tbps),
        ("kernel_us", truth.kernel_us, got.kernel_us),
    ] {
        assert!(
            (have / want - 1.0).abs() < 0.02,
            "{name}: fitted {have}, generated with {want}"
        );
    }
    // MLPs have no convolutions: both kinds are rated as matrix products, as a CPU runs them.
    assert_eq!(
        (got.conv3x3_tflops, got.conv_tflops),
        (got.matmul_tflops, got.matmul_tflops)
    );
    let mut model = concord_engine::layer_model::LayerModel::default();
    model.set(Precision::Fp32, got);
    for p in &points {
        let pred = calibrate::predict_ms(&model, p).unwrap();
        let err = calibrate::error_pct(pred, p.ms_per_step);
        assert!(err.abs() < 0.5, "{} b{}: {err:+.2}%", p.model, p.batch);
    }
}

#[test]
fn a_cpu_fit_may_go_below_a_gpus_floors() {
    // 2 GFLOP/s and 1 GB/s are below the 10 GFLOP/s and 10 GB/s floors of a GPU fit.
    let truth = LayerRates {
        conv3x3_tflops: 0.002,
        conv_tflops: 0.002,
        pointwise_tflops: 0.002,
        matmul_tflops: 0.002,
        half_batch: 4.0,
        memory_tbps: 0.001,
        kernel_us: 10.0,
        dispatch_us: 0.5,
        step_us: 0.0,
    };
    let points = synthetic(&truth, &models());
    let got = host::fit(&points).unwrap();
    assert!((got.matmul_tflops / 0.002 - 1.0).abs() < 0.02, "{got:?}");
    let gpu = calibrate::calibrate(&points, "h200");
    assert!(gpu.rates(Precision::Fp32).unwrap().matmul_tflops >= 0.01);
}

#[test]
fn configs_without_layers_to_fit_are_refused_naming_why() {
    let cfg = RunConfig {
        model: ModelConfig::Profile {
            name: "vgg16".into(),
        },
        ..RunConfig::default()
    };
    let e = HostModel::from_config("vgg.toml", &cfg)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("vgg.toml") && e.contains("throughput-mode"),
        "{e}"
    );
}

#[test]
fn steps_and_updates_are_measured_for_every_batch_and_parameter() {
    let model = &models()[0];
    let repeats = Repeats {
        warmup: 1,
        min_runs: 3,
        min_seconds: 0.0,
        max_runs: 3,
        max_seconds: 60.0,
    };
    let mut sweep = host::CacheSweep::for_this_machine();
    let mut steps =
        host::measure_steps(std::slice::from_ref(model), &[8, 32], &repeats, 1, 0).unwrap();
    assert_eq!(steps.len(), 1);
    let steps = steps.remove(0);
    assert_eq!(steps.iter().map(|p| p.batch).collect::<Vec<_>>(), [8, 32]);
    for p in &steps {
        assert_eq!(p.runs, 3);
        assert!(p.seconds > 0.0 && p.seconds.is_finite(), "{p:?}");
        assert_eq!(
            p.flops,
            model.training_flops_per_sample() * f64::from(p.batch)
        );
    }
    // 32-64-10: 32·64 + 64 + 64·10 + 10 parameters.
    let update = host::measure_update(model, &repeats, &mut sweep);
    assert_eq!(update.elems, 32 * 64 + 64 + 64 * 10 + 10);
    assert_eq!(update.pushes, 8);
    assert_eq!(update.apply_flops_per_elem, 4.0);
    assert_eq!(
        update.clock_flops(),
        (2.0 * 8.0 + 4.0) * update.elems as f64
    );
    assert!(update.clock_gflops() > 0.0 && update.clock_gflops().is_finite());
    // A message of every parameter, packed and unpacked.
    let copy = host::measure_message_copy(model, &repeats);
    assert_eq!(copy.bytes, 4 * update.elems as u64);
    assert!(
        copy.pack_seconds > 0.0 && copy.unpack_seconds > 0.0,
        "{copy:?}"
    );
    let mean = 0.5 * (copy.pack_seconds + copy.unpack_seconds);
    assert!((copy.gbps() - copy.bytes as f64 * 8.0 / mean / 1e9).abs() < 1e-9);
    let points = host::measurements(model, &steps);
    assert_eq!(points.len(), 2);
    assert_eq!(points[1].ms_per_step, steps[1].seconds * 1e3);
    assert_eq!(*points[1].layers, model.layers());
}

#[test]
fn loopback_streams_every_byte_and_times_the_round_trips() {
    let l = host::loopback(3 << 20, 20).unwrap();
    assert_eq!((l.stream_bytes, l.round_trips), (3 << 20, 20));
    assert!(l.gbps > 0.0 && l.gbps.is_finite(), "{l:?}");
    assert!(l.latency_us > 0.0 && l.latency_us.is_finite(), "{l:?}");
}

/// Steps timed while other threads step beside them (the workers of a job's other processes on
/// this machine): measured as many times as asked, and every thread beside stops with the
/// measurement (the call returns).
#[test]
fn steps_are_timed_with_threads_stepping_beside_them() {
    let model = &models()[0];
    let repeats = Repeats {
        warmup: 1,
        min_runs: 4,
        min_seconds: 0.0,
        max_runs: 4,
        max_seconds: 60.0,
    };
    let steps = host::measure_steps(std::slice::from_ref(model), &[16], &repeats, 1, 2).unwrap();
    assert_eq!(steps.len(), 1);
    let step = &steps[0][0];
    assert_eq!((step.batch, step.runs), (16, 4));
    assert!(step.seconds > 0.0 && step.seconds.is_finite());
}

/// Steps timed in turns over several models: every (model, batch) point gets its share of the
/// runs in every turn, and the points come back per model in the order asked.
#[test]
fn steps_timed_in_turns_give_every_point_its_runs_from_every_turn() {
    let models = [
        models().remove(0),
        HostModel::mlp("tiny", 16, &[8], 4, sgd(), 8).unwrap(),
    ];
    let repeats = Repeats {
        warmup: 3,
        min_runs: 6,
        min_seconds: 0.0,
        max_runs: 6,
        max_seconds: 60.0,
    };
    let steps = host::measure_steps(&models, &[8, 16], &repeats, 3, 0).unwrap();
    assert_eq!(steps.len(), 2);
    for (model, points) in models.iter().zip(&steps) {
        let got: Vec<_> = points
            .iter()
            .map(|p| (p.model.as_str(), p.batch, p.runs))
            .collect();
        assert_eq!(
            got,
            [(model.name.as_str(), 8, 6), (model.name.as_str(), 16, 6)]
        );
        assert!(points
            .iter()
            .all(|p| p.seconds > 0.0 && p.seconds.is_finite()));
    }
}

fn profile() -> HostProfile {
    HostProfile {
        name: "host".into(),
        threads: 1,
        processes: 1,
        processors: 2,
        rates: LayerRates {
            conv3x3_tflops: 1.2,
            conv_tflops: 1.5,
            pointwise_tflops: 0.085,
            matmul_tflops: 0.085,
            half_batch: 120.0,
            memory_tbps: 0.004,
            kernel_us: 0.001,
            dispatch_us: 4.5,
            step_us: 0.0,
        },
        update_gflops: 5.8,
        loopback: Loopback {
            stream_bytes: 256 << 20,
            gbps: 14.1,
            socket_gbps: 33.6,
            round_trips: 2000,
            latency_us: 10.4,
            exchange_gbps: Some(6.0),
        },
        message_copy_gbps: 42.0,
        message_us: 3.5,
        wake: Some(WakeCurve {
            idle_us: vec![100.0, 1000.0],
            extra_us: vec![4.0, 48.5],
        }),
        memory_gib: 23.6,
    }
}

#[test]
fn the_profile_toml_is_a_device_a_config_accepts() {
    let p = profile();
    let text = p.toml();
    let table: toml::Table = text.parse().unwrap();
    let device: DeviceProfile = table["cluster"]["devices"]["host"]
        .clone()
        .try_into()
        .unwrap();
    let cfg = ClusterConfig {
        default_device: "host".into(),
        devices: BTreeMap::from([("host".to_string(), device.clone())]),
        ..ClusterConfig::default()
    };
    Cluster::resolve(&cfg, 2, 1).unwrap();
    // Charged as measured: work by FLOPs at the update rate, steps by the fitted layers, the NIC
    // and latency a role sees through the process runtime's transport (not the bare socket's
    // bandwidth).
    assert!(
        (device.work_seconds(5.8e9) - 1.0).abs() < 1e-3,
        "{device:?}"
    );
    let rates = device.layer_rates().unwrap();
    assert_eq!(*rates, p.rates);
    assert_eq!(device.nic_gbps, 14.1);
    // 6 Gbit/s each way of an exchange is nearer half of 14.1 than all of it.
    assert_eq!(device.nic_duplex, concord_engine::cluster::Duplex::Half);
    assert_eq!(device.latency_us, 10.4);
    assert_eq!(device.message_copy_bytes_per_s(), Some(42.0e9 / 8.0));
    assert_eq!(device.message_us, Some(3.5));
    assert_eq!(device.wake, p.wake);
    assert_eq!(device.memory_gib, 23.6);
    assert_eq!(device.half_saturation_batch, 120.0);
    assert!(text.contains("backend = \"cpu\""), "{text}");
}

#[test]
fn a_job_of_several_processes_here_gets_a_host_its_machines_share() {
    // One process: the profile is a device only.
    let alone = profile();
    let table: toml::Table = alone.toml().parse().unwrap();
    assert!(table["cluster"].get("hosts").is_none());
    assert_eq!(alone.workers_at_once(), 1);

    // Four processes on two processors: steps were timed two at a time, and the config puts the
    // four machines on one host of two processors.
    let four = HostProfile {
        processes: 4,
        ..profile()
    };
    assert_eq!(four.workers_at_once(), 2);
    let text = four.toml();
    assert!(
        text.contains("steps timed as 2 processes' workers take them at once"),
        "{text}"
    );
    let table: toml::Table = text.parse().unwrap();
    let cluster: ClusterConfig = toml::Value::Table(
        [
            ("default_device".to_string(), toml::Value::from("host")),
            ("devices".to_string(), table["cluster"]["devices"].clone()),
            ("hosts".to_string(), table["cluster"]["hosts"].clone()),
        ]
        .into_iter()
        .collect(),
    )
    .try_into()
    .unwrap();
    let host = &cluster.hosts["host"];
    assert_eq!(host.processors, 2);
    assert_eq!(host.machines, Some(vec![0, 1, 2, 3]));
    // Their transfers copy on the processors they share: an exchange at 6 Gbit/s each way
    // against 14.1 alone takes 2.35 times as long, so on two processors each end holds the
    // whole of one (at most), and the NIC takes both ways at once.
    let device = &cluster.devices["host"];
    assert_eq!(device.loopback_share, Some(1.0));
    assert_eq!(device.nic_duplex, concord_engine::cluster::Duplex::Full);
    assert!(text.contains("loopback_share = 1.0"), "{text}");
    // One process alone has no host, so no share: its exchange is the duplex's.
    assert_eq!(alone.device().loopback_share, None);
    let quicker = HostProfile {
        loopback: Loopback {
            exchange_gbps: Some(11.0),
            ..profile().loopback
        },
        ..four
    };
    // 14.1 / 11 = 1.28 times as long: 0.64 of a processor an end.
    let share = quicker.device().loopback_share.unwrap();
    assert!((share - 14.1 / 11.0 / 2.0).abs() < 1e-12, "{share}");
    let resolved = Cluster::resolve(&cluster, 4, 4).unwrap();
    assert_eq!(resolved.host_of, vec![Some(0); 4]);
}
