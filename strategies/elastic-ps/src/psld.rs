//! PSLD's load-distribution algorithms (spec §1.5–§1.8): the superior server set (Alg. 1), the
//! exploit cost (Alg. 2) and ε-greedy assignment of every block from scratch (Alg. 3), plus the
//! helpers the scheduler's trigger uses (predicted makespan, speed variation, scale-out test).
//!
//! All functions are pure: the profile [`Pred`] and the random generator come in as arguments, so
//! the same inputs and seed give the same assignment. Servers are always visited in ascending id,
//! which fixes every tie.

use crate::telemetry::Pred;
use concord_engine::prelude::*;
use std::collections::BTreeMap;

/// Floor of ω, the mean predicted time of the superior servers in Alg. 2 (seconds), so the cost
/// never divides by zero (§1.6 guard).
pub const OMEGA_FLOOR_S: f64 = 1e-9;

/// The tunables of Algorithms 1–3.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PsldParams {
    /// Probability of exploring (placing a block on a uniformly drawn server), constant.
    pub epsilon: f64,
    /// Weight of the normalised predicted communication time in the exploit cost.
    pub theta0: f64,
    /// Weight of the workload share in the exploit cost.
    pub theta1: f64,
    /// Confidence multiplier of the bounds (1.645: the paper's 90% interval).
    pub z: f64,
    /// Alg. 1 stops only when every remaining server's lower bound clears the threshold (the
    /// stated property of the set) instead of just the next candidate's (the pseudocode).
    pub strict: bool,
}

impl Default for PsldParams {
    /// The paper's defaults: ε = 0.1, θ0 = θ1 = 1, z = 1.645, Alg. 1 as written.
    fn default() -> Self {
        PsldParams {
            epsilon: 0.1,
            theta0: 1.0,
            theta1: 1.0,
            z: 1.645,
            strict: false,
        }
    }
}

/// Alg. 1 as written (faithful), `strict` also checks the min lower bound of the remaining; ties → lower id; stops when Remained is empty. Servers without a model are skipped.
///
/// Servers are taken in ascending order of their upper bound at the reference size `s_ref`
/// (the spec's `model_size / |ps_set|`); each one joins unless its lower bound is at least the
/// last joined server's upper bound (the first confident gap), which ends the loop. The first
/// server always joins. The result is in joining order (best upper bound first).
pub fn superior_set(
    pred: &Pred,
    servers: &[ServerId],
    s_ref: f64,
    z: f64,
    strict: bool,
) -> Vec<ServerId> {
    let mut remained: Vec<(ServerId, f64, f64)> = sorted_unique(servers)
        .into_iter()
        .filter_map(|r| {
            pred.get(r)
                .map(|m| (r, m.lower(s_ref, z), m.upper(s_ref, z)))
        })
        .collect();
    // Ascending upper bound, ties by id; stable, so candidates are taken from the front.
    remained.sort_by(|a, b| a.2.total_cmp(&b.2).then(a.0.cmp(&b.0)));
    let mut superior = Vec::new();
    let mut threshold = f64::INFINITY;
    for (i, &(r, lower, upper)) in remained.iter().enumerate() {
        let gap = if strict {
            remained[i..]
                .iter()
                .map(|c| c.1)
                .fold(f64::INFINITY, f64::min)
                >= threshold
        } else {
            lower >= threshold
        };
        if gap {
            break;
        }
        threshold = upper;
        superior.push(r);
    }
    superior
}

/// Whether Alg. 1's superior set is too small and one more server should be launched:
/// `|Superior| < scale_threshold · M0`, with `M0` the initial server count and the paper's
/// ScaleThreshold ½ (§1.9, A5).
pub fn needs_scale_out(superior_len: usize, initial_servers: usize, scale_threshold: f64) -> bool {
    (superior_len as f64) < scale_threshold * initial_servers as f64
}

/// Alg. 2 with the §1.6 guards (S_assign + block, ω floor 1e-9 s, ascending id, "≤" so the last tie wins).
///
/// Cost of server r: `θ0·Pred_mean(r, S_r)/ω + θ1·S_r/(S_assign + block)`, where `S_r` is r's
/// bytes this round (`loads`, missing = 0) plus the block, and ω is the mean of
/// `Pred_mean(q, load_q)` over the superior servers at their current loads. Returns the
/// cheapest superior server; `None` when no server of `superior` has a model (an empty set, or
/// no telemetry yet): there is nothing to choose from and the caller picks the fallback
/// ([`eps_greedy`] takes the least-loaded server).
pub fn exploit(
    block_bytes: u64,
    superior: &[ServerId],
    loads: &BTreeMap<ServerId, u64>,
    assigned_bytes: u64,
    pred: &Pred,
    theta0: f64,
    theta1: f64,
) -> Option<ServerId> {
    let load = |r: ServerId| loads.get(&r).copied().unwrap_or(0);
    let cands: Vec<(ServerId, &crate::telemetry::ServerModel)> = sorted_unique(superior)
        .into_iter()
        .filter_map(|r| pred.get(r).map(|m| (r, m)))
        .collect();
    if cands.is_empty() {
        return None;
    }
    let omega = cands
        .iter()
        .map(|(r, m)| m.mean(load(*r) as f64))
        .sum::<f64>()
        / cands.len() as f64;
    let omega = if omega.is_finite() {
        omega.max(OMEGA_FLOOR_S)
    } else {
        OMEGA_FLOOR_S
    };
    let total = assigned_bytes.saturating_add(block_bytes) as f64;
    let mut best: Option<ServerId> = None;
    let mut cost_min = f64::INFINITY;
    for (r, m) in &cands {
        let s_r = load(*r).saturating_add(block_bytes) as f64;
        let share = if total > 0.0 { s_r / total } else { 0.0 };
        let cost = theta0 / omega * m.mean(s_r) + theta1 * share;
        if cost <= cost_min {
            cost_min = cost;
            best = Some(*r);
        }
    }
    // Costs that are all NaN or +∞ (unusable models): fall back to the lowest id.
    best.or(cands.first().map(|c| c.0))
}

/// Alg. 3: blocks in the given order, from scratch; explore over ALL `servers` uniformly with prob. ε.
///
/// For each block one uniform number `u ∈ [0, 1)` is drawn; `u < ε` explores (a second draw
/// picks the server uniformly from `servers`, sorted by id), otherwise [`exploit`] picks from
/// `superior ∩ servers`. Loads include explored blocks, as the paper's `Assign` does. When no
/// superior server has a model, the block goes to the least-loaded server (ties → lower id).
/// Returns one owner per block, or an empty vector when `servers` is empty.
pub fn eps_greedy(
    block_bytes: &[u64],
    servers: &[ServerId],
    superior: &[ServerId],
    pred: &Pred,
    p: &PsldParams,
    rng: &mut impl rand::Rng,
) -> Vec<ServerId> {
    let servers = sorted_unique(servers);
    if servers.is_empty() {
        return Vec::new();
    }
    let superior: Vec<ServerId> = sorted_unique(superior)
        .into_iter()
        .filter(|r| servers.binary_search(r).is_ok())
        .collect();
    let eps = if p.epsilon.is_nan() {
        0.0
    } else {
        p.epsilon.clamp(0.0, 1.0)
    };
    let mut loads: BTreeMap<ServerId, u64> = servers.iter().map(|&r| (r, 0)).collect();
    let mut assigned: u64 = 0;
    let mut owners = Vec::with_capacity(block_bytes.len());
    for &b in block_bytes {
        let u: f64 = rng.gen();
        let r = if u < eps {
            servers[rng.gen_range(0..servers.len())]
        } else {
            exploit(b, &superior, &loads, assigned, pred, p.theta0, p.theta1)
                .unwrap_or_else(|| least_loaded(&servers, &loads))
        };
        *loads.entry(r).or_insert(0) += b;
        assigned = assigned.saturating_add(b);
        owners.push(r);
    }
    owners
}

/// max_r Pred_mean(r, S_r) of an assignment (servers with no blocks excluded).
/// The implicit objective of Alg. 2 (§1.8): the synchronous iteration waits for the slowest
/// server. Blocks beyond the shorter of the two slices are ignored, servers without a model are
/// left out, and the result is 0 when nothing remains.
pub fn predicted_makespan(block_bytes: &[u64], owners: &[ServerId], pred: &Pred) -> f64 {
    let mut loads: BTreeMap<ServerId, u64> = BTreeMap::new();
    for (&b, &r) in block_bytes.iter().zip(owners) {
        *loads.entry(r).or_insert(0) += b;
    }
    loads
        .iter()
        .filter_map(|(&r, &s)| pred.get(r).map(|m| m.mean(s as f64)))
        .fold(0.0, f64::max)
}

/// (best − worst)/worst of positive speeds; 0 for fewer than two.
/// The paper's straggler test is `variation > VarThreshold = 1` (best more than twice the
/// worst). Non-positive and non-finite speeds are ignored.
pub fn variation(speeds: &[f64]) -> f64 {
    let ok: Vec<f64> = speeds
        .iter()
        .copied()
        .filter(|s| s.is_finite() && *s > 0.0)
        .collect();
    if ok.len() < 2 {
        return 0.0;
    }
    let best = ok.iter().copied().fold(f64::MIN, f64::max);
    let worst = ok.iter().copied().fold(f64::MAX, f64::min);
    (best - worst) / worst
}

fn sorted_unique(ids: &[ServerId]) -> Vec<ServerId> {
    let mut v = ids.to_vec();
    v.sort_unstable();
    v.dedup();
    v
}

fn least_loaded(servers: &[ServerId], loads: &BTreeMap<ServerId, u64>) -> ServerId {
    servers
        .iter()
        .copied()
        .min_by_key(|r| (loads.get(r).copied().unwrap_or(0), *r))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::ServerModel;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    const MIB: u64 = 1 << 20;

    /// §1.14: α = [8, 8.5, 9, 80] ns/byte, β = 1 ms, SEM = [0.02, 0.02, 0.02, 0.05] s.
    fn worked_pred() -> Pred {
        let mut p = Pred::default();
        for (r, (a, sem)) in [(8.0, 0.02), (8.5, 0.02), (9.0, 0.02), (80.0, 0.05)]
            .into_iter()
            .enumerate()
        {
            p.insert(r as ServerId, ServerModel::fixed(a * 1e-9, 1e-3, sem));
        }
        p
    }

    /// Ten 4 MiB blocks, then 1, 2, 0.5 and 3 MiB (46.5 MiB).
    fn worked_blocks() -> Vec<u64> {
        let mut b = vec![4 * MIB; 10];
        b.extend([MIB, 2 * MIB, MIB / 2, 3 * MIB]);
        b
    }

    fn r4(x: f64) -> f64 {
        (x * 1e4).round() / 1e4
    }

    #[test]
    fn worked_example_of_section_1_14() {
        let pred = worked_pred();
        let blocks = worked_blocks();
        let total: u64 = blocks.iter().sum();
        assert_eq!(total, 93 * MIB / 2);
        let s_ref = total as f64 / 4.0;
        let want = [
            (0.0985, 0.0656, 0.1314),
            (0.1046, 0.0717, 0.1375),
            (0.1107, 0.0778, 0.1436),
            (0.9762, 0.8939, 1.0584),
        ];
        for (r, w) in want.iter().enumerate() {
            let m = pred.get(r as ServerId).expect("model");
            let got = (
                r4(m.mean(s_ref)),
                r4(m.lower(s_ref, 1.645)),
                r4(m.upper(s_ref, 1.645)),
            );
            assert_eq!(got, *w, "bounds of PS{r}");
        }
        let servers = [0, 1, 2, 3];
        let sup = superior_set(&pred, &servers, s_ref, 1.645, false);
        assert_eq!(sup, vec![0, 1, 2]);

        let p = PsldParams {
            epsilon: 0.0,
            ..PsldParams::default()
        };
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let owners = eps_greedy(&blocks, &servers, &sup, &pred, &p, &mut rng);
        assert_eq!(owners, vec![0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 1, 1]);

        let mut loads = [0u64; 4];
        for (b, &r) in blocks.iter().zip(&owners) {
            loads[r as usize] += b;
        }
        assert_eq!(loads, [16 * MIB, 33 * MIB / 2, 14 * MIB, 0]);
        let times: Vec<f64> = (0..3)
            .map(|r| {
                r4(pred
                    .get(r)
                    .map_or(0.0, |m| m.mean(loads[r as usize] as f64)))
            })
            .collect();
        assert_eq!(times, vec![0.1352, 0.1481, 0.1331]);
        assert!((predicted_makespan(&blocks, &owners, &pred) - 0.1481).abs() < 5e-5);
    }

    #[test]
    fn exploit_step_by_step_matches_the_cost_formula() {
        // First block of the worked example: all loads 0, ω = β = 1 ms, shares all 1: the
        // cheapest comm time is PS0's.
        let pred = worked_pred();
        let loads = BTreeMap::new();
        let r = exploit(4 * MIB, &[2, 0, 1], &loads, 0, &pred, 1.0, 1.0);
        assert_eq!(r, Some(0));
        // Equal models: every cost ties, "≤" gives the highest id.
        let mut eq = Pred::default();
        for r in 0..3 {
            eq.insert(r, ServerModel::fixed(1e-9, 1e-3, 0.0));
        }
        assert_eq!(exploit(MIB, &[0, 1, 2], &loads, 0, &eq, 1.0, 1.0), Some(2));
        // A server already holding bytes costs more in both terms.
        let loaded: BTreeMap<ServerId, u64> = [(2, 4 * MIB)].into_iter().collect();
        assert_eq!(
            exploit(MIB, &[0, 1, 2], &loaded, 4 * MIB, &eq, 1.0, 1.0),
            Some(1)
        );
        // No model among the superior servers, or none at all.
        assert_eq!(exploit(MIB, &[9], &loads, 0, &eq, 1.0, 1.0), None);
        assert_eq!(exploit(MIB, &[], &loads, 0, &eq, 1.0, 1.0), None);
        // Zero-byte block with nothing assigned and β = 0: ω floor and 0/0 share guarded.
        let mut z = Pred::default();
        z.insert(0, ServerModel::fixed(0.0, 0.0, 0.0));
        z.insert(1, ServerModel::fixed(0.0, 0.0, 0.0));
        assert_eq!(exploit(0, &[0, 1], &loads, 0, &z, 1.0, 1.0), Some(1));
    }

    #[test]
    fn first_server_always_joins_and_the_loop_stops_at_the_first_gap() {
        let mut p = Pred::default();
        // Intervals (z = 1): 0 [0.8, 1.2], 1 [0.6, 1.4], 2 [2.8, 3.2], 3 [1.5, 1.9].
        p.insert(0, ServerModel::fixed(0.0, 1.0, 0.2));
        p.insert(1, ServerModel::fixed(0.0, 1.0, 0.4));
        p.insert(2, ServerModel::fixed(0.0, 3.0, 0.2));
        p.insert(3, ServerModel::fixed(0.0, 1.7, 0.2));
        // By upper bound: 0 joins (threshold 1.2), 1 joins (0.6 < 1.2; threshold 1.4), 3 stops
        // the loop (1.5 ≥ 1.4) although 2 has not been looked at.
        assert_eq!(superior_set(&p, &[0, 1, 2, 3], 0.0, 1.0, false), vec![0, 1]);
        // A single terrible server is still superior on its own.
        assert_eq!(superior_set(&p, &[2], 0.0, 1.0, false), vec![2]);
        // Overlapping intervals all the way: everyone joins, loop ends with Remained empty.
        let mut q = Pred::default();
        for r in 0..4 {
            q.insert(r, ServerModel::fixed(0.0, 1.0 + 0.1 * r as f64, 0.5));
        }
        assert_eq!(
            superior_set(&q, &[3, 2, 1, 0], 0.0, 1.0, false),
            vec![0, 1, 2, 3]
        );
        // Ties in upper bound → lower id first; servers without a model are skipped.
        let mut t = Pred::default();
        t.insert(5, ServerModel::fixed(0.0, 1.0, 0.0));
        t.insert(4, ServerModel::fixed(0.0, 1.0, 0.0));
        assert_eq!(superior_set(&t, &[5, 4, 8], 0.0, 1.0, false), vec![4]);
        assert!(superior_set(&Pred::default(), &[0, 1], 1.0, 1.645, false).is_empty());
    }

    #[test]
    fn strict_mode_catches_a_wide_interval_behind_the_gap() {
        let mut p = Pred::default();
        p.insert(0, ServerModel::fixed(0.0, 1.0, 0.1)); // [0.9, 1.1]
        p.insert(1, ServerModel::fixed(0.0, 2.0, 0.5)); // [1.5, 2.5]: confident gap after 0
        p.insert(2, ServerModel::fixed(0.0, 3.0, 2.5)); // [0.5, 5.5]: might be the best
        assert_eq!(superior_set(&p, &[0, 1, 2], 0.0, 1.0, false), vec![0]);
        assert_eq!(superior_set(&p, &[0, 1, 2], 0.0, 1.0, true), vec![0, 1, 2]);
        // Without the wide server both modes agree.
        assert_eq!(superior_set(&p, &[0, 1], 0.0, 1.0, true), vec![0]);
    }

    fn straggler_pred() -> Pred {
        let mut p = Pred::default();
        for r in 0..4 {
            let a = if r == 3 { 80e-9 } else { 8e-9 };
            p.insert(r, ServerModel::fixed(a, 1e-3, 0.01));
        }
        p
    }

    #[test]
    fn epsilon_one_spreads_blocks_over_all_servers() {
        let pred = straggler_pred();
        let blocks = vec![4 * MIB; 400];
        let p = PsldParams {
            epsilon: 1.0,
            ..PsldParams::default()
        };
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let owners = eps_greedy(&blocks, &[0, 1, 2, 3], &[0, 1, 2], &pred, &p, &mut rng);
        let mut count = [0usize; 4];
        for &r in &owners {
            count[r as usize] += 1;
        }
        // Uniform: 100 expected each; 60 is more than 4 standard deviations (8.7) below.
        assert!(count.iter().all(|&c| c >= 60), "{count:?}");
    }

    #[test]
    fn epsilon_zero_never_uses_a_non_superior_server() {
        let pred = straggler_pred();
        let blocks: Vec<u64> = (0..300).map(|i| (i % 7 + 1) * MIB / 2).collect();
        let p = PsldParams {
            epsilon: 0.0,
            ..PsldParams::default()
        };
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let owners = eps_greedy(&blocks, &[0, 1, 2, 3], &[0, 1, 2], &pred, &p, &mut rng);
        assert_eq!(owners.len(), blocks.len());
        assert!(!owners.contains(&3));
        for r in 0..3 {
            assert!(owners.contains(&r), "superior server {r} unused");
        }
        // The default ε = 0.1 does put some blocks on the straggler (exploration).
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let owners = eps_greedy(
            &blocks,
            &[0, 1, 2, 3],
            &[0, 1, 2],
            &pred,
            &PsldParams::default(),
            &mut rng,
        );
        assert!(owners.contains(&3));
    }

    #[test]
    fn same_seed_same_assignment() {
        let pred = straggler_pred();
        let blocks: Vec<u64> = (0..200).map(|i| (i % 5 + 1) * MIB).collect();
        let run = |seed: u64| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            eps_greedy(
                &blocks,
                &[0, 1, 2, 3],
                &[0, 1, 2],
                &pred,
                &PsldParams::default(),
                &mut rng,
            )
        };
        assert_eq!(run(11), run(11));
        assert_ne!(run(11), run(12));
    }

    #[test]
    fn without_models_or_servers_eps_greedy_stays_total() {
        let blocks = vec![MIB, 2 * MIB, MIB, MIB];
        let p = PsldParams {
            epsilon: 0.0,
            ..PsldParams::default()
        };
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let owners = eps_greedy(&blocks, &[1, 0], &[], &Pred::default(), &p, &mut rng);
        // Least loaded, ties → lower id: 0 (1 MiB), 1 (2 MiB), 0 (2 MiB), then a 2:2 tie → 0.
        assert_eq!(owners, vec![0, 1, 0, 0]);
        assert!(eps_greedy(&blocks, &[], &[0], &straggler_pred(), &p, &mut rng).is_empty());
        // A superior server that is not in `servers` (being removed) is never used.
        let owners = eps_greedy(
            &blocks,
            &[0, 1],
            &[0, 1, 3],
            &straggler_pred(),
            &p,
            &mut rng,
        );
        assert!(!owners.contains(&3));
    }

    #[test]
    fn makespan_variation_and_scale_out() {
        let pred = straggler_pred();
        let blocks = [4 * MIB, 4 * MIB, MIB];
        let m = predicted_makespan(&blocks, &[0, 0, 3], &pred);
        assert!((m - (80e-9 * MIB as f64 + 1e-3)).abs() < 1e-12);
        let m = predicted_makespan(&blocks, &[0, 1, 1], &pred);
        assert!((m - (8e-9 * 5.0 * MIB as f64 + 1e-3)).abs() < 1e-12);
        assert_eq!(predicted_makespan(&[], &[], &pred), 0.0);

        assert_eq!(variation(&[1.0, 2.0, 4.0]), 3.0);
        assert_eq!(variation(&[5.0]), 0.0);
        assert_eq!(variation(&[0.0, 2.0, f64::NAN, 3.0]), 0.5);
        assert_eq!(variation(&[]), 0.0);

        // §1.9: 4 of 8 superior is not < 4; 2 of 8 is.
        assert!(!needs_scale_out(4, 8, 0.5));
        assert!(needs_scale_out(2, 8, 0.5));
    }
}
