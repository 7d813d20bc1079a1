//! A byte rate measured over a window of fixed-size samples (Kafka's `Rate` over
//! `quota.window.num` samples of `quota.window.size.seconds`), split into bytes seen on
//! this shard and bytes other shards reported.
//!
//! Time is milliseconds since the process-wide quota epoch, so sample `k` covers
//! `[k·W, (k+1)·W)` on every shard and a remote report for sample `k` lands in the
//! same bucket everywhere.
//!
//! **The measured window (a deliberate difference from Kafka).** Kafka divides the
//! bytes in the retained samples by the time since the oldest sample started, but pads
//! that time to `(samples − 1)` windows while the window is young. With 30 one-second
//! samples a brand-new client may therefore send 29 seconds' worth of quota before it
//! is throttled at all. Here the elapsed time is the real time since the entity's
//! first recorded byte (or since the oldest retained sample, whichever is later), never
//! less than one window: a new client gets at most one window's worth of quota before
//! throttling starts, and from then on Kafka's throttle formula
//! `(rate − quota) / quota × elapsed` is exactly the time until the bytes already taken
//! are paid off at the quota rate, so the long-run average converges to the quota.
//! An entity idle for a whole window span starts again as new. What is kept from Kafka:
//! the average over up to `samples` windows, so a client that was below its quota for
//! a while may burst by what it left unused within the span.
//!
//! Invariants: a bucket holds bytes of exactly one sample index (`window`); buckets
//! older than the span are never counted; `rate` never divides by less than one window.

/// One sample: bytes recorded here and bytes other shards reported, in window `window`.
#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    window: u64,
    local: u64,
    remote: u64,
}

/// The windowed rate of one quota sensor.
#[derive(Debug, Clone)]
pub struct SampledRate {
    buckets: Box<[Bucket]>,
    window_ms: u64,
    /// When the current run of activity began (ms since the epoch).
    first_ms: u64,
    /// Last time anything was recorded (local or remote), ms since the epoch.
    last_ms: u64,
}

/// A measured rate and the time span it was measured over.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    pub bytes_per_second: f64,
    pub elapsed_ms: u64,
}

impl SampledRate {
    /// A rate over `samples` windows of `window_ms` (both at least 1), starting at `now_ms`.
    pub fn new(samples: usize, window_ms: u64, now_ms: u64) -> SampledRate {
        assert!(samples >= 1);
        assert!(window_ms >= 1);
        SampledRate {
            buckets: vec![Bucket::default(); samples].into_boxed_slice(),
            window_ms,
            first_ms: now_ms,
            last_ms: now_ms,
        }
    }

    fn span_ms(&self) -> u64 {
        self.window_ms.saturating_mul(self.buckets.len() as u64)
    }

    /// The oldest window index still inside the span at `now_ms`.
    fn oldest_window(&self, now_ms: u64) -> u64 {
        (now_ms / self.window_ms).saturating_sub(self.buckets.len() as u64 - 1)
    }

    fn bucket(&mut self, window: u64) -> &mut Bucket {
        let n = self.buckets.len() as u64;
        let i = (window % n) as usize;
        // `i < len` by construction of the modulus.
        let b = &mut self.buckets[i];
        if b.window != window {
            *b = Bucket {
                window,
                local: 0,
                remote: 0,
            };
        }
        b
    }

    /// Starts a new run of activity if the entity was idle for the whole span.
    fn touch(&mut self, now_ms: u64) {
        if now_ms.saturating_sub(self.last_ms) >= self.span_ms() {
            self.first_ms = now_ms;
        }
        self.last_ms = self.last_ms.max(now_ms);
    }

    /// Records `bytes` seen on this shard at `now_ms`.
    pub fn record_local(&mut self, bytes: u64, now_ms: u64) {
        self.touch(now_ms);
        let w = now_ms / self.window_ms;
        let b = self.bucket(w);
        b.local = b.local.saturating_add(bytes);
    }

    /// Records `bytes` another shard saw in window `window`; ignored when that window
    /// is already outside the span (or, clock-wise impossible, in the future).
    pub fn record_remote(&mut self, bytes: u64, window: u64, now_ms: u64) {
        let current = now_ms / self.window_ms;
        if window < self.oldest_window(now_ms) || window > current || bytes == 0 {
            return;
        }
        self.touch(now_ms);
        // The remote bytes may have started at that window's beginning.
        self.first_ms = self.first_ms.min(window.saturating_mul(self.window_ms));
        let b = self.bucket(window);
        b.remote = b.remote.saturating_add(bytes);
    }

    /// Bytes recorded locally in window `window`, if it is still held.
    pub fn local_in(&self, window: u64) -> u64 {
        let n = self.buckets.len() as u64;
        self.buckets
            .get((window % n) as usize)
            .filter(|b| b.window == window)
            .map(|b| b.local)
            .unwrap_or(0)
    }

    /// Whether nothing was recorded during the whole span before `now_ms`.
    pub fn idle(&self, now_ms: u64) -> bool {
        now_ms.saturating_sub(self.last_ms) >= self.span_ms()
    }

    /// The rate at `now_ms`: bytes in the held samples over the real elapsed time (see
    /// the module doc), at least one window.
    pub fn measure(&self, now_ms: u64) -> Measured {
        let oldest = self.oldest_window(now_ms);
        let current = now_ms / self.window_ms;
        let total: u64 = self
            .buckets
            .iter()
            .filter(|b| b.window >= oldest && b.window <= current)
            .map(|b| b.local.saturating_add(b.remote))
            .fold(0u64, |a, b| a.saturating_add(b));
        let start = oldest.saturating_mul(self.window_ms).max(self.first_ms);
        let elapsed_ms = now_ms.saturating_sub(start).max(self.window_ms);
        Measured {
            bytes_per_second: total as f64 * 1000.0 / elapsed_ms as f64,
            elapsed_ms,
        }
    }

    /// Kafka's throttle time for `quota` (bytes/s): `(rate − quota) / quota × elapsed`,
    /// zero when within the quota, at most `max_ms`.
    pub fn throttle_ms(&self, quota: f64, now_ms: u64, max_ms: u64) -> u64 {
        let m = self.measure(now_ms);
        if quota.is_nan() || quota <= 0.0 || m.bytes_per_second <= quota {
            return 0;
        }
        let t = (m.bytes_per_second - quota) / quota * m.elapsed_ms as f64;
        if t.is_finite() {
            (t.ceil() as u64).min(max_ms)
        } else {
            max_ms
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const W: u64 = 1000;

    #[test]
    fn a_new_client_gets_one_window_not_the_whole_span() {
        let mut r = SampledRate::new(30, W, 10_000);
        r.record_local(1_000, 10_000);
        // Exactly one window's quota: not throttled.
        assert_eq!(r.throttle_ms(1_000.0, 10_000, 30_000), 0);
        r.record_local(2_000, 10_000);
        // 3000 bytes over one window at 1000 B/s: 2 s to pay off.
        assert_eq!(r.throttle_ms(1_000.0, 10_000, 30_000), 2_000);
        // Kafka's padding would have measured 3000 B / 29 s and not throttled at all.
    }

    #[test]
    fn throttle_is_capped() {
        let mut r = SampledRate::new(30, W, 0);
        r.record_local(1 << 40, 0);
        assert_eq!(r.throttle_ms(1.0, 0, 30_000), 30_000);
    }

    #[test]
    fn old_samples_leave_the_span_and_idle_entities_start_anew() {
        let mut r = SampledRate::new(3, W, 0);
        r.record_local(3_000, 0);
        assert!(r.measure(500).bytes_per_second > 2_999.0);
        // Four windows later everything has left the span.
        assert_eq!(r.measure(4_000).bytes_per_second, 0.0);
        assert!(r.idle(4_000));
        r.record_local(100, 4_000);
        // Measured from the new first byte, one window minimum.
        assert_eq!(r.measure(4_000).elapsed_ms, W);
    }

    #[test]
    fn remote_bytes_count_once_and_stale_ones_are_ignored() {
        let mut r = SampledRate::new(5, W, 2_100);
        r.record_local(500, 2_100);
        r.record_remote(500, 1, 2_100);
        r.record_remote(10_000, 100, 2_100); // future: ignored
        let m = r.measure(2_100);
        assert_eq!(m.elapsed_ms, 1_100);
        assert!((m.bytes_per_second - 1000.0 * 1000.0 / 1100.0).abs() < 1e-6);
        assert_eq!(r.local_in(2), 500);
        assert_eq!(r.local_in(1), 0);
        let mut old = SampledRate::new(2, W, 10_000);
        old.record_remote(1_000, 3, 10_000); // far outside the span
        assert_eq!(old.measure(10_000).bytes_per_second, 0.0);
    }

    proptest! {
        /// A client that sends whenever it is not throttled, any request sizes, is held
        /// to its quota: after its first window, the bytes it got through never exceed
        /// quota × elapsed + one window's quota + one request.
        #[test]
        fn a_greedy_client_converges_to_the_quota(
            sizes in proptest::collection::vec(1u64..50_000, 1..400),
            quota in 1_000u64..200_000,
            samples in 2usize..40,
        ) {
            let start = 5_000u64;
            let mut r = SampledRate::new(samples, W, start);
            let mut now = start;
            let mut sent = 0u64;
            let max_ms = W * samples as u64;
            let biggest = sizes.iter().copied().max().unwrap_or(0);
            for s in &sizes {
                r.record_local(*s, now);
                sent += s;
                let t = r.throttle_ms(quota as f64, now, max_ms);
                now += t.max(1);
                let elapsed = now - start;
                // Within the span the measurement is exact, so the bound is tight.
                if elapsed < (samples as u64 - 1) * W {
                    let allowed = quota as f64 * (elapsed.max(W) as f64) / 1000.0;
                    prop_assert!(
                        (sent as f64) <= allowed + quota as f64 + biggest as f64 + 1.0,
                        "sent {} allowed {} at {}", sent, allowed, elapsed
                    );
                }
                let m = r.measure(now);
                prop_assert!(m.elapsed_ms >= W);
                prop_assert!(m.bytes_per_second.is_finite());
            }
        }
    }
}
