//! A stage's weight versions (thesis §5.3.3): the latest, and the older ones in-flight
//! minibatches still need.
//!
//! - **Stashing** (PipeDream's default): a forward pass runs on the latest version and stashes
//!   it for its minibatch; the minibatch's backward pass runs on that same version; the update
//!   makes a new latest version and never touches a stashed one. A version is dropped once no
//!   minibatch in flight refers to it.
//! - **Vertical sync**: a minibatch carries the watermark of the input stage's weights when it
//!   entered (the minibatches whose updates they held); every stage runs its forward and
//!   backward passes on its own version with the same watermark.
//! - **No stashing** (the ablation): both passes run on whatever is latest, so a backward pass
//!   can see weights newer than its forward pass did.
//!
//! This module keeps the versions' bookkeeping: which version each pass runs on and which
//! versions are still needed. A version may carry values of any type `V` (the stage worker keeps
//! device tensors, [`crate::weights`]); a version without values is one whose values live
//! elsewhere (the latest, in the replica's parameters) or are not computed (throughput mode).

use std::collections::BTreeMap;

/// Which weights a minibatch's passes run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weights {
    /// Stash the forward pass's version for the backward pass.
    Stash,
    /// Run both passes on the version with the input stage's watermark.
    VerticalSync,
    /// Run each pass on the latest version.
    Latest,
}

/// One weight version.
#[derive(Clone, Debug)]
struct Version<V> {
    /// Minibatches `0..watermark` have updated it (all of them that reach this stage).
    watermark: u64,
    values: Option<V>,
    /// In-flight minibatches that run on it.
    users: u32,
}

/// A stage's versions, each with values of type `V` when it has them.
#[derive(Debug)]
pub struct Versions<V> {
    weights: Weights,
    versions: BTreeMap<u64, Version<V>>,
    latest: u64,
    /// The version each in-flight minibatch runs on.
    by_minibatch: BTreeMap<u64, u64>,
    /// Vertical sync: the version the newest watermark seen maps to. Watermarks only grow, so
    /// no later minibatch needs an older one.
    floor: u64,
    max_alive: usize,
}

impl<V> Versions<V> {
    /// Version 0 (nothing applied) with `values`.
    pub fn new(weights: Weights, values: Option<V>) -> Versions<V> {
        Versions::resumed(weights, values, 0, 0)
    }

    /// The one version of a stage that has applied `updates` updates, which took in minibatches
    /// `0..watermark`, with `values`: where a run resumed from a checkpoint starts, no minibatch
    /// in flight.
    pub fn resumed(
        weights: Weights,
        values: Option<V>,
        updates: u64,
        watermark: u64,
    ) -> Versions<V> {
        let mut versions = BTreeMap::new();
        versions.insert(
            updates,
            Version {
                watermark,
                values,
                users: 0,
            },
        );
        Versions {
            weights,
            versions,
            latest: updates,
            by_minibatch: BTreeMap::new(),
            floor: updates,
            max_alive: 1,
        }
    }

    /// The version minibatch `mb`'s forward pass runs on; `watermark` is what the minibatch
    /// carries under vertical sync (ignored otherwise).
    pub fn forward(&mut self, mb: u64, watermark: Option<u64>) -> u64 {
        let id = match (self.weights, watermark) {
            (Weights::Latest, _) => return self.latest,
            (Weights::VerticalSync, Some(mark)) => self
                .versions
                .iter()
                .rev()
                .find(|(_, v)| v.watermark <= mark)
                .map(|(&id, _)| id)
                .unwrap_or(self.latest),
            _ => self.latest,
        };
        if let Some(v) = self.versions.get_mut(&id) {
            v.users += 1;
        }
        self.by_minibatch.insert(mb, id);
        self.floor = self.floor.max(id);
        self.drop_unused();
        id
    }

    /// The version minibatch `mb`'s backward pass runs on.
    pub fn backward(&self, mb: u64) -> u64 {
        match self.weights {
            Weights::Latest => self.latest,
            _ => self.by_minibatch.get(&mb).copied().unwrap_or(self.latest),
        }
    }

    /// Minibatch `mb` has finished its backward pass here: its version may go.
    pub fn release(&mut self, mb: u64) {
        if let Some(id) = self.by_minibatch.remove(&mb) {
            if let Some(v) = self.versions.get_mut(&id) {
                v.users = v.users.saturating_sub(1);
            }
            self.drop_unused();
        }
    }

    /// A new latest version from an update that took in minibatches `0..watermark`.
    pub fn update(&mut self, values: Option<V>, watermark: u64) {
        self.latest += 1;
        self.versions.insert(
            self.latest,
            Version {
                watermark,
                values,
                users: 0,
            },
        );
        self.drop_unused();
        self.max_alive = self.max_alive.max(self.versions.len());
    }

    /// The values of version `id` (`None` when it has none, or for a dropped version).
    pub fn values(&self, id: u64) -> Option<&V> {
        self.versions.get(&id).and_then(|v| v.values.as_ref())
    }

    /// Gives version `id` its values (a copy of them taken before they change where they
    /// live); nothing for a dropped version.
    pub fn set_values(&mut self, id: u64, values: V) {
        if let Some(v) = self.versions.get_mut(&id) {
            v.values = Some(values);
        }
    }

    /// Whether the latest version stays once an update supersedes it: a minibatch in flight
    /// runs on it, or (vertical sync) a later minibatch's watermark may map to it.
    pub fn latest_outlives_update(&self) -> bool {
        self.weights == Weights::VerticalSync
            || self.versions.get(&self.latest).is_some_and(|v| v.users > 0)
    }

    /// The latest version's id (the number of updates applied).
    pub fn latest(&self) -> u64 {
        self.latest
    }

    /// The latest version's watermark.
    pub fn watermark(&self) -> u64 {
        self.versions
            .get(&self.latest)
            .map(|v| v.watermark)
            .unwrap_or(0)
    }

    /// Versions that have values of their own now (copies beside where the latest lives).
    pub fn with_values(&self) -> usize {
        self.versions
            .values()
            .filter(|v| v.values.is_some())
            .count()
    }

    /// Versions held now, the latest included.
    pub fn alive(&self) -> usize {
        self.versions.len()
    }

    /// The most versions held at once.
    pub fn max_alive(&self) -> usize {
        self.max_alive
    }

    fn drop_unused(&mut self) {
        let (latest, floor) = (self.latest, self.floor);
        let history = self.weights == Weights::VerticalSync;
        // Vertical sync keeps every version a later minibatch's watermark may still map to.
        self.versions
            .retain(|&k, v| k == latest || v.users > 0 || (history && k >= floor));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stashed_version_survives_updates_until_its_backward_pass() {
        let mut v = Versions::new(Weights::Stash, Some(0.0));
        let a = v.forward(0, None);
        assert!(v.latest_outlives_update());
        v.update(Some(1.0), 1);
        assert!(!v.latest_outlives_update());
        v.update(Some(2.0), 2);
        assert_eq!(v.backward(0), a);
        assert_eq!(v.values(a), Some(&0.0));
        assert_eq!(v.alive(), 2);
        v.release(0);
        assert_eq!(v.alive(), 1);
        assert_eq!(v.values(v.latest()), Some(&2.0));
    }

    #[test]
    fn vertical_sync_runs_a_minibatch_on_the_version_with_its_watermark() {
        let mut v = Versions::new(Weights::VerticalSync, Some(0.0));
        assert!(v.latest_outlives_update());
        v.update(Some(1.0), 1);
        v.update(Some(2.0), 2);
        v.update(Some(3.0), 3);
        // A minibatch that entered when the input stage had seen minibatch 0 only.
        let id = v.forward(7, Some(1));
        assert_eq!(v.values(id), Some(&1.0));
        assert_eq!(v.backward(7), id);
        // Versions 2 and 3 stay for later watermarks; version 0 is gone.
        assert_eq!(v.values(0), None);
        assert_eq!(v.values(2), Some(&2.0));
        v.release(7);
        let id = v.forward(8, Some(3));
        assert_eq!(v.values(id), Some(&3.0));
        assert_eq!(v.alive(), 1);
    }

    #[test]
    fn without_stashing_the_backward_pass_sees_the_latest_version() {
        let mut v = Versions::new(Weights::Latest, Some(0.0));
        v.forward(0, None);
        assert!(!v.latest_outlives_update());
        v.update(Some(1.0), 1);
        assert_eq!(v.backward(0), v.latest());
        assert_eq!(v.max_alive(), 1);
    }

    #[test]
    fn values_set_later_stay_with_their_version_and_go_with_it() {
        let mut v: Versions<f32> = Versions::new(Weights::Stash, None);
        let a = v.forward(0, None);
        v.set_values(a, 5.0);
        v.update(None, 1);
        assert_eq!(v.values(a), Some(&5.0));
        assert_eq!(v.values(v.latest()), None);
        v.release(0);
        assert_eq!(v.values(a), None);
        // A dropped version takes no values.
        v.set_values(a, 6.0);
        assert_eq!(v.values(a), None);
    }
}
