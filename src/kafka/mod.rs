//! The Kafka protocol edge: request framing, the supported API table, one handler module
//! per API family, and the mapping of internal errors to Kafka error codes.
//!
//! Codecs come from the `kafka-protocol` crate (vendored with one safety patch, see
//! vendor/README.md). Record bytes are never decoded here: produce records go to the
//! owning shard as `Bytes` slices of the request frame, and fetched records leave as
//! parts of the response frame (`response_frame`), never copied into it.

pub mod access;
pub mod api;
pub mod authorized_operations;
pub mod error_code;
pub mod frame;
pub mod produce_order;
pub mod response_frame;
