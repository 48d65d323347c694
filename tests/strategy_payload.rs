//! A strategy's own messages carrying tensors (`Message::strategy_with`): the receiver gets the
//! body and the payload values back, the link traffic counts header + body + 4 bytes per element
//! (the body not at all when it rides in the header), the link model delays arrival by the
//! payload's size, and a body of the wrong type is an error naming its tag.

use concord::engine::cluster::{DeviceProfile, MachineGroup};
use concord::engine::config::RunConfig;
use concord::engine::message::HEADER_BYTES;
use concord::engine::prelude::*;
use concord::engine::run::{RunOptions, RunResult};
use std::sync::{Arc, Mutex};

/// A piece of content: the body is charged by its encoded size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Chunk {
    seq: u64,
    label: String,
    scale: f32,
}

impl StrategyMessage for Chunk {
    const TAG: &'static str = "payload-test.chunk";
}

/// Addressing only: the body rides in the fixed header, only the tensors are charged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Slice {
    seq: u64,
    offset: u64,
}

impl StrategyMessage for Slice {
    const TAG: &'static str = "payload-test.slice";
    const BODY_IN_HEADER: bool = true;
}

/// One message worker 0 sends to worker 1.
#[derive(Clone, Debug)]
enum Outgoing {
    Chunk(Chunk, Vec<Payload>),
    Slice(Slice, Vec<Payload>),
    /// A `Chunk`-tagged message whose body is not a `Chunk`.
    Malformed,
}

impl Outgoing {
    fn message(&self) -> Result<Message> {
        match self {
            Outgoing::Chunk(c, p) => Message::strategy_with(c, p.clone()),
            Outgoing::Slice(s, p) => Message::strategy_with(s, p.clone()),
            Outgoing::Malformed => Message::custom(Chunk::TAG, &"not a chunk"),
        }
    }

    /// What the wire should charge, computed here from the parts rather than by the engine.
    fn expected_wire_bytes(&self) -> u64 {
        let payload = |p: &[Payload]| p.iter().map(|p| 4 * p.elems()).sum::<u64>();
        match self {
            Outgoing::Chunk(c, p) => {
                let body = serde_json::to_vec(c).expect("encodes").len() as u64;
                HEADER_BYTES + body + payload(p)
            }
            Outgoing::Slice(_, p) => HEADER_BYTES + payload(p),
            Outgoing::Malformed => panic!("not sized"),
        }
    }
}

/// A decoded body.
#[derive(Clone, Debug, PartialEq)]
enum Body {
    Chunk(Chunk),
    Slice(Slice),
}

/// What worker 1 saw of one message.
#[derive(Clone, Debug)]
struct Received {
    from: RoleId,
    sent_at: f64,
    arrived_at: f64,
    body: Body,
    payloads: Vec<Payload>,
}

/// What the roles of a run recorded (a test-only window into the roles).
#[derive(Debug, Default)]
struct Log {
    /// Arrival times `send` predicted, in send order.
    predicted: Vec<f64>,
    received: Vec<Received>,
}

/// Worker 0 sends the plan to worker 1, which decodes every message; other workers idle.
struct ProbeWorker {
    id: WorkerId,
    plan: Arc<Vec<Outgoing>>,
    log: Arc<Mutex<Log>>,
}

#[async_trait]
impl Worker for ProbeWorker {
    async fn run(&mut self, ctx: &mut RoleContext) -> Result<WorkerReport> {
        match self.id {
            0 => {
                for item in self.plan.iter() {
                    let arrival = ctx.send(RoleId::Worker(1), item.message()?);
                    self.log.lock().expect("log").predicted.push(arrival);
                }
            }
            1 => {
                for _ in 0..self.plan.len() {
                    let env = ctx.recv().await?;
                    let arrived_at = ctx.now();
                    let body = if let Some(c) = env.msg.decode::<Chunk>()? {
                        Body::Chunk(c)
                    } else if let Some(s) = env.msg.decode::<Slice>()? {
                        Body::Slice(s)
                    } else {
                        return Err(unexpected(ctx, &env));
                    };
                    let Message::Custom(m) = env.msg else {
                        unreachable!("decoded as a strategy message");
                    };
                    self.log.lock().expect("log").received.push(Received {
                        from: env.from,
                        sent_at: env.sent_at,
                        arrived_at,
                        body,
                        payloads: m.payloads,
                    });
                }
            }
            _ => {}
        }
        Ok(WorkerReport::default())
    }
}

/// Fills the worker slot with [`ProbeWorker`]s running `plan`.
struct PayloadProbe {
    plan: Arc<Vec<Outgoing>>,
    log: Arc<Mutex<Log>>,
}

impl Strategy for PayloadProbe {
    fn name(&self) -> &'static str {
        "payload-probe"
    }
    fn summary(&self) -> &'static str {
        "test: worker 0 sends tensors to worker 1"
    }
    fn slots(&self) -> &'static [Slot] {
        &[Slot::Worker]
    }
    fn install(&self, _: Option<&toml::Value>, _: &RunConfig, asm: &mut Assembly) -> Result<()> {
        let (plan, log) = (self.plan.clone(), self.log.clone());
        asm.set_worker(move |_job, id| {
            Ok(ProbeWorker {
                id,
                plan: plan.clone(),
                log: log.clone(),
            })
        });
        Ok(())
    }
}

/// Two workers, one machine each (the default cluster of `cpu` machines), a tiny data set.
fn config() -> RunConfig {
    let mut cfg = RunConfig {
        workers: 2,
        servers: 1,
        batch: 4,
        iterations: 1,
        eval_every: 1,
        strategies: vec!["payload-probe".into()],
        ..RunConfig::default()
    };
    cfg.data = toml::from_str("kind = \"teacher\"\ntrain = 64\ntest = 16").expect("data");
    cfg
}

/// Runs `plan` under `cfg` with the probe strategy added to the project's registry.
fn run_plan(cfg: &RunConfig, plan: Vec<Outgoing>) -> Result<(RunResult, Log)> {
    let log = Arc::new(Mutex::new(Log::default()));
    let mut registry = concord::registry();
    registry.register(Arc::new(PayloadProbe {
        plan: Arc::new(plan),
        log: log.clone(),
    }))?;
    let asm = registry.compose(cfg)?;
    let result = concord::engine::run(cfg, &asm, RunOptions::default())?;
    let log = std::mem::take(&mut *log.lock().expect("log"));
    Ok((result, log))
}

fn values(n: usize) -> Vec<f32> {
    (0..n).map(|i| (i as f32) * 0.25 - 17.0).collect()
}

fn chunk(seq: u64, payloads: Vec<Payload>) -> Outgoing {
    Outgoing::Chunk(
        Chunk {
            seq,
            label: format!("chunk number {seq}"),
            scale: 0.5,
        },
        payloads,
    )
}

/// The NIC of the default device, bytes/s, and its one-way latency, s.
fn default_link() -> (f64, f64) {
    let d: DeviceProfile =
        DeviceProfile::builtins()[&RunConfig::default().cluster.default_device].clone();
    (d.nic_bytes_per_s(), d.latency_us * 1e-6)
}

/// One tick of simulated time (a tokio millisecond, dilated): the resolution of arrival times.
const TICK_S: f64 = 1e-3 / concord::engine::time::SIM_DILATION;

#[test]
fn tensors_arrive_intact_and_are_charged_by_size() {
    const N: usize = 1_000;
    const M: u64 = 5_000;
    let plan = vec![
        chunk(1, vec![Payload::Real(values(N))]),
        chunk(2, vec![Payload::Virtual { elems: M }]),
        Outgoing::Slice(
            Slice {
                seq: 3,
                offset: 12_345,
            },
            vec![Payload::Real(values(7)), Payload::Virtual { elems: 3 }],
        ),
    ];
    let (r, log) = run_plan(&config(), plan.clone()).expect("runs");

    // Worker 1 decoded every body and got the tensors back, in send order.
    assert_eq!(log.received.len(), 3);
    for (got, sent) in log.received.iter().zip(&plan) {
        assert_eq!(got.from, RoleId::Worker(0));
        match (sent, &got.body) {
            (Outgoing::Chunk(c, p), Body::Chunk(g)) if c == g => assert_eq!(&got.payloads, p),
            (Outgoing::Slice(s, p), Body::Slice(g)) if s == g => assert_eq!(&got.payloads, p),
            other => panic!("sent and received differ: {other:?}"),
        }
    }
    assert_eq!(log.received[0].payloads[0].values(), Some(&values(N)[..]));
    assert_eq!(log.received[1].payloads[0].values(), None);
    assert_eq!(log.received[1].payloads[0].elems(), M);

    // The link counts header + body + 4 bytes per element, real or virtual; the slice's body
    // rides in the header.
    let chunk_body = |seq| {
        let Outgoing::Chunk(c, _) = chunk(seq, Vec::new()) else {
            unreachable!()
        };
        serde_json::to_vec(&c).expect("encodes").len() as u64
    };
    let expected = [
        HEADER_BYTES + chunk_body(1) + 4 * N as u64,
        HEADER_BYTES + chunk_body(2) + 4 * M,
        HEADER_BYTES + 4 * (7 + 3),
    ];
    for (item, want) in plan.iter().zip(expected) {
        assert_eq!(item.expected_wire_bytes(), want);
        assert_eq!(item.message().expect("encodes").wire_bytes(), want);
    }
    let total: u64 = expected.iter().sum();
    let link = r.traffic[&(RoleId::Worker(0), RoleId::Worker(1))];
    assert_eq!(link.messages, 3);
    assert_eq!(link.bytes, total);
    assert_eq!(r.summary.bytes_sent_by_role["worker-0"], total);
    assert_eq!(r.summary.bytes_sent_by_role.get("worker-1"), None);
    assert_eq!(r.summary.bytes_sent, total);
    assert_eq!(r.summary.messages_sent, 3);
}

#[test]
fn a_larger_payload_arrives_later_by_its_extra_bytes_over_the_nic() {
    let (nic, latency) = default_link();
    let transit = |payload: Payload| {
        let item = chunk(1, vec![payload]);
        let bytes = item.expected_wire_bytes();
        let (r, log) = run_plan(&config(), vec![item]).expect("runs");
        assert_eq!(
            r.traffic[&(RoleId::Worker(0), RoleId::Worker(1))].bytes,
            bytes
        );
        let got = &log.received[0];
        // What the sender was told and what the receiver saw agree, to a tick.
        assert!(
            (got.arrived_at - log.predicted[0]).abs() <= TICK_S,
            "{} vs {}",
            got.arrived_at,
            log.predicted[0]
        );
        let t = got.arrived_at - got.sent_at;
        // Sender and receiver are on different machines: the bytes cross both NICs (cut-through)
        // and one latency.
        let model = bytes as f64 / nic + latency;
        assert!(
            (t - model).abs() <= 2.0 * TICK_S,
            "transit {t} s, model {model} s"
        );
        eprintln!("{bytes} B: transit {t:.9} s (model {model:.9} s)");
        t
    };
    let (small, large) = (1_000, 250_000);
    let t_small = transit(Payload::Real(values(small)));
    let t_large = transit(Payload::Real(values(large)));
    let extra = 4.0 * (large - small) as f64 / nic;
    assert!(
        (t_large - t_small - extra).abs() <= 2.0 * TICK_S,
        "larger payload later by {} s, expected {extra} s",
        t_large - t_small
    );
    // A virtual payload is charged as the real one of its size.
    let t_virtual = transit(Payload::Virtual {
        elems: large as u64,
    });
    assert!((t_virtual - t_large).abs() <= 2.0 * TICK_S);
}

#[test]
fn on_one_machine_nothing_crosses_a_nic_but_the_bytes_are_counted() {
    let mut cfg = config();
    cfg.cluster.machines = vec![MachineGroup {
        device: "cpu".into(),
        count: 1,
        slots: 2,
        labels: Default::default(),
    }];
    let item = chunk(1, vec![Payload::Real(values(250_000))]);
    let bytes = item.expected_wire_bytes();
    let (r, log) = run_plan(&cfg, vec![item]).expect("runs");
    let got = &log.received[0];
    assert_eq!(got.arrived_at, got.sent_at);
    assert_eq!(r.summary.bytes_sent_by_role["worker-0"], bytes);
}

#[test]
fn a_body_of_the_wrong_type_is_an_error_naming_its_tag() {
    let bad = Message::custom(Chunk::TAG, &"not a chunk").expect("encodes");
    let e = bad.decode::<Chunk>().expect_err("wrong type").to_string();
    assert!(e.contains(Chunk::TAG), "{e}");
    // Other tags are not this message: no error, no value.
    assert_eq!(bad.decode::<Slice>().expect("not a slice"), None);

    // The same inside a run: the receiving worker's error ends the run, naming the tag.
    let e = run_plan(&config(), vec![Outgoing::Malformed])
        .expect_err("the receiver rejects the body")
        .to_string();
    assert!(e.contains(Chunk::TAG) && e.contains("malformed"), "{e}");
}
