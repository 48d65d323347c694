//! Why a placement could not be built or used.

use thiserror::Error;

/// A placement failure; each variant names what is wrong and where.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum PlacementError {
    /// A shard plan was asked for zero ranks.
    #[error("placement: a shard plan needs at least one rank, got 0")]
    NoRanks,
    /// A table has no rows or no columns.
    #[error("placement: table {table} is empty ({rows} rows x {width} columns); every table needs rows and columns")]
    EmptyTable {
        /// The table index.
        table: usize,
        /// Its row count.
        rows: usize,
        /// Its embedding width.
        width: usize,
    },
    /// Column-wise sharding over more ranks than a table has columns.
    #[error(
        "placement: column-wise sharding of table {table} (width {width}) over {ranks} ranks; \
         a column-wise table needs at least one column per rank"
    )]
    MoreRanksThanColumns {
        /// The table index.
        table: usize,
        /// Its embedding width.
        width: usize,
        /// The rank count.
        ranks: usize,
    },
    /// The device fraction is outside (0, 1].
    #[error("placement: alpha (the device fraction of rows) is {alpha}; it must be in (0, 1]")]
    Alpha {
        /// The fraction given.
        alpha: f64,
    },
    /// One shard of a table is larger than both tiers of its rank.
    #[error(
        "placement: an embedding table larger than every tier: table {table}'s shard on rank \
         {rank} is {bytes} bytes, the device tier holds {device_bytes} bytes and the host tier \
         {host_bytes} bytes"
    )]
    TableTooLarge {
        /// The table index.
        table: usize,
        /// The rank holding the shard.
        rank: usize,
        /// The shard's size, bytes.
        bytes: u64,
        /// The rank's device-tier capacity, bytes.
        device_bytes: u64,
        /// The rank's host-tier capacity, bytes.
        host_bytes: u64,
    },
    /// A rank's shards together exceed its two tiers together.
    #[error(
        "placement: rank {rank} holds {bytes} bytes of embeddings, more than its device \
         ({device_bytes} bytes) and host ({host_bytes} bytes) tiers together"
    )]
    RankOverCapacity {
        /// The rank.
        rank: usize,
        /// The bytes of all its shards.
        bytes: u64,
        /// Its device-tier capacity, bytes.
        device_bytes: u64,
        /// Its host-tier capacity, bytes.
        host_bytes: u64,
    },
    /// A table index past the last table.
    #[error("placement: table {table} does not exist; there are {tables} tables")]
    TableOutOfRange {
        /// The table index given.
        table: usize,
        /// The number of tables.
        tables: usize,
    },
    /// A row id past the end of its table.
    #[error("placement: row {row} of table {table} does not exist; the table has {rows} rows")]
    RowOutOfRange {
        /// The table index.
        table: usize,
        /// The row id given.
        row: usize,
        /// The table's row count.
        rows: usize,
    },
    /// A batch's ids and labels differ in length.
    #[error(
        "placement: table {table}'s batch has {ids} ids but {labels} labels; one label per id"
    )]
    LabelsLength {
        /// The table index.
        table: usize,
        /// The number of ids.
        ids: usize,
        /// The number of labels.
        labels: usize,
    },
    /// An importance-score parameter outside its range.
    #[error("placement: importance parameter {name} is {value}; it must be {expected}")]
    ImportanceParam {
        /// The parameter (`beta`, `k` or `l`).
        name: &'static str,
        /// The value given.
        value: f64,
        /// The range it must lie in.
        expected: &'static str,
    },
    /// An access-stream parameter outside its range.
    #[error("placement: access stream parameter {name} is {value}; it must be {expected}")]
    StreamParam {
        /// The parameter (`rows`, `exponent`, `batch`).
        name: &'static str,
        /// The value given.
        value: f64,
        /// The range it must lie in.
        expected: &'static str,
    },
}
