//! The two families of graph networks, built node by node: a tiny ResNet (basic blocks, with
//! or without batch-norm) and a stack of Inception-A blocks (the thesis's Fig. 4.2).

use super::spec::{GraphNetSpec, NetNode, NetOp};
use crate::error::{Result, WorkloadError};

/// Appends nodes, inferring each one's output shape.
struct Builder {
    nodes: Vec<NetNode>,
}

impl Builder {
    fn new(image: [usize; 3]) -> Builder {
        Builder {
            nodes: vec![NetNode {
                name: "input".into(),
                op: NetOp::Input,
                inputs: Vec::new(),
                shape: image.to_vec(),
            }],
        }
    }

    fn shape(&self, i: usize) -> &[usize] {
        &self.nodes[i].shape
    }

    fn push(&mut self, name: String, op: NetOp, inputs: Vec<usize>, shape: Vec<usize>) -> usize {
        self.nodes.push(NetNode {
            name,
            op,
            inputs,
            shape,
        });
        self.nodes.len() - 1
    }

    /// A `kernel` × `kernel` convolution (3: padding 1; 1: padding 0) of `x`.
    fn conv(
        &mut self,
        name: String,
        x: usize,
        out_ch: usize,
        kernel: usize,
        stride: usize,
        bias: bool,
    ) -> usize {
        let s = self.shape(x);
        // (h + 2p − k) / s + 1 is (h − 1) / s + 1 for both kernels.
        let shape = vec![out_ch, (s[1] - 1) / stride + 1, (s[2] - 1) / stride + 1];
        let op = NetOp::Conv {
            in_ch: s[0],
            out_ch,
            kernel,
            stride,
            bias,
        };
        self.push(name, op, vec![x], shape)
    }

    /// An operation that keeps its input's shape.
    fn same(&mut self, name: String, op: NetOp, x: usize) -> usize {
        let shape = self.shape(x).to_vec();
        self.push(name, op, vec![x], shape)
    }

    fn bn(&mut self, name: String, x: usize) -> usize {
        let channels = self.shape(x)[0];
        self.same(name, NetOp::BatchNorm { channels }, x)
    }

    fn relu(&mut self, name: String, x: usize) -> usize {
        self.same(name, NetOp::Relu, x)
    }

    /// A convolution, then batch-norm (when `bn`; the convolution then has no bias).
    fn conv_bn(
        &mut self,
        name: &str,
        x: usize,
        out_ch: usize,
        kernel: usize,
        stride: usize,
        bn: bool,
    ) -> usize {
        let c = self.conv(name.to_string(), x, out_ch, kernel, stride, !bn);
        if bn {
            self.bn(format!("{name}_bn"), c)
        } else {
            c
        }
    }

    /// Global average pooling, then the classifier.
    fn head(mut self, x: usize, classes: usize) -> GraphNetSpec {
        let c = self.shape(x)[0];
        let gap = self.push("gap".into(), NetOp::GlobalAvgPool, vec![x], vec![c]);
        let fc = NetOp::Fc {
            inputs: c,
            outputs: classes,
        };
        self.push("fc".into(), fc, vec![gap], vec![classes]);
        GraphNetSpec {
            nodes: self.nodes,
            classes,
        }
    }
}

fn check_image(image: [usize; 3]) -> Result<()> {
    if image.contains(&0) {
        return Err(WorkloadError::config(
            "model.image",
            format!("{image:?}"),
            "every dimension must be >= 1",
        ));
    }
    Ok(())
}

impl GraphNetSpec {
    /// A tiny ResNet on `image` (`[c, h, w]`) for `classes` classes: a 3 × 3 stem convolution
    /// (→ batch-norm) → ReLU, then per stage `blocks[s]` basic blocks of width `channels[s]`
    /// (conv 3 × 3 → (bn) → ReLU → conv 3 × 3 → (bn) → add the shortcut → ReLU); every stage
    /// after the first starts with stride 2 and a 1 × 1 stride-2 projection shortcut (→ bn);
    /// then global average pooling and a fully-connected classifier. Convolutions followed by
    /// batch-norm have no bias. Errors name the config key at fault.
    pub fn tiny_resnet(
        image: [usize; 3],
        blocks: &[usize],
        channels: &[usize],
        bn: bool,
        classes: usize,
    ) -> Result<GraphNetSpec> {
        if blocks.is_empty() {
            return Err(WorkloadError::config(
                "model.blocks",
                "[]",
                "needs at least one stage",
            ));
        }
        if channels.len() != blocks.len() || channels.contains(&0) {
            return Err(WorkloadError::config(
                "model.channels",
                format!("{channels:?}"),
                format!(
                    "needs one width >= 1 per stage of model.blocks ({} stages)",
                    blocks.len()
                ),
            ));
        }
        check_image(image)?;
        let mut b = Builder::new(image);
        let mut x = b.conv_bn("stem_conv", 0, channels[0], 3, 1, bn);
        x = b.relu("stem_relu".into(), x);
        for (s, (&n, &width)) in blocks.iter().zip(channels).enumerate() {
            for k in 0..n {
                let stride = if s > 0 && k == 0 { 2 } else { 1 };
                let shape = b.shape(x).to_vec();
                if stride == 2 && (shape[1] < 2 || shape[2] < 2) {
                    return Err(WorkloadError::config(
                        "model.image",
                        format!("{image:?}"),
                        format!(
                            "too small for {} stride-2 stages (model.blocks = {blocks:?})",
                            blocks.iter().skip(1).filter(|&&n| n > 0).count()
                        ),
                    ));
                }
                let p = format!("s{}b{}", s + 1, k + 1);
                let c1 = b.conv_bn(&format!("{p}_conv1"), x, width, 3, stride, bn);
                let r1 = b.relu(format!("{p}_relu1"), c1);
                let main = b.conv_bn(&format!("{p}_conv2"), r1, width, 3, 1, bn);
                let shortcut = if stride != 1 || shape[0] != width {
                    b.conv_bn(&format!("{p}_proj"), x, width, 1, stride, bn)
                } else {
                    x
                };
                let out_shape = b.shape(main).to_vec();
                let add = b.push(
                    format!("{p}_add"),
                    NetOp::Add,
                    vec![main, shortcut],
                    out_shape,
                );
                x = b.relu(format!("{p}_relu"), add);
            }
        }
        Ok(b.head(x, classes))
    }

    /// A stack of `blocks` Inception-A blocks of width `width` on `image`: a 3 × 3 stem
    /// convolution → ReLU of `width` channels, then per block the input forks into four
    /// branches joined by a channel concatenation (the thesis's Fig. 4.2): average pool
    /// 3 × 3 → 1 × 1; 1 × 1; 1 × 1 → 3 × 3; 1 × 1 → 3 × 3 → 3 × 3, every convolution followed by
    /// a ReLU. Each branch ends in `width` channels (its 1 × 1 reductions have
    /// `⌈width / 2⌉`), so a block outputs `4 · width`. Then global average pooling and a
    /// fully-connected classifier. Errors name the config key at fault.
    pub fn inception_stack(
        image: [usize; 3],
        blocks: usize,
        width: usize,
        classes: usize,
    ) -> Result<GraphNetSpec> {
        if blocks == 0 {
            return Err(WorkloadError::config(
                "model.blocks",
                blocks,
                "needs at least one block",
            ));
        }
        if width == 0 {
            return Err(WorkloadError::config("model.width", width, "must be >= 1"));
        }
        check_image(image)?;
        let reduce = width.div_ceil(2);
        let mut b = Builder::new(image);
        let stem = b.conv("stem_conv".into(), 0, width, 3, 1, true);
        let mut x = b.relu("stem_relu".into(), stem);
        for k in 1..=blocks {
            let p = format!("inc{k}");
            // Conv → ReLU, named `<p>_<name>` and `<p>_<name>_relu`.
            let cr = |b: &mut Builder, name: &str, x: usize, ch: usize, kernel: usize| {
                let c = b.conv(format!("{p}_{name}"), x, ch, kernel, 1, true);
                b.relu(format!("{p}_{name}_relu"), c)
            };
            let pool = b.same(format!("{p}_b1_pool"), NetOp::AvgPool3, x);
            let b1 = cr(&mut b, "b1_1x1", pool, width, 1);
            let b2 = cr(&mut b, "b2_1x1", x, width, 1);
            let r3 = cr(&mut b, "b3_1x1", x, reduce, 1);
            let b3 = cr(&mut b, "b3_3x3", r3, width, 3);
            let r4 = cr(&mut b, "b4_1x1", x, reduce, 1);
            let m4 = cr(&mut b, "b4_3x3a", r4, width, 3);
            let b4 = cr(&mut b, "b4_3x3b", m4, width, 3);
            let s = b.shape(b1).to_vec();
            x = b.push(
                format!("{p}_concat"),
                NetOp::Concat,
                vec![b1, b2, b3, b4],
                vec![4 * width, s[1], s[2]],
            );
        }
        Ok(b.head(x, classes))
    }

    /// A chain with no fork or join: conv 3 × 3 → ReLU → 2 × 2 max pool → conv 3 × 3 → bn →
    /// ReLU → global average pool → FC (for tests of a linear network).
    #[cfg(test)]
    pub(crate) fn chain(image: [usize; 3], channels: usize, classes: usize) -> GraphNetSpec {
        let mut b = Builder::new(image);
        let c1 = b.conv("conv1".into(), 0, channels, 3, 1, true);
        let r1 = b.relu("relu1".into(), c1);
        let s = b.shape(r1).to_vec();
        let pool = b.push(
            "pool".into(),
            NetOp::MaxPool2,
            vec![r1],
            vec![s[0], s[1] / 2, s[2] / 2],
        );
        let c2 = b.conv_bn("conv2", pool, channels, 3, 1, true);
        let r2 = b.relu("relu2".into(), c2);
        b.head(r2, classes)
    }
}
