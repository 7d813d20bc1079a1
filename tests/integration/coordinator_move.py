"""Consumers joining a group while its coordinator moves: the scenario of
`test_replication.py::test_joins_pending_while_the_group_coordinator_moves_are_retried`,
broker-agnostic so that `benches/admin_against_kafka.py` runs the same against Apache
Kafka.

A group of librdkafka consumers (confluent-kafka) is stable on a topic; then, round by
round, one more consumer joins, and while its JoinGroup waits for the others to rejoin
(they learn of the rebalance from their next heartbeat, up to 5 s later) the leadership
of the group's `__consumer_offsets` partition moves to another replica (its replicas
reordered by AlterPartitionReassignments, then a preferred ElectLeaders; kafka-python's
admin client). The old coordinator has to answer the joins and syncs it holds with an
error the clients retry (Kafka: NOT_COORDINATOR); an error librdkafka gives up on
("JoinGroup failed: Group rebalance in progress") reaches the application as a consumer
error. `run` returns every consumer error the application saw.
"""
from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, KafkaError
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient
from kafka.structs import TopicPartition as KafkaTopicPartition

OFFSETS = "__consumer_offsets"


def java_hash(s: str) -> int:
    """Java's String.hashCode, made non-negative as Kafka's Utils.abs does (n & 0x7fffffff)."""
    h = 0
    for ch in s:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h & 0x7FFFFFFF


class Member(threading.Thread):
    """One consumer polling in its own thread; records its assignment and its errors."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str):
        super().__init__(daemon=True)
        self.errors: list[str] = []
        self.assigned: set[int] = set()
        self.stopping = threading.Event()
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "heartbeat.interval.ms": 5000, "session.timeout.ms": 30000,
            "max.poll.interval.ms": 60000,
            "error_cb": lambda e: self.errors.append(f"{name} error_cb: {e.name()} {e.str()}")
            if e.code() != KafkaError._TRANSPORT else None,
        })
        self.consumer.subscribe([topic], on_assign=self._assign, on_revoke=self._revoke)

    def _assign(self, _c, parts) -> None:
        self.assigned = {p.partition for p in parts}

    def _revoke(self, _c, _parts) -> None:
        self.assigned = set()

    def run(self) -> None:
        while not self.stopping.is_set():
            for m in self.consumer.consume(100, timeout=0.2):
                e = m.error()
                if e is not None and e.code() != KafkaError._PARTITION_EOF:
                    self.errors.append(f"{e.name()}: {e.str()}")
        self.consumer.close()


def offsets_partition_replicas(bootstrap: str, partition: int) -> tuple[int, list[int]]:
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(OFFSETS, timeout=30)
    p = meta.topics[OFFSETS].partitions[partition]
    return p.leader, list(p.replicas)


def move_leadership(bootstrap: str, partition: int) -> int:
    """Moves the leadership of `__consumer_offsets` `partition` to the next replica;
    returns the new leader."""
    leader, replicas = offsets_partition_replicas(bootstrap, partition)
    target = [r for r in replicas if r != leader] + [leader]
    tp = KafkaTopicPartition(OFFSETS, partition)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.alter_partition_reassignments({tp: target})
        deadline = time.monotonic() + 30
        while offsets_partition_replicas(bootstrap, partition)[1] != target:
            assert time.monotonic() < deadline, "the reordered replicas show in metadata"
            time.sleep(0.1)
        admin.elect_leaders(0, {OFFSETS: [partition]})
    finally:
        admin.close()
    deadline = time.monotonic() + 30
    while offsets_partition_replicas(bootstrap, partition)[0] != target[0]:
        assert time.monotonic() < deadline, f"{target[0]} leads {OFFSETS}-{partition}"
        time.sleep(0.1)
    return target[0]


def run(bootstrap: str, topic: str, group: str, rounds: int = 3,
        partitions: int = 6) -> tuple[list[str], list[int]]:
    """The scenario; returns (every consumer error seen, the coordinators in turn)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 3)])[topic].result(60)
    members: list[Member] = []

    def settled(n: int) -> bool:
        sets = [m.assigned for m in members]
        return (len(members) == n and all(sets)
                and sorted(p for s in sets for p in s) == list(range(partitions)))

    def wait_settled(n: int, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while not settled(n):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{n} members never shared the {partitions} partitions: "
                    f"{[sorted(m.assigned) for m in members]}; errors "
                    f"{[e for m in members for e in m.errors]}")
            time.sleep(0.2)

    coordinators: list[int] = []
    try:
        for i in range(2):
            members.append(Member(bootstrap, group, topic, f"m{i}"))
            members[-1].start()
        wait_settled(2)
        # The group's coordinator created the topic (FindCoordinator) if it was missing.
        offsets = admin.list_topics(OFFSETS, timeout=30).topics[OFFSETS]
        slot = java_hash(group) % len(offsets.partitions)
        coordinators.append(offsets_partition_replicas(bootstrap, slot)[0])
        for r in range(rounds):
            members.append(Member(bootstrap, group, topic, f"m{len(members)}"))
            members[-1].start()
            # Its JoinGroup is now held until the others heartbeat and rejoin.
            time.sleep(1.0)
            coordinators.append(move_leadership(bootstrap, slot))
            wait_settled(len(members))
    finally:
        for m in members:
            m.stopping.set()
        for m in members:
            m.join(30)
    return [e for m in members for e in m.errors], coordinators
