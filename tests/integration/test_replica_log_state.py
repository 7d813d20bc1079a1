"""What a follower's log takes from its leader's besides records: the gaps its leader's
cleaner left (a compacted topic at replication factor 3), and the log start its leader's
DeleteRecords moved. Real broker processes on loopback, librdkafka clients; replica logs
are read on disk once the brokers have stopped."""

from __future__ import annotations

import time
from pathlib import Path

import kwire
from confluent_kafka import Consumer, Producer, TopicPartition
from launcher import wait_until
from test_replication import (FAST, TIMEOUT, admin, batches_on_disk, base_and_last, bootstrap,
                              by_id, create, partition_state)


def records(batch: bytes) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record of an uncompressed batch."""
    decoded, = kwire.decode_batches(batch)
    assert decoded["attributes"] & 0x07 == 0, "the test produces uncompressed batches"
    return [(r["offset"], r["key"], r["value"]) for r in decoded["records"]]


def latest_per_key(batches: list[bytes]) -> dict[bytes, bytes]:
    """Each key's last value in a log, checking on the way that offsets only increase."""
    latest: dict[bytes, bytes] = {}
    last = -1
    for b in batches:
        for offset, key, value in records(b):
            assert offset > last, f"offset {offset} after {last}"
            last = offset
            latest[key] = value
    return latest


def has_gaps(batches: list[bytes]) -> bool:
    """Whether the log skips offsets: between batches, or inside one (fewer records than
    its offset range), as a cleaned log does."""
    ends = [base_and_last(b) for b in batches]
    between = any(b[0] > a[1] + 1 for a, b in zip(ends, ends[1:]))
    inside = any(len(records(b)) < last - base + 1 for b, (base, last) in zip(batches, ends))
    return between or inside


def produce_keyed(brokers, topic: str, first: int, n: int, keys: int,
                  latest: dict[bytes, bytes]) -> None:
    p = Producer({"bootstrap.servers": bootstrap(brokers), "acks": "all",
                  "enable.idempotence": True, "linger.ms": 5, "compression.type": "none"})
    for i in range(first, first + n):
        key, value = f"k{i % keys}".encode(), f"v{i}".encode() + b"." * 40
        p.produce(topic, key=key, value=value)
        latest[key] = value
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(TIMEOUT) == 0


def test_a_follower_behind_a_compaction_copies_the_cleaned_log(broker_factory):
    """A follower is down while its leader's cleaner removes records (batches lose
    records inside, and whole batches go). Back, it fetches from offsets the leader no
    longer holds and appends batches that skip offsets: it catches up and rejoins the
    ISR, holds none of the records its leader had removed, and every replica holds each
    key's latest value, in increasing offsets.

    The follower comes back with its own cleaner idle: a pass of its own may drop the
    only batches that skip offsets inside (every key superseded later) and leave a log
    that starts past its log start with no gap after that."""
    brokers = broker_factory.cluster(voters=3, extra_args=FAST + ["--cleaner-backoff-ms", "200"])
    create(brokers, "cmp", 1, 3, {"cleanup.policy": "compact", "segment.bytes": "16384",
                                  "min.cleanable.dirty.ratio": "0.01",
                                  "min.compaction.lag.ms": "0"})
    leader_id, replicas, _ = partition_state(brokers, "cmp")[0]
    leader = by_id(brokers, leader_id)
    follower = by_id(brokers, next(r for r in replicas if r != leader_id))
    follower.kill()
    alive = [b for b in brokers if b is not follower]
    wait_until(lambda: follower.node_id not in partition_state(alive, "cmp")[0][2], 20,
               "the ISR shrinks without the dead follower")

    latest: dict[bytes, bytes] = {}
    produce_keyed(alive, "cmp", 0, 30_000, 100, latest)
    cleaned: list[bytes] = []  # the leader's log once its cleaner has left gaps

    def leader_cleaned() -> bool:
        cleaned[:] = batches_on_disk(leader.data_dir, "cmp", 0)
        return has_gaps(cleaned)

    wait_until(leader_cleaned, 60, "the leader's cleaner compacts its log")
    # What the leader could still serve: later passes only remove.
    servable = {offset for b in cleaned for offset, _, _ in records(b)}
    cleaned_end = base_and_last(cleaned[-1])[1] + 1

    backoff = follower.extra_args.index("--cleaner-backoff-ms") + 1
    follower.extra_args[backoff] = "600000"
    follower.restart()
    wait_until(lambda: sorted(partition_state(brokers, "cmp")[0][2]) == [1, 2, 3], 60,
               "the follower catches up on the compacted log and rejoins the ISR")
    # Replication goes on from there: acks=all with all three in the ISR, so every
    # replica holds these batches once they are acknowledged.
    produce_keyed(brokers, "cmp", 30_000, 500, 100, latest)
    for b in brokers:
        b.stop()
    logs = {b.node_id: batches_on_disk(b.data_dir, "cmp", 0) for b in brokers}
    copied = [offset for b in logs[follower.node_id] for offset, _, _ in records(b)]
    assert has_gaps(logs[follower.node_id]), "the returning follower copied a cleaned log"
    removed = [o for o in copied if o < cleaned_end and o not in servable]
    assert not removed, f"the follower holds records its leader had removed: {removed[:10]}"
    ends = {n: base_and_last(log[-1])[1] + 1 for n, log in logs.items()}
    assert len(set(ends.values())) == 1, f"every replica ends at the same offset: {ends}"
    for node, log in logs.items():
        assert latest_per_key(log) == latest, f"broker {node} holds each key's latest value"


def log_start_on_disk(data_dir: Path, topic: str, partition: int) -> int:
    f = data_dir / f"{topic}-{partition}" / "log-start-offset"
    return int(f.read_text()) if f.exists() else 0


def test_delete_records_moves_every_replicas_log_start(broker_factory):
    """DeleteRecords at the leader reaches its followers through their fetches (Kafka's
    follower takes up the leader's log start): each one's log start moves, and a
    follower that takes over leads from there, serving none of the deleted records."""
    brokers = broker_factory.cluster(voters=3, extra_args=FAST)
    create(brokers, "dr", 1, 3, {"segment.bytes": "16384"})
    p = Producer({"bootstrap.servers": bootstrap(brokers), "acks": "all", "linger.ms": 5})
    for i in range(5000):
        p.produce("dr", value=b"%06d" % i + b"." * 60)
    assert p.flush(TIMEOUT) == 0
    tp = TopicPartition("dr", 0, 3000)
    client = admin(brokers)  # held: a client dropped leaves its futures unanswered
    client.delete_records([tp])[tp].result(TIMEOUT)

    leader_id = partition_state(brokers, "dr")[0][0]
    followers = [b for b in brokers if b.node_id != leader_id]
    wait_until(lambda: all(log_start_on_disk(b.data_dir, "dr", 0) == 3000 for b in followers),
               20, "every follower's log start follows the leader's")

    by_id(brokers, leader_id).kill()
    alive = [b for b in brokers if b.is_running()]
    wait_until(lambda: partition_state(alive, "dr")[0][0] in {b.node_id for b in alive}, 20,
               "a follower takes over")
    c = Consumer({"bootstrap.servers": bootstrap(alive), "group.id": "dr-check",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        low, high = c.get_watermark_offsets(TopicPartition("dr", 0), timeout=10)
        assert (low, high) == (3000, 5000)
        c.assign([TopicPartition("dr", 0, 0)])  # below the log start: reset to earliest
        first = None
        deadline = time.monotonic() + 20
        while first is None and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and not m.error():
                first = (m.offset(), m.value()[:6])
        assert first == (3000, b"003000"), first
    finally:
        c.close()
