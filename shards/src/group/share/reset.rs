//! A share group's `share.auto.offset.reset` (a group config, KIP-932): where a share
//! partition never seen starts. Parsed here, where the group's configs are checked
//! (`consumer::overrides`), and applied by the partition's leader (`share::leader`).

/// Where a share partition never seen starts (`share.auto.offset.reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AutoOffsetReset {
    #[default]
    Latest,
    Earliest,
    /// At the first record written at most this many milliseconds ago (the log end if
    /// none was).
    ByDuration(i64),
}

/// The group config's name.
pub const AUTO_OFFSET_RESET: &str = "share.auto.offset.reset";

impl AutoOffsetReset {
    /// Kafka's values: `latest`, `earliest`, `by_duration:<ISO-8601 duration>` (Java's
    /// `Duration.parse` form, `PnDTnHnMn.nS`, not negative).
    pub fn parse(value: &str) -> Result<AutoOffsetReset, String> {
        let v = value.trim().to_ascii_lowercase();
        match v.as_str() {
            "latest" => return Ok(AutoOffsetReset::Latest),
            "earliest" => return Ok(AutoOffsetReset::Earliest),
            _ => {}
        }
        let bad = || {
            format!("{AUTO_OFFSET_RESET} must be latest, earliest or by_duration:<ISO-8601 duration>, not {value:?}")
        };
        let d = v.strip_prefix("by_duration:").ok_or_else(bad)?;
        iso_duration_ms(d)
            .map(AutoOffsetReset::ByDuration)
            .ok_or_else(bad)
    }
}

/// Milliseconds of an ISO-8601 duration as Java's `Duration.parse` reads it
/// (`P[nD][T[nH][nM][n[.n]S]]`, case-insensitive), if it is one and not negative.
fn iso_duration_ms(s: &str) -> Option<i64> {
    let rest = s.strip_prefix('p')?;
    let (days, time) = match rest.split_once('t') {
        Some((d, t)) => (d, Some(t)),
        None => (rest, None),
    };
    let mut ms: i64 = 0;
    if !days.is_empty() {
        let n: i64 = days.strip_suffix('d')?.parse().ok()?;
        ms = ms.checked_add(n.checked_mul(86_400_000)?)?;
    }
    let Some(mut t) = time else {
        return (!days.is_empty() && ms >= 0).then_some(ms);
    };
    if t.is_empty() {
        return None;
    }
    for (unit, scale) in [('h', 3_600_000.0), ('m', 60_000.0), ('s', 1000.0)] {
        if let Some(i) = t.find(unit) {
            let n: f64 = t[..i].parse().ok()?;
            ms = ms.checked_add((n * scale) as i64)?;
            t = &t[i + 1..];
        }
    }
    (t.is_empty() && ms >= 0).then_some(ms)
}
