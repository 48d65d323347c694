//! Residual networks: ResNet-50 / ResNet-101 for ImageNet as written in MXNet's
//! `symbols/resnet.py` (the PSLD paper's framework), and ResNet-32 for CIFAR-10 (He et al. 2016,
//! the LB-BSP paper's model).
//!
//! **ImageNet ResNets (MXNet, pre-activation "v2" bottlenecks).** The parameter list is exactly
//! MXNet's trainable `list_arguments` order, which the PSLD spec (§1.3) uses to reproduce its
//! Tables 1 and 2: `bn_data` (a BN on the raw input), `conv0` (7 × 7 / 2), `bn0`, then per unit
//! `bn1, conv1, bn2, conv2, bn3, conv3` and, for the first unit of each stage, the projection
//! shortcut `sc`; finally the closing `bn1` and `fc1`. Convolutions have no bias; BN contributes
//! `gamma` and `beta` (running statistics are not trainable and are not listed); `fc1` has weight
//! and bias. That gives 157 tensors / 25.55 M parameters (ResNet-50) and 310 / 44.54 M
//! (ResNet-101). The stride-2 sits on the 3 × 3 convolution, as in MXNet (4.1 GMACs for
//! ResNet-50). Layers: `stem` (bn_data, conv0, bn0, 3 × 3 / 2 max-pool), one layer per residual
//! unit `stageS_unitU`, and `head` (bn1, ReLU, global average pool, fc1). ResNet-152 (units
//! 3-8-36-3) is built by the same function in its own module. A unit's residual add reads the
//! branch and the shortcut: the unit's input, or the `sc` projection in a stage's first unit.
//!
//! **ResNet-32 (CIFAR-10).** 3 × 3 stem conv to 16 channels, then 3 stages × 5 basic blocks of
//! two 3 × 3 convolutions (16, 32, 64 channels; stages 2 and 3 start with stride 2), each conv
//! followed by BN; option-A (parameter-free, zero-padded identity) shortcuts as in the original
//! paper; global average pool and a 64 → 10 fc. 0.46 M parameters.

use super::builder::{Layer, Net, Shape};
use super::ModelProfile;

/// One MXNet pre-activation bottleneck unit, appending its tensors in `list_arguments` order.
fn bottleneck(
    l: &mut Layer,
    name: &str,
    x: Shape,
    out: u64,
    stride: u64,
    dim_match: bool,
) -> Shape {
    let mid = out / 4;
    let a = l.bn(&format!("{name}_bn1"), x);
    let y = l.conv(&format!("{name}_conv1"), a, mid, 1, 1, 0);
    let y = l.bn(&format!("{name}_bn2"), y);
    let y = l.conv(&format!("{name}_conv2"), y, mid, 3, stride, 1);
    let y = l.bn(&format!("{name}_bn3"), y);
    let y = l.conv(&format!("{name}_conv3"), y, out, 1, 1, 0);
    let shortcut = if dim_match {
        x
    } else {
        l.conv(&format!("{name}_sc"), a, out, 1, stride, 0)
    };
    assert_eq!(shortcut, y, "shortcut shape mismatch in {name}");
    l.residual_add(y, shortcut)
}

/// MXNet ImageNet ResNet with bottleneck units per stage `units`.
pub(super) fn mxnet_resnet(name: &str, units: [usize; 4]) -> ModelProfile {
    const FILTERS: [u64; 4] = [256, 512, 1024, 2048];
    let mut net = Net::new(
        name,
        "3x224x224 (ImageNet, 1000 classes)",
        Shape::new(3, 224, 224),
        false,
    );
    net.layer("stem", |l, x| {
        let x = l.bn("bn_data", x);
        let y = l.conv("conv0", x, 64, 7, 2, 3);
        let y = l.bn("bn0", y);
        l.pool(y, 3, 2, 1, false)
    });
    for (s, (&n, &out)) in units.iter().zip(FILTERS.iter()).enumerate() {
        for u in 0..n {
            let lname = format!("stage{}_unit{}", s + 1, u + 1);
            let stride = if s > 0 && u == 0 { 2 } else { 1 };
            net.layer(&lname, |l, x| bottleneck(l, &lname, x, out, stride, u != 0));
        }
    }
    net.layer("head", |l, x| {
        let y = l.bn("bn1", x);
        let y = l.global_pool(y);
        l.fc("fc1", y, 1000)
    });
    net.finish()
}

/// ResNet-50 (MXNet v2): units 3-4-6-3, 157 tensors, 25.55 M parameters, ≈ 4.1 GMACs.
pub fn resnet50() -> ModelProfile {
    mxnet_resnet("resnet-50", [3, 4, 6, 3])
}

/// ResNet-101 (MXNet v2): units 3-4-23-3, 310 tensors, 44.54 M parameters; the model of the PSLD
/// paper's Tables 1 and 2.
pub fn resnet101() -> ModelProfile {
    mxnet_resnet("resnet-101", [3, 4, 23, 3])
}

/// ResNet-32 for CIFAR-10 (6n + 2 with n = 5, option-A shortcuts): 0.46 M parameters.
pub fn resnet32() -> ModelProfile {
    cifar_resnet32("resnet-32", true)
}

/// ResNet-32 without batch-normalisation: the network of the Dymem thesis's fragmentation study
/// (§4.3.3, Fig. 4.7: 15 residual blocks, batch 100), where nothing but convolutions, ReLUs and
/// residual joins sits between the blocks.
pub fn resnet32_plain() -> ModelProfile {
    cifar_resnet32("resnet-32-nobn", false)
}

/// The CIFAR ResNet-32, with or without a batch-norm after every convolution.
fn cifar_resnet32(name: &str, bn: bool) -> ModelProfile {
    const WIDTHS: [u64; 3] = [16, 32, 64];
    let mut net = Net::new(
        name,
        "3x32x32 (CIFAR-10, 10 classes)",
        Shape::new(3, 32, 32),
        false,
    );
    let norm = |l: &mut Layer, name: &str, y: Shape| if bn { l.bn(name, y) } else { y };
    net.layer("stem", |l, x| {
        let y = l.conv("conv1", x, 16, 3, 1, 1);
        norm(l, "bn1", y)
    });
    for (s, &width) in WIDTHS.iter().enumerate() {
        for b in 0..5 {
            let lname = format!("stage{}_block{}", s + 1, b + 1);
            let stride = if s > 0 && b == 0 { 2 } else { 1 };
            net.layer(&lname, |l, x| {
                let y = l.conv(&format!("{lname}_conv1"), x, width, 3, stride, 1);
                let y = norm(l, &format!("{lname}_bn1"), y);
                let y = l.conv(&format!("{lname}_conv2"), y, width, 3, 1, 1);
                let y = norm(l, &format!("{lname}_bn2"), y);
                l.residual_add(y, x)
            });
        }
    }
    net.layer("head", |l, x| {
        let x = l.global_pool(x);
        l.fc("fc", x, 10)
    });
    net.finish()
}
