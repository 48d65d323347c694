//! Multinomial logistic regression on ImageNet LLC features, the MLR workload of the Harlap
//! thesis (§2.3: 64k samples, d = 21,504 features, 1000 classes; each gradient touches the whole
//! model). One fully connected layer: 21.5 M parameters (86 MB).

use super::builder::{Net, Shape};
use super::ModelProfile;

/// Feature dimension of the LLC encoding.
const FEATURES: u64 = 21_504;
/// ImageNet classes.
const CLASSES: u64 = 1_000;

/// MLR over ImageNet LLC features: one 21,504 × 1,000 fc layer with bias.
pub fn mlr_imagenet() -> ModelProfile {
    let mut net = Net::new(
        "mlr-imagenet",
        "21504 LLC features (ImageNet, 1000 classes)",
        Shape::new(FEATURES, 1, 1),
        true,
    );
    net.layer("fc", |l, x| l.fc("fc", x, CLASSES));
    net.finish()
}
