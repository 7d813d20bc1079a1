//! `/histograms`: latency percentile distributions per API and per internal stage,
//! merged across shards. Plain text is HdrHistogram's `.hgrm` format (what its plotter
//! reads), one section per histogram; `?format=json` gives the summary percentiles and
//! the `.hgrm` text per histogram; `/histograms/<name>.hgrm` gives one histogram alone;
//! `/histograms/plot` is an HTML page that draws them (`page`).

use super::api_name;
use corelog_metrics::hgrm;
use corelog_metrics::{MetricsSnapshot, Stage};

/// (name, histogram) pairs of the merged snapshot: APIs by Kafka name, then stages.
fn named(merged: &MetricsSnapshot) -> Vec<(String, &hdrhistogram::Histogram<u64>)> {
    let mut out: Vec<(String, &hdrhistogram::Histogram<u64>)> = merged
        .apis
        .iter()
        .map(|(k, m)| (api_name(*k), &m.latency_us))
        .collect();
    for stage in Stage::ALL {
        if let Some(h) = merged.stages.get(&stage) {
            out.push((stage.name().to_string(), h));
        }
    }
    out
}

pub fn text(snapshots: &[MetricsSnapshot]) -> String {
    let merged = MetricsSnapshot::merged(snapshots);
    let mut out = String::new();
    for (name, h) in named(&merged) {
        out.push_str(&format!(
            "# {name} latency (ms), merged over shards {:?}\n",
            merged.shards
        ));
        out.push_str(&hgrm::percentile_distribution(h));
        out.push('\n');
    }
    out
}

pub fn json(snapshots: &[MetricsSnapshot]) -> String {
    let merged = MetricsSnapshot::merged(snapshots);
    let mut map = serde_json::Map::new();
    for (name, h) in named(&merged) {
        let mut entry = serde_json::to_value(hgrm::percentiles(h)).unwrap_or_default();
        if let Some(obj) = entry.as_object_mut() {
            obj.insert(
                "hgrm".into(),
                serde_json::Value::String(hgrm::percentile_distribution(h)),
            );
        }
        map.insert(name, entry);
    }
    let doc = serde_json::json!({
        "unit": "ms",
        "shards": merged.shards,
        "histograms": map,
    });
    serde_json::to_string_pretty(&doc).unwrap_or_default()
}

/// One histogram by name (`Produce`, `fsync`, … case-insensitive).
pub fn one(snapshots: &[MetricsSnapshot], name: &str) -> Option<String> {
    let merged = MetricsSnapshot::merged(snapshots);
    named(&merged)
        .into_iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, h)| hgrm::percentile_distribution(h))
}

/// The stages of a produce in the order a batch meets them, the replicated path's last:
/// the page's first plot.
const PRODUCE_STAGES: &[Stage] = &[
    Stage::RequestQueue,
    Stage::Mesh,
    Stage::Append,
    Stage::Fsync,
    Stage::ReplicaFetch,
    Stage::FollowerAppend,
    Stage::ReplicationWait,
];

/// How many APIs the page plots: the most requested (more curves would not be read).
const PLOTTED_APIS: usize = 8;

/// `/histograms/plot`: an HTML page a person reads without a tool — latency by
/// percentile of the produce path's stages, then of the most requested APIs, each a plot
/// drawn as the load generator draws its own (`corelog_metrics::plot`), with a table of
/// the summary percentiles under it. Only histograms with samples are drawn.
pub fn page(snapshots: &[MetricsSnapshot]) -> String {
    use corelog_metrics::plot;
    use std::fmt::Write as _;
    let merged = MetricsSnapshot::merged(snapshots);
    let stages: Vec<(&str, &hdrhistogram::Histogram<u64>)> = PRODUCE_STAGES
        .iter()
        .filter_map(|s| merged.stages.get(s).map(|h| (s.name(), h)))
        .filter(|(_, h)| !h.is_empty())
        .collect();
    let mut apis: Vec<(String, &hdrhistogram::Histogram<u64>)> = merged
        .apis
        .iter()
        .map(|(k, m)| (api_name(*k), &m.latency_us))
        .filter(|(_, h)| !h.is_empty())
        .collect();
    apis.sort_by_key(|(name, h)| (std::cmp::Reverse(h.len()), name.clone()));
    apis.truncate(PLOTTED_APIS);
    let apis: Vec<(&str, &hdrhistogram::Histogram<u64>)> =
        apis.iter().map(|(n, h)| (n.as_str(), *h)).collect();

    let mut out = String::from(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>corelog latency</title>\n<style>body{font-family:sans-serif;margin:2em}\
         table{border-collapse:collapse}td,th{padding:2px 10px;text-align:right}\
         td:first-child,th:first-child{text-align:left}</style>\n</head>\n<body>\n",
    );
    let _ = writeln!(
        out,
        "<h1>corelog latency</h1>\n<p>Merged over shards {:?}, since the broker started. \
         The same distributions as text: <a href=\"/histograms\">/histograms</a> (HdrHistogram's \
         .hgrm), <a href=\"/histograms?format=json\">JSON</a>.</p>",
        merged.shards
    );
    for (heading, title, series) in [
        (
            "Stages of a produce",
            "produce stages: latency by percentile",
            &stages,
        ),
        ("Requests by API", "requests: latency by percentile", &apis),
    ] {
        let _ = writeln!(out, "<h2>{heading}</h2>");
        if series.is_empty() {
            out.push_str("<p>Nothing recorded yet.</p>\n");
            continue;
        }
        out.push_str(&plot::svg_element(title, series));
        out.push_str(
            "<table>\n<tr><th>histogram</th><th>count</th><th>p50 ms</th><th>p99 ms</th>\
             <th>p99.9 ms</th><th>max ms</th></tr>\n",
        );
        for (name, h) in series.iter() {
            let p = hgrm::percentiles(h);
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                plot::escape(name),
                p.count,
                p.p50,
                p.p99,
                p.p999,
                p.max
            );
        }
        out.push_str("</table>\n");
    }
    out.push_str("</body>\n</html>\n");
    out
}
