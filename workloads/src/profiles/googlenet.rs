//! GoogLeNet (Inception v1, Szegedy et al. 2015) as in the paper and Caffe's `bvlc_googlenet`:
//! convolutions with biases, no batch-norm, 5 × 5 branches, Caffe `ceil`-mode 3 × 3 / 2
//! max-pools; the two **auxiliary classifiers are not included** (training-only). ≈ 7.0 M
//! parameters (the paper's table rounds to 6.8 M).
//!
//! The Fela paper trains GoogLeNet on inputs of shape (B, 3, 32, 32) and splits it into 12
//! layers (1–4, 5–9, 10–12). This profile has exactly those 12 layers — `conv1`, `conv2`
//! (3 × 3 reduce + 3 × 3), `inception_3a` … `inception_5b`, `loss3_classifier` — with every
//! max-pool and LRN folded into the preceding layer and the final average pool into the
//! classifier layer. The final pool is global (7 × 7 at 224), as in torchvision, so the same
//! architecture also runs at 32 × 32: [`googlenet`] takes the input side; the parameters are
//! identical at any input size, only FLOPs and activations shrink. (The specs do not pin down
//! Fela's exact 32 × 32 variant; CIFAR-specific re-designs with a 3 × 3 stem also exist.)

use super::builder::{Layer, Net, Shape};
use super::ModelProfile;

/// One inception module: 1×1, 3×3-reduce → 3×3, 5×5-reduce → 5×5, pool → pool-projection.
/// Tensor order follows the Caffe prototxt.
fn inception(l: &mut Layer, n: &str, x: Shape, widths: [u64; 6]) -> Shape {
    let [c1, r3, c3, r5, c5, pp] = widths;
    let b1 = l.conv(&format!("{n}/1x1"), x, c1, 1, 1, 0);
    let b3 = l.conv(&format!("{n}/3x3_reduce"), x, r3, 1, 1, 0);
    let b3 = l.conv(&format!("{n}/3x3"), b3, c3, 3, 1, 1);
    let b5 = l.conv(&format!("{n}/5x5_reduce"), x, r5, 1, 1, 0);
    let b5 = l.conv(&format!("{n}/5x5"), b5, c5, 5, 1, 2);
    let bp = l.pool(x, 3, 1, 1, true);
    let bp = l.conv(&format!("{n}/pool_proj"), bp, pp, 1, 1, 0);
    l.concat(&[b1, b3, b5, bp])
}

/// Inception module widths (1×1, 3×3 reduce, 3×3, 5×5 reduce, 5×5, pool proj) and whether a
/// 3 × 3 / 2 max-pool follows, from Table 1 of the GoogLeNet paper.
const MODULES: [(&str, [u64; 6], bool); 9] = [
    ("inception_3a", [64, 96, 128, 16, 32, 32], false),
    ("inception_3b", [128, 128, 192, 32, 96, 64], true),
    ("inception_4a", [192, 96, 208, 16, 48, 64], false),
    ("inception_4b", [160, 112, 224, 24, 64, 64], false),
    ("inception_4c", [128, 128, 256, 24, 64, 64], false),
    ("inception_4d", [112, 144, 288, 32, 64, 64], false),
    ("inception_4e", [256, 160, 320, 32, 128, 128], true),
    ("inception_5a", [256, 160, 320, 32, 128, 128], false),
    ("inception_5b", [384, 192, 384, 48, 128, 128], false),
];

/// GoogLeNet for `input_hw × input_hw` RGB inputs and 1000 classes (224 is the ImageNet
/// original; 32 is the Fela paper's input). Panics if the input is below 31 × 31: each of the
/// four 3 × 3 / 2 max-pools needs an input of at least 2 × 2.
pub fn googlenet(input_hw: u64) -> ModelProfile {
    let name = if input_hw == 224 {
        "googlenet".to_owned()
    } else {
        format!("googlenet-{input_hw}")
    };
    let mut net = Net::new(
        &name,
        &format!("3x{input_hw}x{input_hw} (1000 classes; no auxiliary heads)"),
        Shape::new(3, input_hw, input_hw),
        true,
    );
    net.layer("conv1", |l, x| {
        let y = l.conv("conv1/7x7_s2", x, 64, 7, 2, 3);
        l.pool(y, 3, 2, 0, true)
    });
    net.layer("conv2", |l, x| {
        let y = l.conv("conv2/3x3_reduce", x, 64, 1, 1, 0);
        let y = l.conv("conv2/3x3", y, 192, 3, 1, 1);
        l.pool(y, 3, 2, 0, true)
    });
    for (n, widths, pooled) in MODULES {
        net.layer(n, |l, x| {
            let y = inception(l, n, x, widths);
            if pooled {
                l.pool(y, 3, 2, 0, true)
            } else {
                y
            }
        });
    }
    net.layer("loss3_classifier", |l, x| {
        let x = l.global_pool(x);
        l.fc("loss3/classifier", x, 1000)
    });
    net.finish()
}
