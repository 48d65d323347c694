//! What FlexRR's learning rate means, and the start-up warning when it is outside the range that
//! trains.
//!
//! FlexRR's workers apply `lr · g` for every unit they process and the servers add every worker's
//! deltas up, so one clock moves the model by about `lr × workers × units` times a mean gradient:
//! the rate an engine strategy's plain SGD on the same global batch would need to move as far per
//! clock (exactly, in BSP RR without read-my-writes: tested). A rate tuned for the engine's
//! strategies is therefore `workers × units` times too large here (the engine's default 0.1 with
//! 16 workers × 100 units acts as 160). [`equivalent_rate`] gives this product;
//! [`rate_warning`] compares it with the highest value measured to train each model kind, and
//! [`crate::Flexrr`] logs the warning at start-up.

use crate::options::Resolved;
use concord_engine::model::ModelConfig;
use concord_engine::optim::OptimizerConfig;
use concord_engine::prelude::*;

/// The highest equivalent rate (`lr × workers × units`) measured to train an MLP (and assumed
/// for the other neural networks, CNN and VGG-like) on the teacher data: 3.2 trains best (94 %
/// test accuracy in 30 clocks, at 8 or 16 workers and 20 or 100 units alike), 6.4 still trains
/// (93 %), 8 spikes the loss and ends at 86 %, 16 and above diverge.
pub const NEURAL_NET_MAX: f64 = 5.0;

/// The highest equivalent rate measured to train softmax regression (MLR, convex) on the teacher
/// data: 160 trains (lr 0.1 with 16 workers × 100 units, 94.6 % in 30 clocks); 320 spikes the
/// loss to 5, 800 to 48.
pub const MLR_MAX: f64 = 200.0;

/// `lr × workers × units` (the mean units per worker under `uneven`): the rate plain SGD on the
/// global batch would need to move the model as far per clock.
pub fn equivalent_rate(config: &RunConfig, resolved: &Resolved) -> f64 {
    let units = resolved.units_per_clock() as f64 / resolved.units.len().max(1) as f64;
    lr_of(config) * f64::from(config.workers) * units
}

/// The configured rate, as written (FlexRR accepts plain SGD only).
fn lr_of(config: &RunConfig) -> f64 {
    match config.optimizer {
        OptimizerConfig::Sgd { lr, .. } => lr,
        OptimizerConfig::Adam { lr, .. } => lr,
    }
}

/// The highest equivalent rate measured to train `model`; `None` where none was measured (matrix
/// factorization, whose sparse steps train at 800 in `configs/flexrr/mf.toml`) or nothing is
/// trained (throughput mode).
pub fn safe_max(model: &ModelConfig) -> Option<f64> {
    match model {
        // An MLP without hidden layers is softmax regression.
        ModelConfig::Mlp { hidden } if hidden.is_empty() => Some(MLR_MAX),
        ModelConfig::Mlp { .. } | ModelConfig::Cnn { .. } | ModelConfig::VggLike { .. } => {
            Some(NEURAL_NET_MAX)
        }
        ModelConfig::Mlr => Some(MLR_MAX),
        _ => None,
    }
}

/// The start-up warning for a rate above the range that trains `config`'s model, naming the
/// equivalent rate and the largest `optimizer.lr` within the range; `None` inside it.
pub fn rate_warning(config: &RunConfig, resolved: &Resolved) -> Option<String> {
    let max = safe_max(&config.model)?;
    let rate = equivalent_rate(config, resolved);
    if rate <= max {
        return None;
    }
    let lr = lr_of(config);
    let per = rate / lr;
    Some(format!(
        "flexrr: optimizer.lr = {} acts as {rate:.3} here (lr × workers × units: every unit's \
         delta is added up), above the {max} this model kind was measured to train at; expect \
         the loss to spike or stay at chance. Use optimizer.lr ≤ {:.3e}",
        lr,
        max / per
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::FlexrrOptions;

    fn config(model: ModelConfig, lr: f64) -> (RunConfig, Resolved) {
        let cfg = RunConfig {
            workers: 16,
            batch: 400,
            model,
            optimizer: OptimizerConfig::Sgd {
                lr,
                momentum: 0.0,
                weight_decay: 0.0,
            },
            ..RunConfig::default()
        };
        let machines: Vec<u32> = (0..16).map(|w| w / 4).collect();
        let r = FlexrrOptions::default().resolve(&cfg, &machines).unwrap();
        (cfg, r)
    }

    fn mlp() -> ModelConfig {
        ModelConfig::Mlp { hidden: vec![64] }
    }

    #[test]
    fn the_equivalent_rate_is_lr_times_workers_times_units() {
        let (cfg, r) = config(mlp(), 0.002);
        let rate = equivalent_rate(&cfg, &r);
        assert!((rate - 3.2).abs() < 1e-6, "{rate}");
    }

    #[test]
    fn the_engine_default_rate_warns_for_an_mlp_and_names_a_rate_that_does_not() {
        let (cfg, r) = config(mlp(), 0.1);
        let w = rate_warning(&cfg, &r).expect("0.1 × 16 × 100 = 160 > 5");
        assert!(
            w.contains("optimizer.lr = 0.1") && w.contains("acts as 160"),
            "{w}"
        );
        assert!(w.contains("optimizer.lr ≤ 3.125e-3"), "{w}");
        let (cfg, r) = config(mlp(), 0.003125);
        assert_eq!(rate_warning(&cfg, &r), None);
        let (cfg, r) = config(mlp(), 0.002);
        assert_eq!(rate_warning(&cfg, &r), None);
    }

    #[test]
    fn mlr_trains_at_higher_rates_and_unmeasured_models_never_warn() {
        let (cfg, r) = config(ModelConfig::Mlr, 0.1);
        assert_eq!(rate_warning(&cfg, &r), None);
        let (cfg, r) = config(ModelConfig::Mlr, 1.0);
        assert!(rate_warning(&cfg, &r).is_some());
        let mut cfg = cfg;
        cfg.model = ModelConfig::Profile {
            name: "mlr-imagenet".into(),
        };
        assert_eq!(rate_warning(&cfg, &r), None);
    }
}
