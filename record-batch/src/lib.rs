//! `corelog-record-batch`: the one statement of the Kafka RecordBatch v2 (magic 2) header
//! layout, shared by everything in corelog that reads or writes a header field by
//! position.
//!
//! It is a leaf: it depends on no crate at all (not even `std`), so that both the storage
//! engine (`corelog-storage`, which writes the log) and the Kafka client
//! (`corelog-kafka-client`, which the replica fetcher and the load generator read and
//! build batches with) can use it, although neither may depend on the other. One table,
//! not a table and a copy, so the two cannot drift apart.
//!
//! Invariants (checked at compile time, next to the table in [`layout`]): the fields are
//! contiguous, in wire order and as wide as their types; `batchLength` ends at
//! [`layout::LOG_OVERHEAD`]; the CRC-covered region ([`layout::CRC_START`]`..`) starts
//! right after `crc`, with `attributes`; `recordCount` ends the 61-byte header
//! ([`layout::BATCH_HEADER_LEN`]).
//!
//! Does not: parse, validate, build or checksum batches (the storage engine and the
//! client each do that for their own needs), or know any other batch format.

#![no_std]

pub mod layout;
