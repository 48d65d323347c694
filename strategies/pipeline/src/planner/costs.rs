//! The planner's cost model (thesis §5.3.1): a stage's time on its replicas, a boundary's
//! transfer time, a stage's memory need, and from them a whole configuration's predicted time
//! and traffic. The searches and [`evaluate`] share these functions and the sums in [`Costs`],
//! so a plan's predicted time is the same number whichever computes it.

use super::{PlanError, Profile, StagePlan, Sync, Topology};

/// Per-range sums of a profile, each summed layer by layer in order.
pub(crate) struct Costs {
    n: usize,
    /// `compute[i * (n + 1) + j]`: Σ compute_s of layers `i..j`.
    compute: Vec<f64>,
    /// Σ weight bytes of layers `i..j`.
    weights: Vec<f64>,
    /// Σ kept activation bytes of layers `i..j` (what a minibatch in flight holds).
    kept: Vec<f64>,
    /// Activation bytes of each layer's output (what a boundary after it carries).
    outputs: Vec<f64>,
    /// How a replicated stage's weight sync is charged.
    sync: Sync,
    /// Optimizer-state copies of the weights a worker keeps (0 for plain SGD, 1 with momentum,
    /// 2 for Adam).
    optimizer_slots: u64,
}

impl Costs {
    /// The sums of `profile` with `sync`'s charge for a replicated stage, checking it has
    /// layers with finite, non-negative times.
    pub(crate) fn with_sync(profile: &Profile, sync: Sync) -> Result<Costs, PlanError> {
        if profile.layers.is_empty() {
            return Err(PlanError::EmptyProfile);
        }
        for (layer, l) in profile.layers.iter().enumerate() {
            if !(l.compute_s.is_finite() && l.compute_s >= 0.0) {
                return Err(PlanError::Compute {
                    layer,
                    compute_s: l.compute_s,
                });
            }
        }
        let n = profile.layers.len();
        let mut c = Costs {
            n,
            compute: vec![0.0; (n + 1) * (n + 1)],
            weights: vec![0.0; (n + 1) * (n + 1)],
            kept: vec![0.0; (n + 1) * (n + 1)],
            outputs: profile
                .layers
                .iter()
                .map(|l| l.activation_bytes as f64)
                .collect(),
            sync,
            optimizer_slots: 0,
        };
        for i in 0..n {
            let (mut t, mut w, mut a) = (0.0, 0.0, 0.0);
            for (j, l) in profile.layers.iter().enumerate().skip(i) {
                t += l.compute_s;
                w += l.weight_bytes as f64;
                a += l.kept_bytes as f64;
                let at = i * (n + 1) + j + 1;
                c.compute[at] = t;
                c.weights[at] = w;
                c.kept[at] = a;
            }
        }
        Ok(c)
    }

    /// The same sums for a job whose optimizer keeps `slots` state copies of every weight
    /// (counted in a stage's memory).
    pub(crate) fn with_optimizer_slots(mut self, slots: u32) -> Costs {
        self.optimizer_slots = u64::from(slots);
        self
    }

    /// Layers in the profile.
    pub(crate) fn layers(&self) -> usize {
        self.n
    }

    /// Σ compute of layers `i..j` on one worker, seconds.
    pub(crate) fn compute(&self, i: usize, j: usize) -> f64 {
        self.compute[i * (self.n + 1) + j]
    }

    /// Σ weight bytes of layers `i..j`.
    pub(crate) fn weights(&self, i: usize, j: usize) -> f64 {
        self.weights[i * (self.n + 1) + j]
    }

    /// Time per minibatch of a stage of layers `i..j` whose one-worker time is `inner`,
    /// replicated on `m` units joined at `bandwidth` ([`Sync`] says which formula).
    pub(crate) fn replicated(&self, i: usize, j: usize, inner: f64, m: u32, bandwidth: f64) -> f64 {
        let w = self.weights(i, j);
        let m = f64::from(m);
        match self.sync {
            // (1/m)·max(inner, 2(m−1)·|w|/B), the thesis's T.
            Sync::Thesis => inner.max(2.0 * (m - 1.0) * w / bandwidth) / m,
            // (inner + 2(m−1)/m·|w|/B) / m: a ring allreduce after the backward passes.
            Sync::Ring => (inner + 2.0 * (m - 1.0) / m * w / bandwidth) / m,
        }
    }

    /// Time of the boundary after layer `s − 1` (between a stage ending at `s` and the next):
    /// activations forward plus gradients back, `2·a/B`.
    pub(crate) fn boundary(&self, s: usize, bandwidth: f64) -> f64 {
        2.0 * self.outputs[s - 1] / bandwidth
    }

    /// Memory one worker of a stage of layers `i..j` needs with `warmup` minibatches in flight
    /// under weight stashing ([`stage_need`]), bytes.
    pub(crate) fn memory(&self, i: usize, j: usize, warmup: u32) -> f64 {
        let at = i * (self.n + 1) + j;
        let k = u64::from(warmup.max(1));
        // The sums are of whole byte counts, exact in an f64 below 2^53 bytes.
        stage_need(StageNeed {
            weight_bytes: self.weights[at] as u64,
            optimizer_slots: self.optimizer_slots,
            weight_copies: stashing_copies(k),
            kept_bytes: self.kept[at] as u64,
            in_flight: k,
            working_bytes: 0,
        }) as f64
    }
}

/// What one worker of a pipeline stage holds, for [`stage_need`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StageNeed {
    /// Bytes of the stage's weights.
    pub weight_bytes: u64,
    /// Optimizer-state copies of the weights (0 for plain SGD, 1 with momentum, 2 for Adam).
    pub optimizer_slots: u64,
    /// Copies of the weights beside them under weight stashing ([`stashing_copies`]; none
    /// without it).
    pub weight_copies: u64,
    /// Activation bytes one minibatch in flight keeps for its backward pass.
    pub kept_bytes: u64,
    /// Minibatches in flight at once.
    pub in_flight: u64,
    /// Activation bytes live for one minibatch at a time besides what the minibatches in
    /// flight keep (GPipe's recomputed backward pass rebuilds a stage's activations).
    pub working_bytes: u64,
}

/// Bytes one worker of a pipeline stage holds at most: its weights, their gradients, the
/// optimizer's state, the stashed weight versions (and the latest's copy while one is loaded)
/// and the kept activations of its minibatches in flight. The planner's memory limit and the runtime's start-up check are both this
/// function, so a plan the planner accepts is not refused when the run starts.
pub fn stage_need(need: StageNeed) -> u64 {
    let copies = 2 + need.optimizer_slots + need.weight_copies;
    need.weight_bytes
        .saturating_mul(copies)
        .saturating_add(need.kept_bytes.saturating_mul(need.in_flight))
        .saturating_add(need.working_bytes)
}

/// Copies of a stage's weights beside them under weight stashing with `in_flight` minibatches
/// in flight: a stashed version for each but the newest, and, while a backward pass runs on a
/// stashed version loaded in the weights' place, the latest version kept aside (as PipeDream's
/// runtime swaps versions). None with one minibatch in flight: every pass runs on the latest.
pub fn stashing_copies(in_flight: u64) -> u64 {
    if in_flight > 1 {
        in_flight
    } else {
        0
    }
}

/// Minibatches in flight at a stage with `replicas` replicas and `downstream` workers from it
/// to the output stage, itself included: `⌈downstream / replicas⌉` (the 1F1B warm-up), and one
/// more at a replicated input stage with stages after it, which waits for its slowest replica
/// at every round's average (the runtime's default depth, NOAM + 1 there).
pub(crate) fn warmup(downstream: u32, replicas: u32, input: bool) -> u32 {
    let barrier = input && replicas > 1 && downstream > replicas;
    downstream.div_ceil(replicas.max(1)) + u32::from(barrier)
}

/// Checks `stages` are a plan of `profile`: consecutive, non-empty layer ranges covering every
/// layer, each on at least one worker.
pub fn validate_stages(profile: &Profile, stages: &[StagePlan]) -> Result<(), PlanError> {
    let n = profile.layers.len();
    let mut next = 0;
    for (k, s) in stages.iter().enumerate() {
        if s.layers.start != next || s.layers.end <= s.layers.start || s.layers.end > n {
            return Err(PlanError::InvalidStages(format!(
                "stage {k} runs layers {:?}; stages must run consecutive, non-empty ranges \
                 from layer {next}, within the profile's {n} layers",
                s.layers
            )));
        }
        if s.replicas == 0 {
            return Err(PlanError::InvalidStages(format!(
                "stage {k} has 0 replicas"
            )));
        }
        next = s.layers.end;
    }
    if next != n || stages.is_empty() {
        return Err(PlanError::InvalidStages(format!(
            "the stages cover layers 0..{next} of the profile's {n}"
        )));
    }
    Ok(())
}

/// The predicted time per minibatch of `stages` laid out on workers `0..` in order: the slowest
/// of each stage's time on its replicas (weight sync at the slowest link it spans) and each
/// boundary's transfer (at the slowest link among the two stages' workers), seconds. `NaN`
/// where `stages` are not a plan of `profile` ([`validate_stages`] says why).
pub fn evaluate(profile: &Profile, topology: &Topology, stages: &[StagePlan]) -> f64 {
    evaluate_under(profile, topology, stages, Sync::Thesis)
}

/// [`evaluate`] with `sync`'s charge for replicated stages.
pub fn evaluate_under(
    profile: &Profile,
    topology: &Topology,
    stages: &[StagePlan],
    sync: Sync,
) -> f64 {
    if validate_stages(profile, stages).is_err() {
        return f64::NAN;
    }
    let Ok(costs) = Costs::with_sync(profile, sync) else {
        return f64::NAN;
    };
    evaluate_with(&costs, topology, stages)
}

/// [`evaluate`] on prepared sums and valid stages.
pub(crate) fn evaluate_with(costs: &Costs, topology: &Topology, stages: &[StagePlan]) -> f64 {
    let mut worst: f64 = 0.0;
    let mut lo = 0u32;
    for (k, s) in stages.iter().enumerate() {
        let (i, j) = (s.layers.start, s.layers.end);
        let hi = lo + s.replicas;
        let inner = costs.compute(i, j);
        let t = costs.replicated(i, j, inner, s.replicas, topology.span_bandwidth(lo, hi));
        worst = worst.max(t);
        if let Some(next) = stages.get(k + 1) {
            // Minibatches go round-robin from every replica of this stage to every replica of
            // the next: the boundary runs at the slowest link among both stages' workers.
            let end = hi + next.replicas;
            worst = worst.max(costs.boundary(j, topology.span_bandwidth(lo, end)));
        }
        lo = hi;
    }
    worst
}

/// Bytes sent per training sample by `stages`: each boundary's activations and gradients
/// (`2·a`) plus each replicated stage's weight sync (`2(m−1)/m·|w|` per minibatch), over the
/// minibatch's samples. One stage on m workers is data parallelism's `2(m−1)/m·|W| / G`.
pub fn bytes_per_sample(profile: &Profile, stages: &[StagePlan]) -> f64 {
    let mut bytes = 0.0;
    for (k, s) in stages.iter().enumerate() {
        let w: u64 = profile
            .layers
            .get(s.layers.clone())
            .map_or(0, |ls| ls.iter().map(|l| l.weight_bytes).sum());
        let m = f64::from(s.replicas.max(1));
        bytes += 2.0 * (m - 1.0) / m * w as f64;
        if k + 1 < stages.len() {
            let a = s
                .layers
                .end
                .checked_sub(1)
                .and_then(|l| profile.layers.get(l))
                .map_or(0, |l| l.activation_bytes);
            bytes += 2.0 * a as f64;
        }
    }
    bytes / profile.batch.max(1) as f64
}

/// Each stage's memory need per worker under weight stashing ([`stage_need`]), bytes, for a
/// job whose optimizer keeps `optimizer_slots` state copies of the weights: `warmup` minibatches
/// in flight (its 1F1B warm-up depth, `⌈workers from it to the end / its replicas⌉`), the weight
/// copies stashing keeps for them ([`stashing_copies`]), and the outputs of its layers for each (what a minibatch in
/// flight keeps for its backward pass).
pub fn stage_memory_bytes(
    profile: &Profile,
    stages: &[StagePlan],
    optimizer_slots: u32,
) -> Vec<u64> {
    let mut downstream: u32 = stages.iter().map(|s| s.replicas).sum();
    stages
        .iter()
        .map(|s| {
            let k = u64::from(warmup(downstream, s.replicas, s.layers.start == 0).max(1));
            downstream = downstream.saturating_sub(s.replicas);
            let layers = profile.layers.get(s.layers.clone()).unwrap_or(&[]);
            stage_need(StageNeed {
                weight_bytes: layers.iter().map(|l| l.weight_bytes).sum(),
                optimizer_slots: u64::from(optimizer_slots),
                weight_copies: stashing_copies(k),
                kept_bytes: layers.iter().map(|l| l.kept_bytes).sum(),
                in_flight: k,
                working_bytes: 0,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::LayerProfile;
    use super::*;

    fn profile() -> Profile {
        let l = |c, a, w| LayerProfile {
            compute_s: c,
            activation_bytes: a,
            kept_bytes: a,
            weight_bytes: w,
        };
        Profile {
            layers: vec![l(3.0, 10, 100), l(1.0, 20, 1000)],
            batch: 10,
        }
    }

    #[test]
    fn evaluate_charges_stages_and_boundaries() {
        let p = profile();
        let t = Topology::flat(4, 100.0);
        let dp = [StagePlan {
            layers: 0..2,
            replicas: 4,
        }];
        // (1/4)·max(4, 2·3·1100/100 = 66) = 16.5; the ring: (4 + 2·(3/4)·1100/100) / 4.
        assert_eq!(evaluate(&p, &t, &dp), 16.5);
        assert!((evaluate_under(&p, &t, &dp, Sync::Ring) - 5.125).abs() < 1e-12);
        let pp = [
            StagePlan {
                layers: 0..1,
                replicas: 3,
            },
            StagePlan {
                layers: 1..2,
                replicas: 1,
            },
        ];
        // stage 0: (1/3)·max(3, 2·2·100/100 = 4) = 4/3; boundary 2·10/100; stage 1: 1.
        assert_eq!(evaluate(&p, &t, &pp), 4.0 / 3.0);
        // The ring: (3 + 2·(2/3)·100/100) / 3 = 13/9.
        assert!((evaluate_under(&p, &t, &pp, Sync::Ring) - 13.0 / 9.0).abs() < 1e-12);
        assert!(evaluate(&p, &t, &pp[..1]).is_nan());
    }

    #[test]
    fn a_boundary_into_a_stage_across_machines_runs_at_the_machines_link() {
        let l = |c, a| LayerProfile {
            compute_s: c,
            activation_bytes: a,
            kept_bytes: a,
            weight_bytes: 0,
        };
        let p = Profile {
            layers: vec![l(0.0, 1000), l(0.0, 0)],
            batch: 1,
        };
        // Two machines of 4 workers, 100 bytes/s inside and 10 between.
        let t = Topology::two_level(4, 100.0, 2, 10.0);
        let split = |r0, r1| {
            [
                StagePlan {
                    layers: 0..1,
                    replicas: r0,
                },
                StagePlan {
                    layers: 1..2,
                    replicas: r1,
                },
            ]
        };
        // Workers 0..3 send to worker 3, all on machine 0: 2·1000/100.
        assert_eq!(evaluate(&p, &t, &split(3, 1)), 20.0);
        // Workers 0..3 send round-robin to workers 3..6, two of them on machine 1: 2·1000/10,
        // though the next stage's first worker shares their machine.
        assert_eq!(evaluate(&p, &t, &split(3, 3)), 200.0);
    }

    #[test]
    fn bytes_per_sample_counts_boundaries_and_sync() {
        let p = profile();
        let dp = [StagePlan {
            layers: 0..2,
            replicas: 4,
        }];
        assert_eq!(bytes_per_sample(&p, &dp), 2.0 * 3.0 / 4.0 * 1100.0 / 10.0);
        let pp = [
            StagePlan {
                layers: 0..1,
                replicas: 2,
            },
            StagePlan {
                layers: 1..2,
                replicas: 1,
            },
        ];
        assert_eq!(bytes_per_sample(&p, &pp), (100.0 + 20.0) / 10.0);
    }

    #[test]
    fn memory_grows_with_warmup() {
        let p = profile();
        let pp = [
            StagePlan {
                layers: 0..1,
                replicas: 1,
            },
            StagePlan {
                layers: 1..2,
                replicas: 1,
            },
        ];
        // stage 0: warmup 2 → 100·(2 + 2 copies: the stashed version and the latest kept aside
        // while it is loaded) + 10·2; stage 1: warmup 1 → 1000·2 + 20.
        assert_eq!(stage_memory_bytes(&p, &pp, 0), vec![420, 2020]);
        // With momentum, one more copy of each stage's weights.
        assert_eq!(stage_memory_bytes(&p, &pp, 1), vec![520, 3020]);
    }

    #[test]
    fn invalid_stages_are_named() {
        let p = profile();
        let gap = [StagePlan {
            layers: 1..2,
            replicas: 1,
        }];
        let e = validate_stages(&p, &gap).unwrap_err().to_string();
        assert!(e.contains("stage 0 runs layers 1..2"), "{e}");
    }
}
