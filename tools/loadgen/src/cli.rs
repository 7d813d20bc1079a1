//! Command line: the three modes, their flags, and the validated `Config` the rest of
//! the tool runs from.
//!
//! Invariants (checked once here, so nothing downstream re-validates):
//! - sizes, counts and rates are positive; `--rate` is finite;
//! - exactly one stop condition: `--messages N`, or `--duration D` (default 10s);
//! - e2e messages are at least 8 bytes (the value's first 8 bytes carry the send stamp);
//! - `--security-protocol` is one of Kafka's four, with the CA file and SASL login it needs.

use crate::keys::KeySpec;
use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use corelog_kafka_client::security::{
    tls_client_config, ClientSecurity, SaslCredentials, SaslMechanism, TlsClient,
};
use kafka_protocol::records::Compression;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "corelog-load",
    version,
    about = "Load generator for Kafka-compatible brokers (thread-per-core, glommio)"
)]
pub struct Cli {
    #[command(subcommand)]
    pub mode: ModeCmd,
}

#[derive(Subcommand, Debug)]
pub enum ModeCmd {
    /// Produce messages; latency is produce-ack latency from each message's intended send time.
    Produce(Flags),
    /// Fetch messages from the start of each partition; latency is fetch round-trip time.
    Consume(Flags),
    /// Produce and consume at once; adds end-to-end latency (consume time - send stamp).
    E2e(Flags),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CompressionArg {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl From<CompressionArg> for Compression {
    fn from(c: CompressionArg) -> Self {
        match c {
            CompressionArg::None => Compression::None,
            CompressionArg::Gzip => Compression::Gzip,
            CompressionArg::Snappy => Compression::Snappy,
            CompressionArg::Lz4 => Compression::Lz4,
            CompressionArg::Zstd => Compression::Zstd,
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct Flags {
    /// Broker addresses, comma-separated host:port.
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub bootstrap: String,
    #[arg(long, default_value = "corelog-load")]
    pub topic: String,
    /// Create the topic with N partitions if it does not exist.
    #[arg(long)]
    pub partitions: Option<i32>,
    #[arg(long, default_value_t = 1)]
    pub replication_factor: i16,
    /// Bytes per message value.
    #[arg(long, default_value_t = 1024)]
    pub message_size: usize,
    /// Bytes of records per batch per partition.
    #[arg(long, default_value_t = 256 * 1024)]
    pub batch_size: usize,
    /// How long a non-full batch may wait for more messages.
    #[arg(long, default_value_t = 5)]
    pub linger_ms: u64,
    /// 0, 1, or all (-1).
    #[arg(long, default_value = "1", value_parser = parse_acks)]
    pub acks: i16,
    #[arg(long, value_enum, default_value_t = CompressionArg::None)]
    pub compression: CompressionArg,
    /// none | uniform:K | zipf:K[,s]
    #[arg(long, default_value = "none")]
    pub keys: KeySpec,
    #[arg(long, default_value_t = 1)]
    pub producers: usize,
    #[arg(long, default_value_t = 1)]
    pub consumers: usize,
    /// Messages per second in total (open loop); as fast as possible when absent.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Run time after warm-up, e.g. 30s, 500ms, 2m. Default 10s unless --messages.
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Total messages to produce (produce, e2e) or consume (consume).
    #[arg(long)]
    pub messages: Option<u64>,
    /// Time at the start excluded from all figures.
    #[arg(long, value_parser = parse_duration, default_value = "0s")]
    pub warmup: Duration,
    /// Requests outstanding per connection; every producer and every consumer has its own
    /// connections, as Kafka clients do, so this is per client, as Kafka's
    /// `max.in.flight.requests.per.connection`.
    #[arg(long, default_value_t = 5)]
    pub max_in_flight: usize,
    /// Executors (threads), each with its own connections.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Pin executor i to CPU i.
    #[arg(long)]
    pub pin: bool,
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// HdrHistogram percentile distribution (milliseconds).
    #[arg(long)]
    pub hgrm: Option<PathBuf>,
    /// SVG latency-by-percentile plot.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    #[arg(long, default_value = "corelog-load")]
    pub client_id: String,
    #[arg(long, default_value_t = 50 * 1024 * 1024)]
    pub fetch_max_bytes: i32,
    #[arg(long, default_value_t = 8 * 1024 * 1024)]
    pub partition_fetch_max_bytes: i32,
    #[arg(long, default_value_t = 500)]
    pub fetch_max_wait_ms: i32,
    #[arg(long, value_parser = parse_duration, default_value = "5s")]
    pub connect_timeout: Duration,
    /// Broker-side produce timeout (acks=all).
    #[arg(long, default_value_t = 30_000)]
    pub request_timeout_ms: i32,
    /// Seed for key choice.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Produce as an idempotent producer: an InitProducerId per producer, sequence
    /// numbers per partition (Kafka's enable.idempotence; needs --acks all).
    #[arg(long)]
    pub idempotent: bool,
    /// Kafka's `security.protocol`: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.
    #[arg(long, default_value = "PLAINTEXT")]
    pub security_protocol: String,
    /// The CAs that signed the brokers' certificates (PEM), for SSL and SASL_SSL.
    #[arg(long)]
    pub ssl_ca_location: Option<PathBuf>,
    /// This client's certificate chain and unencrypted key in one PEM file (mutual TLS).
    #[arg(long)]
    pub ssl_keystore_location: Option<PathBuf>,
    /// Do not check that a broker's certificate names its host (Kafka's empty
    /// `ssl.endpoint.identification.algorithm`).
    #[arg(long)]
    pub ssl_no_hostname_verification: bool,
    /// PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
    #[arg(long, default_value = "PLAIN")]
    pub sasl_mechanism: String,
    /// The password is read from CORELOG_LOAD_SASL_PASSWORD, never a flag: it stays off
    /// command lines, logs and this struct's `Debug`.
    #[arg(long)]
    pub sasl_username: Option<String>,
}

impl Flags {
    /// TLS and SASL as `--security-protocol` asks.
    fn security(&self) -> Result<ClientSecurity> {
        let protocol = self.security_protocol.trim().to_ascii_uppercase();
        let (tls, sasl) = match protocol.as_str() {
            "PLAINTEXT" => (false, false),
            "SSL" => (true, false),
            "SASL_PLAINTEXT" => (false, true),
            "SASL_SSL" => (true, true),
            other => {
                bail!("--security-protocol {other}: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL")
            }
        };
        let tls = if tls {
            let ca = self
                .ssl_ca_location
                .as_ref()
                .context("--security-protocol with SSL needs --ssl-ca-location")?;
            let trusted = std::fs::read(ca).with_context(|| format!("reading {}", ca.display()))?;
            let identity = match &self.ssl_keystore_location {
                Some(p) => {
                    Some(std::fs::read(p).with_context(|| format!("reading {}", p.display()))?)
                }
                None => None,
            };
            let config = tls_client_config(
                &trusted,
                identity.as_deref(),
                !self.ssl_no_hostname_verification,
            )
            .map_err(|e| anyhow::anyhow!("TLS: {e}"))?;
            Some(TlsClient { config })
        } else {
            None
        };
        let sasl = if sasl {
            let mechanism = SaslMechanism::from_name(&self.sasl_mechanism).with_context(|| {
                format!(
                    "--sasl-mechanism {}: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512",
                    self.sasl_mechanism
                )
            })?;
            let user = self
                .sasl_username
                .clone()
                .context("SASL needs --sasl-username")?;
            let password = std::env::var("CORELOG_LOAD_SASL_PASSWORD")
                .context("SASL needs a password in CORELOG_LOAD_SASL_PASSWORD")?;
            Some(SaslCredentials::new(mechanism, user, password))
        } else {
            None
        };
        Ok(ClientSecurity { tls, sasl })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Produce,
    Consume,
    E2e,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Produce => "produce",
            Mode::Consume => "consume",
            Mode::E2e => "e2e",
        }
    }
    pub fn produces(self) -> bool {
        self != Mode::Consume
    }
    pub fn consumes(self) -> bool {
        self != Mode::Produce
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Messages(u64),
    Duration(Duration),
}

#[derive(Debug, Clone)]
pub struct Config {
    pub mode: Mode,
    pub flags: Flags,
    /// TLS and SASL towards the brokers (`--security-protocol`).
    pub security: ClientSecurity,
    pub bootstrap: Vec<String>,
    pub stop: Stop,
    pub compression: Compression,
}

pub fn parse_acks(s: &str) -> Result<i16, String> {
    match s {
        "0" => Ok(0),
        "1" => Ok(1),
        "all" | "-1" => Ok(-1),
        _ => Err(format!("acks must be 0, 1, all or -1, not {s:?}")),
    }
}

/// `30s`, `500ms`, `2m`, `1h`, `1.5s`, or bare seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("bad duration {s:?}"))?;
    if !(v >= 0.0 && v.is_finite()) {
        return Err(format!("bad duration {s:?}"));
    }
    let secs = match unit {
        "us" => v / 1e6,
        "ms" => v / 1e3,
        "s" => v,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        _ => return Err(format!("bad duration unit in {s:?} (us, ms, s, m, h)")),
    };
    Ok(Duration::from_secs_f64(secs))
}

impl Config {
    pub fn from_cli(cli: Cli) -> Result<Config> {
        let (mode, f) = match cli.mode {
            ModeCmd::Produce(f) => (Mode::Produce, f),
            ModeCmd::Consume(f) => (Mode::Consume, f),
            ModeCmd::E2e(f) => (Mode::E2e, f),
        };
        let bootstrap: Vec<String> = f
            .bootstrap
            .split(',')
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect();
        if bootstrap.is_empty() {
            bail!("--bootstrap needs at least one host:port");
        }
        if f.topic.is_empty() {
            bail!("--topic must not be empty");
        }
        if let Some(p) = f.partitions {
            if p < 1 {
                bail!("--partitions must be at least 1");
            }
        }
        if f.message_size == 0 || f.message_size > 64 << 20 {
            bail!("--message-size must be 1..=64 MiB");
        }
        if mode == Mode::E2e && f.message_size < 8 {
            bail!("e2e needs --message-size of at least 8 (the send stamp)");
        }
        if f.batch_size == 0 {
            bail!("--batch-size must be positive");
        }
        if f.producers == 0 && mode.produces() {
            bail!("--producers must be at least 1");
        }
        if f.consumers == 0 && mode.consumes() {
            bail!("--consumers must be at least 1");
        }
        if f.threads == 0 {
            bail!("--threads must be at least 1");
        }
        if f.max_in_flight == 0 {
            bail!("--max-in-flight must be at least 1");
        }
        if let Some(r) = f.rate {
            if !(r > 0.0 && r.is_finite()) {
                bail!("--rate must be a positive number of messages per second");
            }
        }
        if f.fetch_max_bytes <= 0 || f.partition_fetch_max_bytes <= 0 {
            bail!("fetch byte limits must be positive");
        }
        if f.fetch_max_bytes > 1 << 30 {
            bail!("--fetch-max-bytes is at most 1 GiB");
        }
        if f.connect_timeout.is_zero() {
            bail!("--connect-timeout must be positive");
        }
        if f.idempotent && f.acks != -1 {
            bail!("--idempotent needs --acks all (as Kafka's enable.idempotence does)");
        }
        let stop = match (f.messages, f.duration) {
            (Some(_), Some(_)) => bail!("give --messages or --duration, not both"),
            (Some(0), None) => bail!("--messages must be positive"),
            (Some(n), None) => Stop::Messages(n),
            (None, Some(d)) if d.is_zero() => bail!("--duration must be positive"),
            (None, Some(d)) => Stop::Duration(d),
            (None, None) => Stop::Duration(Duration::from_secs(10)),
        };
        Ok(Config {
            mode,
            security: f.security()?,
            compression: f.compression.into(),
            bootstrap,
            stop,
            flags: f,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert!(parse_duration("x").is_err());
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn acks() {
        assert_eq!(parse_acks("all").unwrap(), -1);
        assert_eq!(parse_acks("0").unwrap(), 0);
        assert!(parse_acks("2").is_err());
    }

    #[test]
    fn validation() {
        let cfg = |args: &[&str]| {
            let mut v = vec!["corelog-load"];
            v.extend_from_slice(args);
            Config::from_cli(Cli::try_parse_from(v).unwrap())
        };
        let c = cfg(&["produce", "--messages", "10"]).unwrap();
        assert_eq!(c.stop, Stop::Messages(10));
        assert_eq!(
            cfg(&["consume"]).unwrap().stop,
            Stop::Duration(Duration::from_secs(10))
        );
        assert!(cfg(&["produce", "--messages", "10", "--duration", "1s"]).is_err());
        assert!(cfg(&["e2e", "--message-size", "4"]).is_err());
        assert!(cfg(&["produce", "--rate", "0"]).is_err());
        assert!(cfg(&["produce", "--bootstrap", ","]).is_err());
        let c = cfg(&[
            "produce",
            "--compression",
            "zstd",
            "--keys",
            "zipf:100,1.2",
            "--acks",
            "all",
        ])
        .unwrap();
        assert_eq!(c.compression, Compression::Zstd);
        assert_eq!(c.flags.acks, -1);
    }
}
