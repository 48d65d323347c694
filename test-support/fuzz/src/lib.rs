//! The runner every fuzz target of concord uses, so that they all try inputs the same way: a
//! fixed budget of cases from a fixed seed, so that every run (and CI) tries the same inputs and
//! a failure reproduces; `PROPTEST_CASES` raises or lowers the budget for a longer or shorter
//! run; no failure-persistence files are written into the source tree.
//!
//! It lives in a crate of its own, depending on nothing but proptest, so that the lowest crates
//! (the straggler patterns, the workloads) can use it in their tests without depending on the
//! engine.

use proptest::test_runner::{Config, RngSeed, TestRunner};

/// A runner for fuzz target `target` that tries `cases` cases (unless `PROPTEST_CASES` says
/// otherwise) from `seed`. Prints the budget and seed, so that a test log says what ran.
pub fn runner(target: &str, cases: u32, seed: u64) -> TestRunner {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cases);
    let config = Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        ..Config::default()
    };
    println!("fuzz {target}: {} cases, seed {seed:#x}", config.cases);
    TestRunner::new(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The same seed tries the same inputs: two runners draw the same values.
    #[test]
    fn a_fixed_seed_draws_the_same_cases() {
        let draw = || {
            let seen = std::cell::RefCell::new(Vec::new());
            runner("draw", 16, 7)
                .run(&any::<u64>(), |v| {
                    seen.borrow_mut().push(v);
                    Ok(())
                })
                .unwrap();
            seen.into_inner()
        };
        let first = draw();
        assert!(!first.is_empty());
        assert_eq!(first, draw());
    }
}
