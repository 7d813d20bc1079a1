//! corelog: a Kafka-compatible message broker on a thread-per-core io_uring core.
//!
//! The library holds the broker; `main.rs` is only the command line. The process is:
//! parse flags and the optional TOML file (`config`), set up logging, start the HTTP
//! endpoint (`http`), then the shards (`server`), each with its listener and connections
//! (`net`) speaking the Kafka protocol (`kafka`) to what each core owns (the `shards`
//! crate, over `corelog-partition` and `corelog-storage`). It is the only crate that
//! speaks Kafka's wire protocol to clients and maps internal errors to Kafka error codes;
//! nothing below it depends on it. It is a library so that benchmarks reach the hot paths
//! (request decode, response framing) directly.

/// What `corelog --version` prints and the start-up log names: the package version and
/// the commit it was built from (`build.rs`).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("CORELOG_COMMIT"),
    ")"
);

pub mod admin;
pub mod cluster;
pub mod config;
pub mod config_reference;
pub mod host_check;
pub mod http;
pub mod inter_broker_security;
pub mod journal_log;
pub mod kafka;
pub mod kafka_settings;
pub mod kernel;
pub mod lenient_toml;
pub mod limits;
pub mod listeners;
pub mod log_filter;
pub mod metrics;
pub mod net;
pub mod paths;
pub mod quota;
pub mod rate_limited_log;
pub mod sasl;
pub mod security_config;
pub mod server;
pub mod service_notify;
pub mod session;
pub mod share_session;
pub mod tls_config;
pub mod tls_principal;
pub mod tls_reload;
