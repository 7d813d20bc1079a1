"""CreateTopics' and CreatePartitions' request checks answer Kafka's codes and messages
in a 3-broker cluster (`topic_admin_cases.py` lists them; the same cases pass against
Apache Kafka: `benches/admin_against_kafka.py`), and CreatePartitions takes explicit
replica lists as Kafka's `kafka-topics --alter --partitions N --replica-assignment`
sends them."""
from __future__ import annotations

import os
import shutil

import pytest
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient
from kafka.admin import NewPartitions

import topic_admin_cases as cases
from launcher import bootstrap, wait_until
from test_kafka_cli import KAFKA_CLI, KAFKA_LIBS, kafka


@pytest.fixture(scope="module")
def cluster(module_broker_factory):
    return module_broker_factory.cluster(voters=3)


def test_create_topics_checks_answer_kafkas_codes(cluster):
    wrong = cases.check_create_topics(bootstrap(cluster), "checks")
    assert not wrong, "\n".join(wrong)


def test_create_partitions_with_replica_lists(cluster):
    wrong = cases.check_create_partitions(bootstrap(cluster), "grow")
    assert not wrong, "\n".join(wrong)


@pytest.mark.skipif(shutil.which(os.environ.get("JAVA", "java")) is None
                    or not any(KAFKA_LIBS.glob("kafka-tools-*.jar")),
                    reason="needs Java and Kafka's jars (test.sh fetches them)")
def test_kafka_topics_alter_with_a_replica_assignment(cluster):
    b = cluster[0].bootstrap
    kafka("kafka-topics", "--bootstrap-server", b, "--create", "--topic", "cli-grow",
          "--replica-assignment", "1:2,2:3")
    # The whole assignment, existing partitions first: the tool sends the new ones.
    kafka("kafka-topics", "--bootstrap-server", b, "--alter", "--topic", "cli-grow",
          "--partitions", "4", "--replica-assignment", "1:2,2:3,3:1,1:3")
    client = KafkaAdminClient(bootstrap_servers=b)
    try:
        wait_until(lambda: cases.replicas_of(client, "cli-grow")
                   == {0: [1, 2], 1: [2, 3], 2: [3, 1], 3: [1, 3]}, 20,
                   "the new partitions on the brokers asked for")
    finally:
        client.close()
    # A broker that does not exist is refused with Kafka's code, as the tool reports it.
    r = kafka("kafka-topics", "--bootstrap-server", b, "--alter", "--topic", "cli-grow",
              "--partitions", "5", "--replica-assignment", "1:2,2:3,3:1,1:3,2:9", check=False)
    assert r.rc != 0 and "InvalidReplicaAssignmentException" in r.out + r.err, r.why()
    assert "no such broker is registered" in r.out + r.err, r.why()


def live_brokers(bootstrap_servers: str) -> set[int]:
    md = AdminClient({"bootstrap.servers": bootstrap_servers}).list_topics(timeout=10)
    return set(md.brokers)


def isr_of(bootstrap_servers: str, topic: str, partition: int) -> tuple[int, list[int]]:
    """(leader, ISR) of one partition, as Metadata answers it."""
    md = AdminClient({"bootstrap.servers": bootstrap_servers}).list_topics(topic, timeout=10)
    p = md.topics[topic].partitions.get(partition)
    return (p.leader, sorted(p.isrs)) if p else (-1, [])


def with_admin(bootstrap_servers: str, use):
    """``use(client)`` with a kafka-python admin client made for it, then closed."""
    client = KafkaAdminClient(bootstrap_servers=bootstrap_servers, request_timeout_ms=30_000)
    try:
        return use(client)
    finally:
        client.close()


def test_new_partitions_on_a_fenced_broker(cluster):
    """A replica list naming only fenced brokers is refused with Kafka's code and
    message; one naming a live broker too is taken, the fenced replica left out of the
    ISR. (Last in this module: it stops broker 3, and starts it again.)"""
    b = bootstrap(cluster[:2])
    stopped = cluster[2]
    created = with_admin(b, lambda client: [
        client.create_topics({topic: {"assignments": {0: first}}}, raise_errors=False)
        for topic, first in (("fenced-rf1", [1]), ("fenced-rf2", [1, 2]))])
    assert all(r["topics"][0]["error_code"] == cases.NONE for r in created), created
    stopped.stop()
    try:
        wait_until(lambda: stopped.node_id not in live_brokers(b), 30,
                   f"broker {stopped.node_id} fenced")
        # A client made now: kafka-python keeps the controller of its first Metadata
        # answer for its life, and one made before could hold the broker just stopped.
        (t,) = with_admin(b, lambda client: client.create_partitions(
            {"fenced-rf1": NewPartitions(2, [[3]])}, raise_errors=False)).results
        assert t.error_code == cases.INVALID_REPLICA_ASSIGNMENT and (
            "All brokers specified in the manual partition assignment for partition 1 "
            "are fenced or in controlled shutdown.") in t.error_message, t
        (t,) = with_admin(b, lambda client: client.create_partitions(
            {"fenced-rf2": NewPartitions(2, [[3, 1]])}, raise_errors=False)).results
        assert t.error_code == cases.NONE, t
        wait_until(lambda: isr_of(b, "fenced-rf2", 1) == (1, [1]), 20,
                   "partition 1 led by broker 1, the fenced broker 3 outside its ISR")
    finally:
        stopped.start()
