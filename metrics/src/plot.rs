//! Latency by percentile as a small hand-written SVG, drawn the way HdrHistogram's
//! plotter draws it: x is the percentile on a log scale of 1/(1-p) (so 90 %, 99 %,
//! 99.9 %, ... are evenly spaced), y is latency in ms (linear). The load generator's
//! `--plot FILE` writes one; the broker's `/histograms/plot` page shows its own.
//!
//! Invariants:
//! - The x axis runs from 0 % to one "nine" past the highest percentile the sample
//!   count can resolve (at least 99.99 %), so the tail is never cut off.
//! - `svg` is a standalone SVG 1.1 document and `svg_element` the same drawing as an
//!   element to place in an HTML page; every number printed is finite.

use hdrhistogram::Histogram;
use std::fmt::Write as _;

const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 500.0;
const MARGIN_LEFT: f64 = 70.0;
const MARGIN_RIGHT: f64 = 160.0;
const MARGIN_TOP: f64 = 40.0;
const MARGIN_BOTTOM: f64 = 50.0;
/// Ten colours that stay apart from each other (matplotlib's "tab10"): enough for every
/// stage of the replicated produce path on one plot.
const COLOURS: &[&str] = &[
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

/// x position of quantile `q` in "nines": log10(1/(1-q)).
pub fn nines(q: f64) -> f64 {
    let q = q.clamp(0.0, 1.0 - 1e-12);
    -(1.0 - q).log10()
}

/// One curve: (quantile, latency ms) points from the histogram, µs in.
pub fn curve(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    if h.is_empty() {
        return Vec::new();
    }
    let mut pts: Vec<(f64, f64)> = h
        .iter_quantiles(5)
        .map(|v| {
            (
                v.quantile_iterated_to(),
                v.value_iterated_to() as f64 / 1000.0,
            )
        })
        .collect();
    // The last step reaches quantile 1.0, which a log axis cannot place; pin the max at
    // the axis end instead (as HdrHistogram's plotter does).
    pts.retain(|(q, _)| *q < 1.0);
    pts.push((1.0, h.max() as f64 / 1000.0));
    pts
}

/// Renders the named histograms (µs) into one SVG document.
pub fn svg(title: &str, series: &[(&str, &Histogram<u64>)]) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n{}",
        svg_element(title, series)
    )
}

/// The same drawing as [`svg`], as an `<svg>` element (no XML declaration) for a page.
pub fn svg_element(title: &str, series: &[(&str, &Histogram<u64>)]) -> String {
    let total = series
        .iter()
        .map(|(_, h)| h.len())
        .max()
        .unwrap_or(0)
        .max(1);
    // Resolvable nines: with N samples, percentiles finer than 1/N are just the max.
    let max_nines = ((total as f64).log10().ceil() + 1.0).max(4.0);
    let y_max = series
        .iter()
        .map(|(_, h)| h.max() as f64 / 1000.0)
        .fold(0.0, f64::max);
    let y_max = nice_ceiling(y_max.max(0.001));
    let plot_w = WIDTH - MARGIN_LEFT - MARGIN_RIGHT;
    let plot_h = HEIGHT - MARGIN_TOP - MARGIN_BOTTOM;
    let x = |q: f64| MARGIN_LEFT + (nines(q).min(max_nines) / max_nines) * plot_w;
    let y = |ms: f64| MARGIN_TOP + plot_h - (ms / y_max).clamp(0.0, 1.0) * plot_h;

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
        WIDTH / 2.0,
        escape(title)
    );
    // Grid and x labels at each nine.
    for n in 0..=(max_nines as u32) {
        let q = 1.0 - 10f64.powi(-(n as i32));
        let px = x(q);
        let label = match n {
            0 => "0%".to_owned(),
            _ => format!("{}%", trim_float(q * 100.0, n.saturating_sub(2) as usize)),
        };
        let _ = writeln!(
            s,
            r##"<line x1="{px:.1}" y1="{MARGIN_TOP}" x2="{px:.1}" y2="{:.1}" stroke="#ddd"/><text x="{px:.1}" y="{:.1}" text-anchor="middle">{label}</text>"##,
            MARGIN_TOP + plot_h,
            MARGIN_TOP + plot_h + 18.0
        );
    }
    for i in 0..=5 {
        let v = y_max * i as f64 / 5.0;
        let py = y(v);
        let _ = writeln!(
            s,
            r##"<line x1="{MARGIN_LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            MARGIN_LEFT + plot_w,
            MARGIN_LEFT - 6.0,
            py + 4.0,
            trim_float(v, 3)
        );
    }
    let _ = writeln!(
        s,
        r##"<rect x="{MARGIN_LEFT}" y="{MARGIN_TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#333"/>
<text x="{:.1}" y="{:.1}" text-anchor="middle">percentile</text>
<text x="16" y="{:.1}" text-anchor="middle" transform="rotate(-90 16 {:.1})">latency (ms)</text>"##,
        MARGIN_LEFT + plot_w / 2.0,
        HEIGHT - 10.0,
        MARGIN_TOP + plot_h / 2.0,
        MARGIN_TOP + plot_h / 2.0
    );
    for (i, (name, h)) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let pts = curve(h);
        if pts.is_empty() {
            continue;
        }
        let mut d = String::new();
        for (j, (q, ms)) in pts.iter().enumerate() {
            let _ = write!(
                d,
                "{}{:.1},{:.1}",
                if j == 0 { "M" } else { " L" },
                x(*q),
                y(*ms)
            );
        }
        let _ = writeln!(
            s,
            r#"<path d="{d}" fill="none" stroke="{colour}" stroke-width="2"/>"#
        );
        let ly = MARGIN_TOP + 20.0 + 20.0 * i as f64;
        let lx = MARGIN_LEFT + plot_w + 12.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{colour}" stroke-width="2"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            lx + 20.0,
            lx + 26.0,
            ly + 4.0,
            escape(name)
        );
    }
    s.push_str("</svg>\n");
    s
}

fn nice_ceiling(v: f64) -> f64 {
    let mag = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if v <= m * mag {
            return m * mag;
        }
    }
    10.0 * mag
}

fn trim_float(v: f64, decimals: usize) -> String {
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    }
}

/// `s` safe inside XML and HTML text.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_histogram() -> Histogram<u64> {
        Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds")
    }

    #[test]
    fn nines_scale() {
        assert!(nines(0.0).abs() < 1e-12);
        assert!((nines(0.9) - 1.0).abs() < 1e-9);
        assert!((nines(0.999) - 3.0).abs() < 1e-9);
        assert!(nines(1.0).is_finite());
    }

    #[test]
    fn svg_is_well_formed_and_labelled() {
        let mut h = new_histogram();
        for i in 1..=10_000u64 {
            h.record(i * 10).unwrap();
        }
        let out = svg("produce <test>", &[("produce-ack", &h)]);
        assert!(out.starts_with("<?xml"));
        assert!(out.trim_end().ends_with("</svg>"));
        assert!(out.contains("99.99%"));
        assert!(out.contains("&lt;test&gt;"));
        assert!(out.contains("<path d=\"M"));
        assert!(!out.contains("NaN") && !out.contains("inf"));
        assert_eq!(out.matches("<svg").count(), 1);
    }

    #[test]
    fn empty_histogram_draws_axes_only() {
        let h = new_histogram();
        let out = svg("empty", &[("x", &h)]);
        assert!(!out.contains("<path"));
    }
}
