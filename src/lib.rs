//! # concord
//!
//! Distributed training on heterogeneous, straggler-prone clusters: one engine
//! ([`concord_engine`], re-exported as [`engine`]), many coordination strategies, each from a
//! paper and each a crate of its own, composed from a layered config.
//!
//! This facade links every strategy crate into one [`registry`], loads configs
//! ([`config::load`]), and holds the `concord` command line ([`cli`]).

#![warn(missing_docs)]

pub mod cli;
pub mod config;

pub use concord_engine as engine;
use concord_engine::prelude::*;

/// Every strategy this build knows, with the defaults for unclaimed slots: consistency `bsp`,
/// memory `resident`. A new strategy crate adds one line here.
pub fn registry() -> Registry {
    let mut r = Registry::new();
    let built = concord_bsp_ssp::register(&mut r).and_then(|_| concord_memory::register(&mut r));
    let built = built.and_then(|_| concord_lb_bsp::register(&mut r));
    let built = built.and_then(|_| concord_elastic_ps::register(&mut r));
    let built = built.and_then(|_| concord_allreduce::register(&mut r));
    let built = built.and_then(|_| concord_rna::register(&mut r));
    let built = built.and_then(|_| concord_flexrr::register(&mut r));
    let built = built.and_then(|_| concord_token_sched::register(&mut r));
    let built = built.and_then(|_| concord_pipeline::register(&mut r));
    let built = built.and_then(|_| concord_sven::register(&mut r));
    // Registration only fails on duplicate names, which is a bug in this list.
    if let Err(e) = built {
        panic!("strategy registry is inconsistent: {e}");
    }
    r.set_default(Slot::Consistency, "bsp")
        .set_default(Slot::Memory, "resident");
    r
}
