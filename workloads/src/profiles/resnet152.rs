//! ResNet-152 for ImageNet, MXNet "v2" (pre-activation bottlenecks) like ResNet-50/101: He et
//! al. 2016 ("Identity Mappings in Deep Residual Networks"), as written in MXNet's
//! `symbols/resnet.py` with units 3-8-36-3 per stage. 463 tensors, 60.19 M parameters (the
//! published count is 60.2 M), ≈ 11.5 GMACs per 224 × 224 sample. Layers and tensor order are
//! those of [`super::resnet50`]: `stem`, one layer per unit `stageS_unitU`, `head`.

use super::resnet::mxnet_resnet;
use super::ModelProfile;

/// ResNet-152 (MXNet v2): units 3-8-36-3, 60.19 M parameters; the deepest residual net of the
/// memory-management evaluations, here in its ImageNet bottleneck form.
pub fn resnet152() -> ModelProfile {
    mxnet_resnet("resnet-152", [3, 8, 36, 3])
}
