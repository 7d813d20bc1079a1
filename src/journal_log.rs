//! Log lines for journald: where the broker's standard output is the journal's stream
//! (`JOURNAL_STREAM`, set by systemd for a unit whose output goes to the journal), each
//! line starts with its syslog priority (`<3>` error, `<4>` warning, `<6>` info, `<7>`
//! debug and trace), which journald takes as the entry's priority (`SyslogLevelPrefix`,
//! on by default) and strips, so `journalctl -p warning` shows the warnings and errors.
//! Anywhere else the lines are unchanged.
//!
//! Invariant: the prefix is written only when `JOURNAL_STREAM` names the very file
//! standard output is (its device and inode), as sd-daemon(3) asks: a broker started from
//! a unit's shell with its output redirected elsewhere keeps plain lines.

use std::fmt;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// Whether standard output is the journal's stream.
pub fn stdout_is_journal() -> bool {
    use std::os::unix::fs::MetadataExt;
    let Some(stream) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = stream.to_str().and_then(|s| s.split_once(':')) else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    match std::fs::metadata("/proc/self/fd/1") {
        Ok(m) => m.dev() == dev && m.ino() == ino,
        Err(_) => false,
    }
}

/// The syslog priority of a level.
pub fn priority(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        Level::DEBUG | Level::TRACE => 7,
    }
}

/// A line format that puts the priority in front of `inner`'s lines when `journal`.
pub struct PriorityPrefix<F> {
    pub inner: F,
    pub journal: bool,
}

impl<S, N, F> FormatEvent<S, N> for PriorityPrefix<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        if self.journal {
            write!(writer, "<{}>", priority(event.metadata().level()))?;
        }
        self.inner.format_event(ctx, writer, event)
    }
}
