//! corelog-load: a thread-per-core load generator for Kafka-compatible brokers.
//!
//! Layout (one job per module):
//! - `cli`: flags and the validated `Config`.
//! - the Kafka client (framing, versions, record batches, pipelined connections,
//!   metadata) is the `corelog-kafka-client` crate; histograms' `.hgrm` form comes from
//!   `corelog-metrics`. It depends on no broker crate: it drives any Kafka broker.
//! - `rate`: the open-loop schedule and the coordinated-omission rule.
//! - `keys`: key distributions and key → partition.
//! - `producer`, `consumer`: the load itself, one task per producer/consumer.
//! - `stats`: histograms and counters per executor, merged across threads.
//! - `runner`: executors, progress ticks, stop conditions.
//! - `report`, `plot`: summary, JSON, .hgrm, SVG.
//!
//! Exit codes: 0 success (also after Ctrl-C, with the summary so far), 1 a failed run,
//! 2 the broker could not be reached (the message names the address).
//! Errors are `anyhow` (allowed in tools): they end up as one line for a person.

mod cli;
mod consumer;
mod exec_ctx;
mod keys;
mod producer;
mod rate;
mod report;
mod runner;
mod stats;
mod topic_offsets;

use anyhow::{Context, Result};
use clap::Parser;
use corelog_kafka_client::ClientError;
use corelog_metrics::plot;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

fn main() {
    // A panic on any executor thread ends the run with an error instead of leaving the
    // other threads waiting for it forever.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        std::process::exit(101);
    }));
    let cli = cli::Cli::parse();
    let code = match real_main(cli) {
        Ok(code) => code,
        Err(e) => {
            let unreachable = e
                .chain()
                .find_map(|c| match c.downcast_ref::<ClientError>() {
                    Some(u @ ClientError::Unreachable { .. }) => Some(u),
                    _ => None,
                });
            match unreachable {
                Some(u) => {
                    eprintln!("corelog-load: {u}");
                    2
                }
                None => {
                    eprintln!("corelog-load: {e:#}");
                    1
                }
            }
        }
    };
    std::process::exit(code);
}

fn real_main(cli: cli::Cli) -> Result<i32> {
    let cfg = cli::Config::from_cli(cli)?;
    // First Ctrl-C: stop and report what was measured. Second: exit at once (130).
    let interrupted = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register_conditional_shutdown(
        signal_hook::consts::SIGINT,
        130,
        interrupted.clone(),
    )
    .context("installing the SIGINT handler")?;
    signal_hook::flag::register(signal_hook::consts::SIGINT, interrupted.clone())
        .context("installing the SIGINT handler")?;

    let outcome = runner::run(cfg.clone(), interrupted)?;
    let runner::Outcome {
        total,
        measure_from_us,
        interrupted,
        error,
        partitions,
    } = outcome;
    print!(
        "{}",
        report::summary_text(&cfg, &total, measure_from_us, interrupted)
    );
    let f = &cfg.flags;
    if let Some(path) = &f.json {
        let v = report::json_report(&cfg, &total, measure_from_us, partitions, interrupted);
        std::fs::write(path, serde_json::to_string_pretty(&v)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let primary = report::primary(cfg.mode, &total);
    if let Some(path) = &f.hgrm {
        // e2e: the end-to-end distribution is the one people plot; produce-ack otherwise.
        let h = if cfg.mode == cli::Mode::E2e {
            &total.consumed.e2e
        } else {
            &primary.latency
        };
        std::fs::write(path, report::hgrm(h))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &f.plot {
        let title = format!("corelog-load {} latency by percentile", cfg.mode.name());
        let svg = match cfg.mode {
            cli::Mode::Produce => plot::svg(&title, &[("produce-ack", &primary.latency)]),
            cli::Mode::Consume => plot::svg(&title, &[("fetch", &primary.latency)]),
            cli::Mode::E2e => plot::svg(
                &title,
                &[
                    ("produce-ack", &primary.latency),
                    ("end-to-end", &total.consumed.e2e),
                ],
            ),
        };
        std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))?;
    }
    match error {
        Some(e) => Err(e),
        None => Ok(0),
    }
}
