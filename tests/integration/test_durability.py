"""Crash consistency and restarts: SIGKILL in the middle of a produce stream,
concurrent producers, and restarting with a different shard count."""

from __future__ import annotations

import random
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition

from test_librdkafka_roundtrip import (
    check_watermarks, consume_all, consumer_config, create_topic, make_message, norm_headers,
    produce_all, verify,
)


def test_sigkill_during_produce_keeps_every_acked_message(broker):
    """Every message acknowledged (acks=all) before a SIGKILL is there after the restart,
    at the offset the broker reported, and each partition is a dense, readable log."""
    topic = "it-crash"
    partitions = 4
    create_topic(broker.bootstrap, topic, partitions)

    rng = random.Random(5)
    acked: dict[int, dict[int, tuple]] = {p: {} for p in range(partitions)}
    failed = 0
    stop = threading.Event()
    lock = threading.Lock()
    sent: dict[bytes, tuple] = {}

    def on_delivery(err, msg):
        nonlocal failed
        with lock:
            if err is not None:
                failed += 1
                return
            k, v, h, ts = sent[msg.key()]
            assert msg.offset() not in acked[msg.partition()], "offset acknowledged twice"
            acked[msg.partition()][msg.offset()] = (k, v, norm_headers(h), ts)

    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 2,
                         "batch.size": 64 * 1024, "enable.idempotence": False, "retries": 0,
                         "message.timeout.ms": 5_000, "socket.timeout.ms": 3_000,
                         "queue.buffering.max.messages": 100_000})

    def produce_loop():
        i = 0
        while not stop.is_set():
            key, value, headers, ts = make_message(i, rng)
            with lock:
                sent[key] = (key, value, headers, ts)
            try:
                producer.produce(topic, key=key, value=value, headers=headers, timestamp=ts,
                                 on_delivery=on_delivery)
            except BufferError:
                producer.poll(0.01)
                continue
            i += 1
            if i % 200 == 0:
                producer.poll(0)
                time.sleep(0.001)

    t = threading.Thread(target=produce_loop, daemon=True)
    t.start()
    deadline = time.monotonic() + 20
    while sum(len(a) for a in acked.values()) < 20_000:   # mid-stream, with data in flight
        assert time.monotonic() < deadline, "producer made no progress"
        producer.poll(0.05)
    broker.kill()
    stop.set()
    t.join(10)
    producer.flush(15)  # the rest fails (message.timeout.ms) or was acked just before the kill

    n_acked = sum(len(a) for a in acked.values())
    broker.restart()

    # every partition: dense from 0, and every acked record at its acked offset
    consumer_counts = {}
    c = Consumer(consumer_config(broker.bootstrap))
    try:
        for p in range(partitions):
            low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=15, cached=False)
            assert low == 0, f"partition {p}: low watermark {low}"
            top_acked = max(acked[p], default=-1)
            assert high >= top_acked + 1, (
                f"partition {p}: high watermark {high} after restart, but offset {top_acked} was acked")
            consumer_counts[p] = high
    finally:
        c.close()
    got = consume_all(broker.bootstrap, topic, consumer_counts)
    for p in range(partitions):
        offsets = [r[0] for r in got[p]]
        assert offsets == list(range(consumer_counts[p])), f"partition {p}: offsets not dense after recovery"
        by_offset = {r[0]: r[1:] for r in got[p]}
        for off, want in acked[p].items():
            assert by_offset.get(off) == want, (
                f"partition {p} offset {off}: acked {want[0]!r} but after recovery found "
                f"{by_offset.get(off, ('<missing>',))[0]!r}")
        # records beyond the acked ones must still be records we sent (no garbage)
        for off, (k, v, h, ts) in by_offset.items():
            assert k in sent and sent[k][1] == v, f"partition {p} offset {off}: unknown record {k!r}"
    print(f"acked before SIGKILL: {n_acked}, failed: {failed}, after recovery: {consumer_counts}")

    # and the recovered log accepts new appends right after its end
    new_offsets: dict[int, list] = {p: [] for p in range(partitions)}
    p2 = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "enable.idempotence": False})
    for i in range(40):
        p2.produce(topic, value=b"after-recovery", partition=i % partitions,
                   on_delivery=lambda err, msg: new_offsets[msg.partition()].append(
                       msg.offset() if err is None else err))
    assert p2.flush(30) == 0
    for p in range(partitions):
        assert new_offsets[p] == list(range(consumer_counts[p], consumer_counts[p] + 10)), (
            f"partition {p}: appends after recovery got {new_offsets[p]}, log end was {consumer_counts[p]}")
    broker.stop()


def test_concurrent_producers_same_partitions(broker):
    """Several producer connections (landing on different shards) writing the same
    partitions: nothing lost, nothing duplicated, offsets dense."""
    topic = "it-concurrent"
    partitions = 3
    create_topic(broker.bootstrap, topic, partitions)
    per_producer = 10_000
    results: list[dict] = []
    errors: list = []

    def run(idx: int):
        out: dict[int, list] = {}
        p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 1,
                      "enable.idempotence": False, "client.id": f"concurrent-{idx}"})

        def dr(err, msg):
            if err is not None:
                errors.append(err)
            else:
                out.setdefault(msg.partition(), []).append((msg.offset(), msg.key(), msg.value()))
        for i in range(per_producer):
            key = f"p{idx}-{i}".encode()
            while True:
                try:
                    p.produce(topic, key=key, value=key * 3, partition=i % partitions, on_delivery=dr)
                    break
                except BufferError:
                    p.poll(0.01)
            if i % 500 == 0:
                p.poll(0)
        assert p.flush(60) == 0
        results.append(out)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:5]
    assert len(results) == 4
    merged: dict[int, list] = {p: [] for p in range(partitions)}
    for out in results:
        for p, recs in out.items():
            merged[p].extend(recs)
    for p in range(partitions):
        merged[p].sort()
        assert [r[0] for r in merged[p]] == list(range(len(merged[p]))), f"partition {p}: acked offsets not dense"
    counts = {p: len(v) for p, v in merged.items()}
    assert sum(counts.values()) == 4 * per_producer
    check_watermarks(broker.bootstrap, topic, counts, "concurrent")
    got = consume_all(broker.bootstrap, topic, counts)
    for p in range(partitions):
        assert [(o, k, v) for o, k, v, _h, _t in got[p]] == merged[p], f"partition {p}"


def test_restart_with_different_shard_count(broker):
    """The data dir is the broker's, not a shard's: restarting with fewer or more
    shards serves the same topics and records."""
    topic = "it-reshard"
    partitions = 6
    create_topic(broker.bootstrap, topic, partitions)
    reports = produce_all(broker.bootstrap, topic, 6_000, seed=3)
    reports = {p: reports.get(p, []) for p in range(partitions)}
    counts = {p: len(v) for p, v in reports.items()}
    for shards in (1, 3, 2):
        broker.stop()
        broker.shards = shards
        broker.restart()
        check_watermarks(broker.bootstrap, topic, counts, f"shards={shards}")
        verify(reports, consume_all(broker.bootstrap, topic, counts), f"shards={shards}")
