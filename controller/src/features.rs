//! Cluster-wide feature levels (KIP-584, Kafka's `FeatureControlManager`): which
//! `metadata.version`, `transaction.version`, `group.version`, `share.version` and
//! `kraft.version` the whole cluster has finalized, decided here as pure functions of the
//! image and the request so that applying an `UpdateFeatures` (or a registration) gives
//! the same answer on every node.
//!
//! A level is finalized through the metadata log, never by a broker alone, and only
//! when every registered broker supports it: a cluster that still runs a broker of an
//! older release never receives a format that broker cannot read. A broker whose
//! release cannot serve a level the cluster has finalized is refused when it registers
//! (`check_registration`), which is how a downgrade after finalizing is refused.
//!
//! Levels follow Kafka's numbering, so that Kafka's `kafka-features` and Admin clients
//! read and change them unchanged: `metadata.version` from 3.3-IV3 (7) to 4.4-IV2 (33);
//! a feature at level 0 is not finalized (Kafka removes it). Each level means here what
//! it means in Kafka as far as corelog serves it: `transaction.version` 2 is KIP-890's
//! epoch bump per transaction, `group.version` 1 the consumer group protocol of KIP-848,
//! `share.version` 1 share groups (KIP-932). corelog's metadata log reads and writes one
//! format at every `metadata.version` it supports; the level is kept, advertised and
//! refused a downgrade as Kafka does, so that a later release can tie a format change
//! to a level an operator finalizes.
//!
//! An image that has never finalized a level (`MetadataImage::features` empty) is one
//! written by a release before feature levels, mid-way through a rolling upgrade: its
//! brokers go on serving the levels their configuration gives (`legacy`), as those
//! releases did, until the first `UpdateFeatures` finalizes the whole set.
//!
//! Invariants: finalized levels are within this release's `supported()` ranges and > 0
//! (`metadata.version` always present once any level is finalized).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const METADATA_VERSION: &str = "metadata.version";
pub const TRANSACTION_VERSION: &str = "transaction.version";
pub const GROUP_VERSION: &str = "group.version";
pub const SHARE_VERSION: &str = "share.version";
pub const KRAFT_VERSION: &str = "kraft.version";

/// Kafka's 3.3-IV3: the oldest `metadata.version` Kafka 4 (and corelog) accepts.
pub const METADATA_VERSION_MIN: i16 = 7;
/// Kafka's 4.4-IV2: the newest `metadata.version` this release reads, and the level a
/// new cluster starts at.
pub const METADATA_VERSION_LATEST: i16 = 33;
/// Kafka's 3.7-IV2: the `metadata.version` from which brokers register their log
/// directories' ids and report where each replica lives (KIP-858).
pub const METADATA_VERSION_DIRECTORY_IDS: i16 = 17;
pub const TRANSACTION_VERSION_MAX: i16 = 2;
pub const GROUP_VERSION_MAX: i16 = 1;
pub const SHARE_VERSION_MAX: i16 = 1;

/// Levels by feature name.
pub type FeatureLevels = BTreeMap<String, i16>;

/// The levels of one feature a node can serve (inclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionRange {
    pub min: i16,
    pub max: i16,
}

impl VersionRange {
    pub fn contains(&self, level: i16) -> bool {
        (self.min..=self.max).contains(&level)
    }
}

impl std::fmt::Display for VersionRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.min, self.max)
    }
}

/// Ranges by feature name: what a node's release supports.
pub type FeatureRanges = BTreeMap<String, VersionRange>;

/// What this release supports. `kraft.version` stays at 0: the controller quorum's
/// voters are fixed (no KIP-853 membership changes).
pub fn supported() -> FeatureRanges {
    let r = |min, max| VersionRange { min, max };
    FeatureRanges::from([
        (
            METADATA_VERSION.to_string(),
            r(METADATA_VERSION_MIN, METADATA_VERSION_LATEST),
        ),
        (
            TRANSACTION_VERSION.to_string(),
            r(0, TRANSACTION_VERSION_MAX),
        ),
        (GROUP_VERSION.to_string(), r(0, GROUP_VERSION_MAX)),
        (SHARE_VERSION.to_string(), r(0, SHARE_VERSION_MAX)),
        (KRAFT_VERSION.to_string(), r(0, 0)),
    ])
}

/// The levels a broker serves from its configuration where the cluster has finalized
/// none (`legacy`), and that a new cluster starts at (`bootstrap`): Kafka's
/// `kafka-storage format --feature`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfiguredLevels {
    pub transaction_version: i16,
    pub share_version: i16,
}

impl ConfiguredLevels {
    /// The levels a new cluster is finalized at: the newest `metadata.version`, the
    /// consumer protocol on, the rest as configured.
    pub fn bootstrap(&self) -> FeatureLevels {
        let mut levels = self.legacy();
        levels.insert(METADATA_VERSION.to_string(), METADATA_VERSION_LATEST);
        levels
    }

    /// What a broker served before feature levels were finalized through the log: the
    /// oldest `metadata.version`, the consumer protocol on (those releases served it
    /// unconditionally), transaction and share versions from its configuration.
    pub fn legacy(&self) -> FeatureLevels {
        [
            METADATA_VERSION,
            GROUP_VERSION,
            TRANSACTION_VERSION,
            SHARE_VERSION,
        ]
        .into_iter()
        .map(|name| (name.to_string(), self.legacy_level(name)))
        .filter(|(_, l)| *l > 0)
        .collect()
    }

    /// One feature's level in `legacy` (0: not finalized), without building the map.
    pub fn legacy_level(&self, name: &str) -> i16 {
        match name {
            METADATA_VERSION => METADATA_VERSION_MIN,
            GROUP_VERSION => GROUP_VERSION_MAX,
            TRANSACTION_VERSION => self.transaction_version,
            SHARE_VERSION => self.share_version,
            _ => 0,
        }
    }
}

/// A feature's finalized level in an image whose finalized levels are `finalized`
/// (empty: none finalized yet, so the configured `legacy` level).
pub fn level_of(finalized: &FeatureLevels, legacy: &ConfiguredLevels, name: &str) -> i16 {
    if finalized.is_empty() {
        legacy.legacy_level(name)
    } else {
        finalized.get(name).copied().unwrap_or(0)
    }
}

/// How a change may move a level (Kafka's `FeatureUpdate.UpgradeType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum UpgradeType {
    Upgrade,
    /// Lossless downgrades only.
    SafeDowngrade,
    /// Downgrades that may lose metadata (Kafka refuses them for `metadata.version`).
    UnsafeDowngrade,
}

/// One feature's requested level (UpdateFeatures' `FeatureUpdateKey`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeatureUpdate {
    pub name: String,
    /// 0 disables the feature (not allowed for `metadata.version`).
    pub level: i16,
    pub upgrade: UpgradeType,
}

/// The finalized levels of an image: its own once any were finalized, else `legacy`.
pub fn effective<'a>(finalized: &'a FeatureLevels, legacy: &'a FeatureLevels) -> &'a FeatureLevels {
    if finalized.is_empty() {
        legacy
    } else {
        finalized
    }
}

/// The levels after `updates`, or Kafka's INVALID_UPDATE_VERSION message for the first
/// update refused (then none is applied). `current` are the effective levels;
/// `brokers` every registered broker with the ranges its release supports (`None`: a
/// release before feature levels, which reads no `UpdateFeatures`).
pub fn update<'a>(
    current: &FeatureLevels,
    brokers: impl IntoIterator<Item = (i32, Option<&'a FeatureRanges>)> + Clone,
    updates: &[FeatureUpdate],
) -> Result<FeatureLevels, String> {
    let mut next = current.clone();
    for u in updates {
        let refuse = |why: &str| {
            if u.name == METADATA_VERSION {
                format!("Invalid metadata.version {}. {why}", u.level)
            } else {
                format!(
                    "Invalid update version {} for feature {}. {why}",
                    u.level, u.name
                )
            }
        };
        let now = current.get(&u.name).copied().unwrap_or(0);
        if u.level < 0 {
            return Err(refuse("A feature version cannot be less than 0."));
        }
        for (id, ranges) in brokers.clone() {
            let Some(ranges) = ranges else {
                return Err(refuse(&format!(
                    "Broker {id} runs a release without feature levels: upgrade it first."
                )));
            };
            if let Some(why) = not_supported(u.level, &format!("Broker {id}"), ranges.get(&u.name))
            {
                return Err(refuse(&why));
            }
        }
        if u.level < now && u.upgrade == UpgradeType::Upgrade {
            return Err(refuse(
                "Can't downgrade the version of this feature without setting the upgrade type \
                 to either safe or unsafe downgrade.",
            ));
        }
        if u.level > now && u.upgrade != UpgradeType::Upgrade {
            return Err(refuse("Can't downgrade to a newer version."));
        }
        if u.name == METADATA_VERSION {
            if u.level < METADATA_VERSION_MIN {
                return Err(refuse("Unable to set a metadata.version less than 3.3-IV3"));
            }
            if u.level < now {
                return Err(format!(
                    "Unsupported metadata.version downgrade from {now} to {}. Refusing to \
                     perform the requested downgrade because it might delete metadata \
                     information.",
                    u.level
                ));
            }
        }
        if u.level == 0 {
            next.remove(&u.name);
        } else {
            next.insert(u.name.clone(), u.level);
        }
    }
    Ok(next)
}

/// Why a node whose release supports `range` of a feature cannot be at `level`, in
/// Kafka's words (`QuorumFeatures.reasonNotSupported`); `None` if it can.
pub fn not_supported(level: i16, who: &str, range: Option<&VersionRange>) -> Option<String> {
    match range {
        Some(r) if r.contains(level) => None,
        Some(r) => Some(format!("{who} only supports versions {r}")),
        // A feature a release does not know it serves at level 0, as Kafka's DISABLED.
        None if level == 0 => None,
        None => Some(format!("{who} does not support this feature.")),
    }
}

/// Whether a broker supporting `ranges` (`None`: a release before feature levels) may
/// register in a cluster at `finalized` levels (empty: none finalized yet).
pub fn check_registration(
    id: i32,
    finalized: &FeatureLevels,
    ranges: Option<&FeatureRanges>,
) -> Result<(), String> {
    if finalized.is_empty() {
        return Ok(());
    }
    let Some(ranges) = ranges else {
        return Err(format!(
            "broker {id} runs a release without feature levels, and the cluster has finalized \
             them ({}): it cannot read this metadata log",
            describe(finalized)
        ));
    };
    for (name, level) in finalized {
        if let Some(why) = not_supported(*level, &format!("broker {id}"), ranges.get(name)) {
            return Err(format!(
                "the cluster has finalized {name} {level}, and {why}: run a release that \
                 supports it"
            ));
        }
    }
    Ok(())
}

/// Whether this release can serve `finalized` (an image's levels), as the reason it
/// cannot: a metadata log or snapshot of a newer release, which it must not apply.
pub fn check_supported(finalized: &FeatureLevels) -> Result<(), String> {
    let ours = supported();
    for (name, level) in finalized {
        if let Some(why) = not_supported(*level, "this release", ours.get(name)) {
            return Err(format!(
                "the cluster has finalized {name} {level}, and {why}: run a release that \
                 supports it"
            ));
        }
    }
    Ok(())
}

/// `name level, ...`, for messages.
pub fn describe(levels: &FeatureLevels) -> String {
    levels
        .iter()
        .map(|(n, l)| format!("{n} {l}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(name: &str, level: i16, upgrade: UpgradeType) -> FeatureUpdate {
        FeatureUpdate {
            name: name.into(),
            level,
            upgrade,
        }
    }

    fn configured() -> ConfiguredLevels {
        ConfiguredLevels {
            transaction_version: 2,
            share_version: 1,
        }
    }

    #[test]
    fn a_new_cluster_starts_at_the_newest_metadata_version_and_the_configured_levels() {
        let b = configured().bootstrap();
        assert_eq!(b[METADATA_VERSION], METADATA_VERSION_LATEST);
        assert_eq!(b[TRANSACTION_VERSION], 2);
        assert_eq!(b[GROUP_VERSION], 1);
        assert_eq!(b[SHARE_VERSION], 1);
        let quiet = ConfiguredLevels {
            transaction_version: 0,
            share_version: 0,
        };
        assert!(!quiet.bootstrap().contains_key(TRANSACTION_VERSION));
        assert_eq!(quiet.legacy()[METADATA_VERSION], METADATA_VERSION_MIN);
    }

    #[test]
    fn an_update_every_broker_supports_is_applied_in_order() {
        let ours = supported();
        let brokers = [(1, Some(&ours)), (2, Some(&ours))];
        let current = configured().legacy();
        let next = update(
            &current,
            brokers,
            &[
                up(
                    METADATA_VERSION,
                    METADATA_VERSION_LATEST,
                    UpgradeType::Upgrade,
                ),
                up(TRANSACTION_VERSION, 1, UpgradeType::SafeDowngrade),
                up(SHARE_VERSION, 0, UpgradeType::SafeDowngrade),
            ],
        )
        .unwrap();
        assert_eq!(next[METADATA_VERSION], METADATA_VERSION_LATEST);
        assert_eq!(next[TRANSACTION_VERSION], 1);
        assert!(!next.contains_key(SHARE_VERSION));
    }

    #[test]
    fn a_level_some_broker_cannot_serve_is_refused_in_kafkas_words() {
        let ours = supported();
        let mut older = supported();
        older.insert(TRANSACTION_VERSION.into(), VersionRange { min: 0, max: 1 });
        let current = configured().legacy();
        let e = update(
            &current,
            [(1, Some(&ours)), (2, Some(&older))],
            &[up(TRANSACTION_VERSION, 2, UpgradeType::Upgrade)],
        );
        // current tv is 2 in `legacy`; ask for a level the other broker lacks
        assert_eq!(
            e.unwrap_err(),
            "Invalid update version 2 for feature transaction.version. Broker 2 only supports \
             versions 0-1"
        );
        let e = update(
            &current,
            [(1, Some(&ours))],
            &[up("bogus.version", 1, UpgradeType::Upgrade)],
        );
        assert_eq!(
            e.unwrap_err(),
            "Invalid update version 1 for feature bogus.version. Broker 1 does not support this \
             feature."
        );
        let e = update(
            &current,
            [(1, Some(&ours)), (3, None)],
            &[up(
                METADATA_VERSION,
                METADATA_VERSION_LATEST,
                UpgradeType::Upgrade,
            )],
        );
        assert!(e
            .unwrap_err()
            .contains("Broker 3 runs a release without feature levels"));
    }

    #[test]
    fn downgrades_need_their_type_and_metadata_version_never_goes_back() {
        let ours = supported();
        let b = [(1, Some(&ours))];
        let current = configured().bootstrap();
        let e = update(
            &current,
            b,
            &[up(TRANSACTION_VERSION, 1, UpgradeType::Upgrade)],
        );
        assert!(e.unwrap_err().contains("without setting the upgrade type"));
        let e = update(
            &current,
            b,
            &[up(GROUP_VERSION, 1, UpgradeType::SafeDowngrade)],
        );
        assert!(e.is_ok(), "the same level is no downgrade");
        let mut low = current.clone();
        low.insert(TRANSACTION_VERSION.into(), 1);
        let e = update(
            &low,
            b,
            &[up(TRANSACTION_VERSION, 2, UpgradeType::SafeDowngrade)],
        );
        assert!(e
            .unwrap_err()
            .contains("Can't downgrade to a newer version."));
        let e = update(
            &current,
            b,
            &[up(METADATA_VERSION, 21, UpgradeType::SafeDowngrade)],
        );
        assert_eq!(
            e.unwrap_err(),
            "Unsupported metadata.version downgrade from 33 to 21. Refusing to perform the \
             requested downgrade because it might delete metadata information."
        );
        let e = update(
            &current,
            b,
            &[up(METADATA_VERSION, 0, UpgradeType::UnsafeDowngrade)],
        );
        assert!(e.unwrap_err().contains("only supports versions 7-33"));
        let e = update(
            &current,
            b,
            &[up(TRANSACTION_VERSION, -1, UpgradeType::SafeDowngrade)],
        );
        assert!(e.unwrap_err().contains("cannot be less than 0"));
    }

    #[test]
    fn a_broker_that_cannot_serve_the_finalized_levels_is_refused_at_registration() {
        let finalized = configured().bootstrap();
        assert!(check_registration(1, &FeatureLevels::new(), None).is_ok());
        assert!(check_registration(1, &finalized, Some(&supported())).is_ok());
        let e = check_registration(2, &finalized, None).unwrap_err();
        assert!(
            e.contains("broker 2 runs a release without feature levels"),
            "{e}"
        );
        let mut older = supported();
        older.insert(METADATA_VERSION.into(), VersionRange { min: 7, max: 30 });
        assert!(check_supported(&finalized).is_ok());
        let mut newer = finalized.clone();
        newer.insert(METADATA_VERSION.into(), METADATA_VERSION_LATEST + 1);
        assert!(check_supported(&newer)
            .unwrap_err()
            .contains("metadata.version 34, and this release only supports versions 7-33"));
        let e = check_registration(3, &finalized, Some(&older)).unwrap_err();
        assert_eq!(
            e,
            "the cluster has finalized metadata.version 33, and broker 3 only supports \
             versions 7-30: run a release that supports it"
        );
    }
}
