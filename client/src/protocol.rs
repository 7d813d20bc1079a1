//! The Kafka requests this tool sends, their versions, and the framing around them.
//!
//! Owns: the version ranges the load generator implements (`OUR_APIS`), the negotiation
//! against a broker's ApiVersions answer, request framing (size prefix + header + body)
//! and the builders for the six requests the tool uses. No I/O happens here.
//!
//! Invariants:
//! - A negotiated version is always inside both our range and the broker's; if the two
//!   ranges do not meet for an API we need, negotiation fails with a message naming it.
//! - Topics are addressed by name, so Metadata/Fetch stop at v12 and Produce at v12 (v13+
//!   address topics by id only).
//!
//! Deliberately not here: decoding record batches (`records.rs`), sockets
//! (`connection.rs`).

use crate::error::{ClientError, Result};
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, CreateTopicsRequest, FetchRequest, ListOffsetsRequest,
    MetadataRequest, ProduceRequest, RequestHeader, TopicName,
};
use kafka_protocol::protocol::{Encodable, StrBytes};

/// What this tool implements, per API: (key, min, max). The minimums are the oldest
/// versions whose fields we fill correctly (Produce v3 is the first carrying RecordBatch
/// v2); the maximums are the newest that still address topics by name.
pub const OUR_APIS: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 12),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 7),
    (ApiKey::Metadata, 1, 12),
    (ApiKey::ApiVersions, 0, 3),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::InitProducerId, 0, 1),
];

/// ApiVersions is sent before anything is known about the broker: v3 first, and v0 if
/// the broker answers UNSUPPORTED_VERSION (KIP-511).
pub const API_VERSIONS_FIRST_TRY: i16 = 3;

/// The negotiated version of each API this tool uses, for one broker connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Versions {
    pub produce: i16,
    pub fetch: i16,
    pub list_offsets: i16,
    pub metadata: i16,
    /// `None` when the broker does not offer CreateTopics; only `--partitions` needs it.
    pub create_topics: Option<i16>,
}

fn our_range(key: ApiKey) -> (i16, i16) {
    OUR_APIS
        .iter()
        .find(|(k, _, _)| *k == key)
        .map(|(_, lo, hi)| (*lo, *hi))
        .unwrap_or((0, -1))
}

/// Highest version inside both ranges, or `None` when they do not meet.
pub fn pick_version(ours: (i16, i16), theirs: (i16, i16)) -> Option<i16> {
    let lo = ours.0.max(theirs.0);
    let hi = ours.1.min(theirs.1);
    (lo <= hi).then_some(hi)
}

/// Picks, for every API we use, the highest version both sides support.
pub fn negotiate(resp: &ApiVersionsResponse) -> Result<Versions> {
    let theirs = |key: ApiKey| {
        resp.api_keys
            .iter()
            .find(|v| v.api_key == key as i16)
            .map(|v| (v.min_version, v.max_version))
    };
    let need = |key: ApiKey| -> Result<i16> {
        let ours = our_range(key);
        let t = theirs(key)
            .ok_or_else(|| ClientError::Protocol(format!("broker does not offer {key:?}")))?;
        pick_version(ours, t).ok_or_else(|| {
            ClientError::Protocol(format!(
                "broker offers {key:?} v{}..v{}, this tool implements v{}..v{}",
                t.0, t.1, ours.0, ours.1
            ))
        })
    };
    Ok(Versions {
        produce: need(ApiKey::Produce)?,
        fetch: need(ApiKey::Fetch)?,
        list_offsets: need(ApiKey::ListOffsets)?,
        metadata: need(ApiKey::Metadata)?,
        create_topics: theirs(ApiKey::CreateTopics)
            .and_then(|t| pick_version(our_range(ApiKey::CreateTopics), t)),
    })
}

pub use crate::error::error_name;

/// Appends one whole request frame (4-byte size, header, body) to `buf`.
///
/// The size prefix is patched after encoding so the body is written exactly once.
pub fn encode_frame<R: Encodable>(
    buf: &mut BytesMut,
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    client_id: &StrBytes,
    body: &R,
) -> Result<()> {
    let start = buf.len();
    buf.put_i32(0);
    let mut header = RequestHeader::default();
    header.request_api_key = api as i16;
    header.request_api_version = version;
    header.correlation_id = correlation_id;
    header.client_id = Some(client_id.clone());
    header
        .encode(buf, api.request_header_version(version))
        .map_err(|e| ClientError::Protocol(format!("encoding request header: {e:#}")))?;
    body.encode(buf, version)
        .map_err(|e| ClientError::Protocol(format!("encoding {api:?} v{version}: {e:#}")))?;
    let size = buf.len() - start - 4;
    let size = i32::try_from(size)
        .map_err(|_| ClientError::Protocol(format!("request of {size} bytes is too large")))?;
    buf[start..start + 4].copy_from_slice(&size.to_be_bytes());
    Ok(())
}

pub fn topic_name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_owned()))
}

pub fn metadata_request(topic: &str, auto_create: bool) -> MetadataRequest {
    let mut t = MetadataRequestTopic::default();
    t.name = Some(topic_name(topic));
    let mut r = MetadataRequest::default();
    r.topics = Some(vec![t]);
    r.allow_auto_topic_creation = auto_create;
    r
}

pub fn create_topics_request(
    topic: &str,
    partitions: i32,
    replication_factor: i16,
    timeout_ms: i32,
) -> CreateTopicsRequest {
    let mut t = CreatableTopic::default();
    t.name = topic_name(topic);
    t.num_partitions = partitions;
    t.replication_factor = replication_factor;
    let mut r = CreateTopicsRequest::default();
    r.topics = vec![t];
    r.timeout_ms = timeout_ms;
    r
}

/// One Produce request carrying one record batch per listed partition.
pub fn produce_request(
    topic: &TopicName,
    acks: i16,
    timeout_ms: i32,
    batches: impl IntoIterator<Item = (i32, Bytes)>,
) -> ProduceRequest {
    let mut td = TopicProduceData::default();
    td.name = topic.clone();
    td.partition_data = batches
        .into_iter()
        .map(|(p, records)| {
            let mut pd = PartitionProduceData::default();
            pd.index = p;
            pd.records = Some(records);
            pd
        })
        .collect();
    let mut r = ProduceRequest::default();
    r.acks = acks;
    r.timeout_ms = timeout_ms;
    r.topic_data = vec![td];
    r
}

/// Sentinel timestamps of ListOffsets.
pub const OFFSET_LATEST: i64 = -1;
pub const OFFSET_EARLIEST: i64 = -2;

pub fn list_offsets_request(
    topic: &TopicName,
    partitions: &[i32],
    which: i64,
) -> ListOffsetsRequest {
    let mut t = ListOffsetsTopic::default();
    t.name = topic.clone();
    t.partitions = partitions
        .iter()
        .map(|&p| {
            let mut lp = ListOffsetsPartition::default();
            lp.partition_index = p;
            lp.timestamp = which;
            lp
        })
        .collect();
    let mut r = ListOffsetsRequest::default();
    // -1: we are a consumer, not a follower replica.
    r.replica_id = (-1).into();
    r.topics = vec![t];
    r
}

/// A full (sessionless) fetch of the given (partition, offset) pairs.
pub fn fetch_request(
    topic: &TopicName,
    partitions: &[(i32, i64)],
    max_wait_ms: i32,
    max_bytes: i32,
    partition_max_bytes: i32,
) -> FetchRequest {
    let mut t = FetchTopic::default();
    t.topic = topic.clone();
    t.partitions = partitions
        .iter()
        .map(|&(p, off)| {
            let mut fp = FetchPartition::default();
            fp.partition = p;
            fp.fetch_offset = off;
            fp.partition_max_bytes = partition_max_bytes;
            fp
        })
        .collect();
    let mut r = FetchRequest::default();
    r.max_wait_ms = max_wait_ms;
    r.min_bytes = 1;
    r.max_bytes = max_bytes;
    // session_id 0 / epoch -1: a full fetch request without an incremental session.
    r.session_id = 0;
    r.session_epoch = -1;
    r.topics = vec![t];
    r
}

/// Fails unless `code` is 0, naming the Kafka error.
pub fn check(code: i16, what: &str) -> Result<()> {
    if code != 0 {
        return Err(ClientError::Kafka {
            context: what.to_string(),
            code,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_highest_common_version() {
        assert_eq!(pick_version((3, 12), (0, 9)), Some(9));
        assert_eq!(pick_version((3, 12), (5, 13)), Some(12));
        assert_eq!(pick_version((3, 12), (0, 2)), None);
    }

    #[test]
    fn negotiates_against_corelog_ranges() {
        use kafka_protocol::messages::api_versions_response::ApiVersion;
        let mut resp = ApiVersionsResponse::default();
        for (k, lo, hi) in [
            (ApiKey::Produce, 3, 9),
            (ApiKey::Fetch, 4, 12),
            (ApiKey::ListOffsets, 1, 6),
            (ApiKey::Metadata, 0, 12),
            (ApiKey::ApiVersions, 0, 3),
        ] {
            let mut v = ApiVersion::default();
            v.api_key = k as i16;
            v.min_version = lo;
            v.max_version = hi;
            resp.api_keys.push(v);
        }
        let v = negotiate(&resp).unwrap();
        assert_eq!(v.produce, 9);
        assert_eq!(v.list_offsets, 6);
        assert_eq!(v.create_topics, None);
    }

    #[test]
    fn frame_size_prefix_matches_body() {
        let mut buf = BytesMut::new();
        let req = metadata_request("t", false);
        encode_frame(
            &mut buf,
            ApiKey::Metadata,
            12,
            7,
            &StrBytes::from_static_str("x"),
            &req,
        )
        .unwrap();
        let size = i32::from_be_bytes(buf[0..4].try_into().unwrap());
        assert_eq!(size as usize, buf.len() - 4);
    }
}
