//! What a run measured: counts and latency histograms, per executor and merged.
//!
//! Owns: the time base (`Clock`: Unix microseconds read from a monotonic clock, so
//! stamps written by a producer can be compared by a consumer in another thread or
//! process on the same host), the histogram shape, and `Interval`, the unit every
//! executor ships to the main thread once a second and at the end.
//!
//! Invariants:
//! - Latencies are recorded in microseconds in histograms of one shape
//!   (`new_histogram`), so any two can be added; values beyond the range saturate at its
//!   top rather than being dropped (a 2-hour stall still shows as the max).
//! - Nothing completing before the end of `--warmup` is counted: not messages, bytes,
//!   errors or latency (callers ask `Recorder::measuring` first).
//! - Merging is associative and commutative (counts add, histograms add, the event
//!   window is the union), so the order executors report in does not matter.
//!
//! Not here: output formats (`report.rs`).

use hdrhistogram::Histogram;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// One hour in microseconds: the largest latency kept exactly.
pub const LATENCY_US_MAX: u64 = 3_600_000_000;
/// 3 significant digits: 0.1 % value resolution, ~200 KB per histogram.
pub const LATENCY_SIGFIG: u8 = 3;

pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_US_MAX, LATENCY_SIGFIG)
        .expect("static histogram bounds are valid")
}

/// Unix time in microseconds that only moves forward (anchored once, then monotonic).
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    anchor: Instant,
    anchor_unix_us: u64,
}

impl Clock {
    pub fn new() -> Self {
        let anchor = Instant::now();
        let anchor_unix_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        Clock {
            anchor,
            anchor_unix_us,
        }
    }
    pub fn us(&self, at: Instant) -> u64 {
        self.anchor_unix_us + at.saturating_duration_since(self.anchor).as_micros() as u64
    }
    pub fn now_us(&self) -> u64 {
        self.us(Instant::now())
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

/// Counts and histograms over some stretch of time, from one executor or merged.
#[derive(Clone, Debug)]
pub struct Interval {
    pub messages: u64,
    pub bytes: u64,
    pub errors: u64,
    /// Produce-ack latency (produce, e2e) or fetch latency (consume), µs.
    pub latency: Histogram<u64>,
    /// End-to-end latency, µs (e2e only).
    pub e2e: Histogram<u64>,
    /// First and last counted event, Unix µs.
    pub first_us: Option<u64>,
    pub last_us: Option<u64>,
}

impl Default for Interval {
    fn default() -> Self {
        Interval {
            messages: 0,
            bytes: 0,
            errors: 0,
            latency: new_histogram(),
            e2e: new_histogram(),
            first_us: None,
            last_us: None,
        }
    }
}

impl Interval {
    pub fn merge(&mut self, other: &Interval) {
        self.messages += other.messages;
        self.bytes += other.bytes;
        self.errors += other.errors;
        // Same shape by construction (`new_histogram`), so `add` cannot fail.
        self.latency
            .add(&other.latency)
            .expect("histograms share one shape");
        self.e2e
            .add(&other.e2e)
            .expect("histograms share one shape");
        self.first_us = match (self.first_us, other.first_us) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.last_us = self.last_us.max(other.last_us);
    }

    fn touch(&mut self, at_us: u64) {
        self.first_us = Some(self.first_us.map_or(at_us, |f| f.min(at_us)));
        self.last_us = Some(self.last_us.map_or(at_us, |l| l.max(at_us)));
    }

    /// Takes the contents, leaving this interval empty (keeps the allocations).
    pub fn take(&mut self) -> Interval {
        let out = self.clone();
        self.messages = 0;
        self.bytes = 0;
        self.errors = 0;
        self.latency.reset();
        self.e2e.reset();
        self.first_us = None;
        self.last_us = None;
        out
    }
}

impl Interval {
    /// Messages completed at `done_us`. `stamps` are (intended µs, count) runs: one entry
    /// per batch when every message shares a send time, one per message otherwise, so
    /// recording is `record_n` per run rather than per message.
    pub fn record_completed(&mut self, stamps: &[(u64, u32)], bytes: u64, done_us: u64) {
        let mut n = 0u64;
        for &(intended, count) in stamps {
            let lat = crate::rate::latency_from_intended(intended, done_us);
            self.latency.saturating_record_n(lat, u64::from(count));
            n += u64::from(count);
        }
        self.messages += n;
        self.bytes += bytes;
        self.touch(done_us);
    }

    /// Messages and bytes that arrived at `at_us`, without a latency sample.
    pub fn record_count(&mut self, messages: u64, bytes: u64, at_us: u64) {
        self.messages += messages;
        self.bytes += bytes;
        self.touch(at_us);
    }

    /// Messages refused (or lost) at `at_us`. They count towards the run's duration as
    /// acknowledged ones do, so a run whose later produces are all refused reports its
    /// acknowledged messages over the time it really ran, not over the time to its last
    /// acknowledgement.
    pub fn record_errors(&mut self, messages: u64, at_us: u64) {
        self.errors += messages;
        self.touch(at_us);
    }

    pub fn record_e2e(&mut self, stamp_us: u64, at_us: u64) {
        self.e2e.saturating_record(at_us.saturating_sub(stamp_us));
    }
}

/// What one executor ships to the main thread: the producer side and the consumer side
/// of its work, kept apart (e2e mode has both).
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub produced: Interval,
    pub consumed: Interval,
}

impl Snapshot {
    pub fn merge(&mut self, other: &Snapshot) {
        self.produced.merge(&other.produced);
        self.consumed.merge(&other.consumed);
    }
    pub fn take(&mut self) -> Snapshot {
        Snapshot {
            produced: self.produced.take(),
            consumed: self.consumed.take(),
        }
    }
}

/// One executor's recorder. Single-threaded by construction (lives in an `Rc`).
/// Callers check `measuring(t)` before recording anything that happened at `t`.
pub struct Recorder {
    measure_from_us: u64,
    pub now: Snapshot,
}

impl Recorder {
    pub fn new(measure_from_us: u64) -> Self {
        Recorder {
            measure_from_us,
            now: Snapshot::default(),
        }
    }

    pub fn measuring(&self, at_us: u64) -> bool {
        at_us >= self.measure_from_us
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_across_threads_equals_one_recorder() {
        let mut whole = Interval::default();
        let mut parts: Vec<Interval> = Vec::new();
        let handles: Vec<_> = (0..4u64)
            .map(|t| {
                std::thread::spawn(move || {
                    let mut r = Interval::default();
                    for i in 0..1000u64 {
                        r.record_completed(&[(1_000_000, 1)], 10, 1_000_000 + t * 10_000 + i);
                    }
                    r
                })
            })
            .collect();
        for h in handles {
            parts.push(h.join().unwrap());
        }
        for t in 0..4u64 {
            for i in 0..1000u64 {
                whole.record_completed(&[(1_000_000, 1)], 10, 1_000_000 + t * 10_000 + i);
            }
        }
        let mut merged = Interval::default();
        for p in parts.iter().rev() {
            merged.merge(p);
        }
        assert_eq!(merged.messages, 4000);
        assert_eq!(merged.bytes, 40_000);
        assert_eq!(merged.latency.len(), 4000);
        for q in [0.5, 0.9, 0.99, 0.999, 1.0] {
            assert_eq!(
                merged.latency.value_at_quantile(q),
                whole.latency.value_at_quantile(q)
            );
        }
        assert_eq!(merged.first_us, Some(1_000_000));
        assert_eq!(merged.last_us, Some(1_030_999));
    }

    #[test]
    fn warmup_boundary() {
        let r = Recorder::new(5_000);
        assert!(!r.measuring(4_999));
        assert!(r.measuring(5_000));
    }

    #[test]
    fn runs_record_n_from_intended_times() {
        let mut i = Interval::default();
        i.record_completed(&[(4_000, 10), (4_500, 2)], 100, 5_000);
        assert_eq!(i.messages, 12);
        assert_eq!(i.latency.len(), 12);
        assert_eq!(i.latency.max(), i.latency.highest_equivalent(1_000));
        assert_eq!(i.latency.min(), i.latency.lowest_equivalent(500));
    }

    #[test]
    fn take_resets_but_returns_contents() {
        let mut s = Snapshot::default();
        s.produced.record_completed(&[(0, 5)], 50, 10);
        s.consumed.record_count(3, 30, 10);
        let t = s.take();
        assert_eq!(t.produced.messages, 5);
        assert_eq!(t.consumed.messages, 3);
        assert_eq!(s.produced.messages, 0);
        assert!(s.produced.latency.is_empty());
        assert_eq!(s.produced.first_us, None);
    }

    #[test]
    fn refusals_extend_the_run_without_counting_as_messages() {
        let mut i = Interval::default();
        i.record_completed(&[(0, 5)], 50, 1_000);
        i.record_errors(7, 9_000);
        assert_eq!((i.messages, i.errors), (5, 7));
        assert_eq!(i.latency.len(), 5);
        assert_eq!(i.last_us, Some(9_000));
    }

    #[test]
    fn huge_latency_saturates_instead_of_vanishing() {
        let mut i = Interval::default();
        i.record_completed(&[(0, 1)], 1, LATENCY_US_MAX * 2);
        assert_eq!(i.latency.len(), 1);
    }
}
