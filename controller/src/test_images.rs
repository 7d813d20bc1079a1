//! Metadata images for the unit tests of the controller's duties: brokers registered and
//! unfenced, and a topic "t" with explicit assignments, built by applying the commands
//! the controller itself would commit.

use crate::command::{Command, NewTopic};
use crate::image::{Endpoint, MetadataImage};
use uuid::Uuid;

/// Applies `cmd` as the next log entry.
pub fn apply(img: &mut MetadataImage, cmd: Command) -> crate::Outcome {
    let index = img.applied + 1;
    img.apply(index, &cmd)
}

/// Registers broker `id` and unfences it.
pub fn join(img: &mut MetadataImage, id: i32) {
    apply(
        img,
        Command::RegisterBroker {
            id,
            incarnation: Uuid::new_v4(),
            endpoint: Endpoint {
                host: "127.0.0.1".into(),
                port: 9000 + id as u16,
            },
            listeners: Vec::new(),
            controller_addr: String::new(),
            rack: None,
            supported_features: None,
            log_dirs: Vec::new(),
        },
    );
    let epoch = img.applied;
    apply(img, Command::UnfenceBroker { id, epoch });
}

/// Brokers `1..=brokers`, and topic "t" with one partition per assignment.
pub fn cluster(brokers: i32, assignments: Vec<Vec<i32>>) -> MetadataImage {
    let mut img = MetadataImage::default();
    for id in 1..=brokers {
        join(&mut img, id);
    }
    create(&mut img, "t", assignments);
    img
}

/// Creates topic `name` with one partition per assignment.
pub fn create(img: &mut MetadataImage, name: &str, assignments: Vec<Vec<i32>>) {
    let created = apply(
        img,
        Command::CreateTopics {
            topics: vec![NewTopic {
                name: name.into(),
                id: Uuid::new_v4(),
                partitions: assignments.len() as i32,
                replication_factor: assignments[0].len() as i32,
                assignments: Some(assignments),
                configs: Default::default(),
            }],
        },
    );
    assert_eq!(created, crate::Outcome::Items(vec![Ok(())]));
}
