//! PSLD "real-world" server generator: a per-server Markov-modulated bandwidth factor with
//! lognormal jitter.

use rand::Rng;
use rand_distr::StandardNormal;
use serde::{Deserialize, Serialize};

use crate::common::{in_filter, Check};
use crate::config::Pattern;
use crate::rng::rng_for;
use crate::{Effect, Probe, RoleKind, Straggler, StragglerError};

/// The pattern's TOML tag.
const NAME: &str = "server-markov";

/// PSLD real-world generator: per-server Markov-modulated bandwidth factor. Every `step_s`
/// the server jumps, with `switch_probability`, to a uniformly chosen other state of
/// `states`; the initial state is uniform. Each (server, step) also gets a lognormal
/// (median 1) factor of σ = `jitter`, so with the default states the cross-server
/// (best − worst)/worst spans ≈ 0.005–3.2. With `cpu_coupled`, service time is also
/// multiplied by 1/state. Keyed by (seed, server, step). Server-only.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerMarkovConfig {
    /// Servers affected (None = all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub servers: Option<Vec<u32>>,
    /// Bandwidth factor of each state (> 0). Default [1.0, 0.5, 0.25].
    #[serde(default = "d_states")]
    pub states: Vec<f64>,
    /// Seconds between switching decisions (> 0). Default 10.
    #[serde(default = "d_ten")]
    pub step_s: f64,
    /// Probability of switching at each step. Default 0.1.
    #[serde(default = "d_switch_probability")]
    pub switch_probability: f64,
    /// σ of the per-(server, step) lognormal factor. Default 0.01.
    #[serde(default = "d_markov_jitter")]
    pub jitter: f64,
    /// Also slow service time by 1/state. Default false.
    #[serde(default)]
    pub cpu_coupled: bool,
}

fn d_states() -> Vec<f64> {
    vec![1.0, 0.5, 0.25]
}

fn d_ten() -> f64 {
    10.0
}

fn d_switch_probability() -> f64 {
    0.1
}

fn d_markov_jitter() -> f64 {
    0.01
}

impl Pattern for ServerMarkovConfig {
    fn name(&self) -> &'static str {
        NAME
    }

    fn validate(&self) -> Result<(), StragglerError> {
        let c = Check::new(NAME);
        if self.states.is_empty() {
            return Err(c.err("states", "[]", "a non-empty list of bandwidth factors > 0"));
        }
        for &s in &self.states {
            c.pos("states", s)?;
        }
        c.pos("step_s", self.step_s)?;
        c.prob("switch_probability", self.switch_probability)?;
        c.nonneg("jitter", self.jitter)
    }

    fn applies_to(&self, kind: RoleKind, index: u32, _machine: u32) -> bool {
        kind == RoleKind::Server && in_filter(&self.servers, index)
    }

    fn build(
        &self,
        seed: u64,
        _kind: RoleKind,
        index: u32,
        _machine: u32,
    ) -> Result<Box<dyn Straggler>, StragglerError> {
        Ok(Box::new(ServerMarkov::new(
            seed,
            index,
            self.states.clone(),
            self.step_s,
            self.switch_probability,
            self.jitter,
            self.cpu_coupled,
        )))
    }
}

/// Per-server Markov-modulated bandwidth factor over steps of `step_s` seconds.
#[derive(Debug)]
pub(crate) struct ServerMarkov {
    seed: u64,
    index: u32,
    states: Vec<f64>,
    step_s: f64,
    switch_probability: f64,
    jitter: f64,
    cpu_coupled: bool,
    cache: Option<(u64, usize)>,
}

impl ServerMarkov {
    pub(crate) fn new(
        seed: u64,
        index: u32,
        states: Vec<f64>,
        step_s: f64,
        switch_probability: f64,
        jitter: f64,
        cpu_coupled: bool,
    ) -> Self {
        ServerMarkov {
            seed,
            index,
            states,
            step_s,
            switch_probability,
            jitter,
            cpu_coupled,
            cache: None,
        }
    }

    /// State index at step `j`: a pure function of (seed, server, j).
    pub(crate) fn state_at(&mut self, j: u64) -> usize {
        let n = self.states.len();
        let (mut k, mut s) = match self.cache {
            Some((k, s)) if k <= j => (k, s),
            _ => (
                0,
                rng_for(self.seed, "server-markov", u64::from(self.index), 0).gen_range(0..n),
            ),
        };
        while k < j {
            k += 1;
            let mut rng = rng_for(self.seed, "server-markov", u64::from(self.index), k);
            if n > 1 && rng.gen::<f64>() < self.switch_probability {
                // Uniform over the other states.
                let other = rng.gen_range(0..n - 1);
                s = if other >= s { other + 1 } else { other };
            }
        }
        self.cache = Some((k, s));
        s
    }

    /// (bandwidth factor, state level) at time `now`.
    pub(crate) fn factor_at(&mut self, now: f64) -> (f64, f64) {
        let j = (now.max(0.0) / self.step_s).floor() as u64;
        let state = self.state_at(j);
        let level = self.states[state];
        let z: f64 = rng_for(self.seed, "server-markov-jitter", u64::from(self.index), j)
            .sample(StandardNormal);
        (level * (self.jitter * z).exp(), level)
    }
}

impl Straggler for ServerMarkov {
    fn effect(&mut self, p: &Probe) -> Effect {
        let (bw, level) = self.factor_at(p.now);
        Effect {
            compute_factor: if self.cpu_coupled { 1.0 / level } else { 1.0 },
            bandwidth_factor: bw,
            ..Effect::NONE
        }
    }
}
