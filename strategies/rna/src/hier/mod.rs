//! RNA-H: the hierarchical mode (Yang thesis §5.2, spec §2.1.4).
//!
//! Randomized probing hides transient stragglers but not a *persistent* speed gap: in flat RNA
//! the slow workers mostly contribute null or stale gradients and drift. RNA-H therefore
//!
//! 1. **forms groups from profiled speeds** ([`form_groups`]): the job starts as flat RNA (the
//!    warm-up); every worker times its first `profile_steps` local steps and reports the mean;
//!    once all have reported, the controller splits the workers into slow (mean above the set's
//!    mean v) and fast while ζ = slowest − fastest exceeds `split_ratio` · v, recursively, and
//!    the groups take over at the next round (formation happens once, spec §2.1.4 \[CHOICE\]).
//!    Explicit `groups` skip the warm-up;
//! 2. runs **RNA inside each group**: one probe state machine per group on the controller (q
//!    probes among the group's members, activation of the group only, ring over the group
//!    subset, learning-rate rule with the group's size);
//! 3. **averages the groups' models asynchronously through a parameter server**
//!    ([`AveragingServer`], server 0): every `sync_period` rounds of a group, that round's
//!    initiator pushes the group's parameters; the server keeps each group's latest copy and
//!    answers with their mean over the groups that have pushed so far; the initiator broadcasts
//!    it to its group (binomial tree), whose members overwrite their parameters (optimizer state
//!    kept). There is no barrier across groups: each group is one "node" of a classic PS.
//!    With `merge = "delta"` the server instead keeps one global model and adds to it each
//!    group's change since it last answered that group (the thesis's other phrasing, "each group
//!    can be regarded as a node in the traditional PS"); the group's first push carries the
//!    model it started from. Averaging N groups counts each group's step 1/N, so groups then
//!    scale their learning rate by their own size; a delta enters whole, so they scale by the
//!    job's worker count (the thesis's γ_k = Σw · γ with the per-worker γ).
//!
//! Every message is serializable (custom JSON bodies or
//! [`Message::Collective`](concord_engine::prelude::Message::Collective) payloads).
//!
//! One module per part: `groups` (the split rule), `ops` (the averaging's operation ids, the
//! broadcast tree, the push layout), `server` (the averaging server) and `controller` (the
//! per-group probe controllers and the group formation).

mod controller;
mod groups;
mod ops;
mod server;

pub use controller::HierController;
pub use groups::form_groups;
pub use ops::{is_sync_op, sync_group, sync_op, tree, PUSH_WITH_BASE, SYNC_OP};
pub use server::{add_delta, average, AveragingServer};
