//! One job of the cost study, simulated event by event over the price trace: evictions at price
//! rises, billing hours ending, decision points, stalls (λ after an eviction, σ after a
//! footprint change, restart and checkpoint writes), until the job's work is done.
//!
//! Work rate (vCPU-hours per hour) = φ × Σ k·ν over the instances that run workers: every spot
//! instance, and the reliable on-demand ones while transient : reliable ≤ the stage-3 ratio
//! (AgileML's stages 1–2; all of them for the on-demand scheme). No progress while stalled.
//! The 2-minute eviction warning is what lets AgileML hand over in λ minutes; the work of those
//! two minutes is not counted (the instance is taken at the price rise).

use super::bidbrain::{best_acquisition, should_terminate, AllocView};
use super::billing::{Allocation, Ledger, Tier};
use super::error::MarketError;
use super::scheme::Scheme;
use super::study::{JobOutcome, Study};

/// Times closer than this (s) are the same instant.
const EPS: f64 = 1e-6;

/// The checkpoint scheme's state.
#[derive(Clone, Copy, Debug)]
struct Checkpoints {
    /// Young's interval τ, s of progress.
    interval_s: f64,
    /// Time to write one, s.
    write_s: f64,
    /// Progress (s of computing) since the last checkpoint.
    since_s: f64,
    /// Work left as of the last checkpoint (what an eviction rolls back to).
    saved_left: f64,
    /// A checkpoint being written: when it is done and the work left it saves.
    writing: Option<(f64, f64)>,
}

/// A job in progress.
pub struct Job<'a> {
    study: &'a Study,
    scheme: Scheme,
    start: f64,
    now: f64,
    work_left: f64,
    allocs: Vec<Allocation>,
    ledger: Ledger,
    stall_until: f64,
    next_decision: f64,
    checkpoints: Option<Checkpoints>,
}

impl<'a> Job<'a> {
    /// A job of `scheme` starting at `start` s, nothing bought yet.
    pub fn new(study: &'a Study, scheme: Scheme, start: f64) -> Job<'a> {
        let checkpoints = (scheme == Scheme::StandardCheckpoint).then(|| Checkpoints {
            interval_s: study.checkpoint_interval_s().max(60.0),
            write_s: study.params.checkpoint_write_min * 60.0,
            since_s: 0.0,
            saved_left: study.work(),
            writing: None,
        });
        Job {
            study,
            scheme,
            start,
            now: start,
            work_left: study.work(),
            allocs: Vec::new(),
            ledger: Ledger::default(),
            stall_until: start,
            next_decision: start,
            checkpoints,
        }
    }

    /// Runs the job to the end of its work; its cost and use.
    pub fn run(mut self) -> Result<JobOutcome, MarketError> {
        let p = &self.study.params;
        let limit_h = 50.0 * p.hours + 24.0;
        let decision_s = p.decision_min * 60.0;
        loop {
            if self.now - self.start > limit_h * 3600.0 {
                return Err(MarketError::DidNotFinish {
                    scheme: self.scheme.name().into(),
                    start_s: self.start,
                    limit_h,
                });
            }
            self.roll_hours();
            let evicted = self.evictions();
            let decide = self.now >= self.next_decision - EPS;
            if decide || evicted {
                self.decide();
            }
            if decide {
                self.next_decision += decision_s;
            }
            let next = self.next_event();
            let rate = self.rate();
            let dt_h = (next - self.now) / 3600.0;
            if rate > 0.0 && rate * dt_h >= self.work_left - 1e-12 {
                let end = self.now + self.work_left / rate * 3600.0;
                return Ok(self.finish(end));
            }
            self.work_left -= rate * dt_h;
            if let Some(c) = self.checkpoints.as_mut() {
                if rate > 0.0 {
                    c.since_s += next - self.now;
                }
            }
            self.now = next;
            self.checkpoint_events();
        }
    }

    fn price(&self, type_index: usize) -> f64 {
        self.study.market.traces[type_index].price_at(self.now)
    }

    /// Bills every hour that ended by now (an instance alive at the boundary served the whole
    /// hour, even if the price rose at that very instant).
    fn roll_hours(&mut self) {
        for i in 0..self.allocs.len() {
            while self.allocs[i].hour_end() <= self.now + EPS {
                let a = &self.allocs[i];
                let next_price = match a.tier {
                    Tier::OnDemand => a.hour_price,
                    Tier::Spot { .. } => {
                        self.study.market.traces[a.type_index].price_at(a.hour_end())
                    }
                };
                self.allocs[i].roll_hour(&mut self.ledger, next_price);
            }
        }
    }

    /// Evicts every spot allocation whose bid the price is now above; applies the scheme's
    /// cost of an eviction. Whether any was evicted.
    fn evictions(&mut self) -> bool {
        let mut evicted = false;
        let mut i = 0;
        while i < self.allocs.len() {
            let a = &self.allocs[i];
            let out = matches!(a.tier, Tier::Spot { bid } if self.price(a.type_index) > bid);
            if out {
                let a = self.allocs.swap_remove(i);
                a.evict(&mut self.ledger, self.now);
                evicted = true;
            } else {
                i += 1;
            }
        }
        if evicted {
            if let Some(c) = self.checkpoints.as_mut() {
                // Roll back to the last checkpoint; restart before any progress.
                self.work_left = c.saved_left;
                c.since_s = 0.0;
                c.writing = None;
                let restart = self.now + self.study.params.restart_min * 60.0;
                self.stall_until = self.stall_until.max(restart);
            } else {
                let lambda = self.now + self.study.params.app.lambda_min * 60.0;
                self.stall_until = self.stall_until.max(lambda);
            }
        }
        evicted
    }

    /// A footprint change after the start costs σ minutes without progress (AgileML schemes).
    fn changed(&mut self) {
        if self.scheme.agile() && self.now > self.start + EPS {
            let sigma = self.now + self.study.params.app.sigma_min * 60.0;
            self.stall_until = self.stall_until.max(sigma);
        }
    }

    fn decide(&mut self) {
        let study = self.study;
        let reference = study.reference;
        let od_price = study.market.types[reference].on_demand;
        match self.scheme {
            Scheme::OnDemand => {
                if self.allocs.is_empty() {
                    let k = study.params.reference_count;
                    self.allocs.push(Allocation::new(
                        reference,
                        k,
                        Tier::OnDemand,
                        self.now,
                        od_price,
                    ));
                }
            }
            Scheme::StandardCheckpoint | Scheme::StandardAgileml | Scheme::AtMarket => {
                // Spot for the whole reference footprint; AgileML holds its reliable
                // on-demand allocation besides (which runs no workers in stage 3).
                if self.scheme.agile() {
                    self.hold_reliable();
                }
                if !self.allocs.iter().any(Allocation::is_spot) {
                    self.standard_acquire(study.reference_vcpus());
                }
            }
            Scheme::Proteus => {
                self.hold_reliable();
                self.renewals();
                self.acquire_best();
            }
        }
    }

    /// The reliable on-demand allocation AgileML always holds.
    fn hold_reliable(&mut self) {
        if !self.allocs.iter().any(|a| a.tier == Tier::OnDemand) {
            let r = self.study.reference;
            let price = self.study.market.types[r].on_demand;
            let k = self.study.params.reliable_count;
            self.allocs
                .push(Allocation::new(r, k, Tier::OnDemand, self.now, price));
        }
    }

    /// Standard bidding: the type with the lowest current spot price per vCPU among those it
    /// can get, enough instances for `target_vcpus`, bid the on-demand price (at-market: the
    /// price + $0.0001).
    fn standard_acquire(&mut self, target_vcpus: f64) {
        let market = &self.study.market;
        let best = (0..market.types.len())
            .filter(|&t| {
                self.scheme == Scheme::AtMarket || self.price(t) < market.types[t].on_demand
            })
            .min_by(|&a, &b| {
                let per = |t: usize| self.price(t) / market.types[t].vcpus as f64;
                per(a).total_cmp(&per(b))
            });
        let Some(t) = best else { return };
        let ty = &market.types[t];
        let k = (target_vcpus / ty.vcpus as f64).ceil().max(1.0) as u32;
        let price = self.price(t);
        let bid = match self.scheme {
            Scheme::AtMarket => price + 1e-4,
            _ => ty.on_demand,
        };
        self.allocs
            .push(Allocation::new(t, k, Tier::Spot { bid }, self.now, price));
        self.changed();
    }

    /// Whether the reliable machines run workers with `spot` transient instances beside them.
    fn reliable_works(&self, spot: u32) -> bool {
        let reliable: u32 = self
            .allocs
            .iter()
            .filter(|a| a.tier == Tier::OnDemand)
            .map(|a| a.k)
            .sum();
        self.scheme == Scheme::OnDemand
            || reliable == 0
            || spot as f64 / reliable as f64 <= self.study.params.stage3_ratio
    }

    fn spot_instances(&self) -> u32 {
        self.allocs
            .iter()
            .filter(|a| a.is_spot())
            .map(|a| a.k)
            .sum()
    }

    /// BidBrain's view of allocation `a` now (`renewed`: as if it started a new hour now at
    /// the current price), with `reliable_nu` for on-demand instances.
    fn view(&self, a: &Allocation, renewed: bool, reliable_nu: bool) -> AllocView {
        let ty = &self.study.market.types[a.type_index];
        let nu = ty.vcpus as f64;
        let t_r = if renewed {
            60.0
        } else {
            (a.hour_end() - self.now) / 60.0
        };
        match a.tier {
            Tier::OnDemand => {
                AllocView::on_demand(a.k, if reliable_nu { nu } else { 0.0 }, a.hour_price, t_r)
            }
            Tier::Spot { bid } => {
                let price = self.price(a.type_index);
                let (beta, tte) = self.study.betas[a.type_index].lookup(bid - price);
                AllocView {
                    k: a.k,
                    nu,
                    price_per_h: if renewed { price } else { a.hour_price },
                    beta,
                    median_tte_min: tte,
                    t_r_min: t_r,
                }
            }
        }
    }

    fn views(&self, renewed: Option<usize>, extra_spot: u32) -> Vec<AllocView> {
        let works = self.reliable_works(self.spot_instances() + extra_spot);
        self.allocs
            .iter()
            .enumerate()
            .map(|(i, a)| self.view(a, renewed == Some(i), works))
            .collect()
    }

    /// Shortly before a spot allocation's hour ends: keep it for another hour or terminate it.
    fn renewals(&mut self) {
        let window = self.study.params.decision_min * 60.0 + EPS;
        let mut i = 0;
        while i < self.allocs.len() {
            let a = &self.allocs[i];
            if a.is_spot() && a.hour_end() - self.now <= window {
                let x = self.views(Some(i), 0);
                if should_terminate(&x, i, &self.study.params.app) {
                    let a = self.allocs.swap_remove(i);
                    a.terminate(&mut self.ledger, self.now);
                    self.changed();
                    continue;
                }
            }
            i += 1;
        }
    }

    /// BidBrain's acquisition over types × bid deltas × sizes within the largest footprint.
    fn acquire_best(&mut self) {
        let study = self.study;
        let market = &study.market;
        let spot_vcpus: f64 = self
            .allocs
            .iter()
            .filter(|a| a.is_spot())
            .map(|a| a.k as f64 * market.types[a.type_index].vcpus as f64)
            .sum();
        let room = study.params.max_footprint * study.reference_vcpus() - spot_vcpus;
        let mut options: Vec<(usize, u32, f64)> = Vec::new();
        let mut views: Vec<AllocView> = Vec::new();
        for (t, ty) in market.types.iter().enumerate() {
            let price = self.price(t);
            let table = &study.betas[t];
            for &k in &study.params.allocation_sizes {
                if k as f64 * ty.vcpus as f64 > room + EPS {
                    continue;
                }
                for (j, &delta) in table.deltas.iter().enumerate() {
                    options.push((t, k, price + delta));
                    views.push(AllocView {
                        k,
                        nu: ty.vcpus as f64,
                        price_per_h: price,
                        beta: table.beta[j],
                        median_tte_min: table.median_tte_min[j],
                        t_r_min: 60.0,
                    });
                }
            }
        }
        if options.is_empty() {
            return;
        }
        // The reliable machines' ν depends on the ratio the candidate makes; sizes differ, so
        // evaluate per size.
        let mut best: Option<(usize, f64)> = None;
        let app = study.params.app;
        for &k in &study.params.allocation_sizes {
            let x = self.views(None, 0);
            let with = self.views(None, k);
            let idx: Vec<usize> = (0..options.len()).filter(|&i| options[i].1 == k).collect();
            let cands: Vec<AllocView> = idx.iter().map(|&i| views[i]).collect();
            // Current E_A with today's ν; the candidate's with the ν its ratio gives.
            let now_e = super::bidbrain::cost_per_work(&x, &app, false);
            if let Some(c) = best_acquisition(&with, &cands, &app) {
                let mut all = with.clone();
                all.push(cands[c]);
                let e = super::bidbrain::cost_per_work(&all, &app, true);
                if e < now_e && best.is_none_or(|(_, b)| e < b) {
                    best = Some((idx[c], e));
                }
            }
        }
        if let Some((i, _)) = best {
            let (t, k, bid) = options[i];
            let price = self.price(t);
            self.allocs
                .push(Allocation::new(t, k, Tier::Spot { bid }, self.now, price));
            self.changed();
        }
    }

    /// Work per hour now (vCPU-hours per hour, times φ).
    fn rate(&self) -> f64 {
        if self.now < self.stall_until - EPS {
            return 0.0;
        }
        if self.checkpoints.is_some_and(|c| c.writing.is_some()) {
            return 0.0;
        }
        let works = self.reliable_works(self.spot_instances());
        let vcpus: f64 = self
            .allocs
            .iter()
            .filter(|a| a.is_spot() || works)
            .map(|a| a.k as f64 * self.study.market.types[a.type_index].vcpus as f64)
            .sum();
        self.study.params.app.phi * vcpus
    }

    /// The next instant anything can change.
    fn next_event(&self) -> f64 {
        let mut next = self.next_decision.max(self.now + EPS);
        for a in &self.allocs {
            next = next.min(a.hour_end());
            if a.is_spot() {
                if let Some(t) = self.study.market.traces[a.type_index].next_change_after(self.now)
                {
                    next = next.min(t);
                }
            }
        }
        if self.stall_until > self.now + EPS {
            next = next.min(self.stall_until);
        }
        if let Some(c) = &self.checkpoints {
            match c.writing {
                Some((end, _)) => next = next.min(end),
                None if self.rate() > 0.0 => {
                    next = next.min(self.now + (c.interval_s - c.since_s).max(0.0))
                }
                None => {}
            }
        }
        next.max(self.now + EPS)
    }

    /// Finishes a checkpoint being written, or starts one when τ of progress has passed.
    fn checkpoint_events(&mut self) {
        let now = self.now;
        let left = self.work_left;
        if let Some(c) = self.checkpoints.as_mut() {
            match c.writing {
                Some((end, saved)) if end <= now + EPS => {
                    c.saved_left = saved;
                    c.writing = None;
                    c.since_s = 0.0;
                }
                None if c.since_s >= c.interval_s - EPS => {
                    c.writing = Some((now + c.write_s, left));
                }
                _ => {}
            }
        }
    }

    /// The work is done at `end`: bill the hours in progress pro rata.
    fn finish(mut self, end: f64) -> JobOutcome {
        self.now = end;
        for a in std::mem::take(&mut self.allocs) {
            a.finish(&mut self.ledger, end);
        }
        let l = self.ledger;
        JobOutcome {
            cost: l.cost,
            runtime_h: (end - self.start) / 3600.0,
            on_demand_h: l.on_demand_h,
            spot_h: l.spot_h,
            free_h: l.free_h,
            evictions: l.evictions,
        }
    }
}
