"""Idempotent producers end to end: librdkafka through a proxy that keeps cutting its
connections (and swallowing responses the broker already sent), retries answered with the
original offsets, fencing of stale epochs, producer state across restarts and crashes,
and kafka-python's idempotent producer as a second client library."""

from __future__ import annotations

import random
import socket
import struct
import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

import kwire as W
from launcher import free_port
from test_librdkafka_roundtrip import consumer_config, create_topic

API_INIT_PRODUCER_ID = 22
ERR_NONE = 0
ERR_OUT_OF_ORDER_SEQUENCE_NUMBER = 45
ERR_INVALID_PRODUCER_EPOCH = 47
ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
ERR_INVALID_REQUEST = 42
ERR_INVALID_RECORD = 87


# ---------------------------------------------------------------------------
# raw protocol helpers
# ---------------------------------------------------------------------------

def init_producer_id(bootstrap: str, transactional_id: str | None = None) -> tuple[int, int, int]:
    """InitProducerId v1 -> (error_code, producer_id, epoch)."""
    body = W.string(transactional_id) + W.i32(60_000)
    _, resp = W.roundtrip(bootstrap, W.request(API_INIT_PRODUCER_ID, 1, 7, body))
    r = W.Reader(resp)
    r.i32()  # throttle_time_ms
    return r.i16(), r.i64(), r.i16()


def idem_batch(pid: int, epoch: int, seq: int, count: int, tag: str = "m") -> bytes:
    now = int(time.time() * 1000)
    records = [(None, f"{tag}-{pid}-{seq + i}".encode(), [], now) for i in range(count)]
    return W.record_batch(records, now, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


class RawProducer:
    """One connection that sends hand-built Produce v3 requests."""

    def __init__(self, bootstrap: str, topic: str):
        self.sock = W.connect(bootstrap)
        self.topic = topic
        self.corr = 0

    def send(self, batch: bytes, partition: int = 0) -> tuple[int, int]:
        self.corr += 1
        self.sock.sendall(W.produce_v3(self.corr, self.topic, {partition: batch}))
        corr, body = W.recv_response(self.sock)
        assert corr == self.corr
        r = W.parse_produce_v3(body)[(self.topic, partition)]
        return r["error_code"], r["base_offset"]

    def close(self):
        self.sock.close()


def duplicates_answered(broker) -> int:
    """Retries the broker recognised, summed over shards (from /metrics)."""
    import urllib.request
    text = urllib.request.urlopen(f"http://{broker.http}/metrics", timeout=10).read().decode()
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines()
               if line.startswith("corelog_idempotent_duplicate_batches_total"))


def end_offset(bootstrap: str, topic: str, partition: int = 0) -> int:
    c = Consumer(consumer_config(bootstrap))
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
    finally:
        c.close()


# ---------------------------------------------------------------------------
# hand-sent batches
# ---------------------------------------------------------------------------

def test_init_producer_id_hands_out_fresh_ids(broker):
    seen = set()
    for _ in range(5):
        err, pid, epoch = init_producer_id(broker.bootstrap)
        assert err == ERR_NONE and pid >= 0 and epoch == 0
        seen.add(pid)
    assert len(seen) == 5, "every InitProducerId gets a new id"
    assert init_producer_id(broker.bootstrap, "")[0] == ERR_INVALID_REQUEST


def test_duplicate_batch_returns_the_original_offset(broker):
    topic = "idem-raw"
    create_topic(broker.bootstrap, topic, 1)
    _, pid, epoch = init_producer_id(broker.bootstrap)
    p = RawProducer(broker.bootstrap, topic)
    try:
        first = idem_batch(pid, epoch, 0, 3)
        assert p.send(first) == (ERR_NONE, 0)
        # A plain batch in between, then the second batch of the producer.
        assert p.send(W.record_batch([(None, b"plain", [], 1)], 1)) == (ERR_NONE, 3)
        second = idem_batch(pid, epoch, 3, 2)
        assert p.send(second) == (ERR_NONE, 4)
        # Exact retries of both, byte for byte: the original offsets, nothing written.
        assert p.send(first) == (ERR_NONE, 0)
        assert p.send(second) == (ERR_NONE, 4)
        assert end_offset(broker.bootstrap, topic) == 6
        assert duplicates_answered(broker) == 2
        # A gap is refused and leaves nothing behind.
        err, _ = p.send(idem_batch(pid, epoch, 9, 1))
        assert err == ERR_OUT_OF_ORDER_SEQUENCE_NUMBER
        assert end_offset(broker.bootstrap, topic) == 6
        # Two batches of one producer in one partition's records are refused.
        err, _ = p.send(idem_batch(pid, epoch, 5, 1) + idem_batch(pid, epoch, 6, 1))
        assert err == ERR_INVALID_RECORD
        assert p.send(idem_batch(pid, epoch, 5, 1)) == (ERR_NONE, 6)
    finally:
        p.close()


def test_transactional_control_and_unsequenced_batches_are_refused(broker):
    topic = "idem-txn"
    create_topic(broker.bootstrap, topic, 1)
    _, pid, epoch = init_producer_id(broker.bootstrap)
    p = RawProducer(broker.bootstrap, topic)
    try:
        now = int(time.time() * 1000)
        # A transactional batch without the request's transactional id; a control batch
        # (only the broker writes markers), transactional or not.
        for attributes, err in ((0x10, ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
                                (0x20, ERR_INVALID_RECORD), (0x30, ERR_INVALID_RECORD)):
            b = W.record_batch([(None, b"x", [], now)], now, producer_id=pid, producer_epoch=epoch,
                               base_sequence=0, attributes=attributes)
            assert p.send(b)[0] == err, f"attributes {attributes:#x}"
        # A producer's batch without a sequence (Kafka's LogValidator refuses it too).
        assert p.send(idem_batch(pid, epoch, -5, 1))[0] == ERR_INVALID_RECORD
        assert end_offset(broker.bootstrap, topic) == 0
        assert p.send(idem_batch(pid, epoch, 0, 1)) == (ERR_NONE, 0)
    finally:
        p.close()


def test_sequence_wraps_at_2_pow_31(broker):
    topic = "idem-wrap"
    create_topic(broker.bootstrap, topic, 1)
    _, pid, epoch = init_producer_id(broker.bootstrap)
    p = RawProducer(broker.bootstrap, topic)
    try:
        # Unknown to the partition: any first sequence is accepted (Kafka's rule).
        assert p.send(idem_batch(pid, epoch, 2**31 - 2, 4)) == (ERR_NONE, 0)  # ..MAX, 0, 1
        assert p.send(idem_batch(pid, epoch, 2, 1)) == (ERR_NONE, 4)
        assert p.send(idem_batch(pid, epoch, 2**31 - 2, 4)) == (ERR_NONE, 0)
        assert p.send(idem_batch(pid, epoch, 4, 1))[0] == ERR_OUT_OF_ORDER_SEQUENCE_NUMBER
    finally:
        p.close()


def test_stale_epoch_is_fenced(broker):
    topic = "idem-fence"
    create_topic(broker.bootstrap, topic, 1)
    _, pid, _ = init_producer_id(broker.bootstrap)
    p = RawProducer(broker.bootstrap, topic)
    try:
        assert p.send(idem_batch(pid, 0, 0, 1)) == (ERR_NONE, 0)
        assert p.send(idem_batch(pid, 1, 0, 1)) == (ERR_NONE, 1)  # the epoch moves on
        err, _ = p.send(idem_batch(pid, 0, 1, 1))
        assert err == ERR_INVALID_PRODUCER_EPOCH
        # A retry at the old epoch is fenced too, not answered as a duplicate.
        assert p.send(idem_batch(pid, 0, 0, 1))[0] == ERR_INVALID_PRODUCER_EPOCH
        # A newer epoch must restart its sequence at 0.
        assert p.send(idem_batch(pid, 2, 5, 1))[0] == ERR_OUT_OF_ORDER_SEQUENCE_NUMBER
        assert end_offset(broker.bootstrap, topic) == 2
    finally:
        p.close()


@pytest.mark.parametrize("how", ["clean", "kill"])
def test_idempotent_state_survives_a_restart(broker, how):
    topic = f"idem-restart-{how}"
    create_topic(broker.bootstrap, topic, 1)
    _, pid, epoch = init_producer_id(broker.bootstrap)
    p = RawProducer(broker.bootstrap, topic)
    batches = [idem_batch(pid, epoch, i * 2, 2) for i in range(8)]
    offsets = [p.send(b) for b in batches]
    assert offsets == [(ERR_NONE, i * 2) for i in range(8)]
    p.close()
    if how == "clean":
        broker.stop()
        broker.start()
    else:
        broker.kill()
        broker.start()
    p = RawProducer(broker.bootstrap, topic)
    try:
        # The last five batches are still known: retries get their offsets back.
        for i in range(3, 8):
            assert p.send(batches[i]) == (ERR_NONE, i * 2), f"retry of batch {i} after {how}"
        assert end_offset(broker.bootstrap, topic) == 16
        assert p.send(idem_batch(pid, epoch, 20, 1))[0] == ERR_OUT_OF_ORDER_SEQUENCE_NUMBER
        assert p.send(idem_batch(pid, epoch - 1, 16, 1))[0] == ERR_INVALID_PRODUCER_EPOCH
        assert p.send(idem_batch(pid, epoch, 16, 1)) == (ERR_NONE, 16)
    finally:
        p.close()
    # Ids handed out before the restart are never handed out again.
    _, fresh, _ = init_producer_id(broker.bootstrap)
    assert fresh > pid


# ---------------------------------------------------------------------------
# librdkafka through a connection-cutting proxy
# ---------------------------------------------------------------------------

class CuttingProxy:
    """A TCP proxy that forwards client connections to the broker and keeps breaking them:
    every `swallow_every`-th response chunk from the broker is dropped and both sockets
    closed (the request was served, the client never hears it: the case idempotence is
    for), and every connection is also cut at random times."""

    def __init__(self, listen_port: int, upstream: tuple[str, int], swallow_every: int = 7,
                 cut_interval_s: float = 0.7, seed: int = 11):
        self.upstream = upstream
        self.swallow_every = swallow_every
        self.cut_interval_s = cut_interval_s
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.pairs: list[tuple[socket.socket, socket.socket]] = []
        self.cutting = True
        self.stopped = threading.Event()
        self.swallowed = 0
        self.cuts = 0
        self.chunks = 0
        self.server = socket.create_server(("127.0.0.1", listen_port), reuse_port=False)
        self.server.settimeout(0.2)
        self.threads = [threading.Thread(target=self._accept, daemon=True),
                        threading.Thread(target=self._cutter, daemon=True)]
        for t in self.threads:
            t.start()

    def _accept(self):
        while not self.stopped.is_set():
            try:
                client, _ = self.server.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                up = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            for s in (client, up):
                s.settimeout(None)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                self.pairs.append((client, up))
            threading.Thread(target=self._pump, args=(client, up, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(up, client, True), daemon=True).start()

    def _close(self, a: socket.socket, b: socket.socket):
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        with self.lock:
            self.pairs = [p for p in self.pairs if p[0] is not a and p[0] is not b]

    def _pump(self, src: socket.socket, dst: socket.socket, from_broker: bool):
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not data:
                self._close(src, dst)
                return
            if from_broker and self.cutting:
                with self.lock:
                    self.chunks += 1
                    swallow = self.chunks % self.swallow_every == 0
                    if swallow:
                        self.swallowed += 1
                if swallow:
                    self._close(src, dst)
                    return
            try:
                dst.sendall(data)
            except OSError:
                self._close(src, dst)
                return

    def _cutter(self):
        while not self.stopped.wait(self.rng.uniform(0.3, self.cut_interval_s * 2)):
            if not self.cutting:
                continue
            with self.lock:
                victims = list(self.pairs)
            for a, b in victims:
                self.cuts += 1
                self._close(a, b)

    def stop_cutting(self):
        self.cutting = False

    def close(self):
        self.stopped.set()
        self.server.close()
        with self.lock:
            victims = list(self.pairs)
        for a, b in victims:
            self._close(a, b)


def test_librdkafka_idempotent_producer_through_cut_connections(broker_factory):
    """Every message exactly once, in order, no gaps, although the connection keeps being
    cut and responses to served requests are lost (so librdkafka retries batches the broker
    already wrote)."""
    proxy_port = free_port()
    broker = broker_factory.start(advertise=f"127.0.0.1:{proxy_port}")
    proxy = CuttingProxy(proxy_port, ("127.0.0.1", broker.port))
    topic = "idem-proxy"
    partitions = 3
    n = 6_000
    try:
        create_topic(f"127.0.0.1:{broker.port}", topic, partitions)
        errors: list[str] = []
        delivered: dict[int, list[tuple[int, int]]] = {p: [] for p in range(partitions)}
        lock = threading.Lock()

        def on_delivery(err, msg):
            with lock:
                if err is not None:
                    errors.append(str(err))
                else:
                    delivered[msg.partition()].append((msg.offset(), int(msg.value())))

        producer = Producer({
            "bootstrap.servers": f"127.0.0.1:{proxy_port}",
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 2,
            "batch.num.messages": 50,
            "max.in.flight.requests.per.connection": 5,
            "retry.backoff.ms": 20,
            "reconnect.backoff.ms": 10,
            "reconnect.backoff.max.ms": 100,
            "message.timeout.ms": 120_000,
            "socket.timeout.ms": 10_000,
        })
        for i in range(n):
            while True:
                try:
                    producer.produce(topic, value=str(i).encode(), partition=i % partitions,
                                     on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.05)
            if i % 200 == 0:
                producer.poll(0)
                time.sleep(0.02)  # spread the stream over the proxy's cuts
        assert producer.flush(180) == 0, "every message was delivered or failed"
        assert not errors, f"delivery errors: {errors[:5]}"
        assert proxy.swallowed >= 3, (
            f"the proxy must have lost responses to served requests (lost {proxy.swallowed}, "
            f"cut {proxy.cuts})")
        proxy.stop_cutting()
        dups = duplicates_answered(broker)
        print(f"proxy: {proxy.swallowed} responses swallowed, {proxy.cuts} cuts; broker: {dups} duplicates answered")
        assert dups > 0, "librdkafka retried batches the broker had written"

        # What the broker holds, read straight from it: each value exactly once, in the
        # order produced, offsets dense from 0.
        consumer = Consumer(consumer_config(f"127.0.0.1:{proxy_port}"))
        got: dict[int, list[int]] = {p: [] for p in range(partitions)}
        try:
            consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
            eof: set[int] = set()
            deadline = time.monotonic() + 60
            while len(eof) < partitions:
                assert time.monotonic() < deadline, {p: len(v) for p, v in got.items()}
                for msg in consumer.consume(num_messages=5_000, timeout=1.0):
                    if msg.error():
                        if msg.error().code() == KafkaError._PARTITION_EOF:
                            eof.add(msg.partition())
                            continue
                        raise AssertionError(str(msg.error()))
                    assert msg.offset() == len(got[msg.partition()]), "offsets are dense"
                    got[msg.partition()].append(int(msg.value()))
        finally:
            consumer.close()
        for p in range(partitions):
            want = list(range(p, n, partitions))
            have = got[p]
            dupes = len(have) - len(set(have))
            assert dupes == 0, f"partition {p}: {dupes} duplicated messages"
            assert have == want, f"partition {p}: {len(have)} messages, not the {len(want)} sent in order"
            # Delivery reports name the offsets where the messages really are.
            for offset, value in delivered[p]:
                assert have[offset] == value
    finally:
        proxy.close()


def test_kafka_python_idempotent_producer(broker):
    """A second client library: kafka-python's idempotent producer (InitProducerId, then
    sequenced batches)."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.structs import TopicPartition as KTP

    topic = "idem-kafka-python"
    create_topic(broker.bootstrap, topic, 2)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True,
                             acks="all", linger_ms=5)
    futures = [producer.send(topic, value=str(i).encode(), partition=i % 2) for i in range(500)]
    producer.flush(30)
    metas = [f.get(timeout=30) for f in futures]
    producer.close()
    assert sorted(m.offset for m in metas if m.partition == 0) == list(range(250))
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=5_000)
    consumer.assign([KTP(topic, 0), KTP(topic, 1)])
    consumer.seek_to_beginning()
    values = sorted(int(r.value) for r in consumer)
    consumer.close()
    assert values == list(range(500))
