//! Open-loop send schedule: message `i` of a sender is *intended* to leave at
//! `start + i / rate`, whatever happened to the messages before it.
//!
//! Invariants:
//! - Intended times depend only on `start`, `rate` and `i`: a stall (broker slow, in-flight
//!   limit reached, executor descheduled) never moves the schedule. A sender that falls
//!   behind sends the overdue messages at once, and their latency is still measured from
//!   their intended times; this is the coordinated-omission correction (Gil Tene's term),
//!   and `latency_from_intended` is the single place latency is computed from a stamp.
//! - `due(now)` never exceeds the schedule: it counts only messages whose intended time
//!   has passed.
//!
//! Not here: sleeping (the producer decides how to wait), closed-loop mode (without
//! `--rate` the intended time of a message is when it was appended to its batch).

use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    start: Instant,
    /// Nanoseconds between consecutive intended send times.
    interval_ns: f64,
}

impl Schedule {
    /// `rate_per_s` must be positive and finite (checked by the CLI).
    pub fn new(start: Instant, rate_per_s: f64) -> Self {
        assert!(
            rate_per_s > 0.0 && rate_per_s.is_finite(),
            "rate must be positive"
        );
        Schedule {
            start,
            interval_ns: 1e9 / rate_per_s,
        }
    }

    /// The intended send time of message `i` (0-based).
    pub fn intended(&self, i: u64) -> Instant {
        self.start + Duration::from_nanos((i as f64 * self.interval_ns) as u64)
    }

    /// How many messages (0..n) are due at `now`: those with `intended(i) <= now`.
    pub fn due(&self, now: Instant) -> u64 {
        let Some(elapsed) = now.checked_duration_since(self.start) else {
            return 0;
        };
        let n = (elapsed.as_nanos() as f64 / self.interval_ns).floor() as u64 + 1;
        // Float rounding may put the boundary one message off; settle it exactly.
        if self.intended(n) <= now {
            n + 1
        } else if n > 0 && self.intended(n - 1) > now {
            n - 1
        } else {
            n
        }
    }
}

/// Latency of a message intended at `intended` and completed at `done`, in
/// microseconds, from the intended time (never from when it actually left).
pub fn latency_from_intended(intended_us: u64, done_us: u64) -> u64 {
    done_us.saturating_sub(intended_us)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hdrhistogram::Histogram;

    #[test]
    fn schedule_math() {
        let t0 = Instant::now();
        let s = Schedule::new(t0, 1000.0); // one per millisecond
        assert_eq!(s.intended(0), t0);
        assert_eq!(s.intended(1000), t0 + Duration::from_secs(1));
        assert_eq!(s.due(t0), 1);
        assert_eq!(s.due(t0 + Duration::from_micros(999)), 1);
        assert_eq!(s.due(t0 + Duration::from_millis(1)), 2);
        assert_eq!(
            s.due(t0 + Duration::from_millis(10) + Duration::from_micros(500)),
            11
        );
        for i in 0..5000u64 {
            let at = s.intended(i);
            assert_eq!(s.due(at), i + 1, "at intended({i})");
        }
    }

    #[test]
    fn fractional_rates_keep_exact_spacing() {
        let t0 = Instant::now();
        let s = Schedule::new(t0, 3.0);
        assert_eq!(s.intended(3), t0 + Duration::from_secs(1));
        assert_eq!(s.due(t0 + Duration::from_millis(700)), 3);
    }

    /// A sender at 1,000 msg/s stalls for 100 ms after message 100 (as if the broker
    /// paused), then catches up by sending everything overdue at once. Measured from
    /// intended times, the messages scheduled during the stall show latencies spread
    /// from ~100 ms down to ~0; a naive "time from actual send" would show one slow
    /// message and 99 fast ones, hiding the stall (coordinated omission).
    #[test]
    fn stalled_sender_records_latency_from_intended_times() {
        let t0_us = 0u64;
        let rate = 1000.0;
        let interval_us = (1e6 / rate) as u64;
        let service_us = 50; // each message takes 50 µs when the broker is healthy
        let stall_at = 100u64;
        let stall_us = 100_000u64;
        let mut corrected = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
        let mut naive = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
        let mut sender_free_at = 0u64;
        for i in 0..1000u64 {
            let intended = t0_us + i * interval_us;
            let mut actual_send = intended.max(sender_free_at);
            if i == stall_at {
                actual_send += stall_us;
            }
            let done = actual_send + service_us;
            sender_free_at = done;
            corrected
                .record(latency_from_intended(intended, done))
                .unwrap();
            naive.record(done - actual_send).unwrap();
        }
        // Naive: everything looks like 50 µs except nothing — the stall is invisible.
        assert!(naive.value_at_quantile(0.99) < 100);
        // Corrected: ~100 of 1000 messages (10 %) waited behind the stall.
        assert!(
            corrected.value_at_quantile(0.95) > 40_000,
            "p95 {}",
            corrected.value_at_quantile(0.95)
        );
        assert!(corrected.max() >= stall_us);
        assert!(corrected.value_at_quantile(0.5) < 1_000);
    }
}
