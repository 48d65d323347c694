//! The token server's state (Fela §III-C to §III-F, spec A1.9): the token generator, the token
//! buckets, the info mapping and the distributor with its three policies, as a plain state
//! machine. The coordinator role ([`crate::TokenServerRole`]) drives it with the workers'
//! messages; tests drive it directly.
//!
//! - **Generation.** An iteration starts with the level-1 tokens. Completed T-i tokens wait in a
//!   per-level FIFO; whenever `r_i` are waiting, they become the dependencies of a new T-(i+1)
//!   token (so dependency sets form in completion order: the paper's Fig. 3).
//! - **ADS** (aggressive depth-first): a requester gets a token of the deepest level available,
//!   and among those the one whose dependencies it holds most of (locality score
//!   `|H_w ∩ D_t| / |D_t|`, Eq. 1), the smallest id on a tie. Off: oldest token first.
//! - **HF** (hierarchical fetching): one sub-bucket per worker; a worker takes from its own first
//!   and, once it is empty, helps the worker with the fewest helpers and the most work left.
//!   A new token goes to the bucket of the worker holding most of its dependencies (the reporter
//!   on a tie). Off: one shared bucket, every pick contended.
//! - **CTD** (conditional distribution): tokens of the communication-heavy level go only to the
//!   subset S, whose members take them before anything else.
//!
//! A single actor serializes requests, so nothing is ever handed out twice; the events a
//! lock-based server would have had to resolve are counted instead: steals, would-be conflicts
//! (two picks from the same shared bucket within one lock hold) and locking-problem waits (a
//! requester parked because every token is in flight).

use crate::plan::TokenPlan;
use concord_engine::prelude::*;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// A token's id, unique within its iteration (level by level, see [`TokenPlan::first_id`]).
pub type TokenId = u64;

/// A unit of work: train sub-model `level` on the outputs of `deps` (level 0: on samples).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Token {
    /// Id within the iteration.
    pub id: TokenId,
    /// Sub-model, from 0.
    pub level: usize,
    /// The iteration.
    pub iter: u64,
    /// The tokens whose outputs are this token's input, in row order (none at level 0).
    pub deps: Vec<TokenId>,
    /// The samples its rows are, as (offset in the iteration's batch, count), in row order.
    pub spans: Vec<(u64, u64)>,
}

impl Token {
    /// Samples (rows) the token processes.
    pub fn batch(&self) -> u64 {
        self.spans.iter().map(|s| s.1).sum()
    }
}

/// Conditional token distribution: level `level` runs only on `members`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ctd {
    /// The communication-heavy sub-model (from 0).
    pub level: usize,
    /// The workers allowed to train it (S), ascending.
    pub members: Vec<WorkerId>,
}

/// Which distribution policies are on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policies {
    /// Aggressive depth-first scheduling.
    pub ads: bool,
    /// Hierarchical fetching (per-worker sub-buckets, helpers).
    pub hf: bool,
    /// Conditional token distribution, if on.
    pub ctd: Option<Ctd>,
}

/// What the distributor counted (per run).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Counters {
    /// Tokens handed out.
    pub assigned: u64,
    /// Requests parked because no token was available (the locking problem).
    pub waits: u64,
    /// Tokens taken from another worker's sub-bucket.
    pub steals: u64,
    /// Picks from a shared bucket within one lock hold of the previous pick from it.
    pub conflicts: u64,
    /// Tokens handed out per worker.
    pub per_worker: Vec<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Available(usize),
    Assigned(WorkerId),
    Done(WorkerId),
}

#[derive(Clone, Debug)]
struct Entry {
    token: Token,
    state: State,
    /// Creation order in the iteration (ADS off hands out the oldest first).
    seq: u64,
}

/// The token server's state.
#[derive(Clone, Debug)]
pub struct TokenServer {
    plan: TokenPlan,
    workers: u32,
    policies: Policies,
    /// Seconds a lock on a shared bucket would be held (a fetch's round trip).
    lock_hold_s: f64,
    iter: u64,
    tokens: BTreeMap<TokenId, Entry>,
    buckets: Vec<BTreeSet<TokenId>>,
    ready: Vec<VecDeque<TokenId>>,
    created: Vec<u64>,
    held: Vec<BTreeSet<TokenId>>,
    helpers: Vec<u32>,
    helping: Vec<Option<usize>>,
    done: Vec<u64>,
    backward_done: Vec<u64>,
    last_shared_pick: BTreeMap<usize, f64>,
    seq: u64,
    counters: Counters,
}

impl TokenServer {
    /// A server for `workers` workers dealing `plan`'s tokens under `policies`; `lock_hold_s` is
    /// how long a lock-based server would hold a shared bucket per pick (for the conflict count).
    pub fn new(plan: TokenPlan, workers: u32, policies: Policies, lock_hold_s: f64) -> TokenServer {
        let levels = plan.levels();
        let buckets = if policies.hf { workers as usize } else { 1 };
        TokenServer {
            plan,
            workers,
            policies,
            lock_hold_s,
            iter: 0,
            tokens: BTreeMap::new(),
            buckets: vec![BTreeSet::new(); buckets],
            ready: vec![VecDeque::new(); levels],
            created: vec![0; levels],
            held: vec![BTreeSet::new(); workers as usize],
            helpers: vec![0; workers as usize],
            helping: vec![None; workers as usize],
            done: vec![0; levels],
            backward_done: vec![0; levels],
            last_shared_pick: BTreeMap::new(),
            seq: 0,
            counters: Counters {
                per_worker: vec![0; workers as usize],
                ..Counters::default()
            },
        }
    }

    /// The plan tokens are dealt by.
    pub fn plan(&self) -> &TokenPlan {
        &self.plan
    }

    /// The policies in force.
    pub fn policies(&self) -> &Policies {
        &self.policies
    }

    /// What the distributor counted so far.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The current iteration.
    pub fn iter(&self) -> u64 {
        self.iter
    }

    /// Whether `worker` trains (and keeps) sub-model `level`.
    pub fn trains(&self, worker: WorkerId, level: usize) -> bool {
        match &self.policies.ctd {
            Some(c) if c.level == level => c.members.contains(&worker),
            _ => true,
        }
    }

    /// Starts iteration `iter`: forgets the last one and deals the level-1 tokens round-robin
    /// into the buckets.
    pub fn start_iteration(&mut self, iter: u64) {
        let levels = self.plan.levels();
        self.iter = iter;
        self.tokens.clear();
        self.buckets.iter_mut().for_each(BTreeSet::clear);
        self.ready = vec![VecDeque::new(); levels];
        self.created = vec![0; levels];
        self.held.iter_mut().for_each(BTreeSet::clear);
        self.helpers.iter_mut().for_each(|h| *h = 0);
        self.helping.iter_mut().for_each(|h| *h = None);
        self.done = vec![0; levels];
        self.backward_done = vec![0; levels];
        self.last_shared_pick.clear();
        for k in 0..self.plan.counts[0] {
            let token = Token {
                id: k,
                level: 0,
                iter,
                deps: Vec::new(),
                spans: vec![self.plan.leaf_span(k)],
            };
            let bucket = self.leaf_bucket(k);
            self.insert(token, bucket);
        }
        self.created[0] = self.plan.counts[0];
    }

    fn leaf_bucket(&self, k: u64) -> usize {
        if !self.policies.hf {
            return 0;
        }
        match &self.policies.ctd {
            Some(c) if c.level == 0 => c.members[k as usize % c.members.len()] as usize,
            _ => (k % self.workers as u64) as usize,
        }
    }

    fn insert(&mut self, token: Token, bucket: usize) {
        let id = token.id;
        self.buckets[bucket].insert(id);
        self.tokens.insert(
            id,
            Entry {
                token,
                state: State::Available(bucket),
                seq: self.seq,
            },
        );
        self.seq += 1;
    }

    /// Records that `worker` finished token `id` (its forward pass, and for the last level its
    /// backward pass too) and holds its output; returns the tokens this created.
    pub fn complete(
        &mut self,
        worker: WorkerId,
        id: TokenId,
    ) -> std::result::Result<Vec<TokenId>, String> {
        let entry = self
            .tokens
            .get_mut(&id)
            .ok_or_else(|| format!("token {id} of iteration {} does not exist", self.iter))?;
        if entry.state != State::Assigned(worker) {
            return Err(format!(
                "token {id} reported done by worker {worker}, but it is {:?}",
                entry.state
            ));
        }
        entry.state = State::Done(worker);
        let level = entry.token.level;
        self.held[worker as usize].insert(id);
        self.done[level] += 1;
        let mut created = Vec::new();
        if level + 1 < self.plan.levels() {
            self.ready[level].push_back(id);
            let r = self.plan.ratios[level] as usize;
            while self.ready[level].len() >= r {
                let deps: Vec<TokenId> = self.ready[level].drain(..r).collect();
                created.push(self.create(level + 1, deps, worker));
            }
        }
        Ok(created)
    }

    fn create(&mut self, level: usize, deps: Vec<TokenId>, reporter: WorkerId) -> TokenId {
        let index = self.created[level];
        let id = self.plan.first_id(level) + index;
        self.created[level] += 1;
        let spans = deps
            .iter()
            .flat_map(|d| self.tokens[d].token.spans.clone())
            .collect();
        let bucket = self.bucket_for(level, &deps, reporter, index);
        let token = Token {
            id,
            level,
            iter: self.iter,
            deps,
            spans,
        };
        self.insert(token, bucket);
        id
    }

    /// The sub-bucket a new token goes to: the worker holding most of its dependencies (the
    /// reporter on a tie, then the lowest id), among S for the CTD level.
    fn bucket_for(&self, level: usize, deps: &[TokenId], reporter: WorkerId, index: u64) -> usize {
        if !self.policies.hf {
            return 0;
        }
        let allowed: Vec<WorkerId> = (0..self.workers)
            .filter(|&w| self.trains(w, level))
            .collect();
        let count = |w: WorkerId| {
            deps.iter()
                .filter(|d| self.held[w as usize].contains(d))
                .count()
        };
        let best = allowed.iter().map(|&w| count(w)).max().unwrap_or(0);
        if best == 0 {
            return allowed[index as usize % allowed.len()] as usize;
        }
        if allowed.contains(&reporter) && count(reporter) == best {
            return reporter as usize;
        }
        allowed
            .into_iter()
            .find(|&w| count(w) == best)
            .unwrap_or(reporter) as usize
    }

    /// Records that the backward pass of token `id` is done; returns the level if that finished
    /// its last backward pass of the iteration (its gradients can be synchronized).
    pub fn backward_done(&mut self, id: TokenId) -> Option<usize> {
        let level = self.tokens.get(&id)?.token.level;
        self.backward_done[level] += 1;
        (self.backward_done[level] == self.plan.counts[level]).then_some(level)
    }

    /// Whether every token of the iteration has been trained forward (and the last level's
    /// backward passes run).
    pub fn all_done(&self) -> bool {
        self.done.iter().zip(&self.plan.counts).all(|(d, c)| d == c)
    }

    /// The holders of `token`'s dependencies, in dependency order.
    pub fn holders(&self, token: &Token) -> Vec<(TokenId, WorkerId)> {
        token
            .deps
            .iter()
            .filter_map(|d| match self.tokens.get(d).map(|e| e.state) {
                Some(State::Done(w)) => Some((*d, w)),
                _ => None,
            })
            .collect()
    }

    /// The locality score of `id` for `worker` (Eq. 1): the share of its dependencies the worker
    /// holds (0 for a level-1 token).
    pub fn locality(&self, worker: WorkerId, id: TokenId) -> f64 {
        let deps = &self.tokens[&id].token.deps;
        if deps.is_empty() {
            return 0.0;
        }
        let held = deps
            .iter()
            .filter(|d| self.held[worker as usize].contains(d))
            .count();
        held as f64 / deps.len() as f64
    }

    /// Answers `worker`'s request at run time `now`: the token it is given, or `None` (the
    /// requester must wait: counted as a locking-problem wait while the iteration is not done).
    pub fn pick(&mut self, worker: WorkerId, now: f64) -> Option<Token> {
        let (bucket, id) = self.choose(worker)?;
        let shared = !self.policies.hf || bucket != worker as usize;
        if shared {
            if let Some(&t) = self.last_shared_pick.get(&bucket) {
                if now - t < self.lock_hold_s {
                    self.counters.conflicts += 1;
                }
            }
            self.last_shared_pick.insert(bucket, now);
        }
        if self.policies.hf && bucket != worker as usize {
            self.counters.steals += 1;
            if self.helping[worker as usize] != Some(bucket) {
                self.helping[worker as usize] = Some(bucket);
                self.helpers[bucket] += 1;
            }
        }
        self.buckets[bucket].remove(&id);
        let entry = self.tokens.get_mut(&id)?;
        debug_assert_eq!(entry.state, State::Available(bucket));
        entry.state = State::Assigned(worker);
        self.counters.assigned += 1;
        self.counters.per_worker[worker as usize] += 1;
        Some(entry.token.clone())
    }

    /// Counts a request that found nothing to do before the iteration's end.
    pub fn count_wait(&mut self) {
        if !self.all_done() {
            self.counters.waits += 1;
        }
    }

    fn choose(&self, worker: WorkerId) -> Option<(usize, TokenId)> {
        if !self.policies.hf {
            return self.best_in(0, worker).map(|id| (0, id));
        }
        let own = worker as usize;
        if let Some(id) = self.best_in(own, worker) {
            return Some((own, id));
        }
        // A helper: the worker with the fewest helpers, then the most work left, then the lowest id.
        let victim = (0..self.workers as usize)
            .filter(|&v| v != own && self.best_in(v, worker).is_some())
            .min_by_key(|&v| {
                let helpers = if self.helping[own] == Some(v) {
                    self.helpers[v].saturating_sub(1)
                } else {
                    self.helpers[v]
                };
                (
                    helpers,
                    std::cmp::Reverse(self.remaining_work(v, worker)),
                    v,
                )
            })?;
        self.best_in(victim, worker).map(|id| (victim, id))
    }

    /// Samples of work in bucket `v` that `worker` may take.
    fn remaining_work(&self, v: usize, worker: WorkerId) -> u64 {
        self.buckets[v]
            .iter()
            .map(|id| &self.tokens[id].token)
            .filter(|t| self.trains(worker, t.level))
            .map(Token::batch)
            .sum()
    }

    /// The token of bucket `b` that `worker` should get, by ADS (or oldest first with ADS off).
    fn best_in(&self, b: usize, worker: WorkerId) -> Option<TokenId> {
        let allowed = self.buckets[b]
            .iter()
            .map(|id| &self.tokens[id])
            .filter(|e| self.trains(worker, e.token.level));
        if !self.policies.ads {
            return allowed
                .min_by_key(|e| (e.seq, e.token.id))
                .map(|e| e.token.id);
        }
        let ctd_level = self.policies.ctd.as_ref().map(|c| c.level);
        let priority = |level: usize| -> usize {
            if Some(level) == ctd_level {
                usize::MAX
            } else {
                level
            }
        };
        let mut best: Option<(usize, f64, TokenId)> = None;
        for e in allowed {
            let p = priority(e.token.level);
            let score = self.locality(worker, e.token.id);
            let better = match best {
                None => true,
                Some((bp, bs, bid)) => {
                    p > bp || (p == bp && (score > bs || (score == bs && e.token.id < bid)))
                }
            };
            if better {
                best = Some((p, score, e.token.id));
            }
        }
        best.map(|b| b.2)
    }

    /// Hands token `id` to `worker` regardless of policy (tests of the paper's examples).
    #[cfg(test)]
    pub(crate) fn force_assign(&mut self, worker: WorkerId, id: TokenId) {
        let e = self.tokens.get_mut(&id).expect("token");
        if let State::Available(b) = e.state {
            self.buckets[b].remove(&id);
        }
        e.state = State::Assigned(worker);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(workers: u32, weights: &[u32], hf: bool) -> TokenServer {
        let plan = TokenPlan::new(128, workers, 16, weights, "w").unwrap();
        let policies = Policies {
            ads: true,
            hf,
            ctd: None,
        };
        let mut s = TokenServer::new(plan, workers, policies, 0.0);
        s.start_iteration(0);
        s
    }

    fn done(s: &mut TokenServer, w: WorkerId, id: TokenId) -> Vec<TokenId> {
        s.force_assign(w, id);
        s.complete(w, id).unwrap()
    }

    fn deps(s: &TokenServer, id: TokenId) -> Vec<TokenId> {
        s.tokens[&id].token.deps.clone()
    }

    #[test]
    fn fig_3_tokens_form_in_completion_order() {
        let mut s = server(8, &[1, 2, 4], true);
        assert_eq!(s.tokens.len(), 8);
        assert_eq!(done(&mut s, 0, 0), Vec::<TokenId>::new());
        assert_eq!(done(&mut s, 1, 1), vec![8]);
        assert_eq!(deps(&s, 8), vec![0, 1]);
        assert_eq!(done(&mut s, 2, 2), Vec::<TokenId>::new());
        assert_eq!(done(&mut s, 3, 3), vec![9]);
        assert_eq!(done(&mut s, 4, 4), Vec::<TokenId>::new());
        assert_eq!(done(&mut s, 5, 5), vec![10]);
        // Token 12 appears once tokens 8 and 10 are complete.
        assert_eq!(done(&mut s, 0, 8), Vec::<TokenId>::new());
        assert_eq!(done(&mut s, 4, 10), vec![12]);
        assert_eq!(deps(&s, 12), vec![8, 10]);
        assert_eq!(s.tokens[&12].token.batch(), 64);
        assert_eq!(done(&mut s, 6, 6), Vec::<TokenId>::new());
        assert_eq!(done(&mut s, 7, 7), vec![11]);
        assert_eq!(done(&mut s, 2, 9), Vec::<TokenId>::new());
        assert_eq!(done(&mut s, 6, 11), vec![13]);
        assert_eq!(deps(&s, 13), vec![9, 11]);
    }

    #[test]
    fn fig_4_locality_then_smallest_id() {
        // Worker 0 holds {2, 3}: Token9 (D = {2, 3}) scores 1, Token10 (D = {4, 5}) scores 0.
        let mut s = server(4, &[1, 2, 4], false);
        for (w, t) in [(1, 0), (1, 1), (0, 2), (0, 3), (1, 4), (1, 5)] {
            done(&mut s, w, t);
        }
        s.force_assign(1, 8);
        assert_eq!((deps(&s, 9), deps(&s, 10)), (vec![2, 3], vec![4, 5]));
        assert_eq!(s.locality(0, 9), 1.0);
        assert_eq!(s.locality(0, 10), 0.0);
        assert_eq!(s.pick(0, 0.0).map(|t| t.id), Some(9));
        // Worker 0 holds {3, 4}: both score 0.5; the smaller id wins.
        let mut s = server(4, &[1, 2, 4], false);
        for (w, t) in [(1, 0), (1, 1), (1, 2), (0, 3), (0, 4), (1, 5)] {
            done(&mut s, w, t);
        }
        s.force_assign(1, 8);
        assert_eq!((s.locality(0, 9), s.locality(0, 10)), (0.5, 0.5));
        assert_eq!(s.pick(0, 0.0).map(|t| t.id), Some(9));
    }

    #[test]
    fn ads_hands_out_the_deepest_level_first() {
        let mut s = server(2, &[1, 2], false);
        done(&mut s, 0, 0);
        done(&mut s, 0, 1);
        // Level-1 tokens 2..7 remain, and token 8 (level 2) now exists: it goes first.
        assert_eq!(s.pick(1, 0.0).map(|t| t.level), Some(1));
    }

    #[test]
    fn a_helper_takes_from_the_worker_with_most_work_left() {
        let mut s = server(4, &[1], true);
        // Worker 0 drains its own sub-bucket (tokens 0, 4), then helps.
        assert_eq!(s.pick(0, 0.0).map(|t| t.id), Some(0));
        assert_eq!(s.pick(0, 0.0).map(|t| t.id), Some(4));
        assert_eq!(s.pick(1, 0.0).map(|t| t.id), Some(1));
        // Workers 2 and 3 have two tokens left each, worker 1 one: the helper goes to worker 2.
        assert_eq!(s.pick(0, 0.0).map(|t| t.id), Some(2));
        assert_eq!(s.counters().steals, 1);
        // A second helper goes to the straggler with fewer helpers: worker 3.
        assert_eq!(s.pick(1, 0.0).map(|t| t.id), Some(5));
        assert_eq!(s.pick(1, 0.0).map(|t| t.id), Some(3));
    }

    #[test]
    fn ctd_keeps_its_level_on_the_subset_and_puts_it_first() {
        let plan = TokenPlan::new(64, 4, 16, &[1, 1], "w").unwrap();
        let ctd = Ctd {
            level: 1,
            members: vec![0],
        };
        let policies = Policies {
            ads: true,
            hf: true,
            ctd: Some(ctd),
        };
        let mut s = TokenServer::new(plan, 4, policies, 0.0);
        s.start_iteration(0);
        let t = s.pick(1, 0.0).unwrap();
        s.complete(1, t.id).unwrap();
        // The level-2 token went to member 0's sub-bucket; worker 1 may not take it.
        assert_eq!(s.pick(1, 0.0).map(|t| t.level), Some(0));
        assert_eq!(s.pick(0, 0.0).map(|t| t.level), Some(1));
    }
}
