//! The network side of a shard: the SO_REUSEPORT listener, the per-connection request
//! pipeline, and the limits on connections and on request memory.

pub mod connection;
pub mod connection_limits;
pub mod frame_writer;
pub mod ktls;
pub mod listener;
pub mod request_buffers;
pub mod request_memory;
pub mod shutdown;
pub mod tls;
