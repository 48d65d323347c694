//! VGG-16 and VGG-19 (Simonyan & Zisserman, configurations D and E) on 224 × 224 ImageNet.
//!
//! Every convolution is 3 × 3, stride 1, padding 1, with a bias; each of the five stages ends in
//! a 2 × 2 / 2 max-pool, folded into the stage's last convolution layer. The classifier is
//! fc6 (25088 → 4096), fc7 (4096 → 4096) and fc8 (4096 → 1000), all with biases. Tensor order is
//! `weight, bias` per layer in execution order, which is also MXNet's `list_arguments` order.
//! One profile layer per weight layer: VGG-19 has 16 conv + 3 fc = 19 layers, the layer list the
//! Fela paper partitions (layers 1–8, 9–16, 17–19).

use super::builder::{Net, Shape};
use super::ModelProfile;

/// Convolution widths per stage for VGG-16 (configuration D).
const VGG16: [&[u64]; 5] = [
    &[64, 64],
    &[128, 128],
    &[256, 256, 256],
    &[512, 512, 512],
    &[512, 512, 512],
];

/// Convolution widths per stage for VGG-19 (configuration E).
const VGG19: [&[u64]; 5] = [
    &[64, 64],
    &[128, 128],
    &[256, 256, 256, 256],
    &[512, 512, 512, 512],
    &[512, 512, 512, 512],
];

fn vgg(name: &str, stages: &[&[u64]; 5]) -> ModelProfile {
    let mut net = Net::new(
        name,
        "3x224x224 (ImageNet, 1000 classes)",
        Shape::new(3, 224, 224),
        true,
    );
    for (s, widths) in stages.iter().enumerate() {
        for (i, &cout) in widths.iter().enumerate() {
            let lname = format!("conv{}_{}", s + 1, i + 1);
            let last = i + 1 == widths.len();
            net.layer(&lname, |l, x| {
                let y = l.conv(&lname, x, cout, 3, 1, 1);
                if last {
                    l.pool(y, 2, 2, 0, false)
                } else {
                    y
                }
            });
        }
    }
    net.layer("fc6", |l, x| l.fc("fc6", x, 4096));
    net.layer("fc7", |l, x| l.fc("fc7", x, 4096));
    net.layer("fc8", |l, x| l.fc("fc8", x, 1000));
    net.finish()
}

/// VGG-16: 13 conv + 3 fc layers, 32 tensors, 138.36 M parameters; the PSLD paper's most
/// communication-heavy model (fc6 alone is 411 MB).
pub fn vgg16() -> ModelProfile {
    vgg("vgg16", &VGG16)
}

/// VGG-19: 16 conv + 3 fc layers, 38 tensors, 143.67 M parameters; the Fela paper's model.
pub fn vgg19() -> ModelProfile {
    vgg("vgg19", &VGG19)
}
