//! Inception-V3 (Szegedy et al. 2016) on 299 × 299 ImageNet, the LB-BSP paper's large model.
//!
//! The layout and names follow torchvision's `inception_v3` (which matches the TF-slim
//! reference): every convolution is a `BasicConv2d`, i.e. a bias-free conv (`<name>.conv.weight`)
//! followed by batch-norm (`<name>.bn.gamma`, `<name>.bn.beta`). The **auxiliary classifier is
//! not included**: it only exists during training on the ImageNet recipe, is commonly disabled,
//! and the published 23.8 M parameter count excludes it (with it, torchvision reports 27.2 M).
//! Layers: the five stem convolutions (the two 3 × 3 / 2 max-pools folded into `Conv2d_2b_3x3`
//! and `Conv2d_4a_3x3`), the eleven `Mixed_*` blocks, and `fc` (global average pool, dropout,
//! 2048 → 1000). Tensor order is torchvision's `named_parameters` order.

use super::builder::{Layer, Net, Shape};
use super::ModelProfile;

/// A `BasicConv2d`: bias-free convolution plus batch-norm.
pub(super) fn cbn(
    l: &mut Layer,
    name: &str,
    x: Shape,
    cout: u64,
    k: (u64, u64),
    stride: u64,
    pad: (u64, u64),
) -> Shape {
    let y = l.conv2d(&format!("{name}.conv"), x, cout, k, (stride, stride), pad);
    l.bn(&format!("{name}.bn"), y)
}

/// A square `BasicConv2d`.
pub(super) fn cbn_sq(
    l: &mut Layer,
    name: &str,
    x: Shape,
    cout: u64,
    k: u64,
    stride: u64,
    pad: u64,
) -> Shape {
    cbn(l, name, x, cout, (k, k), stride, (pad, pad))
}

/// InceptionA (35 × 35): 1×1, 5×5, double 3×3 and pooled-projection branches.
fn inception_a(l: &mut Layer, n: &str, x: Shape, pool_features: u64) -> Shape {
    let b1 = cbn_sq(l, &format!("{n}.branch1x1"), x, 64, 1, 1, 0);
    let b5 = cbn_sq(l, &format!("{n}.branch5x5_1"), x, 48, 1, 1, 0);
    let b5 = cbn_sq(l, &format!("{n}.branch5x5_2"), b5, 64, 5, 1, 2);
    let b3 = cbn_sq(l, &format!("{n}.branch3x3dbl_1"), x, 64, 1, 1, 0);
    let b3 = cbn_sq(l, &format!("{n}.branch3x3dbl_2"), b3, 96, 3, 1, 1);
    let b3 = cbn_sq(l, &format!("{n}.branch3x3dbl_3"), b3, 96, 3, 1, 1);
    let bp = l.pool(x, 3, 1, 1, false);
    let bp = cbn_sq(l, &format!("{n}.branch_pool"), bp, pool_features, 1, 1, 0);
    l.concat(&[b1, b5, b3, bp])
}

/// InceptionB (35 → 17 grid reduction).
fn inception_b(l: &mut Layer, n: &str, x: Shape) -> Shape {
    let b3 = cbn_sq(l, &format!("{n}.branch3x3"), x, 384, 3, 2, 0);
    let bd = cbn_sq(l, &format!("{n}.branch3x3dbl_1"), x, 64, 1, 1, 0);
    let bd = cbn_sq(l, &format!("{n}.branch3x3dbl_2"), bd, 96, 3, 1, 1);
    let bd = cbn_sq(l, &format!("{n}.branch3x3dbl_3"), bd, 96, 3, 2, 0);
    let bp = l.pool(x, 3, 2, 0, false);
    l.concat(&[b3, bd, bp])
}

/// InceptionC (17 × 17) with factorised 1×7 / 7×1 convolutions of width `c7`.
fn inception_c(l: &mut Layer, n: &str, x: Shape, c7: u64) -> Shape {
    let (h, v) = ((1, 7), (7, 1));
    let (ph, pv) = ((0, 3), (3, 0));
    let b1 = cbn_sq(l, &format!("{n}.branch1x1"), x, 192, 1, 1, 0);
    let b7 = cbn_sq(l, &format!("{n}.branch7x7_1"), x, c7, 1, 1, 0);
    let b7 = cbn(l, &format!("{n}.branch7x7_2"), b7, c7, h, 1, ph);
    let b7 = cbn(l, &format!("{n}.branch7x7_3"), b7, 192, v, 1, pv);
    let bd = cbn_sq(l, &format!("{n}.branch7x7dbl_1"), x, c7, 1, 1, 0);
    let bd = cbn(l, &format!("{n}.branch7x7dbl_2"), bd, c7, v, 1, pv);
    let bd = cbn(l, &format!("{n}.branch7x7dbl_3"), bd, c7, h, 1, ph);
    let bd = cbn(l, &format!("{n}.branch7x7dbl_4"), bd, c7, v, 1, pv);
    let bd = cbn(l, &format!("{n}.branch7x7dbl_5"), bd, 192, h, 1, ph);
    let bp = l.pool(x, 3, 1, 1, false);
    let bp = cbn_sq(l, &format!("{n}.branch_pool"), bp, 192, 1, 1, 0);
    l.concat(&[b1, b7, bd, bp])
}

/// InceptionD (17 → 8 grid reduction).
fn inception_d(l: &mut Layer, n: &str, x: Shape) -> Shape {
    let b3 = cbn_sq(l, &format!("{n}.branch3x3_1"), x, 192, 1, 1, 0);
    let b3 = cbn_sq(l, &format!("{n}.branch3x3_2"), b3, 320, 3, 2, 0);
    let b7 = cbn_sq(l, &format!("{n}.branch7x7x3_1"), x, 192, 1, 1, 0);
    let b7 = cbn(l, &format!("{n}.branch7x7x3_2"), b7, 192, (1, 7), 1, (0, 3));
    let b7 = cbn(l, &format!("{n}.branch7x7x3_3"), b7, 192, (7, 1), 1, (3, 0));
    let b7 = cbn_sq(l, &format!("{n}.branch7x7x3_4"), b7, 192, 3, 2, 0);
    let bp = l.pool(x, 3, 2, 0, false);
    l.concat(&[b3, b7, bp])
}

/// InceptionE (8 × 8) with expanded 1×3 / 3×1 filter banks.
fn inception_e(l: &mut Layer, n: &str, x: Shape) -> Shape {
    let (h, v) = ((1, 3), (3, 1));
    let (ph, pv) = ((0, 1), (1, 0));
    let b1 = cbn_sq(l, &format!("{n}.branch1x1"), x, 320, 1, 1, 0);
    let b3 = cbn_sq(l, &format!("{n}.branch3x3_1"), x, 384, 1, 1, 0);
    let b3a = cbn(l, &format!("{n}.branch3x3_2a"), b3, 384, h, 1, ph);
    let b3b = cbn(l, &format!("{n}.branch3x3_2b"), b3, 384, v, 1, pv);
    let bd = cbn_sq(l, &format!("{n}.branch3x3dbl_1"), x, 448, 1, 1, 0);
    let bd = cbn_sq(l, &format!("{n}.branch3x3dbl_2"), bd, 384, 3, 1, 1);
    let bda = cbn(l, &format!("{n}.branch3x3dbl_3a"), bd, 384, h, 1, ph);
    let bdb = cbn(l, &format!("{n}.branch3x3dbl_3b"), bd, 384, v, 1, pv);
    let bp = l.pool(x, 3, 1, 1, false);
    let bp = cbn_sq(l, &format!("{n}.branch_pool"), bp, 192, 1, 1, 0);
    l.concat(&[b1, b3a, b3b, bda, bdb, bp])
}

/// Inception-V3 without the auxiliary head: 17 layers, ≈ 23.8 M parameters, ≈ 5.7 GMACs.
pub fn inception_v3() -> ModelProfile {
    let mut net = Net::new(
        "inception-v3",
        "3x299x299 (ImageNet, 1000 classes; no auxiliary head)",
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
        let y = cbn_sq(l, "Conv2d_2b_3x3", x, 64, 3, 1, 1);
        l.pool(y, 3, 2, 0, false)
    });
    net.layer("Conv2d_3b_1x1", |l, x| {
        cbn_sq(l, "Conv2d_3b_1x1", x, 80, 1, 1, 0)
    });
    net.layer("Conv2d_4a_3x3", |l, x| {
        let y = cbn_sq(l, "Conv2d_4a_3x3", x, 192, 3, 1, 0);
        l.pool(y, 3, 2, 0, false)
    });
    net.layer("Mixed_5b", |l, x| inception_a(l, "Mixed_5b", x, 32));
    net.layer("Mixed_5c", |l, x| inception_a(l, "Mixed_5c", x, 64));
    net.layer("Mixed_5d", |l, x| inception_a(l, "Mixed_5d", x, 64));
    net.layer("Mixed_6a", |l, x| inception_b(l, "Mixed_6a", x));
    net.layer("Mixed_6b", |l, x| inception_c(l, "Mixed_6b", x, 128));
    net.layer("Mixed_6c", |l, x| inception_c(l, "Mixed_6c", x, 160));
    net.layer("Mixed_6d", |l, x| inception_c(l, "Mixed_6d", x, 160));
    net.layer("Mixed_6e", |l, x| inception_c(l, "Mixed_6e", x, 192));
    net.layer("Mixed_7a", |l, x| inception_d(l, "Mixed_7a", x));
    net.layer("Mixed_7b", |l, x| inception_e(l, "Mixed_7b", x));
    net.layer("Mixed_7c", |l, x| inception_e(l, "Mixed_7c", x));
    net.layer("fc", |l, x| {
        let x = l.global_pool(x);
        l.fc("fc", x, 1000)
    });
    net.finish()
}
