//! PSLD server slowdowns: a deterministic schedule and the Markov "real-world" generator.

use rand::Rng;
use rand_distr::StandardNormal;

use super::rng::rng_for;
use super::{Effect, Probe, Straggler};

/// A fixed effect active on `[start_s, end_s)`.
#[derive(Debug)]
pub(super) struct SlowServer {
    pub(super) start_s: f64,
    pub(super) end_s: Option<f64>,
    pub(super) effect: Effect,
}

impl Straggler for SlowServer {
    fn effect(&mut self, p: &Probe) -> Effect {
        let started = p.now >= self.start_s;
        let ended = self.end_s.is_some_and(|end| p.now >= end);
        if started && !ended {
            self.effect
        } else {
            Effect::NONE
        }
    }
}

/// Per-server Markov-modulated bandwidth factor over steps of `step_s` seconds.
#[derive(Debug)]
pub(super) struct ServerMarkov {
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
    pub(super) fn new(
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
    pub(super) fn state_at(&mut self, j: u64) -> usize {
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
    pub(super) fn factor_at(&mut self, now: f64) -> (f64, f64) {
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
