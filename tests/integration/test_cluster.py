"""Several corelog brokers as one cluster, on loopback, each a real process with its own
ports and data directory: the controller quorum forms, topics spread over the brokers,
clients produce and consume through any broker, the active controller and other brokers
die (kill -9) and come back, an observer joins, a broker catches up from a metadata
snapshot, and a data directory of another cluster is refused.

Topics here have replication factor 1, so a dead broker's partitions go offline and
come back with it; replication itself is `test_replication.py`."""

from __future__ import annotations

import collections
import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient

import kwire
from launcher import bootstrap, wait_until

# Short sessions so that a dead broker is fenced within seconds.
FAST = ["--broker-session-timeout-ms", "3000", "--broker-heartbeat-interval-ms", "500",
        "--group-initial-rebalance-delay-ms", "0"]
TIMEOUT = 30


def admin(brokers) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap(brokers)})


def metadata(brokers, topic: str | None = None):
    return admin(brokers).list_topics(topic=topic, timeout=TIMEOUT)


def active_controller(brokers) -> int:
    """The quorum leader as the first broker that answers DescribeQuorum knows it (-1:
    none). Metadata's controller_id names the answering broker, not the leader."""
    for b in brokers:
        try:
            return kwire.describe_quorum_leader(b.bootstrap)
        except (OSError, AssertionError, kwire.Closed, TimeoutError):
            continue
    return -1


def create(brokers, name: str, partitions: int, replication_factor: int = 1):
    client = admin(brokers)  # held until the answer: the futures die with it
    futures = client.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=replication_factor)],
        request_timeout=TIMEOUT)
    futures[name].result(TIMEOUT)


def leaders(brokers, topic: str) -> dict[int, int]:
    md = metadata(brokers, topic)
    return {p.id: p.leader for p in md.topics[topic].partitions.values()}


def produce(brokers, topic: str, n: int, prefix: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap(brokers), "acks": "all",
                  "enable.idempotence": True, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, key=f"{prefix}-{i}".encode(), value=f"{prefix}-{i}".encode())
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(TIMEOUT) == 0, "every produced record acknowledged"


def consume_all(brokers, topic: str, expected: int, group: str) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap(brokers), "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    seen: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(seen) < expected and time.monotonic() < deadline:
            for m in c.consume(500, timeout=1.0):
                if m.error():
                    continue
                seen.append(m.value())
        c.commit(asynchronous=False)
    finally:
        c.close()
    return seen


def test_three_brokers_one_cluster_through_any_bootstrap(broker_factory):
    brokers = broker_factory.cluster(voters=3, extra_args=FAST)
    md = metadata(brokers)
    assert sorted(md.brokers) == [1, 2, 3], "Metadata lists every live broker"
    assert md.controller_id in (1, 2, 3)
    assert md.cluster_id, "the cluster has an id"

    # Created through broker 1, placed over all three: 10 leaders each.
    create(brokers[:1], "spread", 30)
    per_broker = collections.Counter(leaders(brokers[2:], "spread").values())
    assert per_broker == {1: 10, 2: 10, 3: 10}, per_broker
    for b in brokers:
        seen = metadata([b], "spread").topics["spread"]
        assert len(seen.partitions) == 30, f"{b.name} sees the whole topic"
        for p in seen.partitions.values():
            assert p.replicas == [p.leader] and p.isrs == [p.leader]

    # Replication factor above the live brokers: refused.
    with pytest.raises(KafkaException) as e:
        create(brokers, "rf4", 1, replication_factor=4)
    assert "INVALID_REPLICATION_FACTOR" in str(e.value), e.value

    # Produced through broker 2, consumed in a group through broker 3: the group's
    # coordinator is the broker leading its __consumer_offsets partition.
    produce(brokers[1:2], "spread", 3000, "r")
    values = consume_all(brokers[2:], "spread", 3000, "g-spread")
    assert sorted(values) == sorted(f"r-{i}".encode() for i in range(3000))
    offsets_leaders = collections.Counter(leaders(brokers, "__consumer_offsets").values())
    assert sorted(offsets_leaders) == [1, 2, 3], f"__consumer_offsets spread: {offsets_leaders}"

    # kafka-python sees the same cluster.
    kp = KafkaAdminClient(bootstrap_servers=brokers[0].bootstrap, request_timeout_ms=30_000)
    try:
        cluster = kp.describe_cluster()
        ids = sorted(b.get("broker_id", b.get("node_id")) for b in cluster["brokers"])
        assert ids == [1, 2, 3], cluster
        assert cluster["controller_id"] in (1, 2, 3), cluster
        (part,) = kp.describe_metadata_quorum()["topics"][0]["partitions"]
        assert part["leader_id"] in (1, 2, 3) and part["high_watermark"] > 0, part
        assert sorted(v["replica_id"] for v in part["current_voters"]) == [1, 2, 3], part
        assert part["observers"] == [], part
    finally:
        kp.close()


def test_a_killed_broker_takes_its_partitions_offline_and_back(broker_factory):
    brokers = broker_factory.cluster(voters=3, extra_args=FAST)
    create(brokers, "offline", 6)
    produce(brokers, "offline", 600, "a")
    before = leaders(brokers, "offline")
    victim = next(b for b in brokers if b.node_id != active_controller(brokers))
    led = sorted(p for p, l in before.items() if l == victim.node_id)
    assert led, f"{victim.name} leads some partitions: {before}"
    victim.kill()
    alive = [b for b in brokers if b is not victim]

    def offline():
        md = metadata(alive, "offline")
        if victim.node_id in md.brokers:
            return None
        parts = md.topics["offline"].partitions
        return all(parts[p].leader == -1 for p in led) and parts
    wait_until(offline, 20, f"{victim.name}'s partitions offline")

    victim.start()
    wait_until(lambda: leaders(alive, "offline") == before, 20, "the partitions led again")
    produce(brokers, "offline", 600, "b")
    values = consume_all(alive, "offline", 1200, "g-offline")
    assert sorted(values) == sorted([f"a-{i}".encode() for i in range(600)]
                                    + [f"b-{i}".encode() for i in range(600)])


def test_controller_killed_while_topics_are_created(broker_factory):
    brokers = broker_factory.cluster(voters=3, extra_args=FAST)
    names = [f"c{i}" for i in range(40)]
    outcomes: dict[str, str] = {}
    took: dict[str, float] = {}

    def creator():
        client = admin(brokers)
        for name in names:
            started = time.monotonic()
            deadline = started + 60
            while True:
                f = client.create_topics([NewTopic(name, num_partitions=2, replication_factor=1)],
                                         request_timeout=8)[name]
                try:
                    f.result(10)
                    outcomes[name] = "created"
                    took[name] = time.monotonic() - started
                    time.sleep(0.1)  # paced, so that the kill lands among the creates
                    break
                except KafkaException as e:
                    if "TOPIC_ALREADY_EXISTS" in str(e):
                        # A retry of a create that was committed before its answer was lost.
                        outcomes[name] = "existed"
                        break
                    if time.monotonic() > deadline:
                        outcomes[name] = f"failed: {e}"
                        break
                    # librdkafka keeps sending admin requests to the controller it last
                    # heard of, dead or not, until its metadata refreshes: a new client
                    # asks the live brokers which broker that is now.
                    client = admin(brokers)
                    time.sleep(0.2)
    t = threading.Thread(target=creator)
    t.start()
    wait_until(lambda: len(outcomes) >= 10, 60, "the first creates")
    old = active_controller(brokers)
    victim = next(b for b in brokers if b.node_id == old)
    killed_at = time.monotonic()
    victim.kill()
    alive = [b for b in brokers if b is not victim]
    new = wait_until(lambda: (c := active_controller(alive)) not in (old, -1) and c, 15,
                     "a new active controller")
    elected_after = time.monotonic() - killed_at
    print(f"a new active controller {elected_after:.2f} s after the old one was killed")
    assert elected_after < 10, f"a new controller after {elected_after:.1f}s"
    assert len(outcomes) < len(names), "the controller was killed while topics were being created"
    t.join(120)
    print("slowest creates:", sorted(took.items(), key=lambda kv: -kv[1])[:5])
    assert not t.is_alive(), f"creates still running: {len(outcomes)} of {len(names)} done"
    assert all(o in ("created", "existed") for o in outcomes.values()), outcomes
    assert set(outcomes) == set(names)
    victim.start()
    md = metadata(brokers)
    topics = {n: len(t.partitions) for n, t in md.topics.items() if n.startswith("c")}
    assert topics == {n: 2 for n in names}, "every create applied, once"

    # All three restarted: the same metadata.
    def snapshot():
        md = metadata(brokers)
        return {n: sorted((p.id, p.leader) for p in t.partitions.values())
                for n, t in md.topics.items()}
    wait_until(lambda: all(l >= 0 for ps in snapshot().values() for _, l in ps), 20,
               "every partition led")
    before = snapshot()
    for b in brokers:
        b.stop()
    for b in brokers:
        b.launch()
    for b in brokers:
        b.wait_healthy()
    wait_until(lambda: snapshot() == before, 20, "the same metadata after a full restart")
    assert new != old


def test_an_observer_joins_and_takes_partitions(broker_factory):
    brokers = broker_factory.cluster(voters=3, observers=1, extra_args=FAST)
    md = metadata(brokers)
    assert sorted(md.brokers) == [1, 2, 3, 4]
    assert md.controller_id in (1, 2, 3, 4)
    assert active_controller(brokers) in (1, 2, 3), "an observer never controls"
    create(brokers[3:], "four", 8)
    assert collections.Counter(leaders(brokers, "four").values()) == {1: 2, 2: 2, 3: 2, 4: 2}
    produce(brokers[3:], "four", 400, "o")
    assert len(consume_all(brokers[3:], "four", 400, "g-four")) == 400


def test_a_broker_down_across_snapshots_catches_up(broker_factory):
    brokers = broker_factory.cluster(voters=3, extra_args=[*FAST, "--metadata-snapshot-entries", "10"])
    behind = next(b for b in brokers if b.node_id != active_controller(brokers))
    behind.stop()
    alive = [b for b in brokers if b is not behind]
    for i in range(30):
        create(alive, f"s{i}", 1)
    behind.start()
    md = wait_until(lambda: (m := metadata([behind])) and len([t for t in m.topics if t.startswith("s")]) == 30 and m,
                    20, f"{behind.name} caught up")
    assert all(md.topics[f"s{i}"].partitions[0].leader >= 0 for i in range(30))
    # The leader had purged what it missed: it came as a snapshot.
    assert "metadata snapshot installed" in behind.log_path.read_text(errors="replace")


def test_another_clusters_data_directory_is_refused(broker_factory):
    # A one-node cluster whose broker is node 3.
    lone = broker_factory.start(extra_args=["--node-id", "3"])
    lone.stop()
    brokers = broker_factory.cluster(voters=3, extra_args=FAST)
    third = brokers[2]
    third.stop()
    third.data_dir = lone.data_dir
    third.launch()
    rc = third.proc.wait(timeout=30)
    assert rc != 0, "a broker on another cluster's data directory does not start"
    assert "another cluster" in third.log_tail(), third.log_tail()
