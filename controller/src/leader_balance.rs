//! The active controller's preferred-leader rebalancing (Kafka's
//! `auto.leader.rebalance.enable`): every `leader.imbalance.check.interval.seconds`, each
//! broker's *imbalance* is the share of the partitions it is the preferred leader of (the
//! first replica of their assignment) that another broker leads. A broker whose
//! imbalance is above `leader.imbalance.per.broker.percentage` gets those partitions back
//! through one preferred `ElectLeaders`, for the ones where it is a live ISR member now
//! (the election checks that again when it applies, on the image of that moment).
//!
//! Leaders move after failures (an election keeps a new leader until it dies) and after
//! reassignments; without this, a broker that comes back leads nothing.

use crate::command::{Command, Election};
use crate::image::MetadataImage;
pub use crate::node_config::LeaderBalance;
use crate::node_state::{self as node, Shared};
use crate::state_machine::Proposal;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

/// The partitions to hand back to their preferred leaders: those of every broker whose
/// imbalance is above `max_imbalance_percent`, where that broker is a live ISR member.
pub fn partitions_to_rebalance(
    image: &MetadataImage,
    max_imbalance_percent: u32,
) -> Vec<(String, i32)> {
    // broker → (partitions it prefers to lead, those led elsewhere that it could take).
    let mut preferred: BTreeMap<i32, (usize, usize, Vec<(String, i32)>)> = BTreeMap::new();
    for t in image.topics.values() {
        for (i, p) in (0..).zip(&t.partitions) {
            let Some(&first) = p.replicas.first() else {
                continue;
            };
            let entry = preferred.entry(first).or_default();
            entry.0 += 1;
            if p.leader != first {
                entry.1 += 1;
                if p.isr.contains(&first) && image.is_live(first) {
                    entry.2.push((t.name.clone(), i));
                }
            }
        }
    }
    preferred
        .into_values()
        .filter(|(total, elsewhere, _)| *elsewhere * 100 > *total * max_imbalance_percent as usize)
        .flat_map(|(_, _, movable)| movable)
        .collect()
}

/// Runs for as long as the node does; acts only while the node leads.
pub(crate) async fn lead(shared: Arc<Shared>, config: LeaderBalance) {
    let mut tick = tokio::time::interval(config.check_interval.max(Duration::from_millis(100)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await; // the first tick is at once: wait one interval from start-up
    loop {
        tick.tick().await;
        if !node::is_leader(&shared) {
            continue;
        }
        let partitions = partitions_to_rebalance(&shared.sm.image(), config.max_imbalance_percent);
        if partitions.is_empty() {
            continue;
        }
        let n = partitions.len();
        let proposal = Proposal {
            id: Uuid::new_v4(),
            command: Command::ElectLeaders {
                election: Election::Preferred,
                partitions,
            },
        };
        match node::write_local(&shared, proposal).await {
            Ok(applied) => {
                tracing::info!(partitions = n, outcome = ?applied.outcome, "preferred leaders rebalanced")
            }
            Err(e) => tracing::debug!(error = %e, "preferred leader rebalance not committed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image_with(assignments: Vec<Vec<i32>>) -> MetadataImage {
        crate::test_images::cluster(3, assignments)
    }

    #[test]
    fn brokers_above_the_imbalance_get_their_preferred_partitions_back() {
        let mut img = image_with(vec![vec![1, 2]; 10]);
        assert!(partitions_to_rebalance(&img, 10).is_empty(), "balanced");
        // Broker 2 leads one of broker 1's ten: 10 %, not above 10 %.
        let p = &mut img.topics.get_mut("t").unwrap().partitions;
        p[3].leader = 2;
        assert!(partitions_to_rebalance(&img, 10).is_empty());
        // Two of ten: 20 %.
        img.topics.get_mut("t").unwrap().partitions[7].leader = 2;
        assert_eq!(
            partitions_to_rebalance(&img, 10),
            vec![("t".to_string(), 3), ("t".to_string(), 7)]
        );
        // Only where the preferred leader is in the ISR.
        img.topics.get_mut("t").unwrap().partitions[7].isr = vec![2];
        assert_eq!(
            partitions_to_rebalance(&img, 10),
            vec![("t".to_string(), 3)]
        );
        assert!(
            partitions_to_rebalance(&img, 50).is_empty(),
            "a looser limit"
        );
    }
}
