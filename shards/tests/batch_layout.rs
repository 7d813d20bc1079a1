//! The client crate's copy of the RecordBatch v2 header layout equals the owner's
//! (`corelog_storage::batch::layout`): the replica fetcher reads with one and the log
//! writes with the other, and neither crate may depend on the other.

use corelog_kafka_client::records::layout as client;
use corelog_storage::batch::{layout as owner, BATCH_HEADER_LEN, CRC_START, LOG_OVERHEAD};

#[test]
fn the_client_header_layout_is_the_storage_engines() {
    assert_eq!(client::FIELDS, owner::FIELDS);
    assert_eq!(client::LOG_OVERHEAD, LOG_OVERHEAD);
    assert_eq!(client::CRC_START, CRC_START);
    assert_eq!(client::BATCH_HEADER_LEN, BATCH_HEADER_LEN);
    assert_eq!(client::COMPRESSION_MASK, owner::COMPRESSION_MASK);
    assert_eq!(client::CONTROL_BIT, owner::CONTROL_BIT);
}
