use super::*;
use crate::cluster::Cluster;
use crate::context::{RoleContext, RuntimeKind};
use crate::message::HEADER_BYTES;
use crate::stragglers::StragglerSet;
use crate::time::TimeBase;
use crate::transport::{LinkTraffic, Network};
use std::future::Future;
use std::sync::Arc;

/// 1 GB/s NICs (8 Gbit/s), 10 µs latency.
const BYTES_PER_S: f64 = 1e9;
const LATENCY_S: f64 = 10e-6;

/// One machine per worker, `p` workers.
fn cluster(p: u32) -> Arc<Cluster> {
    crate::cluster::test_cluster(p)
}

type Traffic = std::collections::BTreeMap<(RoleId, RoleId), LinkTraffic>;

/// Runs `body(rank, ctx)` as `p` worker roles on a simulated network; returns each rank's output
/// with the run time it finished at, and the traffic.
fn simulate<T, F, Fut>(p: u32, body: F) -> (Vec<(T, f64)>, Traffic)
where
    T: Send + 'static,
    F: Fn(usize, RoleContext) -> Fut,
    Fut: Future<Output = (T, RoleContext)> + Send + 'static,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let roles: Vec<RoleId> = (0..p).map(RoleId::Worker).collect();
        let (net, mut rx) = Network::new(cluster(p), TimeBase::new(true), &roles, None);
        let pump = tokio::spawn(net.clone().pump());
        let mut tasks = Vec::new();
        for (rank, &role) in roles.iter().enumerate() {
            let ctx = RoleContext::new(
                role,
                RuntimeKind::Sim,
                net.clone(),
                rx.remove(&role).unwrap(),
                p,
                1,
                StragglerSet::default(),
                crate::memory::DeviceMemory::unbounded(role),
            );
            let fut = body(rank, ctx);
            tasks.push(tokio::spawn(async move {
                let (out, ctx) = fut.await;
                let t = ctx.now();
                (out, t)
            }));
        }
        let mut outs = Vec::new();
        for t in tasks {
            outs.push(t.await.unwrap());
        }
        net.close();
        pump.await.unwrap();
        (outs, net.traffic())
    })
}

/// Deterministic pseudo-random test values (splitmix64-based).
fn values(seed: u64, n: usize, integers: bool) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let h = crate::stragglers::splitmix64(seed * 1_000_003 + i as u64);
            if integers {
                (h % 201) as f32 - 100.0
            } else {
                (h >> 40) as f32 / (1u64 << 24) as f32 - 0.5
            }
        })
        .collect()
}

fn ring_sum(
    p: u32,
    n: usize,
    integers: bool,
    buckets: Vec<(usize, usize)>,
) -> (Vec<Vec<f32>>, Vec<f64>, Traffic) {
    let group = Group::workers(p).unwrap();
    let (outs, traffic) = simulate(p, move |rank, mut ctx| {
        let group = group.clone();
        let buckets = buckets.clone();
        async move {
            let mut buf = Payload::Real(values(rank as u64, n, integers));
            allreduce_sum(&mut ctx, &group, 7, &mut buf, &buckets)
                .await
                .unwrap();
            let Payload::Real(v) = buf else {
                panic!("real in, real out")
            };
            (v, ctx)
        }
    });
    let times = outs.iter().map(|(_, t)| *t).collect();
    (outs.into_iter().map(|(v, _)| v).collect(), times, traffic)
}

#[test]
fn ring_allreduce_equals_a_direct_sum_for_many_group_sizes_and_uneven_chunks() {
    for (p, n) in [
        (1, 5),
        (2, 8),
        (3, 10),
        (4, 13),
        (5, 3),
        (6, 6),
        (7, 100),
        (8, 1),
    ] {
        let (results, _, _) = ring_sum(p, n, true, Vec::new());
        let direct: Vec<f32> = (0..n)
            .map(|i| (0..p).map(|r| values(r as u64, n, true)[i]).sum())
            .collect();
        for (rank, got) in results.iter().enumerate() {
            // Integer values: every summation order is exact, so the sum must match exactly.
            assert_eq!(got, &direct, "P = {p}, n = {n}, rank {rank}");
        }
    }
}

#[test]
fn ring_allreduce_of_real_values_is_close_to_the_direct_sum_and_identical_everywhere() {
    let (p, n) = (5u32, 1003);
    let (results, _, _) = ring_sum(p, n, false, vec![(0, 400), (400, 401), (401, 1003)]);
    for (i, got) in results[0].iter().enumerate() {
        let direct: f64 = (0..p).map(|r| values(r as u64, n, false)[i] as f64).sum();
        assert!((*got as f64 - direct).abs() < 1e-5, "element {i}");
    }
    for r in &results[1..] {
        assert_eq!(r, &results[0], "every member ends with the same bits");
    }
    // Deterministic: a second run gives the same bits.
    let (again, _, _) = ring_sum(p, n, false, vec![(0, 400), (400, 401), (401, 1003)]);
    assert_eq!(again, results);
}

#[test]
fn each_member_sends_two_p_minus_one_over_p_of_the_buffer() {
    let (p, n) = (4u32, 1000usize);
    let (_, _, traffic) = ring_sum(p, n, true, Vec::new());
    for r in 0..p {
        let me = RoleId::Worker(r);
        let right = RoleId::Worker((r + 1) % p);
        let sent: Vec<_> = traffic.iter().filter(|((f, _), _)| *f == me).collect();
        assert_eq!(
            sent.len(),
            1,
            "a ring member only talks to its right neighbour"
        );
        assert_eq!(*sent[0].0, (me, right));
        let link = sent[0].1;
        assert_eq!(link.messages, 2 * (p as u64 - 1));
        let payload = link.bytes - link.messages * HEADER_BYTES;
        // 2(P−1)/P · 4n bytes = 2 · 3/4 · 4000.
        assert_eq!(payload, 2 * (p as u64 - 1) * 4 * n as u64 / p as u64);
    }
    // Uneven chunks: 10 elements over 3 members: chunks 4, 3, 3; each member sends every chunk
    // but one in each phase, 2·10 − (its two skipped chunks) elements in total.
    let (_, _, traffic) = ring_sum(3, 10, true, Vec::new());
    let total: u64 = traffic
        .values()
        .map(|l| l.bytes - l.messages * HEADER_BYTES)
        .sum();
    assert_eq!(
        total,
        4 * 2 * 2 * 10,
        "2(P−1)/P · n per member, summed over members"
    );
}

#[test]
fn ring_time_emerges_from_the_link_model() {
    let (p, n) = (4u32, 250_000usize); // 1 MB buffer
    let (_, times, _) = ring_sum(p, n, true, Vec::new());
    let chunk_bytes = (4 * n / p as usize) as f64 + HEADER_BYTES as f64;
    let per_step = chunk_bytes / BYTES_PER_S + LATENCY_S;
    let expected = 2.0 * (p as f64 - 1.0) * per_step;
    for t in times {
        assert!(
            (t - expected).abs() < 1e-6,
            "finished at {t}, model says {expected}"
        );
    }
    // Two buckets pay the per-hop latency twice as often for the same bytes.
    let (_, times2, _) = ring_sum(p, n, true, vec![(0, n / 2), (n / 2, n)]);
    let extra = 2.0 * (p as f64 - 1.0) * (LATENCY_S + HEADER_BYTES as f64 / BYTES_PER_S);
    assert!((times2[0] - expected - extra).abs() < 1e-6, "{}", times2[0]);
}

#[test]
fn allreduce_on_a_subset_leaves_the_others_out() {
    let group = Group::workers(5).unwrap().subset(&[4, 1, 3]).unwrap();
    let (outs, traffic) = simulate(5, move |rank, mut ctx| {
        let group = group.clone();
        async move {
            let mut buf = Payload::Real(vec![rank as f32 + 1.0; 4]);
            if group.rank_of(ctx.id()).is_some() {
                allreduce_sum(&mut ctx, &group, 1, &mut buf, &[])
                    .await
                    .unwrap();
            }
            (buf, ctx)
        }
    });
    for (rank, (buf, _)) in outs.iter().enumerate() {
        let want = if [4, 1, 3].contains(&rank) {
            5.0 + 2.0 + 4.0
        } else {
            rank as f32 + 1.0
        };
        assert_eq!(buf, &Payload::Real(vec![want; 4]), "rank {rank}");
    }
    for (from, to) in traffic.keys() {
        for r in [from, to] {
            assert!(![RoleId::Worker(0), RoleId::Worker(2)].contains(r));
        }
    }
}

#[test]
fn virtual_buffers_cost_the_same_as_real_ones() {
    let (p, n) = (3u32, 3000usize);
    let (_, real_times, real_traffic) = ring_sum(p, n, true, Vec::new());
    let group = Group::workers(p).unwrap();
    let (outs, traffic) = simulate(p, move |_, mut ctx| {
        let group = group.clone();
        async move {
            let mut buf = Payload::Virtual { elems: n as u64 };
            allreduce_sum(&mut ctx, &group, 3, &mut buf, &[])
                .await
                .unwrap();
            (buf, ctx)
        }
    });
    assert_eq!(traffic, real_traffic);
    for ((buf, t), rt) in outs.iter().zip(real_times) {
        assert_eq!(buf, &Payload::Virtual { elems: n as u64 });
        assert_eq!(*t, rt);
    }
}

#[test]
fn broadcast_reaches_every_member_from_any_root() {
    for (p, root) in [(1u32, 0usize), (2, 1), (5, 0), (5, 3), (8, 7)] {
        let group = Group::workers(p).unwrap();
        let (outs, traffic) = simulate(p, move |rank, mut ctx| {
            let group = group.clone();
            async move {
                let mut buf = if rank == root {
                    Payload::Real(vec![1.5, -2.0, 3.25])
                } else {
                    Payload::Real(vec![0.0; 3])
                };
                broadcast(&mut ctx, &group, root, 9, &mut buf)
                    .await
                    .unwrap();
                (buf, ctx)
            }
        });
        for (buf, _) in &outs {
            assert_eq!(
                buf,
                &Payload::Real(vec![1.5, -2.0, 3.25]),
                "P = {p}, root {root}"
            );
        }
        let messages: u64 = traffic.values().map(|l| l.messages).sum();
        assert_eq!(
            messages,
            p as u64 - 1,
            "each non-root receives exactly once"
        );
    }
}

#[test]
fn alltoall_delivers_each_part_to_its_rank() {
    let p = 4u32;
    let group = Group::workers(p).unwrap();
    let (outs, traffic) = simulate(p, move |rank, mut ctx| {
        let group = group.clone();
        async move {
            let parts = (0..p as usize)
                .map(|j| Payload::Real(vec![(10 * rank + j) as f32; j + 1]))
                .collect();
            let got = alltoall(&mut ctx, &group, 4, parts).await.unwrap();
            (got, ctx)
        }
    });
    for (j, (got, _)) in outs.iter().enumerate() {
        for (src, part) in got.iter().enumerate() {
            assert_eq!(part, &Payload::Real(vec![(10 * src + j) as f32; j + 1]));
        }
    }
    assert_eq!(traffic.len(), (p * (p - 1)) as usize);
}

#[test]
fn bad_groups_and_calls_are_errors() {
    assert!(Group::new(Vec::new()).is_err());
    let e = Group::new(vec![RoleId::Worker(1), RoleId::Worker(1)]).unwrap_err();
    assert!(e.to_string().contains("worker-1"), "{e}");
    let g = Group::workers(3).unwrap();
    assert!(g
        .subset(&[0, 3])
        .unwrap_err()
        .to_string()
        .contains("rank 3"));
    let parts = g.split(|r| r % 2);
    assert_eq!(parts[0].members(), &[RoleId::Worker(0), RoleId::Worker(2)]);
    assert_eq!(parts[1].members(), &[RoleId::Worker(1)]);
    // A role outside the group, and buckets that do not tile the buffer.
    let small = Group::workers(2).unwrap();
    let (outs, _) = simulate(3, move |rank, ctx| {
        let small = small.clone();
        async move {
            let buf = Payload::Real(vec![0.0; 4]);
            let r = if rank == 2 {
                RingAllreduce::start(&ctx, &small, 0, buf, &[]).map(|_| ())
            } else {
                RingAllreduce::start(&ctx, &small, 0, buf, &[(0, 3)]).map(|_| ())
            };
            (r.map_err(|e| e.to_string()), ctx)
        }
    });
    assert!(outs[2].0.as_ref().unwrap_err().contains("not in"));
    assert!(outs[0].0.as_ref().unwrap_err().contains("do not tile"));
}

#[test]
fn fusion_round_trips_and_buckets_whole_tensors() {
    let f = Fusion::new(vec![3, 5, 2, 10], 1, 8);
    assert_eq!(f.len(), 21);
    // 3+5 fill a bucket, 2 starts the next, 10 is too big to join and gets its own, + 1 scalar.
    assert_eq!(f.buckets(), &[(0, 8), (8, 10), (10, 21)]);
    let tensors = vec![vec![1.0; 3], vec![2.0; 5], vec![3.0; 2], vec![4.0; 10]];
    let Payload::Real(flat) = f.fuse(&tensors, &[9.0]) else {
        panic!()
    };
    let (back, extras) = f.views(&flat);
    assert_eq!(back, tensors.iter().map(Vec::as_slice).collect::<Vec<_>>());
    assert_eq!(extras, &[9.0]);
    assert_eq!(Fusion::new(Vec::new(), 1, 8).buckets(), &[(0, 1)]);
}

/// Fusing tensors on their device gives the host buffer's bits, whatever the tensors' shapes,
/// and the tensor views cut it back; a wrong count or size is named.
#[test]
fn fused_tensors_are_the_host_buffer_and_their_views_cut_it_back() {
    use candle_core::{Device, Tensor};
    let f = Fusion::new(vec![3, 5, 2, 10], 1, 8);
    let host: Vec<Vec<f32>> = [3, 5, 2, 10]
        .iter()
        .enumerate()
        .map(|(k, &n)| values(k as u64, n, false))
        .collect();
    let shapes: [&[usize]; 4] = [&[3], &[5], &[2, 1], &[2, 5]];
    let tensors: Vec<Tensor> = host
        .iter()
        .zip(shapes)
        .map(|(v, s)| Tensor::from_slice(v, s, &Device::Cpu).unwrap())
        .collect();
    let Payload::Real(flat) = f.fuse(&host, &[2.5]) else {
        panic!("a real buffer")
    };
    let fused = f.fuse_tensors(&tensors, &[2.5]).unwrap();
    assert_eq!(fused.dims(), &[21]);
    let got: Vec<u32> = fused
        .to_vec1::<f32>()
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect();
    assert_eq!(got, flat.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
    let views = f.tensor_views(&fused).unwrap();
    let (host_views, _) = f.views(&flat);
    for (k, (v, h)) in views.iter().zip(host_views).enumerate() {
        assert_eq!(v.to_vec1::<f32>().unwrap(), h, "tensor {k}");
    }
    let e = f
        .fuse_tensors(&tensors[..3], &[2.5])
        .unwrap_err()
        .to_string();
    assert!(e.contains("3 tensors for a layout of 4"), "{e}");
    let mut wrong = tensors.clone();
    wrong[1] = Tensor::zeros(4, candle_core::DType::F32, &Device::Cpu).unwrap();
    let e = f.fuse_tensors(&wrong, &[2.5]).unwrap_err().to_string();
    assert!(e.contains("4 elements for tensor 1 of 5"), "{e}");
    assert!(f
        .tensor_views(&Tensor::zeros(9, candle_core::DType::F32, &Device::Cpu).unwrap())
        .is_err());
}

/// The ring reduces a device tensor through the host to the sum it gives the same values as a
/// host buffer, on the tensor's device, sending the same bytes; tensors of any shapes summed in
/// one call come back as the same sums.
#[test]
fn the_ring_sums_a_tensor_as_it_sums_its_values() {
    let (p, n) = (3u32, 11usize);
    let group = Group::workers(p).unwrap();
    let buckets = vec![(0, 4), (4, n)];
    let (outs, _) = simulate(p, move |rank, mut ctx| {
        let (group, buckets) = (group.clone(), buckets.clone());
        async move {
            let mut allreduce = Allreduce::ring(group);
            assert!(!allreduce.sums_on_device());
            let own = values(rank as u64, n, false);
            let t = candle_core::Tensor::from_slice(&own, n, &candle_core::Device::Cpu).unwrap();
            let (sum, sent) = allreduce
                .sum_tensor(&mut ctx, 1, &t, &buckets)
                .await
                .unwrap();
            let mut host = Payload::Real(own.clone());
            let host_sent = allreduce
                .sum(&mut ctx, 2, &mut host, &buckets)
                .await
                .unwrap();
            let Payload::Real(host) = host else {
                panic!("real in, real out")
            };
            let sum = sum.to_vec1::<f32>().unwrap();
            // Shaped tensors summed in one call come back flat, in order, as the same sums.
            let cpu = candle_core::Device::Cpu;
            let shaped = [
                candle_core::Tensor::from_slice(&own[..6], (2, 3), &cpu).unwrap(),
                candle_core::Tensor::from_slice(&own[6..], n - 6, &cpu).unwrap(),
            ];
            let (parts, _) = allreduce.sum_tensors(&mut ctx, 3, &shaped).await.unwrap();
            let joined: Vec<f32> = parts
                .iter()
                .flat_map(|t| t.to_vec1::<f32>().unwrap())
                .collect();
            ((sum, host, joined, sent, host_sent), ctx)
        }
    });
    for (rank, ((sum, host, joined, sent, host_sent), _)) in outs.iter().enumerate() {
        assert_eq!(sum, host, "rank {rank}");
        assert_eq!(joined, host, "rank {rank}: the shaped tensors' sums");
        assert_eq!(sent, host_sent, "rank {rank}");
    }
}

/// RNA §5.1.3 (R8 iii): the update uses Σg/Σw with the learning rate scaled by Σw/P.
#[test]
fn apply_reduced_averages_over_contributors_and_scales_the_learning_rate() {
    let sgd = crate::optim::OptimizerConfig::Sgd {
        lr: 0.4,
        momentum: 0.0,
        weight_decay: 0.0,
    };
    let fusion = Fusion::new(vec![2], 1, 1 << 20);
    // Two of four workers contributed gradients [1, 3] and [3, 5]; two sent null (zeros, w = 0).
    let contributions = [
        ([1.0, 3.0], 1.0),
        ([0.0, 0.0], 0.0),
        ([3.0, 5.0], 1.0),
        ([0.0, 0.0], 0.0),
    ];
    let sum: Vec<f32> = (0..3)
        .map(|i| {
            contributions
                .iter()
                .map(|(g, w)| if i < 2 { g[i] } else { *w })
                .sum()
        })
        .collect();
    let mut m = LocalModel::from_values(Some(vec![vec![10.0, 10.0]]), sgd.clone(), every(100));
    let w = m
        .apply_reduced(&fusion, Payload::Real(sum), 4, 0.0)
        .unwrap();
    assert_eq!(w, 2.0);
    // ḡ = (Σg)/Σw = [2, 4]; γ_k = (Σw/P)·lr = 0.2.
    assert_eq!(
        m.params().unwrap(),
        &[vec![10.0 - 0.2 * 2.0, 10.0 - 0.2 * 4.0]]
    );
    // Null contributors add zero: the same update from the two contributors alone, with the
    // same learning-rate share, gives the same bits.
    let mut alone = LocalModel::from_values(Some(vec![vec![10.0, 10.0]]), sgd, every(100));
    alone.apply(&[vec![2.0, 4.0]], 0.5, 0.0).unwrap();
    assert_eq!(alone.params(), m.params());
    // Nobody contributed: no step, but the round counts.
    let mut idle = LocalModel::from_values(
        Some(vec![vec![1.0, 1.0]]),
        crate::optim::OptimizerConfig::default(),
        every(1),
    );
    assert_eq!(
        idle.apply_reduced(&fusion, Payload::Real(vec![0.0; 3]), 4, 0.0)
            .unwrap(),
        0.0
    );
    assert_eq!(
        (idle.params().unwrap(), idle.updates()),
        (&[vec![1.0, 1.0]][..], 1)
    );
}

/// Snapshots every `n` updates, none by time.
fn every(n: u64) -> crate::ps::SnapshotPlan {
    crate::ps::SnapshotPlan {
        every: n,
        every_s: None,
    }
}

/// Runs one alltoall of `elems` per split among `p` members where member r arrives after
/// `skew[r]` seconds, asynchronously (Sven) or blocking (NCCL-style); each member's splits are
/// `[r * 100 + j]` repeated. Returns, per member, its parts, done time and staged bytes.
fn skewed_alltoall(
    p: u32,
    elems: usize,
    skew: &[f64],
    blocking: bool,
) -> Vec<((Vec<Payload>, u64), f64)> {
    let skew = skew.to_vec();
    let (outs, _) = simulate(p, move |rank, mut ctx| {
        let delay = skew[rank];
        async move {
            let group = Group::workers(p).unwrap();
            let splits: Vec<Payload> = (0..p as usize)
                .map(|j| Payload::Real(vec![(rank * 100 + j) as f32; elems]))
                .collect();
            // Arrive after `delay`, taking whatever comes meanwhile.
            let op = 77;
            let out = if blocking {
                let mut a = BlockingAlltoall::new(&ctx, &group, op).unwrap();
                let until = ctx.now() + delay;
                while let Some(env) = ctx.recv_until(until).await.unwrap() {
                    a.on_message(&ctx, env).unwrap();
                }
                a.arrive(&ctx, splits).unwrap();
                while !a.is_done() {
                    let env = ctx.recv_matching(|e| a.wants(e)).await.unwrap();
                    a.on_message(&ctx, env).unwrap();
                }
                (a.into_parts(), 0)
            } else {
                let mut a = AsyncAlltoall::new(&ctx, &group, op).unwrap();
                let until = ctx.now() + delay;
                while let Some(env) = ctx.recv_until(until).await.unwrap() {
                    a.on_message(&ctx, env).unwrap();
                }
                a.scatter(&ctx, splits).unwrap();
                while !a.is_done() {
                    let env = ctx.recv_matching(|e| a.wants(e)).await.unwrap();
                    a.on_message(&ctx, env).unwrap();
                }
                let staged = a.staged_bytes();
                (a.into_parts(), staged)
            };
            (out, ctx)
        }
    });
    outs
}

#[test]
fn both_alltoalls_deliver_split_j_of_member_r_to_member_j() {
    for blocking in [false, true] {
        let outs = skewed_alltoall(4, 3, &[0.0, 2e-3, 1e-3, 0.0], blocking);
        for (j, ((parts, _), _)) in outs.iter().enumerate() {
            for (r, part) in parts.iter().enumerate() {
                assert_eq!(
                    part,
                    &Payload::Real(vec![(r * 100 + j) as f32; 3]),
                    "blocking {blocking}: member {j}'s part from {r}"
                );
            }
        }
    }
}

#[test]
fn the_async_alltoall_finishes_early_members_sooner_and_equals_blocking_without_skew() {
    // 1 MB splits: 1 ms on a 1 GB/s NIC.
    let elems = 250_000;
    let skew = [0.0, 0.0, 0.0, 5e-3];
    let asy = skewed_alltoall(4, elems, &skew, false);
    let blk = skewed_alltoall(4, elems, &skew, true);
    // Blocking: nobody can finish before the last arrival plus a transfer.
    for (_, t) in &blk {
        assert!(*t >= 5e-3 + 1e-3, "blocking member done at {t}");
    }
    // Asynchronous: the three early members exchanged among themselves before the late one came,
    // so the late member's splits are all that is left (it finishes right after its own sends).
    let mean = |o: &[((Vec<Payload>, u64), f64)]| o.iter().map(|(_, t)| t).sum::<f64>() / 4.0;
    let times = |o: &[((Vec<Payload>, u64), f64)]| o.iter().map(|(_, t)| *t).collect::<Vec<_>>();
    assert!(
        mean(&asy) < mean(&blk),
        "{:?} vs {:?}",
        times(&asy),
        times(&blk)
    );
    // The late member found every other split already staged: 3 splits of 1 MB.
    // The late member found splits already staged (each waits there until it arrives), and
    // finishes soon after its arrival instead of after a whole exchange; the early ones staged
    // nothing (they arrived first).
    assert!(asy[3].0 .1 >= elems as u64 * 4, "{}", asy[3].0 .1);
    assert!(
        asy[3].1 < 5e-3 + 1e-3 && asy[3].1 < blk[3].1,
        "{:?}",
        times(&asy)
    );
    for early in &asy[..3] {
        assert_eq!(early.0 .1, 0);
    }
    // Without skew the two take the same time, up to the arrival announcements' latency (which
    // member finishes first may differ: the order sends meet on the NICs).
    let asy = skewed_alltoall(4, elems, &[0.0; 4], false);
    let blk = skewed_alltoall(4, elems, &[0.0; 4], true);
    let (a, b) = (mean(&asy), mean(&blk));
    assert!(
        b >= a && b - a <= 2.0 * LATENCY_S + 1e-9,
        "{:?} vs {:?}",
        times(&asy),
        times(&blk)
    );
}

#[test]
fn a_split_from_a_member_twice_or_the_wrong_count_is_an_error() {
    let (outs, _) = simulate(2, |rank, ctx| async move {
        let group = Group::workers(2).unwrap();
        let mut a = AsyncAlltoall::new(&ctx, &group, 5).unwrap();
        let wrong = a.scatter(&ctx, vec![Payload::Real(vec![1.0])]).is_err();
        let _ = rank;
        (wrong, ctx)
    });
    assert!(outs.iter().all(|(wrong, _)| *wrong));
}
