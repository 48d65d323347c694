//! Inception-V4 (Szegedy et al. 2016, "Inception-v4, Inception-ResNet and the Impact of Residual
//! Connections on Learning", Figs. 3–9) on 299 × 299 ImageNet: the stem, 4 × Inception-A,
//! Reduction-A, 7 × Inception-B, Reduction-B, 3 × Inception-C, global average pool and a
//! 1536 → 1000 fc. Dymem's largest nonlinear model (its feature maps are over 90% of training
//! memory).
//!
//! The layout follows timm's `inception_v4` (ported from the TF-slim reference): every
//! convolution is a `BasicConv2d`, a bias-free conv (`<name>.conv.weight`) followed by
//! batch-norm (`<name>.bn.gamma`, `<name>.bn.beta`); convolutions are valid-padded unless the
//! paper marks them same-padded. 42,679,816 parameters (timm's count) and ≈ 12.25 GMACs per
//! sample. Layers use TF-slim's block names: the stem's `Conv2d_1a_3x3`, `Conv2d_2a_3x3`,
//! `Conv2d_2b_3x3`, `Mixed_3a`, `Mixed_4a`, `Mixed_5a`; Inception-A `Mixed_5b`–`Mixed_5e`,
//! Reduction-A `Mixed_6a`, Inception-B `Mixed_6b`–`Mixed_6h`, Reduction-B `Mixed_7a`,
//! Inception-C `Mixed_7b`–`Mixed_7d`; and `fc` (global average pool, dropout, fc). An
//! Inception-C block's two split branches (1 × 3 and 3 × 1 heads) join the block's one
//! concatenation directly, which carries the same channels in the same order as timm's nested
//! concatenations.

use super::builder::{Layer, Net, Shape};
use super::inception::{cbn, cbn_sq};
use super::ModelProfile;

/// Horizontal and vertical 1 × 7 kernels with their same-padding.
const K7: [((u64, u64), (u64, u64)); 2] = [((1, 7), (0, 3)), ((7, 1), (3, 0))];
/// Horizontal and vertical 1 × 3 kernels with their same-padding.
const K3: [((u64, u64), (u64, u64)); 2] = [((1, 3), (0, 1)), ((3, 1), (1, 0))];

/// Mixed_3a: a 3 × 3 / 2 max-pool beside a 3 × 3 / 2 convolution (147 → 73).
fn mixed_3a(l: &mut Layer, n: &str, x: Shape) -> Shape {
    let p = l.pool(x, 3, 2, 0, false);
    let c = cbn_sq(l, &format!("{n}.conv"), x, 96, 3, 2, 0);
    l.concat(&[p, c])
}

/// Mixed_4a: 1 × 1 → 3 × 3 beside 1 × 1 → 1 × 7 → 7 × 1 → 3 × 3 (73 → 71).
fn mixed_4a(l: &mut Layer, n: &str, x: Shape) -> Shape {
    let [(h, ph), (v, pv)] = K7;
    let b0 = cbn_sq(l, &format!("{n}.branch0_0"), x, 64, 1, 1, 0);
    let b0 = cbn_sq(l, &format!("{n}.branch0_1"), b0, 96, 3, 1, 0);
    let b1 = cbn_sq(l, &format!("{n}.branch1_0"), x, 64, 1, 1, 0);
    let b1 = cbn(l, &format!("{n}.branch1_1"), b1, 64, h, 1, ph);
    let b1 = cbn(l, &format!("{n}.branch1_2"), b1, 64, v, 1, pv);
    let b1 = cbn_sq(l, &format!("{n}.branch1_3"), b1, 96, 3, 1, 0);
    l.concat(&[b0, b1])
}

/// Mixed_5a: a 3 × 3 / 2 convolution beside a 3 × 3 / 2 max-pool (71 → 35).
fn mixed_5a(l: &mut Layer, n: &str, x: Shape) -> Shape {
    let c = cbn_sq(l, &format!("{n}.conv"), x, 192, 3, 2, 0);
    let p = l.pool(x, 3, 2, 0, false);
    l.concat(&[c, p])
}

/// Inception-A (35 × 35, 384 channels): 1 × 1, 1 × 1 → 3 × 3, 1 × 1 → 3 × 3 → 3 × 3, and
/// average pool → 1 × 1, 96 channels each.
fn inception_a(l: &mut Layer, n: &str, x: Shape) -> Shape {
    let b0 = cbn_sq(l, &format!("{n}.branch0"), x, 96, 1, 1, 0);
    let b1 = cbn_sq(l, &format!("{n}.branch1_0"), x, 64, 1, 1, 0);
    let b1 = cbn_sq(l, &format!("{n}.branch1_1"), b1, 96, 3, 1, 1);
    let b2 = cbn_sq(l, &format!("{n}.branch2_0"), x, 64, 1, 1, 0);
    let b2 = cbn_sq(l, &format!("{n}.branch2_1"), b2, 96, 3, 1, 1);
    let b2 = cbn_sq(l, &format!("{n}.branch2_2"), b2, 96, 3, 1, 1);
    let b3 = l.pool(x, 3, 1, 1, false);
    let b3 = cbn_sq(l, &format!("{n}.branch3"), b3, 96, 1, 1, 0);
    l.concat(&[b0, b1, b2, b3])
}

/// Reduction-A (35 → 17, 384 → 1024 channels): 3 × 3 / 2, 1 × 1 → 3 × 3 → 3 × 3 / 2, and a
/// 3 × 3 / 2 max-pool.
fn reduction_a(l: &mut Layer, n: &str, x: Shape) -> Shape {
    let b0 = cbn_sq(l, &format!("{n}.branch0"), x, 384, 3, 2, 0);
    let b1 = cbn_sq(l, &format!("{n}.branch1_0"), x, 192, 1, 1, 0);
    let b1 = cbn_sq(l, &format!("{n}.branch1_1"), b1, 224, 3, 1, 1);
    let b1 = cbn_sq(l, &format!("{n}.branch1_2"), b1, 256, 3, 2, 0);
    let b2 = l.pool(x, 3, 2, 0, false);
    l.concat(&[b0, b1, b2])
}

/// Inception-B (17 × 17, 1024 channels): 1 × 1, a 1 × 7 / 7 × 1 pair, a doubled 7 × 1 / 1 × 7
/// pair, and average pool → 1 × 1.
fn inception_b(l: &mut Layer, n: &str, x: Shape) -> Shape {
    let [(h, ph), (v, pv)] = K7;
    let b0 = cbn_sq(l, &format!("{n}.branch0"), x, 384, 1, 1, 0);
    let b1 = cbn_sq(l, &format!("{n}.branch1_0"), x, 192, 1, 1, 0);
    let b1 = cbn(l, &format!("{n}.branch1_1"), b1, 224, h, 1, ph);
    let b1 = cbn(l, &format!("{n}.branch1_2"), b1, 256, v, 1, pv);
    let b2 = cbn_sq(l, &format!("{n}.branch2_0"), x, 192, 1, 1, 0);
    let b2 = cbn(l, &format!("{n}.branch2_1"), b2, 192, v, 1, pv);
    let b2 = cbn(l, &format!("{n}.branch2_2"), b2, 224, h, 1, ph);
    let b2 = cbn(l, &format!("{n}.branch2_3"), b2, 224, v, 1, pv);
    let b2 = cbn(l, &format!("{n}.branch2_4"), b2, 256, h, 1, ph);
    let b3 = l.pool(x, 3, 1, 1, false);
    let b3 = cbn_sq(l, &format!("{n}.branch3"), b3, 128, 1, 1, 0);
    l.concat(&[b0, b1, b2, b3])
}

/// Reduction-B (17 → 8, 1024 → 1536 channels): 1 × 1 → 3 × 3 / 2, 1 × 1 → 1 × 7 → 7 × 1 →
/// 3 × 3 / 2, and a 3 × 3 / 2 max-pool.
fn reduction_b(l: &mut Layer, n: &str, x: Shape) -> Shape {
    let [(h, ph), (v, pv)] = K7;
    let b0 = cbn_sq(l, &format!("{n}.branch0_0"), x, 192, 1, 1, 0);
    let b0 = cbn_sq(l, &format!("{n}.branch0_1"), b0, 192, 3, 2, 0);
    let b1 = cbn_sq(l, &format!("{n}.branch1_0"), x, 256, 1, 1, 0);
    let b1 = cbn(l, &format!("{n}.branch1_1"), b1, 256, h, 1, ph);
    let b1 = cbn(l, &format!("{n}.branch1_2"), b1, 320, v, 1, pv);
    let b1 = cbn_sq(l, &format!("{n}.branch1_3"), b1, 320, 3, 2, 0);
    let b2 = l.pool(x, 3, 2, 0, false);
    l.concat(&[b0, b1, b2])
}

/// Inception-C (8 × 8, 1536 channels): 1 × 1; 1 × 1 split into 1 × 3 and 3 × 1 heads;
/// 1 × 1 → 3 × 1 → 1 × 3 split into 1 × 3 and 3 × 1 heads; average pool → 1 × 1.
fn inception_c(l: &mut Layer, n: &str, x: Shape) -> Shape {
    let [(h, ph), (v, pv)] = K3;
    let b0 = cbn_sq(l, &format!("{n}.branch0"), x, 256, 1, 1, 0);
    let b1 = cbn_sq(l, &format!("{n}.branch1_0"), x, 384, 1, 1, 0);
    let b1a = cbn(l, &format!("{n}.branch1_1a"), b1, 256, h, 1, ph);
    let b1b = cbn(l, &format!("{n}.branch1_1b"), b1, 256, v, 1, pv);
    let b2 = cbn_sq(l, &format!("{n}.branch2_0"), x, 384, 1, 1, 0);
    let b2 = cbn(l, &format!("{n}.branch2_1"), b2, 448, v, 1, pv);
    let b2 = cbn(l, &format!("{n}.branch2_2"), b2, 512, h, 1, ph);
    let b2a = cbn(l, &format!("{n}.branch2_3a"), b2, 256, h, 1, ph);
    let b2b = cbn(l, &format!("{n}.branch2_3b"), b2, 256, v, 1, pv);
    let b3 = l.pool(x, 3, 1, 1, false);
    let b3 = cbn_sq(l, &format!("{n}.branch3"), b3, 256, 1, 1, 0);
    l.concat(&[b0, b1a, b1b, b2a, b2b, b3])
}

/// Inception-V4: 23 layers, ≈ 42.68 M parameters, ≈ 12.25 GMACs per 299 × 299 sample.
pub fn inception_v4() -> ModelProfile {
    let mut net = Net::new(
        "inception-v4",
        "3x299x299 (ImageNet, 1000 classes)",
        Shape::new(3, 299, 299),
        false,
    );
    net.layer("Conv2d_1a_3x3", |l, x| {
        cbn_sq(l, "Conv2d_1a_3x3", x, 32, 3, 2, 0)
    });
    net.layer("Conv2d_2a_3x3", |l, x| {
        cbn_sq(l, "Conv2d_2a_3x3", x, 32, 3, 1, 0)
    });
    net.layer("Conv2d_2b_3x3", |l, x| {
        cbn_sq(l, "Conv2d_2b_3x3", x, 64, 3, 1, 1)
    });
    net.layer("Mixed_3a", |l, x| mixed_3a(l, "Mixed_3a", x));
    net.layer("Mixed_4a", |l, x| mixed_4a(l, "Mixed_4a", x));
    net.layer("Mixed_5a", |l, x| mixed_5a(l, "Mixed_5a", x));
    for n in ["Mixed_5b", "Mixed_5c", "Mixed_5d", "Mixed_5e"] {
        net.layer(n, |l, x| inception_a(l, n, x));
    }
    net.layer("Mixed_6a", |l, x| reduction_a(l, "Mixed_6a", x));
    for n in [
        "Mixed_6b", "Mixed_6c", "Mixed_6d", "Mixed_6e", "Mixed_6f", "Mixed_6g", "Mixed_6h",
    ] {
        net.layer(n, |l, x| inception_b(l, n, x));
    }
    net.layer("Mixed_7a", |l, x| reduction_b(l, "Mixed_7a", x));
    for n in ["Mixed_7b", "Mixed_7c", "Mixed_7d"] {
        net.layer(n, |l, x| inception_c(l, n, x));
    }
    net.layer("fc", |l, x| {
        let x = l.global_pool(x);
        l.fc("fc", x, 1000)
    });
    net.finish()
}
