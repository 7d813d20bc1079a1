//! `corelog serve`: the command line of the broker (see the library, `lib.rs`).

use corelog::{config, http, metrics, server};

use clap::{Parser, Subcommand};
use std::sync::atomic::Ordering;
use std::sync::Arc;

#[derive(Parser)]
#[command(name = "corelog", version, about = "A Kafka-compatible message broker")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a single-node broker.
    Serve(config::ServeArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let Command::Serve(args) = cli.command;
    let config = config::BrokerConfig::resolve(args)?;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(&config.log_level))?;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .init();

    let life = Arc::new(server::Lifecycle::default());
    // Signals are turned into a flag that every shard watches; the handler itself does
    // nothing but store it.
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
        signal_hook::flag::register(sig, flag.clone())?;
        let life = life.clone();
        std::thread::Builder::new()
            .name("corelog-signal".into())
            .spawn(move || loop {
                if flag.load(Ordering::Acquire) {
                    tracing::info!("shutting down");
                    life.stop.store(true, Ordering::Release);
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            })?;
    }
    spawn_startup_watchdog(life.clone(), config.shards);
    let (queries, query_rx) = metrics::channel();
    let _http = http::spawn(config.http, life.clone(), config.shards, queries)?;
    let result = server::run(config, life, query_rx);
    match &result {
        Ok(()) => tracing::info!("stopped cleanly"),
        Err(e) => tracing::error!(error = %format!("{e:#}"), "corelog failed"),
    }
    result
}

/// Logs where start-up stands if the broker is not serving after a while, so a stuck
/// start (an executor that cannot start, a shard stuck opening partitions) is visible.
fn spawn_startup_watchdog(life: Arc<server::Lifecycle>, shards: usize) {
    let _ = std::thread::Builder::new()
        .name("corelog-watchdog".into())
        .spawn(move || {
            for waited_s in 1..=120u64 {
                std::thread::sleep(std::time::Duration::from_secs(1));
                if life.ready(shards)
                    || life.stop.load(Ordering::Acquire)
                    || life.failed.load(Ordering::Acquire)
                {
                    return;
                }
                if waited_s % 10 == 0 {
                    tracing::warn!(
                    waited_s,
                    shards,
                    partitions_opened = life.opened.load(Ordering::Acquire),
                    listening = life.listening.load(Ordering::Acquire),
                    "start-up is taking long: shards that opened their partitions / listen so far"
                );
                }
            }
        });
}
