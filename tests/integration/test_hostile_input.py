"""Hostile and malformed input on raw sockets.

All cases share one broker (module scope) so that the last test can check
that, after everything thrown at it, the broker still serves normal clients
and the data written before is intact. Every case also checks that the broker
process is still alive and healthy.

Frames are built by hand (kwire.py); the expected behaviour follows Apache
Kafka: undecodable / oversized / unknown-API requests close the connection,
ApiVersions of an unknown version is answered with UNSUPPORTED_VERSION (35) in
the v0 layout (KIP-511), per-partition problems are error codes.
"""

from __future__ import annotations

import os
import random
import socket
import struct
import time
import zlib

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import kwire as W

SEED_TOPIC = "hostile-seed"       # written by a normal client before the hostile cases
RAW_TOPIC = "hostile-raw"         # written by hand-built Produce requests
SEED_PARTITIONS = 2
SEED_MESSAGES = 500
MESSAGE_MAX_BYTES = 1048588
SOCKET_REQUEST_MAX_BYTES = 100 * 1024 * 1024

ERR_NONE = 0
ERR_OFFSET_OUT_OF_RANGE = 1
ERR_CORRUPT_MESSAGE = 2
ERR_UNKNOWN_TOPIC_OR_PARTITION = 3
ERR_MESSAGE_TOO_LARGE = 10
ERR_UNSUPPORTED_VERSION = 35

ERR_INVALID_RECORD = 87

# APIs the broker promises, and the versions our hand-built requests use.
PROMISED_APIS = [W.API_PRODUCE, W.API_FETCH, W.API_LIST_OFFSETS, W.API_METADATA, W.API_VERSIONS,
                 W.API_CREATE_TOPICS, W.API_DELETE_TOPICS, W.API_CREATE_PARTITIONS]
HAND_BUILT_VERSIONS = {W.API_PRODUCE: 3, W.API_FETCH: 4, W.API_METADATA: 1, W.API_VERSIONS: 0}


def _create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)],
                        operation_timeout=30)[topic].result(timeout=30)
    deadline = time.monotonic() + 30
    while True:
        t = admin.list_topics(topic=topic, timeout=10).topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) == partitions \
                and all(p.leader >= 0 for p in t.partitions.values()):
            return
        assert time.monotonic() < deadline, f"{topic} not ready: {t and t.partitions}"
        time.sleep(0.2)


def _produce_confluent(bootstrap: str, topic: str, messages: list[tuple[bytes, bytes]]) -> dict[int, list]:
    """-> {partition: [(offset, key, value)]} from delivery reports."""
    out: dict[int, list] = {}
    errors: list = []

    def dr(err, msg):
        if err is not None:
            errors.append(err)
        else:
            out.setdefault(msg.partition(), []).append((msg.offset(), msg.key(), msg.value()))

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                  "enable.idempotence": False, "message.timeout.ms": 30_000})
    for k, v in messages:
        p.produce(topic, key=k, value=v, on_delivery=dr)
    assert p.flush(60) == 0, "messages left undelivered"
    assert not errors, errors[:5]
    for lst in out.values():
        lst.sort()
    return out


def _consume_confluent(bootstrap: str, topic: str, counts: dict[int, int], timeout_s: float = 30.0) -> dict[int, list]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "corelog-it-hostile",
                  "enable.auto.commit": False, "enable.partition.eof": True,
                  "auto.offset.reset": "error", "check.crcs": True, "fetch.wait.max.ms": 100})
    got: dict[int, list] = {p: [] for p in counts}
    try:
        c.assign([TopicPartition(topic, p, 0) for p in counts])
        done = {p for p, n in counts.items() if n == 0}
        deadline = time.monotonic() + timeout_s
        while len(done) < len(counts):
            assert time.monotonic() < deadline, f"consume timed out: { {p: len(v) for p, v in got.items()} } of {counts}"
            for m in c.consume(1000, 0.5):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        if len(got[m.partition()]) >= counts[m.partition()]:
                            done.add(m.partition())
                        continue
                    raise AssertionError(f"consumer error on p{m.partition()}: {m.error()}")
                got[m.partition()].append((m.offset(), m.key(), m.value()))
                if len(got[m.partition()]) >= counts[m.partition()]:
                    done.add(m.partition())
    finally:
        c.close()
    return got


@pytest.fixture(scope="module")
def hostile(module_broker_factory):
    """The shared broker, a seed topic filled by a normal producer, and a raw topic."""
    b = module_broker_factory(name="hostile")
    _create_topic(b.bootstrap, SEED_TOPIC, SEED_PARTITIONS)
    _create_topic(b.bootstrap, RAW_TOPIC, 1)
    seed = _produce_confluent(
        b.bootstrap, SEED_TOPIC,
        [(f"seed-{i}".encode(), f"seed-value-{i}".encode() * (1 + i % 7)) for i in range(SEED_MESSAGES)])
    b.seed = seed
    b.raw_records = {}  # accepted through raw Produce: {offset: (key, value, headers, ts)}
    return b


@pytest.fixture
def alive(hostile):
    """Yields the shared broker and asserts afterwards that it survived the case."""
    hostile.assert_alive()
    yield hostile
    hostile.assert_alive()
    # and it still answers a well-formed request on a fresh connection
    cid, body = W.roundtrip(hostile.bootstrap, W.api_versions_v0(4242), timeout=10)
    assert cid == 4242
    assert W.parse_api_versions_v0(body)[0] == ERR_NONE


def _raw_produce(bootstrap: str, topic: str, batches: dict[int, bytes], cid: int = 11,
                 sock: socket.socket | None = None) -> dict:
    frame = W.produce_v3(cid, topic, batches)
    if sock is None:
        got_cid, body = W.roundtrip(bootstrap, frame, timeout=30)
    else:
        sock.sendall(frame)
        got_cid, body = W.recv_response(sock, timeout=30)
    assert got_cid == cid, f"correlation id {got_cid}, sent {cid}"
    return W.parse_produce_v3(body)


# ---------------------------------------------------------------------------
# (f) ApiVersions, incl. a version from the future (KIP-511)
# ---------------------------------------------------------------------------

def test_api_versions_v0_lists_required_apis(alive):
    cid, body = W.roundtrip(alive.bootstrap, W.api_versions_v0(1))
    assert cid == 1
    err, apis = W.parse_api_versions_v0(body)
    assert err == ERR_NONE
    for key in PROMISED_APIS:
        assert key in apis, f"api key {key} missing from ApiVersions: {sorted(apis)}"
        lo, hi = apis[key]
        assert 0 <= lo <= hi, f"api key {key}: advertised {lo}..{hi}"
    for key, need in HAND_BUILT_VERSIONS.items():
        lo, hi = apis[key]
        assert lo <= need <= hi, f"api key {key}: advertised {lo}..{hi}, the raw tests send v{need}"


def test_api_versions_unknown_version_gets_unsupported_version_v0(alive):
    cid, body = W.roundtrip(alive.bootstrap, W.api_versions_future(77, version=99))
    assert cid == 77
    err, apis = W.parse_api_versions_v0(body)  # asserts the exact v0 layout
    assert err == ERR_UNSUPPORTED_VERSION, f"error_code {err}, want 35 (UNSUPPORTED_VERSION)"
    assert W.API_VERSIONS in apis and W.API_PRODUCE in apis, f"api list in the fallback answer: {apis}"
    assert apis[W.API_VERSIONS][1] < 99


# ---------------------------------------------------------------------------
# (a)-(e) malformed framing: the broker must close the connection, not hang
# ---------------------------------------------------------------------------

def test_garbage_http_request_closes_connection(alive):
    W.send_and_expect_close(alive.bootstrap, b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")


def test_garbage_tls_client_hello_closes_connection(alive):
    hello = bytes.fromhex("16030100c4010000c00303") + random.Random(1).randbytes(190)
    W.send_and_expect_close(alive.bootstrap, hello)


def test_garbage_random_bytes_closes_connection(alive):
    rng = random.Random(20240229)
    for _ in range(5):
        data = rng.randbytes(4096)
        (size,) = struct.unpack(">i", data[:4])
        # make the size field hostile but decidable: negative or > socket.request.max.bytes
        if 0 <= size <= SOCKET_REQUEST_MAX_BYTES:
            data = b"\xde\xad\xbe\xef" + data[4:]
        W.send_and_expect_close(alive.bootstrap, data)


def test_garbage_inside_valid_frame_closes_connection(alive):
    # well-formed size, header claims a client_id of 30000 bytes in a 40-byte frame
    payload = W.i16(W.API_METADATA) + W.i16(1) + W.i32(5) + W.i16(30000) + b"x" * 30
    W.send_and_expect_close(alive.bootstrap, W.i32(len(payload)) + payload)
    # random bytes after a valid Metadata v1 header
    body = random.Random(7).randbytes(64)
    frame = W.request(W.API_METADATA, 1, 6, b"\x80\x00\x00\x01" + body)  # topics count negative
    W.send_and_expect_close(alive.bootstrap, frame)


def test_truncated_frame_then_close(alive):
    # size says 100, only 10 bytes arrive, then the client goes away
    with W.connect(alive.bootstrap) as s:
        s.sendall(W.i32(100) + b"\x00\x03\x00\x01\x00\x00\x00\x07\x00\x00")
        time.sleep(0.2)
    # and while such a half-frame is pending on one connection, others are served
    with W.connect(alive.bootstrap) as pending:
        pending.sendall(W.i32(100) + b"\x00\x12\x00\x00")
        cid, body = W.roundtrip(alive.bootstrap, W.api_versions_v0(31))
        assert cid == 31 and W.parse_api_versions_v0(body)[0] == ERR_NONE
        # half-closing (FIN) mid-frame: the broker must give up on the connection
        pending.shutdown(socket.SHUT_WR)
        W.wait_closed(pending, timeout=5)


@pytest.mark.parametrize("size", [0x7FFFFFFF, SOCKET_REQUEST_MAX_BYTES + 1, 0x10000000],
                         ids=["2GiB", "100MiB+1", "256MiB"])
def test_oversized_frame_closes_connection(alive, size):
    # only the header follows; the broker must refuse based on the size field alone
    header = W.i16(W.API_METADATA) + W.i16(1) + W.i32(1) + W.string("x")
    W.send_and_expect_close(alive.bootstrap, W.i32(size) + header)


@pytest.mark.parametrize("size", [-1, -100, -0x80000000], ids=["-1", "-100", "INT_MIN"])
def test_negative_frame_size_closes_connection(alive, size):
    W.send_and_expect_close(alive.bootstrap, W.i32(size) + b"\x00" * 16)


@pytest.mark.parametrize("size", [0, 3], ids=["empty", "shorter-than-header"])
def test_frame_too_short_for_header_closes_connection(alive, size):
    W.send_and_expect_close(alive.bootstrap, W.i32(size) + b"\x00" * size)


def test_unknown_api_key_closes_connection(alive):
    W.send_and_expect_close(alive.bootstrap, W.request(9999, 0, 1, b""))
    W.send_and_expect_close(alive.bootstrap, W.request(-1, 0, 2, b""))


def test_unsupported_version_of_known_api_closes_connection(alive):
    # Kafka closes the connection for unsupported versions of anything but ApiVersions
    W.send_and_expect_close(alive.bootstrap, W.request(W.API_METADATA, 32000, 3, W.array(None)))


def test_array_count_bomb_closes_connection(alive):
    # Metadata v1 whose topics array claims 2^31-1 entries, with nothing following
    frame = W.request(W.API_METADATA, 1, 9, W.i32(0x7FFFFFFF))
    W.send_and_expect_close(alive.bootstrap, frame)
    # same for Produce v3: topic array count bomb
    body = W.string(None) + W.i16(-1) + W.i32(1000) + W.i32(0x7FFFFFFF)
    W.send_and_expect_close(alive.bootstrap, W.request(W.API_PRODUCE, 3, 10, body))
    # and a records field claiming 2 GiB-1 bytes
    body = (W.string(None) + W.i16(-1) + W.i32(1000)
            + W.i32(1) + W.string(RAW_TOPIC) + W.i32(1) + W.i32(0) + W.i32(0x7FFFFFFF))
    W.send_and_expect_close(alive.bootstrap, W.request(W.API_PRODUCE, 3, 11, body))


# ---------------------------------------------------------------------------
# well-formed framing edge cases
# ---------------------------------------------------------------------------

def test_pipelined_requests_answered_in_order(alive):
    frames = b"".join(
        W.api_versions_v0(100 + i) if i % 2 == 0 else W.metadata_v1(100 + i, [SEED_TOPIC])
        for i in range(40))
    with W.connect(alive.bootstrap) as s:
        s.sendall(frames)
        cids = [W.recv_response(s, timeout=10)[0] for _ in range(40)]
    assert cids == list(range(100, 140))


def test_request_trickled_byte_by_byte(alive):
    frame = W.api_versions_v0(55)
    with W.connect(alive.bootstrap) as s:
        for i in range(len(frame)):
            s.send(frame[i:i + 1])
            time.sleep(0.005)
        cid, body = W.recv_response(s, timeout=10)
    assert cid == 55 and W.parse_api_versions_v0(body)[0] == ERR_NONE


# ---------------------------------------------------------------------------
# (g) Produce: valid batch, corrupt CRC, too large
# ---------------------------------------------------------------------------

RAW_TS = 1_600_000_000_000


def _raw_records(tag: str, n: int) -> list[tuple]:
    return [(f"{tag}-k{i}".encode(), f"{tag}-value-{i}".encode() + bytes([0, 255, i & 255]),
             [("h", bytes([i & 255, 0])), ("null", None)], RAW_TS + i) for i in range(n)]


def test_produce_valid_then_corrupt_then_too_large(alive):
    recs = _raw_records("a", 3)
    batch = W.record_batch(recs, base_timestamp=RAW_TS)

    with W.connect(alive.bootstrap) as s:
        # positive control: the hand-built batch is accepted
        res = _raw_produce(alive.bootstrap, RAW_TOPIC, {0: batch}, cid=21, sock=s)
        r = res[(RAW_TOPIC, 0)]
        assert r["error_code"] == ERR_NONE, f"valid hand-built batch rejected: {res}"
        first = r["base_offset"]
        alive.raw_records.update((first + i, rec) for i, rec in enumerate(recs))

        # flip one bit of the CRC -> CORRUPT_MESSAGE (2), nothing appended
        bad = bytearray(W.record_batch(_raw_records("corrupt-crc", 3), base_timestamp=RAW_TS))
        bad[W.CRC.start] ^= 0x01
        res = _raw_produce(alive.bootstrap, RAW_TOPIC, {0: bytes(bad)}, cid=22, sock=s)
        assert res[(RAW_TOPIC, 0)]["error_code"] == ERR_CORRUPT_MESSAGE, f"corrupted CRC: {res}"

        # a payload byte changed after the CRC was computed -> CORRUPT_MESSAGE (2)
        bad = bytearray(W.record_batch(_raw_records("corrupt-body", 3), base_timestamp=RAW_TS))
        bad[-5] ^= 0xFF
        res = _raw_produce(alive.bootstrap, RAW_TOPIC, {0: bytes(bad)}, cid=23, sock=s)
        assert res[(RAW_TOPIC, 0)]["error_code"] == ERR_CORRUPT_MESSAGE, f"corrupted body: {res}"

        # batchLength larger than the records field: Kafka answers CORRUPT_MESSAGE (2) or,
        # since it then sees no complete batch, INVALID_RECORD (87); either way nothing is appended
        bad = bytearray(W.record_batch(_raw_records("bad-len", 1), base_timestamp=RAW_TS))
        bad[W.BATCH_LENGTH] = W.i32(len(bad) * 4)
        res = _raw_produce(alive.bootstrap, RAW_TOPIC, {0: bytes(bad)}, cid=24, sock=s)
        assert res[(RAW_TOPIC, 0)]["error_code"] in (ERR_CORRUPT_MESSAGE, ERR_INVALID_RECORD), (
            f"batchLength overrun: {res}")

        # batch > message.max.bytes (1048588) -> MESSAGE_TOO_LARGE (10)
        big = W.record_batch([(b"big", os.urandom(MESSAGE_MAX_BYTES + 1000), [], RAW_TS)], base_timestamp=RAW_TS)
        assert len(big) > MESSAGE_MAX_BYTES
        res = _raw_produce(alive.bootstrap, RAW_TOPIC, {0: big}, cid=25, sock=s)
        assert res[(RAW_TOPIC, 0)]["error_code"] == ERR_MESSAGE_TOO_LARGE, (
            f"{len(big)}-byte batch: {res} (want 10 MESSAGE_TOO_LARGE)")

        # the connection survives per-partition errors; the next valid batch gets the next offset
        recs2 = _raw_records("b", 2)
        res = _raw_produce(alive.bootstrap, RAW_TOPIC, {0: W.record_batch(recs2, base_timestamp=RAW_TS)},
                           cid=26, sock=s)
        r = res[(RAW_TOPIC, 0)]
        assert r["error_code"] == ERR_NONE and r["base_offset"] == first + len(recs), (
            f"after rejected batches: {res}; want base_offset {first + len(recs)}")
        alive.raw_records.update((r["base_offset"] + i, rec) for i, rec in enumerate(recs2))

    # read back by hand-built Fetch v4: only the accepted batches, intact
    cid, body = W.roundtrip(alive.bootstrap, W.fetch_v4(27, RAW_TOPIC, {0: 0}))
    part = W.parse_fetch_v4(body)[(RAW_TOPIC, 0)]
    assert part["error_code"] == ERR_NONE, part
    assert part["high_watermark"] == len(alive.raw_records)
    batches = W.decode_batches(part["records"] or b"")
    assert all(b["crc_ok"] for b in batches), "broker returned a batch whose CRC does not verify"
    fetched = [(r["offset"], r["key"], r["value"], r["headers"], r["timestamp"])
               for b in batches for r in b["records"]]
    assert fetched == [(o, *rec) for o, rec in sorted(alive.raw_records.items())]


def _raw_hwm(bootstrap: str) -> int:
    cid, body = W.roundtrip(bootstrap, W.fetch_v4(90, RAW_TOPIC, {0: 0}, max_wait_ms=0, partition_max_bytes=1))
    return W.parse_fetch_v4(body)[(RAW_TOPIC, 0)]["high_watermark"]


def _batch_with_raw_records(raw_records: bytes, count: int) -> bytes:
    """A batch header claiming ``count`` records followed by arbitrary record bytes, valid CRC."""
    b = bytearray(W.record_batch(_raw_records("x", 1), base_timestamp=RAW_TS))
    b = b[:W.BATCH_HEADER_LEN] + raw_records
    b[W.BATCH_LENGTH] = W.i32(len(b) - W.LOG_OVERHEAD)
    b[W.LAST_OFFSET_DELTA] = W.i32(count - 1)
    b[W.RECORD_COUNT] = W.i32(count)
    # The CRC recomputed, so that only the structural damage remains.
    return W.with_crc(b)


def _record_body(tail: bytes) -> bytes:
    """attributes, timestampDelta 0, offsetDelta 0, key null, value 'v', then ``tail``."""
    return W.i8(0) + W.varint(0) + W.varint(0) + W.varint(-1) + W.varint(1) + b"v" + tail


# Batches with a valid CRC whose structure is wrong. Kafka answers CORRUPT_MESSAGE (2)
# or INVALID_RECORD (87) depending on where it notices; nothing may be appended.
MALFORMED_BATCHES = {
    "count-larger-than-records": lambda: _batch_with_raw_records(
        W.varint(len(_record_body(W.varint(0)))) + _record_body(W.varint(0)), 5),
    "header-count-bomb": lambda: _batch_with_raw_records(
        W.varint(len(_record_body(W.varint(0x7FFFFFFF)))) + _record_body(W.varint(0x7FFFFFFF)), 1),
    "record-length-bomb": lambda: _batch_with_raw_records(W.varint(0x7FFFFFFF) + _record_body(W.varint(0)), 1),
    "negative-record-length": lambda: _batch_with_raw_records(W.varint(-5) + _record_body(W.varint(0)), 1),
    "key-length-beyond-record": lambda: _batch_with_raw_records(
        W.varint(8) + W.i8(0) + W.varint(0) + W.varint(0) + W.varint(1000) + b"abc", 1),
    "trailing-bytes-after-records": lambda: _batch_with_raw_records(
        W.varint(len(_record_body(W.varint(0)))) + _record_body(W.varint(0)) + b"\x00\x00\x00", 1),
    "record-count-zero": lambda: _batch_with_raw_records(b"", 0),
    "batch-length-too-small": lambda: bytes(W.record_batch(_raw_records("s", 1), RAW_TS)[:W.BATCH_LENGTH.start])
    + W.i32(10) + bytes(W.record_batch(_raw_records("s", 1), RAW_TS)[W.BATCH_LENGTH.stop:]),
    "only-a-partial-header": lambda: bytes(W.record_batch(_raw_records("p", 1), RAW_TS)[:30]),
}


@pytest.mark.parametrize("case", sorted(MALFORMED_BATCHES))
def test_produce_malformed_batch_with_valid_crc(alive, case):
    before = _raw_hwm(alive.bootstrap)
    res = _raw_produce(alive.bootstrap, RAW_TOPIC, {0: MALFORMED_BATCHES[case]()}, cid=30)
    assert res[(RAW_TOPIC, 0)]["error_code"] in (ERR_CORRUPT_MESSAGE, ERR_INVALID_RECORD), f"{case}: {res}"
    assert _raw_hwm(alive.bootstrap) == before, f"{case}: the log grew"


def test_produce_two_batches_in_one_partition_is_invalid_record(alive):
    # Produce v3+ must carry exactly one batch per partition (Kafka: INVALID_RECORD, 87)
    before = _raw_hwm(alive.bootstrap)
    two = (W.record_batch(_raw_records("two-a", 1), RAW_TS) + W.record_batch(_raw_records("two-b", 1), RAW_TS))
    res = _raw_produce(alive.bootstrap, RAW_TOPIC, {0: two}, cid=32)
    r = res[(RAW_TOPIC, 0)]
    if r["error_code"] == ERR_NONE:  # keep the bookkeeping right for the later tests
        alive.raw_records.update({r["base_offset"]: _raw_records("two-a", 1)[0],
                                  r["base_offset"] + 1: _raw_records("two-b", 1)[0]})
    assert r["error_code"] == ERR_INVALID_RECORD, res
    assert _raw_hwm(alive.bootstrap) == before


def test_produce_empty_records_is_invalid_record(alive):
    # Produce v3+ must carry at least one batch per partition (Kafka: INVALID_RECORD, 87)
    before = _raw_hwm(alive.bootstrap)
    res = _raw_produce(alive.bootstrap, RAW_TOPIC, {0: b""}, cid=33)
    assert res[(RAW_TOPIC, 0)]["error_code"] == ERR_INVALID_RECORD, res
    assert _raw_hwm(alive.bootstrap) == before


def test_produce_magic1_message_set_is_invalid_record(alive):
    # a legacy magic-1 message set in Produce v3 (Kafka: INVALID_RECORD, 87 -- see
    # ProduceRequest.validateRecords: v3+ carries exactly one magic-2 batch per partition)
    before = _raw_hwm(alive.bootstrap)
    # (longer than a v2 batch header, so the broker cannot reject it for length alone)
    inner = W.i8(1) + W.i8(0) + W.i64(RAW_TS) + W.kbytes(b"k") + W.kbytes(b"legacy" * 20)
    msg = W.u32(zlib.crc32(inner)) + inner
    legacy = W.i64(0) + W.i32(len(msg)) + msg
    res = _raw_produce(alive.bootstrap, RAW_TOPIC, {0: legacy}, cid=34)
    assert res[(RAW_TOPIC, 0)]["error_code"] == ERR_INVALID_RECORD, res
    assert _raw_hwm(alive.bootstrap) == before


def test_produce_acks0_sends_no_response(alive):
    # acks=0: no response at all; the next request's response must be the next thing on the wire
    recs = _raw_records("acks0", 2)
    off = _raw_hwm(alive.bootstrap)
    with W.connect(alive.bootstrap) as s:
        s.sendall(W.produce_v3(35, RAW_TOPIC, {0: W.record_batch(recs, RAW_TS)}, acks=0))
        s.sendall(W.api_versions_v0(36))
        cid, body = W.recv_response(s, timeout=10)
        assert cid == 36, f"got a response with correlation id {cid} (35 was the acks=0 produce)"
    deadline = time.monotonic() + 10
    while _raw_hwm(alive.bootstrap) < off + 2:
        assert time.monotonic() < deadline, "acks=0 produce never appended"
        time.sleep(0.1)
    assert _raw_hwm(alive.bootstrap) == off + 2
    alive.raw_records.update((off + i, rec) for i, rec in enumerate(recs))


def test_produce_unknown_partition(alive):
    batch = W.record_batch(_raw_records("nopart", 1), base_timestamp=RAW_TS)
    res = _raw_produce(alive.bootstrap, RAW_TOPIC, {7: batch}, cid=41)
    assert res[(RAW_TOPIC, 7)]["error_code"] == ERR_UNKNOWN_TOPIC_OR_PARTITION, res


# ---------------------------------------------------------------------------
# (h) Fetch out of range, and long-poll behaviour
# ---------------------------------------------------------------------------

def test_fetch_out_of_range(alive):
    counts = {p: len(v) for p, v in alive.seed.items()}
    hwm = counts[0]
    for off in (hwm + 1, 10**12, -5):
        cid, body = W.roundtrip(alive.bootstrap, W.fetch_v4(51, SEED_TOPIC, {0: off}))
        part = W.parse_fetch_v4(body)[(SEED_TOPIC, 0)]
        assert part["error_code"] == ERR_OFFSET_OUT_OF_RANGE, f"fetch at offset {off} (hwm {hwm}): {part}"
        assert not part["records"], part


def test_fetch_out_of_range_librdkafka(alive):
    hwm = len(alive.seed[0])
    c = Consumer({"bootstrap.servers": alive.bootstrap, "group.id": "corelog-it-oor",
                  "enable.auto.commit": False, "auto.offset.reset": "error"})
    try:
        c.assign([TopicPartition(SEED_TOPIC, 0, hwm + 1000)])
        deadline = time.monotonic() + 20
        err = None
        while err is None and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None:
                assert m.error() is not None, f"got a message at offset {m.offset()} beyond the log end"
                err = m.error()
        assert err is not None, "no error for an out-of-range fetch"
        assert err.code() == KafkaError._AUTO_OFFSET_RESET and "out of range" in err.str().lower(), err
    finally:
        c.close()


def test_fetch_at_log_end_long_polls(alive):
    hwm = len(alive.seed[1])
    t0 = time.monotonic()
    cid, body = W.roundtrip(alive.bootstrap, W.fetch_v4(61, SEED_TOPIC, {1: hwm}, max_wait_ms=1000), timeout=15)
    took = time.monotonic() - t0
    part = W.parse_fetch_v4(body)[(SEED_TOPIC, 1)]
    assert part["error_code"] == ERR_NONE and not part["records"], part
    assert part["high_watermark"] == hwm
    assert 0.8 <= took <= 5.0, f"fetch at log end with max_wait 1000ms returned after {took:.2f}s"


def test_long_poll_fetch_wakes_on_produce(alive):
    off = _raw_hwm(alive.bootstrap)
    with W.connect(alive.bootstrap) as s:
        s.sendall(W.fetch_v4(71, RAW_TOPIC, {0: off}, max_wait_ms=10_000))
        time.sleep(0.3)
        recs = _raw_records("wake", 1)
        t0 = time.monotonic()
        res = _raw_produce(alive.bootstrap, RAW_TOPIC, {0: W.record_batch(recs, base_timestamp=RAW_TS)}, cid=72)
        r = res[(RAW_TOPIC, 0)]
        assert r["error_code"] == ERR_NONE and r["base_offset"] == off, res
        alive.raw_records.update((off + i, rec) for i, rec in enumerate(recs))
        cid, body = W.recv_response(s, timeout=15)
        took = time.monotonic() - t0
    part = W.parse_fetch_v4(body)[(RAW_TOPIC, 0)]
    got = [r["key"] for b in W.decode_batches(part["records"] or b"") for r in b["records"]]
    assert part["error_code"] == ERR_NONE and got == [recs[0][0]], part
    assert took < 3.0, f"waiting fetch answered {took:.2f}s after the produce (max_wait was 10s)"


# ---------------------------------------------------------------------------
# (i) unknown topic with auto-create disabled (separate broker)
# ---------------------------------------------------------------------------

def test_produce_unknown_topic_without_auto_create(module_broker_factory):
    b = module_broker_factory(extra_args=["--auto-create-topics", "false"], name="no-autocreate")
    batch = W.record_batch(_raw_records("nope", 1), base_timestamp=RAW_TS)
    res = _raw_produce(b.bootstrap, "no-such-topic", {0: batch}, cid=81)
    assert res[("no-such-topic", 0)]["error_code"] == ERR_UNKNOWN_TOPIC_OR_PARTITION, res
    # and it was not created as a side effect
    cid, body = W.roundtrip(b.bootstrap, W.metadata_v1(82, ["no-such-topic"]))
    topics = {n: t["error_code"] for n, t in W.parse_metadata_v1(body)["topics"].items()}
    assert topics.get("no-such-topic") == ERR_UNKNOWN_TOPIC_OR_PARTITION, topics
    b.assert_alive()


# ---------------------------------------------------------------------------
# after everything: normal clients still work, earlier data intact
# ---------------------------------------------------------------------------

# Strings a flexible request may carry (varint lengths) but a __consumer_offsets record
# cannot (int16 lengths): once, a 40,000-byte group id in OffsetCommit v8 stopped the
# broker at the record's encoding.
LONGER_THAN_A_RECORD_STRING = 40_000
ERR_INVALID_GROUP_ID = 24
ERR_INVALID_REQUEST = 42
API_OFFSET_COMMIT = 8
API_JOIN_GROUP = 11


def _offset_commit_v8(bootstrap: str, group: str, topic: str) -> list[int]:
    """The error codes of a simple (generation -1) OffsetCommit v8 of partition 0."""
    part = W.i32(0) + W.i64(5) + W.i32(-1) + W.compact_string(None) + W.tags()
    body = (W.compact_string(group) + W.i32(-1) + W.compact_string("") +
            W.compact_string(None) + W.c_array([W.compact_string(topic) + W.c_array([part]) +
                                                W.tags()]) + W.tags())
    r = W.flex_roundtrip(bootstrap, API_OFFSET_COMMIT, 8, body)
    r.i32()  # throttle_time_ms
    codes = []
    for _ in range(r.c_len()):
        r.c_string()
        for _ in range(r.c_len()):
            r.i32()
            codes.append(r.i16())
            r.skip_tags()
        r.skip_tags()
    return codes


def test_strings_too_long_for_group_records_are_refused(alive):
    bootstrap = alive.bootstrap
    long = "g" * LONGER_THAN_A_RECORD_STRING
    assert _offset_commit_v8(bootstrap, long, RAW_TOPIC) == [ERR_INVALID_GROUP_ID]
    codes = _offset_commit_v8(bootstrap, "hostile-group", "t" * LONGER_THAN_A_RECORD_STRING)
    assert codes and all(c in (ERR_INVALID_REQUEST, ERR_UNKNOWN_TOPIC_OR_PARTITION)
                         for c in codes), codes
    # JoinGroup v6 with a static member id (group.instance.id) no record can hold.
    protocol = W.compact_string("range") + W.uvarint(1) + W.tags()  # empty metadata
    body = (W.compact_string("hostile-group") + W.i32(10_000) + W.i32(10_000) +
            W.compact_string("") + W.compact_string(long) + W.compact_string("consumer") +
            W.c_array([protocol]) + W.tags())
    r = W.flex_roundtrip(bootstrap, API_JOIN_GROUP, 6, body)
    r.i32()  # throttle_time_ms
    assert r.i16() == ERR_INVALID_REQUEST
    # The group and the coordinator are untouched: a normal commit still works.
    assert _offset_commit_v8(bootstrap, "hostile-group", RAW_TOPIC) == [ERR_NONE]


def test_last_broker_still_serves_and_data_intact(hostile):
    """Must stay the last test of this module."""
    hostile.assert_alive()
    # seed data written before the hostile cases
    counts = {p: len(v) for p, v in hostile.seed.items()}
    got = _consume_confluent(hostile.bootstrap, SEED_TOPIC, counts)
    assert got == hostile.seed
    # raw-produced records (if that test ran) are readable by librdkafka too
    hwm = _raw_hwm(hostile.bootstrap)
    raw = {o: (k, v) for o, k, v in _consume_confluent(hostile.bootstrap, RAW_TOPIC, {0: hwm})[0]}
    assert sorted(raw) == list(range(hwm)), "raw topic offsets not dense"
    for o, (k, v, _h, _ts) in sorted(hostile.raw_records.items()):
        assert raw[o] == (k, v), f"raw topic offset {o}"
    # a new round trip works
    new = _produce_confluent(hostile.bootstrap, SEED_TOPIC,
                             [(f"after-{i}".encode(), f"after-value-{i}".encode()) for i in range(200)])
    total = {p: counts.get(p, 0) + len(new.get(p, [])) for p in range(SEED_PARTITIONS)}
    got = _consume_confluent(hostile.bootstrap, SEED_TOPIC, total)
    for p in range(SEED_PARTITIONS):
        assert got[p] == hostile.seed.get(p, []) + new.get(p, []), f"partition {p}"
