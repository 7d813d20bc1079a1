"""A tiny hand-written Kafka wire-protocol codec for the raw-socket tests.

Only what the tests need: request header v1 (non-flexible) and v2, RecordBatch
v2 with CRC-32C, ApiVersions v0 (and the KIP-511 fallback), Metadata v1,
Produce v3, Fetch v4, and a share consumer's ShareGroupHeartbeat, ShareFetch and
ShareAcknowledge v1. Deliberately independent of any Kafka client library.
"""

from __future__ import annotations

import socket
import struct
import time
import typing

# ---------------------------------------------------------------------------
# CRC-32C (Castagnoli), reflected polynomial 0x82F63B78, table driven
# ---------------------------------------------------------------------------

_CRC32C_TABLE = []
for _n in range(256):
    _c = _n
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC32C_TABLE.append(_c)


def crc32c(data: bytes, crc: int = 0) -> int:
    crc ^= 0xFFFFFFFF
    table = _CRC32C_TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283  # standard check value

# ---------------------------------------------------------------------------
# primitive encoders
# ---------------------------------------------------------------------------

def i8(v): return struct.pack(">b", v)
def i16(v): return struct.pack(">h", v)
def i32(v): return struct.pack(">i", v)
def i64(v): return struct.pack(">q", v)
def u32(v): return struct.pack(">I", v)


def string(s: str | bytes | None) -> bytes:
    if s is None:
        return i16(-1)
    b = s.encode() if isinstance(s, str) else s
    return i16(len(b)) + b


def kbytes(b: bytes | None) -> bytes:
    if b is None:
        return i32(-1)
    return i32(len(b)) + b


def array(items: list[bytes] | None) -> bytes:
    if items is None:
        return i32(-1)
    return i32(len(items)) + b"".join(items)


def uvarint(v: int) -> bytes:
    assert v >= 0
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def varint(v: int) -> bytes:
    """zig-zag signed varint (varlong too: Python ints are unbounded)."""
    return uvarint((v << 1) ^ (v >> 63))


def compact_string(s: str | None) -> bytes:
    if s is None:
        return uvarint(0)
    b = s.encode()
    return uvarint(len(b) + 1) + b


# ---------------------------------------------------------------------------
# primitive decoder
# ---------------------------------------------------------------------------

class Reader:
    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError(f"short read: need {n} at {self.pos}, have {len(self.data) - self.pos}")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def i8(self): return struct.unpack(">b", self.take(1))[0]
    def i16(self): return struct.unpack(">h", self.take(2))[0]
    def i32(self): return struct.unpack(">i", self.take(4))[0]
    def i64(self): return struct.unpack(">q", self.take(8))[0]
    def u32(self): return struct.unpack(">I", self.take(4))[0]

    def string(self):
        n = self.i16()
        return None if n < 0 else self.take(n).decode()

    def kbytes(self):
        n = self.i32()
        return None if n < 0 else self.take(n)

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            b = self.take(1)[0]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 63:
                raise ValueError("varint too long")

    def varint(self) -> int:
        v = self.uvarint()
        return (v >> 1) ^ -(v & 1)

    def remaining(self) -> int:
        return len(self.data) - self.pos


# ---------------------------------------------------------------------------
# framing
# ---------------------------------------------------------------------------

CLIENT_ID = "corelog-it-raw"


def request(api_key: int, api_version: int, correlation_id: int, body: bytes,
            client_id: str | None = CLIENT_ID, header_v2: bool = False) -> bytes:
    """Size-prefixed request frame; header v1 (or v2 = v1 + empty tagged fields)."""
    hdr = i16(api_key) + i16(api_version) + i32(correlation_id) + string(client_id)
    if header_v2:
        hdr += uvarint(0)
    payload = hdr + body
    return i32(len(payload)) + payload


def connect(bootstrap: str, timeout: float = 10.0) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


class Closed(Exception):
    """The peer closed the connection (EOF or reset)."""


def recv_exact(sock: socket.socket, n: int, timeout: float) -> bytes:
    deadline = time.monotonic() + timeout
    buf = bytearray()
    while len(buf) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"timed out after {timeout}s with {len(buf)}/{n} bytes")
        sock.settimeout(left)
        try:
            chunk = sock.recv(n - len(buf))
        except (ConnectionResetError, ConnectionAbortedError, BrokenPipeError) as e:
            raise Closed(repr(e))
        except socket.timeout:
            continue
        if not chunk:
            raise Closed(f"EOF after {len(buf)}/{n} bytes")
        buf += chunk
    return bytes(buf)


def recv_response(sock: socket.socket, timeout: float = 10.0) -> tuple[int, bytes]:
    """-> (correlation_id, body after response header v0)."""
    (size,) = struct.unpack(">i", recv_exact(sock, 4, timeout))
    assert 4 <= size <= 200 * 1024 * 1024, f"implausible response size {size}"
    data = recv_exact(sock, size, timeout)
    return struct.unpack(">i", data[:4])[0], data[4:]


def roundtrip(bootstrap: str, frame: bytes, timeout: float = 10.0) -> tuple[int, bytes]:
    with connect(bootstrap) as s:
        s.sendall(frame)
        return recv_response(s, timeout)


def wait_closed(sock: socket.socket, timeout: float = 5.0) -> str:
    """Wait until the broker closes the connection. Returns how ('eof'/'reset').
    Raises AssertionError if it sends data instead or keeps it open."""
    deadline = time.monotonic() + timeout
    got = bytearray()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(
                f"broker neither closed the connection nor reset it within {timeout}s"
                + (f" (it sent {bytes(got[:64])!r})" if got else ""))
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, ConnectionAbortedError):
            how = "reset"
            break
        except socket.timeout:
            continue
        if not chunk:
            how = "eof"
            break
        got += chunk
    assert not got, f"broker answered instead of closing the connection: {bytes(got[:128])!r}"
    return how


def send_and_expect_close(bootstrap: str, data: bytes, timeout: float = 5.0) -> str:
    with connect(bootstrap) as s:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            return "reset-on-send"
        return wait_closed(s, timeout)


# ---------------------------------------------------------------------------
# RecordBatch v2
# ---------------------------------------------------------------------------

# The header's fields: each one's bytes in a batch, as a slice (``batch[CRC]``, or
# ``CRC.start`` for struct.unpack_from). The names and ranges of the Rust owner,
# record-batch/src/layout.rs (tests/layering/test_batch_layout.py holds the two equal).
BASE_OFFSET = slice(0, 8)               # i64
BATCH_LENGTH = slice(8, 12)             # i32: the bytes of the batch after this field
PARTITION_LEADER_EPOCH = slice(12, 16)  # i32
MAGIC = slice(16, 17)                   # i8
CRC = slice(17, 21)                     # u32: CRC-32C of CRC_START.. (the end)
ATTRIBUTES = slice(21, 23)              # i16
LAST_OFFSET_DELTA = slice(23, 27)       # i32
BASE_TIMESTAMP = slice(27, 35)          # i64
MAX_TIMESTAMP = slice(35, 43)           # i64
PRODUCER_ID = slice(43, 51)             # i64
PRODUCER_EPOCH = slice(51, 53)          # i16
BASE_SEQUENCE = slice(53, 57)           # i32
RECORD_COUNT = slice(57, 61)            # i32, the last header field: the records follow
# Bytes in front of each batch that batchLength does not count (a batch's size is
# LOG_OVERHEAD + batchLength).
LOG_OVERHEAD = BATCH_LENGTH.stop
# The CRC covers attributes to the end of the batch.
CRC_START = ATTRIBUTES.start
BATCH_HEADER_LEN = RECORD_COUNT.stop

_FIELDS = [BASE_OFFSET, BATCH_LENGTH, PARTITION_LEADER_EPOCH, MAGIC, CRC, ATTRIBUTES,
           LAST_OFFSET_DELTA, BASE_TIMESTAMP, MAX_TIMESTAMP, PRODUCER_ID, PRODUCER_EPOCH,
           BASE_SEQUENCE, RECORD_COUNT]
assert _FIELDS[0].start == 0 and all(f.stop == g.start for f, g in zip(_FIELDS, _FIELDS[1:]))
assert (LOG_OVERHEAD, CRC_START, BATCH_HEADER_LEN) == (12, 21, 61)


def encode_record(offset_delta: int, ts_delta: int, key: bytes | None, value: bytes | None,
                  headers: list[tuple[str, bytes | None]]) -> bytes:
    body = i8(0) + varint(ts_delta) + varint(offset_delta)
    body += varint(-1) if key is None else varint(len(key)) + key
    body += varint(-1) if value is None else varint(len(value)) + value
    body += varint(len(headers))
    for hk, hv in headers:
        hkb = hk.encode()
        body += varint(len(hkb)) + hkb
        body += varint(-1) if hv is None else varint(len(hv)) + hv
    return varint(len(body)) + body


def record_batch(records: list[tuple], base_timestamp: int, base_offset: int = 0,
                 producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                 attributes: int = 0) -> bytes:
    """records: [(key, value, headers, timestamp)] -> uncompressed RecordBatch v2 (magic 2).
    The producer fields default to "not idempotent"."""
    recs = b"".join(encode_record(i, ts - base_timestamp, k, v, h) for i, (k, v, h, ts) in enumerate(records))
    max_ts = max(ts for *_, ts in records)
    after_crc = (
        i16(attributes)              # attributes: 0 = no compression, CreateTime, not transactional
        + i32(len(records) - 1)      # lastOffsetDelta
        + i64(base_timestamp)        # baseTimestamp
        + i64(max_ts)                # maxTimestamp
        + i64(producer_id)           # producerId
        + i16(producer_epoch)        # producerEpoch
        + i32(base_sequence)         # baseSequence
        + i32(len(records))          # records count
        + recs
    )
    # baseOffset, batchLength and crc filled in below, partitionLeaderEpoch, magic
    batch = bytearray(i64(0) + i32(0) + i32(-1) + i8(2) + u32(0) + after_crc)
    batch[BASE_OFFSET] = i64(base_offset)
    batch[BATCH_LENGTH] = i32(len(batch) - LOG_OVERHEAD)
    return with_crc(batch)


def with_crc(batch: bytearray) -> bytes:
    """The batch with its CRC field set to the CRC-32C of CRC_START.. (as it is now)."""
    batch[CRC] = u32(crc32c(bytes(batch[CRC_START:])))
    return bytes(batch)


def decode_batches(data: bytes) -> list[dict]:
    """Decode a sequence of RecordBatch v2 (a trailing partial batch is ignored)."""
    out = []
    r = Reader(data)
    while r.remaining() >= 12:
        start = r.pos
        base_offset = r.i64()
        length = r.i32()
        if r.remaining() < length:
            break
        body = Reader(r.take(length))
        leader_epoch = body.i32()
        magic = body.i8()
        assert magic == 2, f"batch at {start}: magic {magic}"
        crc = body.u32()
        crc_ok = crc32c(body.data[body.pos:]) == crc
        attrs = body.i16()
        last_offset_delta = body.i32()
        base_ts = body.i64()
        max_ts = body.i64()
        body.i64(); body.i16(); body.i32()  # producer id/epoch, base sequence
        count = body.i32()
        records = []
        for _ in range(count):
            ln = body.uvarint()
            ln = (ln >> 1) ^ -(ln & 1)
            rr = Reader(body.take(ln))
            rr.i8()
            ts_delta = rr.varint()
            off_delta = rr.varint()
            kl = rr.varint()
            key = None if kl < 0 else rr.take(kl)
            vl = rr.varint()
            value = None if vl < 0 else rr.take(vl)
            hs = []
            for _ in range(rr.varint()):
                hk = rr.take(rr.varint()).decode()
                hl = rr.varint()
                hs.append((hk, None if hl < 0 else rr.take(hl)))
            records.append({"offset": base_offset + off_delta, "timestamp": base_ts + ts_delta,
                            "key": key, "value": value, "headers": hs})
        out.append({"base_offset": base_offset, "leader_epoch": leader_epoch, "crc_ok": crc_ok,
                    "attributes": attrs, "last_offset_delta": last_offset_delta,
                    "max_timestamp": max_ts, "records": records})
    return out


# ---------------------------------------------------------------------------
# API messages
# ---------------------------------------------------------------------------

API_PRODUCE, API_FETCH, API_LIST_OFFSETS, API_METADATA = 0, 1, 2, 3
API_VERSIONS, API_CREATE_TOPICS, API_DELETE_TOPICS, API_CREATE_PARTITIONS = 18, 19, 20, 37


def api_versions_v0(correlation_id: int) -> bytes:
    return request(API_VERSIONS, 0, correlation_id, b"")


def api_versions_future(correlation_id: int, version: int = 99) -> bytes:
    """An ApiVersions request of a version the broker cannot know, shaped like
    a flexible (v3+) one: header v2 + compact client software name/version."""
    body = compact_string("corelog-it") + compact_string("9.9.9") + uvarint(0)
    return request(API_VERSIONS, version, correlation_id, body, header_v2=True)


def parse_api_versions_v0(body: bytes) -> tuple[int, dict[int, tuple[int, int]]]:
    """-> (error_code, {api_key: (min, max)}); asserts the exact v0 layout."""
    r = Reader(body)
    err = r.i16()
    n = r.i32()
    assert 0 <= n < 1000, f"api count {n}"
    apis = {}
    for _ in range(n):
        k, lo, hi = r.i16(), r.i16(), r.i16()
        apis[k] = (lo, hi)
    assert r.remaining() == 0, f"{r.remaining()} trailing bytes after an ApiVersions v0 body"
    return err, apis


def metadata_v1(correlation_id: int, topics: list[str] | None) -> bytes:
    return request(API_METADATA, 1, correlation_id, array(None if topics is None else [string(t) for t in topics]))


def parse_metadata_v1(body: bytes) -> dict:
    """-> {"brokers": {id: (host, port)}, "controller_id": int,
           "topics": {name: {"error_code": int, "partitions": {index: (error_code, leader)}}}}"""
    r = Reader(body)
    brokers = {}
    for _ in range(r.i32()):
        node = r.i32(); host = r.string(); port = r.i32(); r.string()  # rack
        brokers[node] = (host, port)
    controller = r.i32()
    topics = {}
    for _ in range(r.i32()):
        err = r.i16(); name = r.string(); r.i8()  # is_internal
        parts = {}
        for _ in range(r.i32()):
            perr = r.i16(); idx = r.i32(); leader = r.i32()
            for _ in range(r.i32()): r.i32()  # replicas
            for _ in range(r.i32()): r.i32()  # isr
            parts[idx] = (perr, leader)
        topics[name] = {"error_code": err, "partitions": parts}
    assert r.remaining() == 0, f"{r.remaining()} trailing bytes after a Metadata v1 body"
    return {"brokers": brokers, "controller_id": controller, "topics": topics}


def produce_v3(correlation_id: int, topic: str, partition_batches: dict[int, bytes],
               acks: int = -1, timeout_ms: int = 10_000, transactional_id: str | None = None) -> bytes:
    parts = [i32(p) + kbytes(b) for p, b in partition_batches.items()]
    body = (string(transactional_id) + i16(acks) + i32(timeout_ms)
            + array([string(topic) + array(parts)]))
    return request(API_PRODUCE, 3, correlation_id, body)


def parse_produce_v3(body: bytes) -> dict[tuple[str, int], dict]:
    r = Reader(body)
    out = {}
    for _ in range(r.i32()):
        name = r.string()
        for _ in range(r.i32()):
            p = r.i32()
            out[(name, p)] = {"error_code": r.i16(), "base_offset": r.i64(), "log_append_time": r.i64()}
    r.i32()  # throttle_time_ms
    return out


def fetch_v4(correlation_id: int, topic: str, partition_offsets: dict[int, int], max_wait_ms: int = 100,
             min_bytes: int = 1, max_bytes: int = 50 * 1024 * 1024,
             partition_max_bytes: int = 10 * 1024 * 1024) -> bytes:
    parts = [i32(p) + i64(off) + i32(partition_max_bytes) for p, off in partition_offsets.items()]
    body = (i32(-1) + i32(max_wait_ms) + i32(min_bytes) + i32(max_bytes) + i8(0)
            + array([string(topic) + array(parts)]))
    return request(API_FETCH, 4, correlation_id, body)


def parse_fetch_v4(body: bytes) -> dict[tuple[str, int], dict]:
    r = Reader(body)
    r.i32()  # throttle_time_ms
    out = {}
    for _ in range(r.i32()):
        name = r.string()
        for _ in range(r.i32()):
            p = r.i32()
            err = r.i16()
            hwm = r.i64()
            lso = r.i64()
            n_aborted = r.i32()
            for _ in range(max(n_aborted, 0)):
                r.i64(); r.i64()
            records = r.kbytes()
            out[(name, p)] = {"error_code": err, "high_watermark": hwm, "last_stable_offset": lso,
                              "records": records}
    return out


# ---------------------------------------------------------------------------
# flexible versions (compact strings and arrays, tagged fields, header v2)
# ---------------------------------------------------------------------------
def tags() -> bytes:
    return uvarint(0)


def c_array(items: list[bytes] | None) -> bytes:
    return uvarint(0) if items is None else uvarint(len(items) + 1) + b"".join(items)


class Flex(Reader):
    """A reader of flexible-version bodies (compact strings, arrays, tagged fields)."""

    def c_string(self):
        n = self.uvarint() - 1
        return None if n < 0 else self.take(n).decode()

    def c_len(self) -> int:
        return self.uvarint() - 1

    def skip_tags(self):
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())

    def uuid(self) -> bytes:
        return self.take(16)

    def nullable_assignment(self) -> dict | None:
        """A heartbeat answer's nullable Assignment struct (ConsumerGroupHeartbeat,
        ShareGroupHeartbeat): topic id -> sorted partitions, or None."""
        if self.i8() != 1:
            return None
        parts = {}
        for _ in range(self.c_len()):
            tid = self.uuid()
            parts[tid] = sorted(self.i32() for _ in range(self.c_len()))
            self.skip_tags()
        self.skip_tags()
        return parts


def flex_roundtrip(bootstrap: str, api_key: int, version: int, body: bytes) -> Flex:
    _, resp = roundtrip(bootstrap, request(api_key, version, 77, body, header_v2=True))
    r = Flex(resp)
    r.skip_tags()  # response header v1
    return r


DESCRIBE_QUORUM = 55


def describe_quorum_leader(bootstrap: str, timeout: float = 5.0) -> int:
    """The metadata quorum's leader (the active controller) as broker `bootstrap` knows
    it, by DescribeQuorum v0 (Kafka's `kafka-metadata-quorum describe --status`);
    -1 if none."""
    return describe_quorum(bootstrap, timeout)[0]


def describe_quorum(bootstrap: str, timeout: float = 5.0) -> tuple[int, int]:
    """(leader, high watermark) of the metadata log, by DescribeQuorum v0: the high
    watermark counts the metadata log's committed entries. (-1, -1) on an error."""
    body = (c_array([compact_string("__cluster_metadata")
                     + c_array([i32(0) + tags()]) + tags()]) + tags())
    _, resp = roundtrip(bootstrap, request(DESCRIBE_QUORUM, 0, 78, body, header_v2=True),
                        timeout)
    r = Flex(resp)
    r.skip_tags()
    assert r.i16() == 0, "DescribeQuorum refused"
    assert r.c_len() == 1
    r.c_string()
    assert r.c_len() == 1
    r.i32()
    code = r.i16()
    leader = r.i32()
    r.i32()  # leader epoch
    high_watermark = r.i64()
    return (leader, high_watermark) if code == 0 else (-1, -1)


# ---------------------------------------------------------------------------------------
# share groups (KIP-932): ShareGroupHeartbeat v1, ShareFetch / ShareAcknowledge v1
# ---------------------------------------------------------------------------------------

SHARE_GROUP_HEARTBEAT, SHARE_FETCH, SHARE_ACKNOWLEDGE = 76, 78, 79


def share_heartbeat(bootstrap: str, group: str, member: str, epoch: int,
                    topics: list[str] | None = None, rack: str | None = None) -> dict:
    """One ShareGroupHeartbeat v1; returns the answer's fields."""
    body = (compact_string(group) + compact_string(member) + i32(epoch)
            + compact_string(rack)
            + c_array(None if topics is None else [compact_string(t) for t in topics])
            + tags())
    r = flex_roundtrip(bootstrap, SHARE_GROUP_HEARTBEAT, 1, body)
    out = {"throttle": r.i32(), "error": r.i16(), "message": r.c_string(), "member": r.c_string(),
           "epoch": r.i32(), "interval": r.i32(), "assignment": r.nullable_assignment()}
    r.skip_tags()
    return out


class ShareClient:
    """One share consumer's connection, speaking ShareFetch and ShareAcknowledge v1, or
    v2 (``version=2``: the acquire mode, and RENEW with ``renew``)."""

    def __init__(self, bootstrap: str, group: str, member: str):
        self.bootstrap, self.group, self.member = bootstrap, group, member
        self.sock = connect(bootstrap)
        self.correlation = 0

    def close(self):
        self.sock.close()

    def call(self, api: int, body: bytes, version: int = 1) -> Flex:
        self.correlation += 1
        self.sock.sendall(request(api, version, self.correlation, body, header_v2=True))
        _, resp = recv_response(self.sock)
        r = Flex(resp)
        r.skip_tags()
        return r

    @staticmethod
    def acks_of(acks: list[tuple[int, int, int]]) -> bytes:
        return c_array([i64(f) + i64(l) + c_array([i8(t)]) + tags() for f, l, t in acks])

    def fetch(self, epoch: int, tid: bytes, acks=(), max_records=100, max_wait_ms=0, *, version=1,
              renew=False, min_bytes=1, max_bytes=1 << 20, mode: int = 1) -> dict:
        """``mode`` (v2): the ShareAcquireMode, 1 record_limit (exact MaxRecords), 0
        batch_optimized (whole log batches; what every v1 request gets)."""
        part = i32(0) + self.acks_of(list(acks)) + tags()
        v2 = (i8(mode) + bytes([1 if renew else 0])) if version >= 2 else b""
        body = (compact_string(self.group) + compact_string(self.member) + i32(epoch)
                + i32(max_wait_ms) + i32(min_bytes) + i32(max_bytes) + i32(max_records) + i32(max_records)
                + v2 + c_array([tid + c_array([part]) + tags()]) + c_array([]) + tags())
        r = self.call(SHARE_FETCH, body, version)
        out = {"throttle": r.i32(), "error": r.i16(), "message": r.c_string(), "lock_ms": r.i32(),
               "partitions": {}}
        for _ in range(r.c_len()):
            t = r.uuid()
            for _ in range(r.c_len()):
                p = {"index": r.i32(), "error": r.i16(), "message": r.c_string(), "ack_error": r.i16(),
                     "ack_message": r.c_string()}
                p["leader"] = (r.i32(), r.i32())
                r.skip_tags()
                n = r.uvarint() - 1
                p["records"] = None if n < 0 else r.take(n)
                p["acquired"] = []
                for _ in range(r.c_len()):
                    p["acquired"].append((r.i64(), r.i64(), r.i16()))
                    r.skip_tags()
                r.skip_tags()
                out["partitions"][(t, p["index"])] = p
            r.skip_tags()
        return out

    def acknowledge(self, epoch: int, tid: bytes, acks, *, version=1, renew=False) -> dict:
        part = i32(0) + self.acks_of(list(acks)) + tags()
        v2 = bytes([1 if renew else 0]) if version >= 2 else b""
        body = (compact_string(self.group) + compact_string(self.member) + i32(epoch) + v2
                + c_array([tid + c_array([part]) + tags()]) + tags())
        r = self.call(SHARE_ACKNOWLEDGE, body, version)
        out = {"throttle": r.i32(), "error": r.i16(), "message": r.c_string(), "partitions": {}}
        if version >= 2:
            out["lock_ms"] = r.i32()
        for _ in range(r.c_len()):
            t = r.uuid()
            for _ in range(r.c_len()):
                index, err, msg = r.i32(), r.i16(), r.c_string()
                r.i32(), r.i32()
                r.skip_tags()
                r.skip_tags()
                out["partitions"][(t, index)] = (err, msg)
            r.skip_tags()
        return out


class LogDir(typing.NamedTuple):
    """One directory of a DescribeLogDirs v4 answer."""
    path: str
    error_code: int
    # partition -> (size, offset lag, is future)
    partitions: dict[int, tuple[int, int, bool]]
    total_bytes: int
    usable_bytes: int

    @property
    def sizes(self) -> dict[int, int]:
        return {p: s for p, (s, _, _) in self.partitions.items()}


def describe_log_dirs(bootstrap: str, topic: str, partitions: list[int]) -> list[LogDir]:
    """DescribeLogDirs v4 of ``topic``'s ``partitions`` on the broker at ``bootstrap``: one
    entry per log directory, in the broker's order."""
    body = c_array([compact_string(topic) + c_array([i32(p) for p in partitions]) + tags()]) + tags()
    r = flex_roundtrip(bootstrap, 35, 4, body)
    r.i32()
    assert r.i16() == 0, "top-level error"
    out = []
    for _ in range(r.c_len()):
        code, path = r.i16(), r.c_string()
        held: dict[int, tuple[int, int, bool]] = {}
        for _ in range(r.c_len()):
            assert r.c_string() == topic
            for _ in range(r.c_len()):
                index, size, lag, future = r.i32(), r.i64(), r.i64(), r.i8()
                r.skip_tags()
                held[index] = (size, lag, bool(future))
            r.skip_tags()
        total, usable = r.i64(), r.i64()
        r.skip_tags()
        out.append(LogDir(path, code, held, total, usable))
    return out


def alter_replica_log_dirs(bootstrap: str, moves: list[tuple[str, str, int]]) -> dict[tuple[str, int], int]:
    """AlterReplicaLogDirs v2: each (path, topic, partition) moved to that log directory;
    the error code of each (topic, partition)."""
    dirs: dict[str, dict[str, list[int]]] = {}
    for path, topic, p in moves:
        dirs.setdefault(path, {}).setdefault(topic, []).append(p)
    body = c_array([
        compact_string(path) + c_array([compact_string(t) + c_array([i32(p) for p in ps]) + tags()
                                        for t, ps in topics.items()]) + tags()
        for path, topics in dirs.items()]) + tags()
    r = flex_roundtrip(bootstrap, 34, 2, body)
    r.i32()
    out = {}
    for _ in range(r.c_len()):
        topic = r.c_string()
        for _ in range(r.c_len()):
            p, code = r.i32(), r.i16()
            r.skip_tags()
            out[(topic, p)] = code
        r.skip_tags()
    return out
