//! `corelog serve`: the command line of the broker (see the library, `lib.rs`).

use corelog::{admin, config, http, log_filter, metrics, server};

use clap::{Parser, Subcommand};
use std::io::IsTerminal;
use std::sync::atomic::Ordering;
use std::sync::Arc;

#[derive(Parser)]
#[command(
    name = "corelog",
    version = corelog::VERSION,
    about = "A Kafka-compatible message broker"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a broker: a single node by default, or a member of a cluster.
    Serve(config::ServeArgs),
    /// Tell what this host gives the broker and what to change, before the first start.
    Check(CheckArgs),
    /// Operate a running cluster (decommission a broker).
    Admin(admin::AdminArgs),
    /// Take a log directory whose disk is lost for good off a stopped broker's record:
    /// at the next start a new, empty directory there gets an id of its own, and the
    /// partitions that were on it are made again from their other replicas.
    ForgetLogDir(ForgetLogDirArgs),
}

#[derive(clap::Args)]
struct ForgetLogDirArgs {
    /// The broker's first log directory (its `--data-dir`, or the first of `log.dirs`).
    #[arg(long, default_value = "./data")]
    data_dir: std::path::PathBuf,
    /// The lost directory, as it is named in `log.dirs`.
    dir: std::path::PathBuf,
}

/// `corelog forget-log-dir`: exit code 1 when the directory was not on the record.
fn forget_log_dir(args: ForgetLogDirArgs) -> anyhow::Result<std::process::ExitCode> {
    let first = corelog::paths::absolute(args.data_dir)?;
    let dir = corelog::paths::absolute(args.dir)?;
    if corelog_shards::log_dir_identity::forget(&first, &dir)? {
        println!(
            "{} forgotten: the next start takes it as a new disk",
            dir.display()
        );
        Ok(std::process::ExitCode::SUCCESS)
    } else {
        eprintln!(
            "{} is not among the log directories recorded in {}",
            dir.display(),
            first.display()
        );
        Ok(std::process::ExitCode::FAILURE)
    }
}

#[derive(clap::Args)]
struct CheckArgs {
    /// The data directory the broker will use (created if missing, as `serve` would).
    #[arg(long, default_value = "./data")]
    data_dir: std::path::PathBuf,
    /// Shards the broker will run (default: one per CPU, as `serve`).
    #[arg(long)]
    shards: Option<usize>,
    /// Connections the broker will allow (default: as `serve`, half the descriptors).
    #[arg(long)]
    max_connections: Option<usize>,
    /// Segment files the broker will keep open (default: as `serve`, a quarter of the
    /// descriptors).
    #[arg(long)]
    max_open_segment_files: Option<usize>,
    /// Also measure the data disk's direct sequential write and read bandwidth, with
    /// this many MiB (256 is a few seconds on an SSD).
    #[arg(long, value_name = "MIB", num_args = 0..=1, default_missing_value = "256")]
    measure: Option<usize>,
}

/// `corelog check`: every finding on its own line; exit code 1 when one is a failure.
fn check(args: CheckArgs) -> std::process::ExitCode {
    use corelog::host_check::{self, Verdict};
    let shards = args
        .shards
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let max_connections = args
        .max_connections
        .unwrap_or_else(corelog::limits::default_max_connections);
    let mut findings = vec![host_check::io_uring_executor()];
    let open_segment_files = args
        .max_open_segment_files
        .unwrap_or_else(corelog::limits::default_max_open_segment_files);
    findings.extend(host_check::cheap_checks(
        std::slice::from_ref(&args.data_dir),
        shards,
        max_connections,
        open_segment_files,
    ));
    if let Some(mib) = args.measure {
        findings.push(host_check::disk_bandwidth(&args.data_dir, mib.max(1)));
    }
    for f in &findings {
        println!("{f}");
    }
    let worst = findings
        .iter()
        .map(|f| f.verdict)
        .max()
        .unwrap_or(Verdict::Ok);
    let (fails, warns) = (
        findings
            .iter()
            .filter(|f| f.verdict == Verdict::Fail)
            .count(),
        findings
            .iter()
            .filter(|f| f.verdict == Verdict::Warn)
            .count(),
    );
    println!(
        "{} checks: {fails} failed, {warns} could be better",
        findings.len()
    );
    if worst == Verdict::Fail {
        std::process::ExitCode::FAILURE
    } else {
        std::process::ExitCode::SUCCESS
    }
}

fn main() -> anyhow::Result<std::process::ExitCode> {
    let cli = Cli::parse();
    let args = match cli.command {
        Command::Serve(args) => args,
        Command::Check(args) => return Ok(check(args)),
        Command::ForgetLogDir(args) => return forget_log_dir(args),
        Command::Admin(args) => {
            return match admin::run(args) {
                Ok(()) => Ok(std::process::ExitCode::SUCCESS),
                Err(e) => {
                    eprintln!("error: {e:#}");
                    Ok(std::process::ExitCode::FAILURE)
                }
            }
        }
    };
    // Logging starts before the configuration is read, at info, so that what resolving
    // it says (a listener taking unsigned tokens, the controller port's security) is
    // logged; the configured level replaces it once known.
    let env_filter = || tracing_subscriber::EnvFilter::try_from_default_env().ok();
    let (filter, filter_handle) = tracing_subscriber::reload::Layer::new(
        env_filter().unwrap_or_else(|| tracing_subscriber::EnvFilter::new("info,openraft=warn")),
    );
    // Colour only for a person at a terminal: escape codes in a file or a log collector's
    // pipe make every line harder to read and to grep. NO_COLOR (no-color.org) turns it
    // off at a terminal too.
    let colour = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    use tracing_subscriber::prelude::*;
    tracing_subscriber::registry()
        .with(log_filter::OpenraftPeerNoise)
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(colour)
                .event_format(corelog::journal_log::PriorityPrefix {
                    inner: tracing_subscriber::fmt::format()
                        .with_target(false)
                        .with_ansi(colour),
                    journal: corelog::journal_log::stdout_is_journal(),
                })
                .with_filter(filter),
        )
        .init();
    let config = match config::BrokerConfig::resolve(args) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "the configuration is refused");
            return Ok(std::process::ExitCode::FAILURE);
        }
    };
    // openraft narrates every election and membership step at info; its warnings and
    // errors are what an operator needs, unless the filter asks for more.
    let level = if config.log_level.contains("openraft") {
        config.log_level.clone()
    } else {
        format!("{},openraft=warn", config.log_level)
    };
    let configured = match env_filter() {
        Some(f) => f,
        None => tracing_subscriber::EnvFilter::try_new(&level)?,
    };
    filter_handle.reload(configured)?;

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
                    corelog::service_notify::stopping();
                    life.stop.store(true, Ordering::Release);
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            })?;
    }
    spawn_startup_watchdog(life.clone(), config.shards);
    let (queries, query_rx) = metrics::channel();
    let faults = config
        .storage_fault_injection
        .then(|| Arc::new(corelog_storage::StorageFaults::new()));
    if faults.is_some() {
        tracing::warn!("storage fault injection is on: POST /faults can fail this broker's disk");
    }
    let data_dir = Arc::new(corelog_shards::storage_context::DataDir::new(
        config.log_dirs.clone(),
        faults.clone(),
    ));
    corelog::service_notify::spawn(life.clone(), config.shards, queries.clone());
    let _http = http::spawn(config.http, life.clone(), config.shards, queries, faults)?;
    let result = server::run(config, life, query_rx, data_dir);
    match &result {
        Ok(()) => tracing::info!("stopped cleanly"),
        Err(e) => tracing::error!(error = %format!("{e:#}"), "corelog failed"),
    }
    result.map(|()| std::process::ExitCode::SUCCESS)
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
