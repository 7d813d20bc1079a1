//! `/histograms`: latency percentile distributions per API and per internal stage,
//! merged across shards. Plain text is HdrHistogram's `.hgrm` format (what its plotter
//! reads), one section per histogram; `?format=json` gives the summary percentiles and
//! the `.hgrm` text per histogram; `/histograms/<name>.hgrm` gives one histogram alone.

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
