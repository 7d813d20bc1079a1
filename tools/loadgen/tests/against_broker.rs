//! corelog-load against the real broker process on loopback.
//!
//! Builds nothing itself: it runs the broker binary named by `CORELOG_BIN` (default
//! `../../target/release/corelog` from this crate, i.e. what `cargo build --release -p
//! corelog` produces) and skips, saying so, when that binary is missing. Each test gets
//! its own broker on free ports with a temporary data directory, killed on drop.

use serde_json::Value;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const LOAD: &str = env!("CARGO_BIN_EXE_corelog-load");

fn broker_bin() -> Option<PathBuf> {
    let p = match std::env::var_os("CORELOG_BIN") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/release/corelog"),
    };
    if p.is_file() {
        Some(p)
    } else if std::env::var_os("CORELOG_BIN").is_some() {
        // Named explicitly (as the project's test command does): missing is a failure.
        panic!("CORELOG_BIN={} does not exist", p.display());
    } else {
        eprintln!("SKIP: broker binary {} not found (build it with `cargo build --release -p corelog` or set CORELOG_BIN)", p.display());
        None
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Minimal HTTP/1.0 GET on loopback: (status, body).
fn http_get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

struct Broker {
    child: Child,
    kafka: String,
    http: String,
    _dir: tempfile::TempDir,
}

impl Broker {
    /// Starts a broker on fresh ports. A start whose process exits before it is healthy
    /// (a port taken between the probe and the broker's bind, by another test's client
    /// connection) is retried on new ports; a start that hangs fails with the log tail.
    fn start(bin: &PathBuf) -> Broker {
        const ATTEMPTS: usize = 3;
        let mut failures = Vec::new();
        for _ in 0..ATTEMPTS {
            match Broker::try_start(bin) {
                Ok(b) => return b,
                Err(why) => failures.push(why),
            }
        }
        panic!(
            "broker did not start in {ATTEMPTS} attempts:\n{}",
            failures.join("\n---\n")
        );
    }

    fn try_start(bin: &PathBuf) -> Result<Broker, String> {
        let dir = tempfile::tempdir().unwrap();
        let kafka = format!("127.0.0.1:{}", free_port());
        let http = loop {
            let http = format!("127.0.0.1:{}", free_port());
            if http != kafka {
                break http;
            }
        };
        let controller = loop {
            let c = format!("127.0.0.1:{}", free_port());
            if c != kafka && c != http {
                break c;
            }
        };
        let log_path = dir.path().join("broker.log");
        let log = std::fs::File::create(&log_path).unwrap();
        let child = Command::new(bin)
            .args([
                "serve",
                "--listen",
                &kafka,
                "--http",
                &http,
                "--controller-listen",
                &controller,
                "--shards",
                "2",
                "--data-dir",
            ])
            .arg(dir.path().join("data"))
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start broker");
        let mut b = Broker {
            child,
            kafka,
            http,
            _dir: dir,
        };
        let log_tail = || {
            let text = std::fs::read_to_string(&log_path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(40)..].join("\n")
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok((200, _)) = http_get(&b.http, "/health") {
                return Ok(b);
            }
            if let Ok(Some(status)) = b.child.try_wait() {
                return Err(format!(
                    "broker exited ({status}) before becoming healthy on {}; log:\n{}",
                    b.http,
                    log_tail()
                ));
            }
            if Instant::now() >= deadline {
                // A hang is the broker's fault, never retried.
                panic!(
                    "broker not healthy on {} after 30 s (start-up hang); log:\n{}",
                    b.http,
                    log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs corelog-load with `args` plus `--json`, returns (exit code, parsed JSON, stderr).
fn load(args: &[&str]) -> (i32, Option<Value>, String) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let out = Command::new(LOAD)
        .args(args)
        .arg("--json")
        .arg(&json)
        .output()
        .expect("run corelog-load");
    let v = std::fs::read_to_string(&json)
        .ok()
        .map(|t| serde_json::from_str(&t).expect("JSON is well formed"));
    (
        out.status.code().unwrap_or(-1),
        v,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn assert_shape(v: &Value, mode: &str) {
    assert_eq!(v["mode"], mode);
    for k in [
        "messages",
        "bytes",
        "duration_s",
        "msgs_per_s",
        "mb_per_s",
        "errors",
    ] {
        assert!(v[k].is_number(), "{k} missing in {v}");
    }
    let mut hists = vec!["latency_ms"];
    if mode == "e2e" {
        hists.push("e2e_latency_ms");
    }
    for h in hists {
        for k in ["p50", "p90", "p99", "p999", "p9999", "max"] {
            assert!(v[h][k].is_number(), "{h}.{k} missing in {v}");
        }
    }
}

#[test]
fn produce_then_consume_counts_match() {
    let Some(bin) = broker_bin() else { return };
    let b = Broker::start(&bin);
    let common = ["--bootstrap", b.kafka.as_str(), "--topic", "it-load"];
    let mut args = vec!["produce"];
    args.extend_from_slice(&common);
    args.extend_from_slice(&[
        "--partitions",
        "4",
        "--messages",
        "20000",
        "--message-size",
        "512",
    ]);
    let (code, v, err) = load(&args);
    assert_eq!(code, 0, "produce failed: {err}");
    let v = v.expect("produce wrote --json");
    assert_shape(&v, "produce");
    assert_eq!(v["messages"], 20000);
    assert_eq!(v["errors"], 0);
    assert_eq!(v["bytes"], 20000 * 512);
    assert_eq!(v["latency_ms"]["count"], 20000);

    let mut args = vec!["consume"];
    args.extend_from_slice(&common);
    args.extend_from_slice(&["--messages", "20000", "--consumers", "2", "--threads", "2"]);
    let (code, v, err) = load(&args);
    assert_eq!(code, 0, "consume failed: {err}");
    let v = v.expect("consume wrote --json");
    assert_shape(&v, "consume");
    assert_eq!(v["messages"], 20000, "consumed exactly what was produced");
    assert_eq!(v["errors"], 0);
}

#[test]
fn e2e_with_rate_keys_and_compression() {
    let Some(bin) = broker_bin() else { return };
    let b = Broker::start(&bin);
    let (code, v, err) = load(&[
        "e2e",
        "--bootstrap",
        &b.kafka,
        "--topic",
        "it-e2e",
        "--partitions",
        "3",
        "--rate",
        "5000",
        "--messages",
        "5000",
        "--keys",
        "zipf:100",
        "--compression",
        "zstd",
        "--acks",
        "all",
    ]);
    assert_eq!(code, 0, "e2e failed: {err}");
    let v = v.unwrap();
    assert_shape(&v, "e2e");
    assert_eq!(v["messages"], 5000);
    assert_eq!(v["consumed"]["messages"], 5000);
    assert_eq!(v["e2e_latency_ms"]["count"], 5000);
    // At 5,000 msg/s, 5,000 messages take about a second of schedule.
    assert!(v["duration_s"].as_f64().unwrap() >= 0.9, "{v}");
}

#[test]
fn unreachable_broker_exits_2_naming_the_address() {
    let port = free_port(); // nothing listens there once the probe socket is closed
    let addr = format!("127.0.0.1:{port}");
    let out = Command::new(LOAD)
        .args([
            "produce",
            "--bootstrap",
            &addr,
            "--messages",
            "10",
            "--connect-timeout",
            "2s",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&addr), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
}

/// Sum of one Prometheus counter over all series whose labels contain `label`.
fn prom_sum(text: &str, name: &str, label: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .sum()
}

/// What corelog-load reports and what the broker's `/metrics` counted agree.
#[test]
fn broker_metrics_match_load_counts() {
    let Some(bin) = broker_bin() else { return };
    let b = Broker::start(&bin);
    let (code, produced, err) = load(&[
        "produce",
        "--bootstrap",
        &b.kafka,
        "--topic",
        "it-metrics",
        "--partitions",
        "4",
        "--messages",
        "10000",
        "--message-size",
        "300",
        "--acks",
        "all",
    ]);
    assert_eq!(code, 0, "produce failed: {err}");
    let produced = produced.expect("json");
    let (code, consumed, err) = load(&[
        "consume",
        "--bootstrap",
        &b.kafka,
        "--topic",
        "it-metrics",
        "--messages",
        "10000",
    ]);
    assert_eq!(code, 0, "consume failed: {err}");
    let consumed = consumed.expect("json");

    let (status, metrics) = http_get(&b.http, "/metrics").expect("GET /metrics");
    assert_eq!(status, 200);
    let api = |a: &str| format!("api=\"{a}\"");
    // Every produced payload byte reached the broker inside Produce frames; every
    // consumed record-batch byte left it inside Fetch frames.
    let bytes_in = prom_sum(
        &metrics,
        "corelog_request_received_bytes_total",
        &api("Produce"),
    );
    assert!(
        bytes_in >= produced["bytes"].as_f64().expect("bytes"),
        "{bytes_in} < {produced}"
    );
    let bytes_out = prom_sum(&metrics, "corelog_response_sent_bytes_total", &api("Fetch"));
    assert!(
        bytes_out >= consumed["bytes"].as_f64().expect("bytes"),
        "{bytes_out} < {consumed}"
    );
    // Frames carry a little overhead, not a multiple of the data.
    assert!(
        bytes_in < produced["bytes"].as_f64().unwrap_or(0.0) * 1.5,
        "{bytes_in}"
    );
    // The broker refused nothing and the client saw no errors.
    assert_eq!(
        prom_sum(&metrics, "corelog_errors_total", &api("Produce")),
        0.0
    );
    assert_eq!(produced["errors"], 0);
    // Requests were counted, and each has a latency sample.
    let produce_requests = prom_sum(&metrics, "corelog_requests_total", &api("Produce"));
    assert!(produce_requests >= 1.0);
    assert_eq!(
        prom_sum(
            &metrics,
            "corelog_request_latency_seconds_count",
            &api("Produce")
        ),
        produce_requests
    );
    // acks=all went through group-commit fsyncs.
    assert!(
        prom_sum(
            &metrics,
            "corelog_stage_latency_seconds_count",
            "stage=\"fsync\""
        ) >= 1.0
    );
}
