//! The transport's per-role bookkeeping, laid out for a send path taken millions of times: tables
//! indexed by a dense role number rather than searched.

use super::LinkTraffic;
use crate::ids::RoleId;
use std::collections::BTreeMap;

/// A dense number for every role: the coordinator, then servers and workers interleaved, so any
/// role has one without knowing the job's counts and a table grows only as far as it is used.
fn slot_of(role: RoleId) -> usize {
    match role {
        RoleId::Coordinator => 0,
        RoleId::Server(i) => 1 + 2 * i as usize,
        RoleId::Worker(i) => 2 + 2 * i as usize,
    }
}

/// The role a dense number stands for (the inverse of [`slot_of`]).
fn role_of(slot: usize) -> RoleId {
    match slot {
        0 => RoleId::Coordinator,
        s if s % 2 == 1 => RoleId::Server(((s - 1) / 2) as u32),
        s => RoleId::Worker(((s - 2) / 2) as u32),
    }
}

/// One value per role, found by the role's dense number.
pub(crate) struct ByRole<T> {
    items: Vec<Option<T>>,
}

impl<T> ByRole<T> {
    /// A table holding `entries`.
    pub(crate) fn new(entries: impl IntoIterator<Item = (RoleId, T)>) -> ByRole<T> {
        let mut items: Vec<Option<T>> = Vec::new();
        for (role, value) in entries {
            let slot = slot_of(role);
            if items.len() <= slot {
                items.resize_with(slot + 1, || None);
            }
            items[slot] = Some(value);
        }
        ByRole { items }
    }

    /// The value of `role`, if it has one.
    pub(crate) fn get(&self, role: RoleId) -> Option<&T> {
        self.items.get(slot_of(role))?.as_ref()
    }

    /// The value of `role` to change, if it has one.
    pub(crate) fn get_mut(&mut self, role: RoleId) -> Option<&mut T> {
        self.items.get_mut(slot_of(role))?.as_mut()
    }

    /// Whether no role has a value.
    pub(crate) fn is_empty(&self) -> bool {
        self.items.iter().all(Option::is_none)
    }

    /// Every value, in role-number order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &T> {
        self.items.iter().flatten()
    }

    /// Every role with its value, in role-number order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (RoleId, &T)> {
        self.items
            .iter()
            .enumerate()
            .filter_map(|(slot, value)| Some((role_of(slot), value.as_ref()?)))
    }
}

/// Traffic counters per directed role pair: a row per sender, a column per receiver, for the
/// roles of the run; a pair naming any other role (a strategy's mistake) is kept aside.
#[derive(Default)]
pub(crate) struct LinkCounts {
    rows: Vec<Vec<LinkTraffic>>,
    /// Role numbers below this get a row and a column.
    dense: usize,
    others: BTreeMap<(RoleId, RoleId), LinkTraffic>,
}

impl LinkCounts {
    /// Counters with rows and columns for `roles`.
    pub(crate) fn new(roles: &[RoleId]) -> LinkCounts {
        LinkCounts {
            dense: roles.iter().map(|&r| slot_of(r) + 1).max().unwrap_or(0),
            ..LinkCounts::default()
        }
    }

    /// Counts one message of `bytes` from `from` to `to`.
    pub(crate) fn add(&mut self, from: RoleId, to: RoleId, bytes: u64) {
        let (row, col) = (slot_of(from), slot_of(to));
        if row >= self.dense || col >= self.dense {
            let link = self.others.entry((from, to)).or_default();
            link.messages += 1;
            link.bytes += bytes;
            return;
        }
        if self.rows.len() <= row {
            self.rows.resize_with(row + 1, Vec::new);
        }
        let row = &mut self.rows[row];
        if row.len() <= col {
            row.resize(col + 1, LinkTraffic::default());
        }
        row[col].messages += 1;
        row[col].bytes += bytes;
    }

    /// Every pair that carried a message, in role order.
    pub(crate) fn to_map(&self) -> BTreeMap<(RoleId, RoleId), LinkTraffic> {
        let dense = self.rows.iter().enumerate().flat_map(|(from, row)| {
            row.iter()
                .enumerate()
                .filter(|(_, t)| t.messages > 0)
                .map(move |(to, &t)| ((role_of(from), role_of(to)), t))
        });
        dense
            .chain(self.others.iter().map(|(&link, &t)| (link, t)))
            .collect()
    }
}

/// When each role's port is free again, run-time seconds: one clock per role, by dense number,
/// growing as far as the roles used; a role never seen is free from the start (0).
#[derive(Default)]
pub(crate) struct PortClocks {
    free: Vec<f64>,
}

impl PortClocks {
    /// When `role`'s port is free.
    pub(crate) fn free_at(&self, role: RoleId) -> f64 {
        self.free.get(slot_of(role)).copied().unwrap_or(0.0)
    }

    /// Marks `role`'s port busy until `at`.
    pub(crate) fn busy_until(&mut self, role: RoleId, at: f64) {
        let slot = slot_of(role);
        if self.free.len() <= slot {
            self.free.resize(slot + 1, 0.0);
        }
        self.free[slot] = at;
    }

    /// Marks `role`'s port busy until at least `at`: a later time it already holds stays.
    pub(crate) fn busy_at_least(&mut self, role: RoleId, at: f64) {
        let later = self.free_at(role).max(at);
        self.busy_until(role, later);
    }

    /// The latest time any port of the roles `within` holds is busy until (0 where none is).
    pub(crate) fn latest(&self, within: impl Fn(RoleId) -> bool) -> f64 {
        self.free
            .iter()
            .enumerate()
            .filter(|&(slot, &t)| t > 0.0 && within(role_of(slot)))
            .map(|(_, &t)| t)
            .fold(0.0, f64::max)
    }

    /// Every port that has carried a message, in role order.
    pub(crate) fn to_map(&self) -> BTreeMap<RoleId, f64> {
        self.free
            .iter()
            .enumerate()
            .filter(|(_, &t)| t > 0.0)
            .map(|(slot, &t)| (role_of(slot), t))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_counts_keep_every_pair_apart_and_list_only_pairs_used() {
        let mut counts = LinkCounts::new(&[
            RoleId::Coordinator,
            RoleId::Server(0),
            RoleId::Server(1),
            RoleId::Server(2),
            RoleId::Worker(0),
            RoleId::Worker(3),
        ]);
        let pairs = [
            (RoleId::Worker(7), RoleId::Server(1)),
            (RoleId::Worker(3), RoleId::Server(1)),
            (RoleId::Server(1), RoleId::Worker(3)),
            (RoleId::Coordinator, RoleId::Worker(0)),
            (RoleId::Worker(0), RoleId::Coordinator),
            (RoleId::Server(0), RoleId::Server(2)),
        ];
        for (n, &(from, to)) in pairs.iter().enumerate() {
            for _ in 0..=n {
                counts.add(from, to, 10);
            }
        }
        let map = counts.to_map();
        assert_eq!(map.len(), pairs.len());
        for (n, pair) in pairs.iter().enumerate() {
            let expected = LinkTraffic {
                messages: n as u64 + 1,
                bytes: 10 * (n as u64 + 1),
            };
            assert_eq!(map[pair], expected, "{pair:?}");
        }
    }

    #[test]
    fn port_clocks_keep_each_role_apart_and_list_only_ports_used() {
        let mut ports = PortClocks::default();
        assert_eq!(ports.free_at(RoleId::Worker(5)), 0.0);
        ports.busy_until(RoleId::Worker(1), 2.5);
        ports.busy_until(RoleId::Server(1), 1.5);
        ports.busy_until(RoleId::Coordinator, 0.5);
        assert_eq!(ports.free_at(RoleId::Worker(1)), 2.5);
        assert_eq!(ports.free_at(RoleId::Server(1)), 1.5);
        assert_eq!(ports.free_at(RoleId::Worker(0)), 0.0);
        let map = ports.to_map();
        let expected = BTreeMap::from([
            (RoleId::Coordinator, 0.5),
            (RoleId::Server(1), 1.5),
            (RoleId::Worker(1), 2.5),
        ]);
        assert_eq!(map, expected);
    }

    #[test]
    fn by_role_finds_each_role_and_nothing_else() {
        let table = ByRole::new([(RoleId::Server(2), 'S'), (RoleId::Worker(2), 'W')]);
        assert_eq!(table.get(RoleId::Server(2)), Some(&'S'));
        assert_eq!(table.get(RoleId::Worker(2)), Some(&'W'));
        assert_eq!(table.get(RoleId::Coordinator), None);
        assert_eq!(table.get(RoleId::Worker(9)), None);
    }
}
