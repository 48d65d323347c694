//! Embedding placement: shard plans, tiers, hot/cold placement and eviction.
