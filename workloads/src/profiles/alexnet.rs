//! AlexNet in the single-tower 96-256-384-384-256 form of MXNet's `symbols/alexnet.py`
//! (no grouped convolutions), as used by the PSLD paper.
//!
//! Input is the classic 227 × 227 crop so that conv5's pooled output is 256 × 6 × 6 = 9216 and
//! fc6 is 9216 × 4096 (151 MB), the size in the PSLD spec's profile table (62.38 M parameters).
//! (MXNet's `valid` pooling on a 224 crop would give 5 × 5 and a smaller fc6.) LRN, ReLU, dropout
//! and the 3 × 3 / 2 max-pools are folded into the preceding weight layer. Layers and tensors
//! use the spec's names conv1–conv5, fc6–fc8 (MXNet itself calls the classifier fc1–fc3);
//! tensor order is `weight, bias` per layer in execution order.

use super::builder::{Net, Shape};
use super::ModelProfile;

/// What tells the two AlexNet layouts apart: input side, conv1's width and padding, and the
/// widths of conv2–conv5 (the kernels, strides, pools and classifier are shared).
struct Layout {
    name: &'static str,
    input: &'static str,
    side: u64,
    conv1: (u64, u64),
    widths: [u64; 4],
}

/// AlexNet (MXNet variant): 5 conv + 3 fc layers, 16 tensors, 62.38 M parameters.
pub fn alexnet() -> ModelProfile {
    build(&Layout {
        name: "alexnet",
        input: "3x227x227 (ImageNet, 1000 classes)",
        side: 227,
        conv1: (96, 0),
        widths: [256, 384, 384, 256],
    })
}

/// AlexNet as torchvision builds it (`torchvision.models.alexnet`, after the "one weird trick"
/// paper): 64-192-384-256-256 convolutions on a 224 × 224 input, 3 × 3 / 2 max-pools after
/// conv1, conv2 and conv5, an adaptive average pool to 6 × 6, and the 9216-4096-4096-1000
/// classifier; 61.10 M parameters, ≈ 0.71 GMACs. Same layer and tensor names as [`alexnet`].
/// It is the AlexNet of PyTorch measurements (the H200 calibration sweep).
pub fn alexnet_torchvision() -> ModelProfile {
    build(&Layout {
        name: "alexnet-tv",
        input: "3x224x224 (ImageNet, 1000 classes; torchvision layout)",
        side: 224,
        conv1: (64, 2),
        widths: [192, 384, 256, 256],
    })
}

/// The AlexNet stack of `layout`: conv1 11 × 11 / 4 and conv2 5 × 5 each followed by a
/// 3 × 3 / 2 max-pool, three 3 × 3 convolutions with a pool after the last, then fc6–fc8.
fn build(layout: &Layout) -> ModelProfile {
    let [w2, w3, w4, w5] = layout.widths;
    let (w1, pad1) = layout.conv1;
    let mut net = Net::new(
        layout.name,
        layout.input,
        Shape::new(3, layout.side, layout.side),
        true,
    );
    net.layer("conv1", |l, x| {
        let y = l.conv("conv1", x, w1, 11, 4, pad1);
        l.pool(y, 3, 2, 0, false)
    });
    net.layer("conv2", |l, x| {
        let y = l.conv("conv2", x, w2, 5, 1, 2);
        l.pool(y, 3, 2, 0, false)
    });
    net.layer("conv3", |l, x| l.conv("conv3", x, w3, 3, 1, 1));
    net.layer("conv4", |l, x| l.conv("conv4", x, w4, 3, 1, 1));
    net.layer("conv5", |l, x| {
        let y = l.conv("conv5", x, w5, 3, 1, 1);
        l.pool(y, 3, 2, 0, false)
    });
    net.layer("fc6", |l, x| l.fc("fc6", x, 4096));
    net.layer("fc7", |l, x| l.fc("fc7", x, 4096));
    net.layer("fc8", |l, x| l.fc("fc8", x, 1000));
    net.finish()
}
