//! Request and response frames: size prefix, request header v0–v2, response header
//! v0–v1, and the KIP-511 fallback for an ApiVersions request of unknown version.
//!
//! Decoding is two-phase: the connection reads a whole frame
//! whose size it has checked against the configured limit; then the header is parsed
//! here from that frame alone. Nothing here allocates from a wire count.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable};

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {0} bytes is shorter than a request header")]
    TooShort(usize),
    #[error("unknown api key {0}")]
    UnknownApiKey(i16),
    #[error("malformed request header: {0}")]
    Header(String),
    #[error("malformed {api:?} v{version} request: {reason}")]
    Body {
        api: ApiKey,
        version: i16,
        reason: String,
    },
    #[error("unsupported {api:?} version {version}")]
    UnsupportedVersion { api: ApiKey, version: i16 },
}

/// A request whose header is parsed; `body` is the rest of the frame.
pub struct RequestFrame {
    pub api_key: ApiKey,
    pub api_version: i16,
    pub header: RequestHeader,
    pub body: Bytes,
}

/// The api key and version, read before the header's own version is known.
pub fn peek_key_and_version(frame: &[u8]) -> Result<(i16, i16), FrameError> {
    let mut b = frame;
    if b.len() < crate::limits::REQUEST_HEADER_MIN_BYTES {
        return Err(FrameError::TooShort(frame.len()));
    }
    Ok((b.get_i16(), b.get_i16()))
}

/// Parses the request header of `frame` (which excludes the size prefix). An api
/// version outside what the codec knows still gets a header, parsed at the lowest
/// header version, so the caller can answer ApiVersions per KIP-511.
pub fn parse_request(frame: Bytes) -> Result<RequestFrame, FrameError> {
    let (key, version) = peek_key_and_version(&frame)?;
    let api_key = ApiKey::try_from(key).map_err(|_| FrameError::UnknownApiKey(key))?;
    let range = api_key.valid_versions();
    let header_version = if version >= range.min && version <= range.max {
        api_key.request_header_version(version)
    } else {
        // Unknown version: the header format is unknowable; v1 (client id, no tagged
        // fields) is what every client sends in front of ApiVersions.
        1
    };
    let mut body = frame;
    let header = RequestHeader::decode(&mut body, header_version)
        .map_err(|e| FrameError::Header(e.to_string()))?;
    Ok(RequestFrame {
        api_key,
        api_version: version,
        header,
        body,
    })
}

/// Decodes a request body of a supported version.
pub fn decode_body<T: Decodable>(frame: &mut RequestFrame) -> Result<T, FrameError> {
    T::decode(&mut frame.body, frame.api_version).map_err(|e| FrameError::Body {
        api: frame.api_key,
        version: frame.api_version,
        reason: e.to_string(),
    })
}

/// Encodes a whole response frame: size, response header, body.
pub fn encode_response<T: Encodable>(
    api_key: ApiKey,
    api_version: i16,
    correlation_id: i32,
    body: &T,
) -> Result<BytesMut, FrameError> {
    let header_version = api_key.response_header_version(api_version);
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let size = header
        .compute_size(header_version)
        .and_then(|h| body.compute_size(api_version).map(|b| h + b))
        .map_err(|e| FrameError::Body {
            api: api_key,
            version: api_version,
            reason: format!("encoding the response: {e}"),
        })?;
    let mut out = BytesMut::with_capacity(4 + size);
    out.put_i32(size as i32);
    header
        .encode(&mut out, header_version)
        .and_then(|_| body.encode(&mut out, api_version))
        .map_err(|e| FrameError::Body {
            api: api_key,
            version: api_version,
            reason: format!("encoding the response: {e}"),
        })?;
    debug_assert_eq!(out.len(), 4 + size);
    Ok(out)
}
