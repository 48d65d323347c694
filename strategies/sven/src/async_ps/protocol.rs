//! The messages between the parameter-server baseline's workers and servers.
//!
//! Ids ride in the message header (they address rows, like the block ids of the engine's own
//! `Push`), and each message carries a virtual payload of one 4-byte element per id so that the
//! wire charges them as the int32 ids they are.

use concord_engine::prelude::*;
use thiserror::Error;

/// Worker → server: read these rows (per table, the sorted unique ids of the server's shard the
/// worker's batch looks up) and every dense tensor the server holds.
///
/// Payloads: `[ids]` (virtual, one element per id).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pull {
    /// The worker's clock.
    pub clock: u64,
    /// Per table, the ids wanted.
    pub ids: Vec<Vec<u32>>,
}
impl StrategyMessage for Pull {
    const TAG: &'static str = "dlrm-async-ps.pull";
    const BODY_IN_HEADER: bool = true;
}

/// Server → worker: the current values of the rows a [`Pull`] asked for and of the server's
/// dense tensors.
///
/// Payloads: `[rows, dense...]`: the rows of every table in request order (`[ids, width]`
/// row-major each, concatenated), then each dense tensor the server holds, in parameter order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rows {
    /// The clock the pull was for.
    pub clock: u64,
    /// Pushes the server had applied when it answered (all workers').
    pub applied: u64,
    /// The staleness of each of this worker's pushes the server applied since its previous
    /// answer to it: other workers' pushes applied between the worker's pull and that push.
    pub staleness: Vec<u64>,
}
impl StrategyMessage for Rows {
    const TAG: &'static str = "dlrm-async-ps.rows";
    const BODY_IN_HEADER: bool = true;
}

/// Worker → server: the gradients of one clock, applied on arrival and never acknowledged.
///
/// Payloads: `[ids, row gradients, dense gradients...]`: the ids (virtual, one element per id),
/// each table's row gradients in `ids` order (`[ids, width]` row-major, concatenated; one row
/// per unique id, duplicates summed), then the gradient of each dense tensor the server holds,
/// in parameter order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Push {
    /// The worker's clock.
    pub clock: u64,
    /// Per table, the ids whose rows the gradients are for.
    pub ids: Vec<Vec<u32>>,
}
impl StrategyMessage for Push {
    const TAG: &'static str = "dlrm-async-ps.push";
    const BODY_IN_HEADER: bool = true;
}

/// The virtual payload that charges `ids` on the wire (one 4-byte element per id).
pub fn ids_payload(ids: &[Vec<u32>]) -> Payload {
    Payload::Virtual {
        elems: ids.iter().map(|t| t.len() as u64).sum(),
    }
}

/// What a server finds wrong with a request.
#[derive(Debug, Error, PartialEq)]
pub enum RequestError {
    /// The request names a different number of tables than the model has.
    #[error("{what} from worker {worker} names {got} tables, the model has {want}")]
    Tables {
        /// Which request.
        what: &'static str,
        /// Its sender.
        worker: WorkerId,
        /// Tables named.
        got: usize,
        /// Tables of the model.
        want: usize,
    },
    /// An id outside the server's rows of a table.
    #[error("{what} from worker {worker} asks for row {id} of table {table}, outside this server's rows {start}..{end}")]
    NotHeld {
        /// Which request.
        what: &'static str,
        /// Its sender.
        worker: WorkerId,
        /// The table.
        table: usize,
        /// The id.
        id: u32,
        /// First row held.
        start: usize,
        /// One past the last row held.
        end: usize,
    },
    /// A push whose payloads do not match its ids and the server's dense tensors.
    #[error(
        "push from worker {worker} carries {got} gradient values for its {part}, expected {want}"
    )]
    Size {
        /// Its sender.
        worker: WorkerId,
        /// Which part (`rows`, or the dense parameter's index).
        part: String,
        /// Values carried.
        got: usize,
        /// Values expected.
        want: usize,
    },
    /// A push for a clock the worker never pulled.
    #[error("push from worker {worker} for clock {clock}, which it never pulled")]
    Unpulled {
        /// Its sender.
        worker: WorkerId,
        /// The clock.
        clock: u64,
    },
}
