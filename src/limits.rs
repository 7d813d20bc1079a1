//! Every fixed bound of the broker in one place, each with the reason for its value.
//! Configurable limits (message.max.bytes, socket.request.max.bytes, …) have their
//! defaults here and live in `config.rs`; the connection limits' configuration and its
//! parsing are here too, so that configuration never depends on the network code.

use std::collections::HashMap;
use std::net::IpAddr;

/// Kafka's `socket.request.max.bytes` default: the largest frame a client may send.
pub const SOCKET_REQUEST_MAX_BYTES: usize = 100 * 1024 * 1024;

/// Kafka's `message.max.bytes` default: the largest record batch accepted.
pub const MESSAGE_MAX_BYTES: usize = 1_048_588;

/// Requests read ahead on one connection while earlier ones are still being served
/// (the default of `--max-inflight-requests-per-connection`). Kafka clients pipeline up
/// to `max.in.flight.requests.per.connection` (5 by default); beyond this the
/// connection stops reading (back-pressure), it is not refused.
pub const INFLIGHT_REQUESTS_PER_CONNECTION_MAX: usize = 16;

/// The least `--max-inflight-requests-per-connection` accepts: below the clients'
/// default pipelining depth every connection would stall on its own requests.
pub const INFLIGHT_REQUESTS_PER_CONNECTION_MIN: usize = 5;

/// Default of `--queued-max-request-bytes`: request frame bytes one shard holds at once
/// (Kafka's `queued.max.request.bytes`, unlimited there; per shard here). Above
/// `SOCKET_REQUEST_MAX_BYTES`, so by default the largest frame fits with room for
/// others; `net/request_memory.rs` explains a smaller setting.
pub const QUEUED_MAX_REQUEST_BYTES_DEFAULT: u64 = 256 * 1024 * 1024;

/// Default of `--request-body-timeout-ms`: longest a frame's body may take to arrive
/// once its memory is granted. Without it a client that declares a large frame and
/// trickles the body holds request memory, and stalls every reader queued behind it,
/// for as long as it likes. Kafka clients give up on a request after
/// `request.timeout.ms` (30 s by default), so a slower body is useless to them anyway;
/// 60 s still lets a 100 MiB frame arrive at under 2 MB/s.
pub const REQUEST_BODY_TIMEOUT_MS_DEFAULT: u64 = 60_000;
/// Kafka's `sasl.server.max.receive.size` default (`SaslServerAuthenticator`): before
/// authentication a request is only a handshake or a token, never this large, so a
/// larger one is an unauthenticated client holding broker memory.
pub const SASL_SERVER_MAX_RECEIVE_SIZE_DEFAULT: usize = 512 << 10;

/// Longest a request body may go without a single byte arriving, once its memory is
/// granted (capped by the body timeout). A client that declares a large frame and sends
/// nothing holds memory other readers may be queued for: it is closed after this, not
/// after the whole body timeout. 10 s of silence mid-frame is no live Kafka client.
pub const REQUEST_BODY_STALL_MS: u64 = 10_000;

/// Default of `--tail-cache-shard-bytes`: the tail caches of all partitions of one shard
/// together (each partition also keeps to `LogConfig::tail_cache_bytes`, 2 MiB), so
/// thousands of partitions on a core cannot hold gigabytes of cached batches.
pub const TAIL_CACHE_SHARD_BYTES_DEFAULT: u64 = 512 * 1024 * 1024;

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
const _: () = assert!(QUEUED_MAX_REQUEST_BYTES_DEFAULT >= SOCKET_REQUEST_MAX_BYTES as u64);
const _: () = assert!(
    INFLIGHT_REQUESTS_PER_CONNECTION_MAX >= INFLIGHT_REQUESTS_PER_CONNECTION_MIN,
    "Kafka clients pipeline 5 by default"
);

// ---- connection limits (`net::connection_limits` enforces them) ----

/// Fewest connections the total may be configured to (the broker must stay reachable).
pub const MAX_CONNECTIONS_MIN: usize = 1;

/// The configured limits (plain data, part of `BrokerConfig`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionLimitsConfig {
    /// Most connections open at once, broker-wide.
    pub total_max: usize,
    /// Most connections from one IP; `None`: unlimited.
    pub per_ip_max: Option<usize>,
    /// Per-IP limits that replace `per_ip_max` for the given addresses.
    pub per_ip_overrides: HashMap<IpAddr, usize>,
}

/// Half of RLIMIT_NOFILE, at least 64. The hard limit is used: start-up raises the soft
/// limit to it (`kernel::raise_nofile`), which an unprivileged process may always do.
/// An unlimited hard limit counts as `NOFILE_ASSUMED_MAX`.
pub fn default_max_connections() -> usize {
    let nofile = crate::kernel::nofile_ceiling().unwrap_or(1024);
    usize::try_from(nofile / 2).unwrap_or(usize::MAX).max(64)
}

/// Fewest segment files the broker may be configured to keep open.
pub const OPEN_SEGMENT_FILES_MIN: usize = 64;

/// A quarter of RLIMIT_NOFILE (the hard limit, as for connections), at least
/// `OPEN_SEGMENT_FILES_MIN`: connections take half by default, and the rest is left
/// for everything else a broker opens (directories, checkpoints, snapshots, rings).
pub fn default_max_open_segment_files() -> usize {
    let nofile = crate::kernel::nofile_ceiling().unwrap_or(1024);
    usize::try_from(nofile / 4)
        .unwrap_or(usize::MAX)
        .max(OPEN_SEGMENT_FILES_MIN)
}

/// Parses Kafka's `max.connections.per.ip.overrides`: `ip:count,ip:count`. Only IP
/// literals (IPv6 too: the count follows the last colon); Kafka also accepts host
/// names, which would need a DNS lookup at start-up that we do not do.
pub fn parse_overrides(text: &str) -> Result<HashMap<IpAddr, usize>, String> {
    let mut out = HashMap::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (ip, count) = item
            .rsplit_once(':')
            .ok_or_else(|| format!("{item:?} is not IP:COUNT"))?;
        let ip = ip.trim().trim_matches(|c| c == '[' || c == ']');
        let ip: IpAddr = ip
            .parse::<IpAddr>()
            .map_err(|_| format!("{ip:?} is not an IP address (host names are not accepted)"))?
            // Peers are compared in canonical form (an IPv4-mapped IPv6 address is IPv4).
            .to_canonical();
        let count: usize = count
            .trim()
            .parse()
            .map_err(|_| format!("{item:?}: count is not a non-negative integer"))?;
        if out.insert(ip, count).is_some() {
            return Err(format!("{ip} is listed twice"));
        }
    }
    Ok(out)
}
