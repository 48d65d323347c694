//! Reading PipeDream's per-layer profiles (`graph.txt`, written by its profiler, the planner's
//! input) as per-layer measurements: each module's forward and backward milliseconds at the
//! profile's minibatch, with the cost facts ([`LayerCost`]) derived from the module's
//! description and the activation and parameter sizes the profile records.
//!
//! A profile is a list of node lines and edge lines:
//!
//! ```text
//! node4 -- Conv2d(64, 64, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1)) -- forward_compute_time=46.201, backward_compute_time=113.330, activation_size=1644167168.000, parameter_size=147712.000
//! <TAB>node3 -- node4
//! ```
//!
//! An edge line starts with a tab. Times are milliseconds for the whole minibatch;
//! `activation_size` is the bytes of the module's output for the whole minibatch;
//! `parameter_size` its parameter bytes. A module's input is what its predecessors output (the
//! edges).
//!
//! Modules measured at zero time (views, in-place adds, concatenations PipeDream does not time)
//! carry nothing to fit and are left out; so is the `Input` node, whose time is the data loader's
//! (host work, not the device's). Module kinds the cost facts do not know are left out and
//! counted, so that a profile of another model still reads.

use crate::cost::{ArithKind, LayerCost};
use std::collections::BTreeMap;

/// One profiled module: its name in the profile, its cost facts per sample, and its measured
/// forward + backward seconds at the profile's minibatch.
#[derive(Clone, Debug, PartialEq)]
pub struct ProfiledLayer {
    /// `nodeN Kind`, for tables and errors.
    pub name: String,
    /// Cost facts per sample.
    pub cost: LayerCost,
    /// Forward + backward seconds of the whole minibatch.
    pub seconds: f64,
}

/// What a profile held: the layers that can be fitted and the kinds left out, with counts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProfileLayers {
    /// Layers with a positive measured time and known cost facts.
    pub layers: Vec<ProfiledLayer>,
    /// Module kinds left out because the cost facts do not know them, with how many.
    pub unknown_kinds: BTreeMap<String, usize>,
}

/// A node line as the profile writes it.
struct Node {
    description: String,
    forward_ms: f64,
    backward_ms: f64,
    activation_bytes: f64,
    parameter_bytes: f64,
}

/// Reads a PipeDream profile of a minibatch of `batch` samples; an error names the line (from 1)
/// and what is wrong with it.
pub fn parse_graph(text: &str, batch: u32) -> Result<ProfileLayers, String> {
    if batch == 0 {
        return Err("batch must be at least 1".into());
    }
    let mut nodes: BTreeMap<String, Node> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut inputs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let at = |reason: String| format!("line {}: {reason}", i + 1);
        if line.trim().is_empty() {
            continue;
        }
        let parts: Vec<&str> = line.trim().split(" -- ").collect();
        match parts.as_slice() {
            [from, to] if line.starts_with('\t') => {
                inputs
                    .entry(to.to_string())
                    .or_default()
                    .push(from.to_string());
            }
            [id, description, fields] => {
                let node = node(description, fields).map_err(at)?;
                if nodes.insert(id.to_string(), node).is_some() {
                    return Err(at(format!("node {id} appears twice")));
                }
                order.push(id.to_string());
            }
            _ => {
                return Err(at(
                    "neither a node (`id -- module -- fields`) nor an edge (`\\tfrom -- to`)"
                        .into(),
                ))
            }
        }
    }
    for (to, froms) in &inputs {
        for id in froms.iter().chain(std::iter::once(to)) {
            if !nodes.contains_key(id) {
                return Err(format!("an edge names {id}, which has no node line"));
            }
        }
    }
    let b = f64::from(batch);
    let mut out = ProfileLayers::default();
    for id in order {
        let n = &nodes[&id];
        let seconds = (n.forward_ms + n.backward_ms) / 1e3;
        let kind = n.description.split('(').next().unwrap_or("").trim();
        if seconds <= 0.0 || kind == "Input" {
            continue;
        }
        let output = n.activation_bytes / 4.0 / b;
        let input: f64 = inputs
            .get(&id)
            .map(|froms| {
                froms
                    .iter()
                    .map(|f| nodes[f].activation_bytes / 4.0 / b)
                    .sum()
            })
            .unwrap_or(0.0);
        let Some(cost) = cost_of(kind, &n.description, input, output, n.parameter_bytes)
            .map_err(|e| format!("{id} ({kind}): {e}"))?
        else {
            *out.unknown_kinds.entry(kind.to_string()).or_default() += 1;
            continue;
        };
        out.layers.push(ProfiledLayer {
            name: format!("{id} {kind}"),
            cost,
            seconds,
        });
    }
    Ok(out)
}

/// Parses a node line's module description and fields.
fn node(description: &str, fields: &str) -> Result<Node, String> {
    let mut values: BTreeMap<&str, f64> = BTreeMap::new();
    for field in fields.split(", ") {
        let (key, value) = field
            .split_once('=')
            .ok_or_else(|| format!("field \"{field}\" is not key=value"))?;
        let v: f64 = value
            .trim()
            .parse()
            .map_err(|_| format!("{key} = \"{value}\" is not a number"))?;
        if !(v.is_finite() && v >= 0.0) {
            return Err(format!("{key} = {v} must be a number >= 0"));
        }
        values.insert(key.trim(), v);
    }
    let get = |key: &str| {
        values
            .get(key)
            .copied()
            .ok_or_else(|| format!("no {key} field"))
    };
    Ok(Node {
        description: description.to_string(),
        forward_ms: get("forward_compute_time")?,
        backward_ms: get("backward_compute_time")?,
        activation_bytes: get("activation_size")?,
        parameter_bytes: get("parameter_size")?,
    })
}

/// The cost facts of a module of kind `kind` reading `input` and writing `output` elements per
/// sample, with `param_bytes` of parameters; `None` for a kind the cost facts do not know.
fn cost_of(
    kind: &str,
    description: &str,
    input: f64,
    output: f64,
    param_bytes: f64,
) -> Result<Option<LayerCost>, String> {
    let mut cost = LayerCost::default();
    let (input_elems, output_elems) = (input.round() as u64, output.round() as u64);
    match kind {
        "Conv2d" => {
            let args = args_of(description);
            let channels = |i: usize| -> Result<u64, String> {
                args.get(i)
                    .and_then(|a| a.trim().parse().ok())
                    .ok_or_else(|| format!("no channel count in \"{description}\""))
            };
            let in_channels = channels(0)?;
            let kernel = pair(description, "kernel_size")?;
            let stride = pair(description, "stride").unwrap_or((1, 1));
            let groups = keyword(description, "groups").unwrap_or(1).max(1);
            let macs = output_elems * (in_channels / groups) * kernel.0 * kernel.1;
            cost.arith(
                ArithKind::of_conv(kernel, stride),
                macs,
                input_elems,
                output_elems,
            );
        }
        "Linear" => {
            let inf = keyword(description, "in_features")
                .ok_or_else(|| format!("no in_features in \"{description}\""))?;
            let outf = keyword(description, "out_features")
                .ok_or_else(|| format!("no out_features in \"{description}\""))?;
            cost.arith(ArithKind::Matmul, inf * outf, input_elems, output_elems);
        }
        "ReLU" => cost.activation(output_elems),
        "BatchNorm2d" | "MaxPool2d" | "AvgPool2d" | "AdaptiveAvgPool2d" | "Add" | "Concat"
        | "Dropout" => cost.elementwise(input_elems, output_elems),
        _ => return Ok(None),
    }
    cost.param_bytes = param_bytes;
    Ok(Some(cost))
}

/// The comma-separated arguments inside a description's outer parentheses.
fn args_of(description: &str) -> Vec<&str> {
    let inner = description
        .split_once('(')
        .map(|(_, rest)| rest.trim_end().trim_end_matches(')'))
        .unwrap_or("");
    inner.split(", ").collect()
}

/// `key=(a, b)` in a description.
fn pair(description: &str, key: &str) -> Result<(u64, u64), String> {
    let bad = || format!("no {key}=(a, b) in \"{description}\"");
    let rest = description
        .split_once(&format!("{key}=("))
        .map(|(_, r)| r)
        .ok_or_else(bad)?;
    let inner = rest.split_once(')').map(|(i, _)| i).ok_or_else(bad)?;
    let (a, b) = inner.split_once(',').ok_or_else(bad)?;
    match (a.trim().parse(), b.trim().parse()) {
        (Ok(a), Ok(b)) => Ok((a, b)),
        _ => Err(bad()),
    }
}

/// `key=n` in a description.
fn keyword(description: &str, key: &str) -> Option<u64> {
    let rest = description.split_once(&format!("{key}="))?.1;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROFILE: &str = "\
node1 -- Input -- forward_compute_time=17.972, backward_compute_time=0.000, activation_size=1204224.000, parameter_size=0.000
node2 -- Conv2d(3, 64, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1)) -- forward_compute_time=2.0, backward_compute_time=3.0, activation_size=25690112.000, parameter_size=7168.000
node3 -- ReLU(inplace) -- forward_compute_time=0.5, backward_compute_time=0.5, activation_size=25690112.000, parameter_size=0.000
node4 -- View(-1) -- forward_compute_time=0.000, backward_compute_time=0.000, activation_size=25690112.000, parameter_size=0.000
node5 -- Linear(in_features=100352, out_features=10, bias=True) -- forward_compute_time=1.0, backward_compute_time=1.0, activation_size=80.000, parameter_size=4014120.000
node6 -- Softmax2d() -- forward_compute_time=0.1, backward_compute_time=0.1, activation_size=80.000, parameter_size=0.000
\tnode1 -- node2
\tnode2 -- node3
\tnode3 -- node4
\tnode4 -- node5
\tnode5 -- node6
";

    #[test]
    fn derives_cost_facts_from_sizes_and_edges() {
        // Batch 2 of 3x224x224 images.
        let p = parse_graph(PROFILE, 2).unwrap();
        let names: Vec<&str> = p.layers.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["node2 Conv2d", "node3 ReLU", "node5 Linear"]);
        let conv = &p.layers[0];
        // 64 x 224 x 224 outputs per sample, each 3 x 3 x 3 multiply-adds.
        assert_eq!(conv.cost.conv3x3_flops, 2.0 * 64.0 * 224.0 * 224.0 * 27.0);
        assert_eq!(
            conv.cost.activation_bytes,
            4.0 * (3.0 + 64.0) * 224.0 * 224.0
        );
        assert_eq!(conv.cost.param_bytes, 7168.0);
        assert!((conv.seconds - 5e-3).abs() < 1e-12);
        let fc = &p.layers[2];
        assert_eq!(fc.cost.matmul_flops, 2.0 * 100352.0 * 10.0);
        assert_eq!(p.unknown_kinds.get("Softmax2d"), Some(&1));
    }

    #[test]
    fn strided_and_pointwise_convolutions_are_their_own_kinds() {
        let text = "\
node1 -- Conv2d(8, 8, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1)) -- forward_compute_time=1, backward_compute_time=1, activation_size=512, parameter_size=0
node2 -- Conv2d(8, 16, kernel_size=(1, 1), stride=(1, 1), bias=False) -- forward_compute_time=1, backward_compute_time=1, activation_size=1024, parameter_size=0
\tnode1 -- node2
";
        let p = parse_graph(text, 1).unwrap();
        assert!(p.layers[0].cost.conv_flops > 0.0 && p.layers[0].cost.conv3x3_flops == 0.0);
        assert_eq!(p.layers[1].cost.pointwise_flops, 2.0 * 16.0 * 16.0 * 8.0);
    }

    #[test]
    fn bad_lines_are_named() {
        let err = parse_graph("node1 -- ReLU -- forward_compute_time=x", 1).unwrap_err();
        assert!(err.starts_with("line 1:"), "{err}");
        let err = parse_graph("node1 -- ReLU() -- forward_compute_time=1", 1).unwrap_err();
        assert!(err.contains("no backward_compute_time"), "{err}");
        let err = parse_graph("garbage", 1).unwrap_err();
        assert!(err.contains("neither a node"), "{err}");
        let err = parse_graph("\tnode1 -- node2\n", 1).unwrap_err();
        assert!(err.contains("node1"), "{err}");
        assert!(parse_graph(PROFILE, 0).is_err());
    }
}
