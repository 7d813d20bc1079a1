"""Client quotas: produce/fetch byte rates per client id and user, set and read with
DescribeClientQuotas (48) and AlterClientQuotas (49), throttling the KIP-219 way.

The quota APIs are driven over the raw wire (kwire.py): kafka-python 3.0 has no
client-quota admin calls. Throughput is driven by librdkafka (confluent-kafka).
"""

from __future__ import annotations

import struct
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

import kwire
from kwire import array, i8, i16, i32, string
from launcher import Broker, free_port

API_DESCRIBE_CLIENT_QUOTAS = 48
API_ALTER_CLIENT_QUOTAS = 49
INVALID_REQUEST = 42
MIB = 1024 * 1024

# ---------------------------------------------------------------------------
# raw codec: DescribeClientQuotas v0 / AlterClientQuotas v0 (non-flexible)
# ---------------------------------------------------------------------------


def f64(v: float) -> bytes:
    return struct.pack(">d", v)


def alter_request(cid: int, entries: list[tuple[list[tuple[str, str | None]], list[tuple]]],
                  validate_only: bool = False) -> bytes:
    """entries: [([(entity_type, name|None)], [(key, value, remove)])]."""
    body = array([
        array([string(t) + string(n) for t, n in entity])
        + array([string(k) + f64(v) + i8(1 if rm else 0) for k, v, rm in ops])
        for entity, ops in entries
    ]) + i8(1 if validate_only else 0)
    return kwire.request(API_ALTER_CLIENT_QUOTAS, 0, cid, body)


def parse_alter(body: bytes) -> list[dict]:
    r = kwire.Reader(body)
    r.i32()  # throttle
    out = []
    for _ in range(r.i32()):
        err, msg = r.i16(), r.string()
        entity = [(r.string(), r.string()) for _ in range(r.i32())]
        out.append({"error_code": err, "error_message": msg, "entity": entity})
    assert r.remaining() == 0
    return out


def describe_request(cid: int, components: list[tuple[str, int, str | None]],
                     strict: bool = False) -> bytes:
    body = array([string(t) + i8(m) + string(n) for t, m, n in components]) + i8(1 if strict else 0)
    return kwire.request(API_DESCRIBE_CLIENT_QUOTAS, 0, cid, body)


def parse_describe(body: bytes) -> dict:
    r = kwire.Reader(body)
    r.i32()
    err, msg = r.i16(), r.string()
    n = r.i32()
    entries = None
    if n >= 0:
        entries = []
        for _ in range(n):
            entity = tuple(sorted((r.string(), r.string()) for _ in range(r.i32())))
            values = {}
            for _ in range(r.i32()):
                k = r.string()
                values[k] = struct.unpack(">d", r.take(8))[0]
            entries.append((entity, values))
    assert r.remaining() == 0
    return {"error_code": err, "error_message": msg, "entries": entries}


def alter(bootstrap, entries, validate_only=False):
    _, body = kwire.roundtrip(bootstrap, alter_request(7, entries, validate_only))
    return parse_alter(body)


def describe(bootstrap, components, strict=False):
    _, body = kwire.roundtrip(bootstrap, describe_request(8, components, strict))
    return parse_describe(body)


def set_quota(bootstrap, entity, key, value):
    res = alter(bootstrap, [(entity, [(key, value, False)])])
    assert [e["error_code"] for e in res] == [0], res


def produce_throttle_ms(sock, cid: int, topic: str, value_bytes: int, client_id: str) -> int:
    """One raw Produce v3 (acks=1) of one record; returns its throttle_time_ms."""
    batch = kwire.record_batch([(None, b"x" * value_bytes, [], int(time.time() * 1000))],
                               int(time.time() * 1000))
    parts = [i32(0) + kwire.kbytes(batch)]
    body = string(None) + i16(1) + i32(10_000) + array([string(topic) + array(parts)])
    sock.sendall(kwire.request(kwire.API_PRODUCE, 3, cid, body, client_id=client_id))
    _, resp = kwire.recv_response(sock, timeout=40)
    parsed = kwire.parse_produce_v3(resp)
    assert all(p["error_code"] == 0 for p in parsed.values()), parsed
    return struct.unpack(">i", resp[-4:])[0]


def create_topic(bootstrap: str, name: str, partitions: int = 1,
                 config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futs = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                         config=config or {})],
                               operation_timeout=10)
    for f in futs.values():
        f.result(timeout=15)


# ---------------------------------------------------------------------------
# (a) acceptance: a greedy producer is held to its quota; an unquoted one is not
# ---------------------------------------------------------------------------

def _produce_flat_out(bootstrap, client_id, topic, stop_at, acked, throttles, extra=None):
    """Produces 10 KiB messages as fast as librdkafka takes them until stop_at;
    appends (ack_time, bytes) to `acked` and throttle times (ms) to `throttles`."""
    conf = {
        "bootstrap.servers": bootstrap,
        "client.id": client_id,
        "acks": 1,
        "linger.ms": 5,
        "batch.size": 128 * 1024,
        "queue.buffering.max.messages": 2000,
        "throttle_cb": lambda ev: throttles.append(ev.throttle_time * 1000.0),
    }
    conf.update(extra or {})
    p = Producer(conf)
    payload = b"q" * 10240

    def on_delivery(err, msg):
        if err is None:
            acked.append((time.monotonic(), len(msg.value())))

    while time.monotonic() < stop_at:
        try:
            p.produce(topic, payload, on_delivery=on_delivery)
        except BufferError:
            p.poll(0.005)
            continue
        p.poll(0)
    p.purge(in_queue=True)
    p.flush(5)
    p.poll(0.1)


def _bytes_between(acked, t0, t1):
    return sum(n for t, n in list(acked) if t0 <= t < t1)


# The unquoted producer writes flat out (some GiB in 12 s): retention keeps its topic
# small so the test never brings the data directory near the broker's disk-full refusal.
BOUNDED_TOPIC = {"retention.bytes": str(256 * MIB), "segment.bytes": str(32 * MIB)}


def test_greedy_producer_held_to_quota_unquoted_producer_not_slowed(broker_factory):
    b = broker_factory.start(extra_args=["--retention-check-interval-ms", "200"])
    quota = 1 * MIB
    create_topic(b.bootstrap, "quota-greedy")
    create_topic(b.bootstrap, "quota-free", config=BOUNDED_TOPIC)
    set_quota(b.bootstrap, [("client-id", "greedy")], "producer_byte_rate", quota)

    start = time.monotonic()
    stop_at = start + 12.5
    greedy_acked, free_acked, greedy_thr, free_thr = [], [], [], []
    threads = [
        threading.Thread(target=_produce_flat_out,
                         args=(b.bootstrap, "greedy", "quota-greedy", stop_at, greedy_acked, greedy_thr)),
        threading.Thread(target=_produce_flat_out,
                         args=(b.bootstrap, "free", "quota-free", stop_at, free_acked, free_thr)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    b.assert_alive()

    # A 10 s window after a 2 s warm-up (the first window's burst is allowed).
    w0, w1 = start + 2.0, start + 12.0
    greedy_rate = _bytes_between(greedy_acked, w0, w1) / (w1 - w0)
    free_rate = _bytes_between(free_acked, w0, w1) / (w1 - w0)
    print(f"greedy {greedy_rate / MIB:.3f} MiB/s, free {free_rate / MIB:.3f} MiB/s, "
          f"greedy throttle events {len(greedy_thr)} (max {max(greedy_thr, default=0):.0f} ms)")
    assert 0.9 * quota <= greedy_rate <= 1.1 * quota, greedy_rate / MIB
    assert free_rate >= 5 * quota, free_rate / MIB
    assert greedy_thr and max(greedy_thr) > 0, "no throttle_time_ms reported to the greedy client"
    assert not free_thr, f"the unquoted client was throttled: {free_thr[:5]}"


# ---------------------------------------------------------------------------
# (b) fetch quota
# ---------------------------------------------------------------------------

def test_consumer_byte_rate_holds_a_consumer(broker_factory):
    b = broker_factory.start()
    quota = 512 * 1024
    create_topic(b.bootstrap, "quota-fetch")
    # Small batches: a fetch returns whole batches, so they set its granularity.
    p = Producer({"bootstrap.servers": b.bootstrap, "client.id": "loader", "acks": 1,
                  "linger.ms": 5, "batch.size": 32768})
    for _ in range(1000):  # ~10 MiB
        while True:
            try:
                p.produce("quota-fetch", b"f" * 10240)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    assert p.flush(30) == 0
    set_quota(b.bootstrap, [("client-id", "slowconsumer")], "consumer_byte_rate", quota)

    throttles = []
    c = Consumer({
        "bootstrap.servers": b.bootstrap, "client.id": "slowconsumer", "group.id": "g-quota",
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "fetch.max.bytes": 65536, "max.partition.fetch.bytes": 65536,
        "message.max.bytes": 65536,
        "queued.max.messages.kbytes": 256,
        "throttle_cb": lambda ev: throttles.append(ev.throttle_time * 1000.0),
    })
    c.subscribe(["quota-fetch"])
    received = []
    first = None
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is None or m.error():
            continue
        now = time.monotonic()
        first = first or now
        received.append((now, len(m.value())))
        if now - first > 7.5:
            break
    c.close()
    assert first is not None, "nothing consumed"
    w0, w1 = first + 2.5, first + 7.5
    rate = _bytes_between(received, w0, w1) / (w1 - w0)
    print(f"consumer {rate / 1024:.0f} KiB/s, throttle events {len(throttles)}")
    assert rate <= 1.15 * quota, rate
    assert rate >= 0.5 * quota, rate
    assert throttles and max(throttles) > 0


# ---------------------------------------------------------------------------
# (c) Describe/Alter round trip, precedence, remove, validate_only, persistence
# ---------------------------------------------------------------------------

def test_apis_are_advertised(broker):
    _, body = kwire.roundtrip(broker.bootstrap, kwire.api_versions_v0(1))
    err, apis = kwire.parse_api_versions_v0(body)
    assert err == 0
    assert apis[API_DESCRIBE_CLIENT_QUOTAS] == (0, 1)
    assert apis[API_ALTER_CLIENT_QUOTAS] == (0, 1)


def test_alter_describe_round_trip_and_persistence(broker_factory):
    b = broker_factory.start()
    bs = b.bootstrap
    assert describe(bs, [])["entries"] == []
    res = alter(bs, [
        ([("client-id", "app")], [("producer_byte_rate", 2048.0, False),
                                  ("consumer_byte_rate", 4096.0, False)]),
        ([("client-id", None)], [("producer_byte_rate", 1000.0, False)]),
        ([("user", None)], [("request_percentage", 12.5, False)]),
        ([("user", "ANONYMOUS"), ("client-id", "app")], [("producer_byte_rate", 512.0, False)]),
    ])
    assert [e["error_code"] for e in res] == [0, 0, 0, 0], res
    assert res[1]["entity"] == [("client-id", None)]
    assert all(e["error_message"] is None for e in res), "success must be a null message"
    assert describe(bs, [])["error_message"] is None

    # validate_only changes nothing
    res = alter(bs, [([("client-id", "ghost")], [("producer_byte_rate", 1.0, False)])],
                validate_only=True)
    assert res[0]["error_code"] == 0
    assert describe(bs, [("client-id", 0, "ghost")])["entries"] == []

    def entries(components, strict=False):
        d = describe(bs, components, strict)
        assert d["error_code"] == 0, d
        return dict(d["entries"])

    all_entries = entries([])
    assert all_entries[(("client-id", "app"),)] == {"producer_byte_rate": 2048.0,
                                                     "consumer_byte_rate": 4096.0}
    assert all_entries[(("client-id", None),)] == {"producer_byte_rate": 1000.0}
    assert all_entries[(("user", None),)] == {"request_percentage": 12.5}
    assert len(all_entries) == 4
    # exact, default, any; strict excludes entities with other types
    assert set(entries([("client-id", 0, "app")])) == {
        (("client-id", "app"),), (("client-id", "app"), ("user", "ANONYMOUS"))}
    assert set(entries([("client-id", 0, "app")], strict=True)) == {(("client-id", "app"),)}
    assert set(entries([("client-id", 1, None)])) == {(("client-id", None),)}
    assert len(entries([("client-id", 2, None)])) == 3
    assert set(entries([("user", 2, None)], strict=True)) == {(("user", None),)}
    assert entries([("ip", 2, None)]) == {}

    # remove one key; removing the last key removes the entity
    res = alter(bs, [([("client-id", "app")], [("consumer_byte_rate", 0.0, True)]),
                     ([("user", None)], [("request_percentage", 0.0, True)])])
    assert [e["error_code"] for e in res] == [0, 0]
    after = entries([])
    assert after[(("client-id", "app"),)] == {"producer_byte_rate": 2048.0}
    assert (("user", None),) not in after

    b.stop()
    b.start()
    assert entries([]) == after


def test_precedence_is_kafkas(broker_factory):
    """A tiny default client-id quota throttles everyone; a client-id override beats
    it; a user (ANONYMOUS) quota beats both client-id levels."""
    b = broker_factory.start()
    bs = b.bootstrap
    create_topic(bs, "quota-prec")
    set_quota(bs, [("client-id", None)], "producer_byte_rate", 1024)
    set_quota(bs, [("client-id", "vip")], "producer_byte_rate", 100 * MIB)
    with kwire.connect(bs) as s:
        assert produce_throttle_ms(s, 1, "quota-prec", 64 * 1024, "someone") > 1000
    with kwire.connect(bs) as s:
        assert produce_throttle_ms(s, 1, "quota-prec", 64 * 1024, "vip") == 0
    # default user beats client-id quotas: now "anyone" is bounded only by it
    set_quota(bs, [("user", None)], "producer_byte_rate", 100 * MIB)
    with kwire.connect(bs) as s:
        assert produce_throttle_ms(s, 1, "quota-prec", 64 * 1024, "anyone") == 0
    # ANONYMOUS + default client beats the default user: every client id on its own
    set_quota(bs, [("user", "ANONYMOUS"), ("client-id", None)], "producer_byte_rate", 2048)
    with kwire.connect(bs) as s:
        t = produce_throttle_ms(s, 1, "quota-prec", 64 * 1024, "third")
        assert t > 1000
        # The next request on a throttled connection is held: it is answered late.
        sent = time.monotonic()
        produce_throttle_ms(s, 2, "quota-prec", 10, "third")
        assert time.monotonic() - sent >= (t / 1000.0) * 0.8


# ---------------------------------------------------------------------------
# (d) hostile input
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("entity,ops,why", [
    ([], [("producer_byte_rate", 1.0, False)], "empty entity"),
    ([("group", "x")], [("producer_byte_rate", 1.0, False)], "unknown entity type"),
    ([("user", "a"), ("user", "b")], [("producer_byte_rate", 1.0, False)], "duplicate entity type"),
    ([("ip", None)], [("connection_creation_rate", 1.0, False)], "ip unsupported"),
    ([("client-id", "a")], [("bogus_rate", 1.0, False)], "unknown key"),
    ([("client-id", "a")], [("bogus_rate", 1.0, True)], "unknown key removed"),
    ([("client-id", "a")], [("producer_byte_rate", 1.0, False),
                            ("producer_byte_rate", 2.0, False)], "duplicate key"),
    ([("client-id", "a")], [("producer_byte_rate", 0.0, False)], "zero"),
    ([("client-id", "a")], [("producer_byte_rate", -5.0, False)], "negative"),
    ([("client-id", "a")], [("producer_byte_rate", 1.5, False)], "fractional byte rate"),
    ([("client-id", "a")], [("consumer_byte_rate", float("nan"), False)], "NaN"),
    ([("client-id", "a")], [("consumer_byte_rate", float("inf"), False)], "infinity"),
])
def test_bad_alter_entries_are_invalid_request(module_broker_factory, entity, ops, why):
    bs = _hostile_broker(module_broker_factory).bootstrap
    res = alter(bs, [(entity, ops), ([("client-id", "fine")], [("producer_byte_rate", 10.0, False)])])
    assert res[0]["error_code"] == INVALID_REQUEST, (why, res)
    assert res[0]["error_message"], why
    assert res[1]["error_code"] == 0, why  # the good entry in the same request still applies
    _hostile_broker(module_broker_factory).assert_alive()


def test_same_entity_twice_is_refused(module_broker_factory):
    bs = _hostile_broker(module_broker_factory).bootstrap
    e = [("client-id", "twice")]
    res = alter(bs, [(e, [("producer_byte_rate", 10.0, False)]),
                     (e, [("producer_byte_rate", 20.0, False)])])
    assert [r["error_code"] for r in res] == [INVALID_REQUEST, INVALID_REQUEST]
    assert describe(bs, [("client-id", 0, "twice")])["entries"] == []


@pytest.mark.parametrize("components,why", [
    ([("client-id", 0, None)], "exact with null match"),
    ([("client-id", 1, "x")], "default with a match"),
    ([("client-id", 7, None)], "unknown match type"),
    ([("client-id", 2, None), ("client-id", 0, "a")], "duplicate component"),
    ([("group", 2, None)], "unknown entity type"),
    ([("ip", 2, None), ("user", 2, None)], "ip combined with user"),
])
def test_bad_describe_filters_are_invalid_request(module_broker_factory, components, why):
    bs = _hostile_broker(module_broker_factory).bootstrap
    d = describe(bs, components)
    assert d["error_code"] == INVALID_REQUEST, (why, d)
    assert d["entries"] is None and d["error_message"], why


def test_truncated_quota_requests_close_only_that_connection(module_broker_factory):
    b = _hostile_broker(module_broker_factory)
    good = alter_request(1, [([("client-id", "a")], [("producer_byte_rate", 10.0, False)])])
    for api, frame in [(API_ALTER_CLIENT_QUOTAS, good),
                       (API_DESCRIBE_CLIENT_QUOTAS, describe_request(1, [("user", 2, None)]))]:
        payload = frame[4:]
        for cut in (12, len(payload) // 2, len(payload) - 1):
            body = payload[:cut]
            kwire.send_and_expect_close(b.bootstrap, i32(len(body)) + body)
        # an array count far beyond the bytes present
        hdr_len = 2 + 2 + 4 + 2 + len(kwire.CLIENT_ID)
        huge = payload[:hdr_len] + i32(0x7FFFFFF0)
        kwire.send_and_expect_close(b.bootstrap, i32(len(huge)) + huge)
    b.assert_alive()
    assert describe(b.bootstrap, [])["error_code"] == 0


_HOSTILE = {}


def _hostile_broker(factory):
    if "b" not in _HOSTILE or not _HOSTILE["b"].is_running():
        _HOSTILE["b"] = factory.start(name="hostile")
    return _HOSTILE["b"]


# ---------------------------------------------------------------------------
# cross-shard: one client id on connections spread over both shards
# ---------------------------------------------------------------------------

def test_client_spread_over_shards_is_held_overall(broker_factory):
    """Six connections with one client id (the kernel spreads them over the two
    shards with SO_REUSEPORT): their total is held to the quota, not quota × shards."""
    b = broker_factory.start(shards=2)
    quota = 256 * 1024
    create_topic(b.bootstrap, "quota-spread")
    set_quota(b.bootstrap, [("client-id", "spread")], "producer_byte_rate", quota)
    start = time.monotonic()
    stop_at = start + 8.0
    acked = []
    lock = threading.Lock()

    def worker(i):
        with kwire.connect(b.bootstrap) as s:
            cid = 0
            while time.monotonic() < stop_at:
                cid += 1
                produce_throttle_ms(s, cid, "quota-spread", 16 * 1024, "spread")
                with lock:
                    acked.append((time.monotonic(), 16 * 1024))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    w0, w1 = start + 3.0, start + 8.0
    rate = _bytes_between(acked, w0, w1) / (w1 - w0)
    import urllib.request
    text = urllib.request.urlopen(f"http://{b.http}/metrics", timeout=10).read().decode()
    shards_throttling = sorted(
        line.split('shard="')[1].split('"')[0] for line in text.splitlines()
        if line.startswith("corelog_quota_throttled_responses_total")
        and 'quota="produce"' in line and not line.endswith(" 0"))
    print(f"spread client: {rate / 1024:.0f} KiB/s over 6 connections; "
          f"shards throttling: {shards_throttling}")
    assert shards_throttling, "no throttle recorded in the metrics"
    assert rate <= 1.3 * quota, rate / 1024
    assert rate >= 0.5 * quota, rate / 1024


def test_flexible_v1_describe_and_alter(broker):
    """v1 of both APIs is flexible (compact strings, tagged fields, header v2)."""
    from kwire import compact_string, uvarint

    def compact_array(items):
        return uvarint(len(items) + 1) + b"".join(items)

    alter_body = compact_array([
        compact_array([compact_string("client-id") + compact_string("flex") + uvarint(0)])
        + compact_array([compact_string("producer_byte_rate") + f64(4096.0) + i8(0) + uvarint(0)])
        + uvarint(0)
    ]) + i8(0) + uvarint(0)
    _, resp = kwire.roundtrip(broker.bootstrap, kwire.request(
        API_ALTER_CLIENT_QUOTAS, 1, 3, alter_body, header_v2=True))
    r = kwire.Reader(resp)
    assert r.uvarint() == 0  # response header tagged fields
    r.i32()
    assert r.uvarint() == 2  # one entry
    assert r.i16() == 0

    describe_body = compact_array([
        compact_string("client-id") + i8(0) + compact_string("flex") + uvarint(0)
    ]) + i8(1) + uvarint(0)
    _, resp = kwire.roundtrip(broker.bootstrap, kwire.request(
        API_DESCRIBE_CLIENT_QUOTAS, 1, 4, describe_body, header_v2=True))
    r = kwire.Reader(resp)
    assert r.uvarint() == 0
    r.i32()
    assert r.i16() == 0
    assert r.uvarint() == 0  # null error message
    assert r.uvarint() == 2  # one entry
    assert r.uvarint() == 2  # one entity component
    n = r.uvarint() - 1
    assert r.take(n) == b"client-id"
    n = r.uvarint() - 1
    assert r.take(n) == b"flex"
    r.uvarint()
    assert r.uvarint() == 2  # one value
    n = r.uvarint() - 1
    assert r.take(n) == b"producer_byte_rate"
    assert struct.unpack(">d", r.take(8))[0] == 4096.0


def test_request_percentage_holds_a_busy_client(broker_factory):
    """request_percentage=1 (10 ms of a core per second) slows a client hammering
    Metadata; an unquoted client on the same broker is not held."""
    b = broker_factory.start()
    # Metadata for 50 partitions: enough work per request for the quota to bite.
    create_topic(b.bootstrap, "weight", 50)
    set_quota(b.bootstrap, [("client-id", "busy")], "request_percentage", 1.0)

    def hammer(client_id, seconds):
        done = 0
        with kwire.connect(b.bootstrap) as s:
            stop = time.monotonic() + seconds
            while time.monotonic() < stop:
                body = kwire.i32(-1)  # Metadata v1: all topics
                s.sendall(kwire.request(kwire.API_METADATA, 1, done, body, client_id=client_id))
                kwire.recv_response(s, timeout=40)
                done += 1
        return done

    hammer("busy", 1.5)  # its first window's allowance
    busy = hammer("busy", 3.0)
    free = hammer("free", 3.0)
    import urllib.request
    text = urllib.request.urlopen(f"http://{b.http}/metrics", timeout=10).read().decode()
    throttled = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                    if line.startswith("corelog_quota_throttled_responses_total")
                    and 'quota="request"' in line)
    print(f"metadata requests in 3 s: busy {busy}, free {free}; request throttles {throttled}")
    assert throttled > 0
    assert busy * 3 < free, (busy, free)


# ---------------------------------------------------------------------------
# (f) quotas by user: the authenticated principal, with Kafka's precedence
# ---------------------------------------------------------------------------

USERS_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_alice="alice-secret" user_bob="bob-secret";')


class UserQuotaBroker(Broker):
    """PLAINTEXT beside SASL_PLAINTEXT with PLAIN users alice and bob."""

    def __init__(self, workdir: Path):
        super().__init__(workdir)
        self.sasl_port = free_port()
        config = workdir / "users.toml"
        config.write_text('[listener.name.sasl_plaintext]\n'
                          '"sasl.enabled.mechanisms" = "PLAIN"\n'
                          f"'plain.sasl.jaas.config' = '{USERS_JAAS}'\n")
        self.extra_args += ["--listeners", f"PLAINTEXT://127.0.0.1:{self.port},"
                                           f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}",
                            "--config", str(config)]


def test_user_quotas_follow_the_authenticated_principal(tmp_path):
    """A producer_byte_rate for user alice holds alice's SASL connections whatever their
    client id, and not bob's; a (user alice, client id vip) quota beats alice's own;
    ANONYMOUS on the plaintext listener is a user like any other."""
    b = UserQuotaBroker(tmp_path / "user-quotas").start()
    try:
        _user_quotas(b)
    finally:
        b.stop()


def _user_quotas(b: UserQuotaBroker) -> None:
    sasl_port = b.sasl_port
    create_topic(b.bootstrap, "quota-user")
    set_quota(b.bootstrap, [("user", "alice")], "producer_byte_rate", 1024)
    # Far above what loopback carries: alice as vip is never throttled.
    set_quota(b.bootstrap, [("user", "alice"), ("client-id", "vip")], "producer_byte_rate",
              1 << 40)

    def throttled(user: str, client_id: str) -> float:
        """The largest throttle time (ms) `user` is told over 2 s of 10 KiB produces."""
        acked, throttles = [], []
        _produce_flat_out(f"127.0.0.1:{sasl_port}", client_id, "quota-user",
                          time.monotonic() + 2.0, acked, throttles,
                          extra={"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                 "sasl.username": user, "sasl.password": f"{user}-secret"})
        assert acked, f"{user} produced nothing"
        return max(throttles, default=0.0)

    assert throttled("alice", "any-client") > 1000
    assert throttled("bob", "any-client") == 0
    assert throttled("alice", "vip") == 0
    # The plaintext listener's clients are User:ANONYMOUS, unbounded here.
    with kwire.connect(b.bootstrap) as s:
        assert produce_throttle_ms(s, 1, "quota-user", 64 * 1024, "any-client") == 0
