//! Every fixed bound of the broker in one place, each with the reason for its value.
//! Configurable limits (message.max.bytes, socket.request.max.bytes, …) have their
//! defaults here and live in `config.rs`.

/// Kafka's `socket.request.max.bytes` default: the largest frame a client may send.
pub const SOCKET_REQUEST_MAX_BYTES: usize = 100 * 1024 * 1024;

/// Kafka's `message.max.bytes` default: the largest record batch accepted.
pub const MESSAGE_MAX_BYTES: usize = 1_048_588;

/// Requests read ahead on one connection while earlier ones are still being served.
/// Kafka clients pipeline up to `max.in.flight.requests.per.connection` (5 by default);
/// beyond this the connection stops reading (back-pressure), it is not refused.
pub const INFLIGHT_REQUESTS_PER_CONNECTION_MAX: usize = 16;

/// Smallest frame that can hold a request header v1 (api key, version, correlation id,
/// client id length).
pub const REQUEST_HEADER_MIN_BYTES: usize = 10;

/// Longest a clean shutdown waits for in-flight requests before closing the logs.
pub const SHUTDOWN_DRAIN_MS: u64 = 5_000;

/// Upper bound on a fetch's max_wait_ms, so a hostile client cannot park a request for
/// days.
pub const FETCH_MAX_WAIT_MS_MAX: u64 = 30_000;

/// Most bytes one partition contributes to one fetch response, whatever the client asks
/// (a hostile `partition_max_bytes` of 2 GiB must not make the broker read a whole
/// segment into memory). At least one whole batch is still always returned.
pub const FETCH_PARTITION_BYTES_MAX: usize = 8 * 1024 * 1024;

/// Most bytes of records in one fetch response (Kafka's `fetch.max.bytes` default is
/// 50 MiB).
pub const FETCH_RESPONSE_BYTES_MAX: usize = 64 * 1024 * 1024;

const _: () = assert!(FETCH_PARTITION_BYTES_MAX <= FETCH_RESPONSE_BYTES_MAX);
const _: () = assert!(MESSAGE_MAX_BYTES < SOCKET_REQUEST_MAX_BYTES);
const _: () = assert!(
    INFLIGHT_REQUESTS_PER_CONNECTION_MAX >= 5,
    "Kafka clients pipeline 5 by default"
);
