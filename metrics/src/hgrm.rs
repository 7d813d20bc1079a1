//! HdrHistogram's percentile-distribution text (`.hgrm`), as the Java HdrHistogram's
//! `outputPercentileDistribution` writes it and its plotter reads it, plus the same
//! percentiles as plain values for JSON.
//!
//! Values are recorded in microseconds and printed in milliseconds (the Java tool's
//! `outputValueUnitScalingRatio` of 1000). Percentiles are walked with 5 ticks per half
//! distance, as the Java default.

use hdrhistogram::Histogram;
use std::fmt::Write;

/// Microseconds per printed unit (milliseconds).
pub const SCALING_RATIO: f64 = 1000.0;
const TICKS_PER_HALF_DISTANCE: u32 = 5;

/// Writes the percentile distribution of `h` (values in µs) in `.hgrm` format.
pub fn percentile_distribution(h: &Histogram<u64>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>12} {:>14} {:>10} {:>14}\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    );
    if h.is_empty() {
        let _ = writeln!(
            out,
            "#[Mean    = {:>12.3}, StdDeviation   = {:>12.3}]",
            0.0, 0.0
        );
        let _ = writeln!(
            out,
            "#[Max     = {:>12.3}, Total count    = {:>12}]",
            0.0, 0
        );
        let _ = writeln!(
            out,
            "#[Buckets = {:>12}, SubBuckets     = {:>12}]",
            h.buckets(),
            h.distinct_values()
        );
        return out;
    }
    for v in h.iter_quantiles(TICKS_PER_HALF_DISTANCE) {
        let q = v.quantile_iterated_to();
        let value = v.value_iterated_to() as f64 / SCALING_RATIO;
        if q < 1.0 {
            let _ = writeln!(
                out,
                "{:>12.3} {:>2.12} {:>10} {:>14.2}",
                value,
                q,
                v.count_since_last_iteration(),
                1.0 / (1.0 - q)
            );
        } else {
            let _ = writeln!(
                out,
                "{:>12.3} {:>2.12} {:>10}",
                value,
                q,
                v.count_since_last_iteration()
            );
        }
    }
    let _ = writeln!(
        out,
        "#[Mean    = {:>12.3}, StdDeviation   = {:>12.3}]",
        h.mean() / SCALING_RATIO,
        h.stdev() / SCALING_RATIO
    );
    let _ = writeln!(
        out,
        "#[Max     = {:>12.3}, Total count    = {:>12}]",
        h.max() as f64 / SCALING_RATIO,
        h.len()
    );
    let _ = writeln!(
        out,
        "#[Buckets = {:>12}, SubBuckets     = {:>12}]",
        h.buckets(),
        h.distinct_values()
    );
    out
}

/// The summary percentiles every report uses, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Percentiles {
    pub count: u64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub p9999: f64,
    pub max: f64,
    pub mean: f64,
}

pub fn percentiles(h: &Histogram<u64>) -> Percentiles {
    let ms = |v: u64| v as f64 / SCALING_RATIO;
    if h.is_empty() {
        return Percentiles {
            count: 0,
            p50: 0.0,
            p90: 0.0,
            p99: 0.0,
            p999: 0.0,
            p9999: 0.0,
            max: 0.0,
            mean: 0.0,
        };
    }
    Percentiles {
        count: h.len(),
        p50: ms(h.value_at_quantile(0.5)),
        p90: ms(h.value_at_quantile(0.9)),
        p99: ms(h.value_at_quantile(0.99)),
        p999: ms(h.value_at_quantile(0.999)),
        p9999: ms(h.value_at_quantile(0.9999)),
        max: ms(h.max()),
        mean: h.mean() / SCALING_RATIO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distribution_has_header_rows_and_footer() {
        let mut h = crate::new_histogram();
        for v in 1..=10_000u64 {
            h.saturating_record(v * 10);
        }
        let text = percentile_distribution(&h);
        let mut lines = text.lines();
        assert!(lines
            .next()
            .is_some_and(|l| l.contains("Percentile") && l.contains("TotalCount")));
        let rows: Vec<&str> = text
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.contains("Value"))
            .collect();
        assert!(rows.len() > 20);
        // Rows are non-decreasing in value and percentile, and end at percentile 1.
        let parsed: Vec<(f64, f64)> = rows
            .iter()
            .map(|r| {
                let mut f = r.split_whitespace();
                let v: f64 = f.next().and_then(|x| x.parse().ok()).expect("value");
                let q: f64 = f.next().and_then(|x| x.parse().ok()).expect("percentile");
                (v, q)
            })
            .collect();
        assert!(parsed
            .windows(2)
            .all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
        assert_eq!(parsed.last().map(|p| p.1), Some(1.0));
        assert!(text.contains("#[Max     =") && text.contains("Total count    =        10000"));
        let p = percentiles(&h);
        assert!((p.p50 - 50.0).abs() < 0.1, "p50 {} ms", p.p50);
        assert!((p.max - 100.0).abs() < 0.1);
    }
}
