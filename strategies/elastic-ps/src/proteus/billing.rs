//! 2016 EC2 billing of allocations, and the ledger a job's cost and machine-hours add up in.
//!
//! Rules (spec §5.1.1, §5.3): an hour is billed when it ends, at the price in force when it
//! began (on-demand: the on-demand price; spot: the spot price at the start of the hour, not
//! the bid). An hour the user ends early (termination) is billed whole. An hour in which the
//! market evicts a spot allocation is refunded: the work done in it is free. At the end of the
//! job the hour in progress is billed pro rata, for every scheme alike.

/// How an allocation was bought.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Tier {
    /// On-demand: never evicted.
    OnDemand,
    /// Spot at this bid, $/h: evicted when the price rises above it.
    Spot {
        /// The bid, $/h.
        bid: f64,
    },
}

/// One allocation: `k` instances of one type bought at one time.
#[derive(Clone, Debug, PartialEq)]
pub struct Allocation {
    /// Index of the instance type in the market.
    pub type_index: usize,
    /// Instances.
    pub k: u32,
    /// On-demand or spot (with its bid).
    pub tier: Tier,
    /// When the current billing hour began, s.
    pub hour_start_s: f64,
    /// The price of the current hour, $/h per instance.
    pub hour_price: f64,
}

/// What a job paid and used: dollars, and instance-hours by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Ledger {
    /// Dollars charged.
    pub cost: f64,
    /// On-demand instance-hours used.
    pub on_demand_h: f64,
    /// Spot instance-hours used and paid for.
    pub spot_h: f64,
    /// Spot instance-hours used in refunded (evicted) hours: free computing.
    pub free_h: f64,
    /// Allocations evicted by the market.
    pub evictions: u32,
}

impl Allocation {
    /// A new allocation whose first hour begins at `now` at `price` ($/h per instance).
    pub fn new(type_index: usize, k: u32, tier: Tier, now: f64, price: f64) -> Allocation {
        Allocation {
            type_index,
            k,
            tier,
            hour_start_s: now,
            hour_price: price,
        }
    }

    /// When the current billing hour ends, s.
    pub fn hour_end(&self) -> f64 {
        self.hour_start_s + 3600.0
    }

    /// Whether the allocation is spot.
    pub fn is_spot(&self) -> bool {
        matches!(self.tier, Tier::Spot { .. })
    }

    /// Instance-hours of the current hour used by `now`.
    fn used_h(&self, now: f64) -> f64 {
        self.k as f64 * (now - self.hour_start_s).max(0.0) / 3600.0
    }

    fn count_used(&self, ledger: &mut Ledger, hours: f64) {
        match self.tier {
            Tier::OnDemand => ledger.on_demand_h += hours,
            Tier::Spot { .. } => ledger.spot_h += hours,
        }
    }

    /// The current hour ended (at `hour_end`): bill it whole and start the next at `next_price`.
    pub fn roll_hour(&mut self, ledger: &mut Ledger, next_price: f64) {
        let end = self.hour_end();
        ledger.cost += self.k as f64 * self.hour_price;
        self.count_used(ledger, self.used_h(end));
        self.hour_start_s = end;
        self.hour_price = next_price;
    }

    /// The market evicts the allocation at `now`: the current hour is refunded, its work free.
    pub fn evict(self, ledger: &mut Ledger, now: f64) {
        ledger.free_h += self.used_h(now);
        ledger.evictions += 1;
    }

    /// The user terminates the allocation at `now`: the current hour is billed whole.
    pub fn terminate(self, ledger: &mut Ledger, now: f64) {
        ledger.cost += self.k as f64 * self.hour_price;
        self.count_used(ledger, self.used_h(now));
    }

    /// The job ends at `now`: the current hour is billed pro rata.
    pub fn finish(self, ledger: &mut Ledger, now: f64) {
        let used = self.used_h(now);
        ledger.cost += used * self.hour_price;
        self.count_used(ledger, used);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hours_are_billed_at_their_start_price_and_the_last_pro_rata() {
        let mut l = Ledger::default();
        let mut a = Allocation::new(0, 2, Tier::Spot { bid: 1.0 }, 0.0, 0.10);
        a.roll_hour(&mut l, 0.30);
        assert!((l.cost - 0.20).abs() < 1e-12);
        // 20 minutes into the second hour: 2 × 0.30 × 1/3.
        a.finish(&mut l, 4800.0);
        assert!((l.cost - 0.40).abs() < 1e-12);
        assert!((l.spot_h - (2.0 + 2.0 / 3.0)).abs() < 1e-12);
        assert_eq!((l.free_h, l.evictions), (0.0, 0));
    }

    #[test]
    fn an_eviction_refunds_the_hour_and_a_termination_pays_it_whole() {
        let mut l = Ledger::default();
        let mut a = Allocation::new(0, 3, Tier::Spot { bid: 1.0 }, 100.0, 0.10);
        a.roll_hour(&mut l, 0.20);
        a.evict(&mut l, 3700.0 + 1800.0);
        assert!((l.cost - 0.30).abs() < 1e-12);
        assert!((l.free_h - 1.5).abs() < 1e-12);
        assert!((l.spot_h - 3.0).abs() < 1e-12);
        assert_eq!(l.evictions, 1);
        let b = Allocation::new(0, 1, Tier::OnDemand, 0.0, 0.209);
        b.terminate(&mut l, 600.0);
        assert!((l.cost - 0.509).abs() < 1e-12);
        assert!((l.on_demand_h - 1.0 / 6.0).abs() < 1e-12);
    }
}
