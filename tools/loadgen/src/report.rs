//! Everything the tool prints or writes about a run: the live progress line, the final
//! summary, `--json`, and `--hgrm` (HdrHistogram's percentile distribution text).
//!
//! Invariants:
//! - One definition of the run's figures (`Figures`), used by the summary and the JSON
//!   alike, so they cannot disagree.
//! - Latencies are recorded in µs and reported in ms (`US_PER_MS`), in every output.
//! - MB is 10^6 bytes (as Kafka's and fio's tools report).
//!
//! Not here: the SVG plot (`plot.rs`).

use crate::cli::{Config, Mode, Stop};
use crate::stats::{Interval, Snapshot};
use hdrhistogram::Histogram;
use serde_json::{json, Map, Value};
use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::time::Instant;

pub const US_PER_MS: f64 = 1000.0;

/// The quantiles reported everywhere, with their JSON key and display label.
pub const QUANTILES: &[(&str, &str, f64)] = &[
    ("p50", "p50", 0.5),
    ("p90", "p90", 0.9),
    ("p99", "p99", 0.99),
    ("p999", "p99.9", 0.999),
    ("p9999", "p99.99", 0.9999),
];

fn ms(us: u64) -> f64 {
    us as f64 / US_PER_MS
}

/// The headline interval of a mode: what was produced, or (consume) what was fetched.
pub fn primary(mode: Mode, s: &Snapshot) -> &Interval {
    match mode {
        Mode::Consume => &s.consumed,
        Mode::Produce | Mode::E2e => &s.produced,
    }
}

pub struct Progress {
    mode: Mode,
    tty: bool,
    measure_from: Instant,
    last_tick: Instant,
    sec_messages: u64,
    sec_bytes: u64,
    printed_tty_line: bool,
}

impl Progress {
    pub fn new(mode: Mode, measure_from: Instant) -> Self {
        Progress {
            mode,
            tty: std::io::stderr().is_terminal(),
            measure_from,
            last_tick: Instant::now(),
            sec_messages: 0,
            sec_bytes: 0,
            printed_tty_line: false,
        }
    }

    pub fn add(&mut self, s: &Snapshot) {
        let p = primary(self.mode, s);
        self.sec_messages += p.messages;
        self.sec_bytes += p.bytes;
    }

    /// Prints one progress line: rates over the last tick, percentiles so far.
    pub fn tick(&mut self, total: &Snapshot) {
        let now = Instant::now();
        let secs = now.duration_since(self.last_tick).as_secs_f64().max(1e-3);
        self.last_tick = now;
        let p = primary(self.mode, total);
        let mut line = String::new();
        if now < self.measure_from {
            let _ = write!(
                line,
                "[warmup {:>4.0}s]",
                (self.measure_from - now).as_secs_f64()
            );
        } else {
            let _ = write!(
                line,
                "[{:>5.0}s]",
                now.duration_since(self.measure_from).as_secs_f64()
            );
        }
        let _ = write!(
            line,
            " {} {:>11.0} msg/s {:>8.1} MB/s  p50 {:.3} ms  p99 {:.3} ms",
            self.mode.name(),
            self.sec_messages as f64 / secs,
            self.sec_bytes as f64 / secs / 1e6,
            ms(p.latency.value_at_quantile(0.5)),
            ms(p.latency.value_at_quantile(0.99)),
        );
        if self.mode == Mode::E2e {
            let _ = write!(
                line,
                "  e2e p50 {:.3} ms  p99 {:.3} ms  consumed {}",
                ms(total.consumed.e2e.value_at_quantile(0.5)),
                ms(total.consumed.e2e.value_at_quantile(0.99)),
                total.consumed.messages
            );
        }
        let errors = total.produced.errors + total.consumed.errors;
        if errors > 0 {
            let _ = write!(line, "  errors {errors}");
        }
        self.sec_messages = 0;
        self.sec_bytes = 0;
        let mut err = std::io::stderr().lock();
        if self.tty {
            // Rewrite one line in place; clear what a longer previous line left.
            let _ = write!(err, "\r{line}\x1b[K");
            self.printed_tty_line = true;
        } else {
            let _ = writeln!(err, "{line}");
        }
        let _ = err.flush();
    }

    pub fn finish(&mut self) {
        if self.printed_tty_line {
            eprintln!();
        }
    }
}

/// The figures of a finished (or interrupted) run.
pub struct Figures {
    pub messages: u64,
    pub bytes: u64,
    pub errors: u64,
    pub duration_s: f64,
    pub msgs_per_s: f64,
    pub mb_per_s: f64,
}

pub fn figures(mode: Mode, total: &Snapshot, measure_from_us: u64) -> Figures {
    let p = primary(mode, total);
    let duration_s = p
        .last_us
        .map_or(0.0, |l| l.saturating_sub(measure_from_us) as f64 / 1e6);
    let per_s = |x: u64| {
        if duration_s > 0.0 {
            x as f64 / duration_s
        } else {
            0.0
        }
    };
    Figures {
        messages: p.messages,
        bytes: p.bytes,
        errors: total.produced.errors + total.consumed.errors,
        duration_s,
        msgs_per_s: per_s(p.messages),
        mb_per_s: per_s(p.bytes) / 1e6,
    }
}

pub fn percentiles_json(h: &Histogram<u64>) -> Value {
    let mut m = Map::new();
    for (key, _, q) in QUANTILES {
        m.insert((*key).into(), json!(round3(ms(h.value_at_quantile(*q)))));
    }
    m.insert("max".into(), json!(round3(ms(h.max()))));
    m.insert("mean".into(), json!(round3(h.mean() / US_PER_MS)));
    m.insert("count".into(), json!(h.len()));
    Value::Object(m)
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

pub fn json_report(
    cfg: &Config,
    total: &Snapshot,
    measure_from_us: u64,
    partitions: usize,
    interrupted: bool,
) -> Value {
    let fig = figures(cfg.mode, total, measure_from_us);
    let p = primary(cfg.mode, total);
    let f = &cfg.flags;
    let mut v = json!({
        "mode": cfg.mode.name(),
        "messages": fig.messages,
        "bytes": fig.bytes,
        "duration_s": round3(fig.duration_s),
        "msgs_per_s": fig.msgs_per_s.round(),
        "mb_per_s": round3(fig.mb_per_s),
        "errors": fig.errors,
        "latency_ms": percentiles_json(&p.latency),
        "interrupted": interrupted,
        "config": {
            "bootstrap": cfg.bootstrap,
            "security_protocol": f.security_protocol.to_ascii_uppercase(),
            "sasl_mechanism": cfg.security.sasl.as_ref().map(|s| s.mechanism.name()),
            "topic": f.topic,
            "partitions": partitions,
            "message_size": f.message_size,
            "batch_size": f.batch_size,
            "linger_ms": f.linger_ms,
            "acks": f.acks,
            "compression": format!("{:?}", cfg.compression).to_lowercase(),
            "keys": format!("{:?}", f.keys),
            "producers": f.producers,
            "consumers": f.consumers,
            "threads": f.threads,
            "rate": f.rate,
            "max_in_flight": f.max_in_flight,
            "warmup_s": f.warmup.as_secs_f64(),
            "stop": match cfg.stop {
                Stop::Messages(n) => json!({"messages": n}),
                Stop::Duration(d) => json!({"duration_s": d.as_secs_f64()}),
            },
        },
    });
    if cfg.mode == Mode::E2e {
        v["e2e_latency_ms"] = percentiles_json(&total.consumed.e2e);
        v["consumed"] = json!({
            "messages": total.consumed.messages,
            "bytes": total.consumed.bytes,
            "errors": total.consumed.errors,
        });
    }
    v
}

fn percentile_line(label: &str, h: &Histogram<u64>) -> String {
    let mut s = format!("{label:<16}");
    for (_, name, q) in QUANTILES {
        let _ = write!(s, " {name} {:.3}", ms(h.value_at_quantile(*q)));
    }
    let _ = write!(s, " max {:.3} (ms, {} samples)", ms(h.max()), h.len());
    s
}

pub fn summary_text(
    cfg: &Config,
    total: &Snapshot,
    measure_from_us: u64,
    interrupted: bool,
) -> String {
    let fig = figures(cfg.mode, total, measure_from_us);
    let p = primary(cfg.mode, total);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}{}: {} messages, {:.1} MB in {:.3} s = {:.0} msg/s, {:.1} MB/s, errors {}",
        cfg.mode.name(),
        if interrupted { " (interrupted)" } else { "" },
        fig.messages,
        fig.bytes as f64 / 1e6,
        fig.duration_s,
        fig.msgs_per_s,
        fig.mb_per_s,
        fig.errors
    );
    let label = match cfg.mode {
        Mode::Consume => "fetch latency",
        _ => "produce latency",
    };
    let _ = writeln!(s, "{}", percentile_line(label, &p.latency));
    if cfg.mode == Mode::E2e {
        let _ = writeln!(s, "consumed: {} messages", total.consumed.messages);
        let _ = writeln!(s, "{}", percentile_line("e2e latency", &total.consumed.e2e));
    }
    s
}

/// HdrHistogram's `outputPercentileDistribution` text in milliseconds: the same writer
/// the broker's `/histograms` uses, so both outputs plot identically.
pub fn hgrm(h: &Histogram<u64>) -> String {
    corelog_metrics::hgrm::percentile_distribution(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Cli;
    use clap::Parser;

    fn cfg(mode: &str) -> Config {
        Config::from_cli(Cli::try_parse_from(["corelog-load", mode, "--messages", "100"]).unwrap())
            .unwrap()
    }

    fn sample() -> Snapshot {
        let mut s = Snapshot::default();
        for i in 0..1000u64 {
            s.produced
                .record_completed(&[(1_000_000, 1)], 1024, 1_000_000 + 100 + i * 10);
            s.consumed.record_count(1, 1024, 1_000_000 + 200 + i * 10);
            s.consumed.record_e2e(1_000_000, 1_000_000 + 500 + i);
        }
        s
    }

    #[test]
    fn json_has_every_required_key() {
        for mode in ["produce", "consume", "e2e"] {
            let c = cfg(mode);
            let v = json_report(&c, &sample(), 1_000_000, 4, false);
            for k in [
                "mode",
                "messages",
                "bytes",
                "duration_s",
                "msgs_per_s",
                "mb_per_s",
                "errors",
            ] {
                assert!(v.get(k).is_some(), "{mode}: {k} missing");
            }
            let mut lat_keys = vec!["latency_ms"];
            if mode == "e2e" {
                lat_keys.push("e2e_latency_ms");
            } else {
                assert!(v.get("e2e_latency_ms").is_none());
            }
            for lk in lat_keys {
                for k in ["p50", "p90", "p99", "p999", "p9999", "max"] {
                    assert!(v[lk][k].is_number(), "{mode}: {lk}.{k}");
                }
            }
            assert_eq!(v["mode"], mode);
            assert_eq!(v["messages"], 1000);
            // Round trip through text: well formed.
            let text = serde_json::to_string_pretty(&v).unwrap();
            let back: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(back, v);
        }
    }

    #[test]
    fn figures_use_the_measured_window() {
        let f = figures(Mode::Produce, &sample(), 1_000_000);
        assert_eq!(f.messages, 1000);
        // Last ack at 1_000_000 + 100 + 9990 µs: ~10.09 ms window.
        assert!((f.duration_s - 0.01009).abs() < 1e-9, "{}", f.duration_s);
        assert!((f.msgs_per_s - 1000.0 / 0.01009).abs() < 1.0);
    }

    #[test]
    fn hgrm_is_in_milliseconds_and_ends_at_max() {
        let s = sample();
        let text = hgrm(&s.produced.latency);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("Value") && lines[0].contains("1/(1-Percentile)"));
        let data: Vec<&str> = lines
            .iter()
            .copied()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .skip(1)
            .collect();
        let first: f64 = data[0].split_whitespace().next().unwrap().parse().unwrap();
        assert!((first - 0.1).abs() < 0.01, "{first}"); // 100 µs = 0.1 ms
        let last = data.last().unwrap();
        assert_eq!(last.split_whitespace().count(), 3);
        assert!(last.contains("1.000000000000"));
        assert!(text.contains("#[Max     ="));
        assert!(text.contains("Total count    =         1000"));
    }
}
