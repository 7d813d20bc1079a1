"""Topic configuration through real admin clients: CreateTopics with configs,
DescribeConfigs (values, sources, synonyms), AlterConfigs, IncrementalAlterConfigs,
broker configs, and INVALID_CONFIG for unknown keys and bad values — with nothing
changed when a change is refused. librdkafka (confluent-kafka) and kafka-python both
drive it."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   ConfigSource, NewTopic)

TIMEOUT = 30


def describe_topic(admin: AdminClient, topic: str) -> dict:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return admin.describe_configs([res])[res].result(TIMEOUT)


def test_create_with_configs_then_describe_alter_and_incremental(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = "cfg-a"
    admin.create_topics([NewTopic(topic, 1, 1, config={"retention.ms": "3600000",
                                                         "cleanup.policy": "compact"})])[topic].result(TIMEOUT)
    d = describe_topic(admin, topic)
    assert d["retention.ms"].value == "3600000"
    assert d["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert d["cleanup.policy"].value == "compact"
    # Not overridden: the broker default, with Kafka's default value.
    assert d["segment.bytes"].value == "1073741824"
    assert d["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert d["max.message.bytes"].value == "1048588"
    # Synonyms: the topic override first, then the broker-level default.
    syn = [s.name for s in d["retention.ms"].synonyms.values()]
    assert "retention.ms" in syn and "log.retention.ms" in syn, syn

    # AlterConfigs replaces the whole set of overrides.
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"segment.bytes": "65536"})
    admin.alter_configs([res])[res].result(TIMEOUT)
    d = describe_topic(admin, topic)
    assert d["segment.bytes"].value == "65536"
    assert d["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert d["cleanup.policy"].value == "delete"

    # IncrementalAlterConfigs: set, append to a list, delete.
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.bytes", "1048576", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
        ConfigEntry("segment.bytes", None, incremental_operation=AlterConfigOpType.DELETE),
    ])
    admin.incremental_alter_configs([res])[res].result(TIMEOUT)
    d = describe_topic(admin, topic)
    assert d["retention.bytes"].value == "1048576"
    assert set(d["cleanup.policy"].value.split(",")) == {"compact", "delete"}
    assert d["segment.bytes"].value == "1073741824"

    # Survives a restart (persisted with the topic).
    broker.stop()
    broker.restart()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    d = describe_topic(admin, topic)
    assert d["retention.bytes"].value == "1048576"


@pytest.mark.parametrize("key,value", [
    ("no.such.config", "1"),
    ("retention.ms", "-5"),
    ("retention.ms", "tomorrow"),
    ("cleanup.policy", "forever"),
    ("min.cleanable.dirty.ratio", "2"),
    ("message.timestamp.type", "WallClock"),
    ("compression.type", "brotli"),
])
def test_invalid_configs_are_refused_and_change_nothing(broker, key, value):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = "cfg-bad"
    fs = admin.create_topics([NewTopic(topic, 1, 1, config={key: value})])
    with pytest.raises(KafkaException) as e:
        fs[topic].result(TIMEOUT)
    assert e.value.args[0].name() == "INVALID_CONFIG", e.value
    assert topic not in admin.list_topics(timeout=TIMEOUT).topics

    good = "cfg-good"
    admin.create_topics([NewTopic(good, 1, 1, config={"retention.ms": "1000000"})])[good].result(TIMEOUT)
    res = ConfigResource(ConfigResource.Type.TOPIC, good, incremental_configs=[
        ConfigEntry("segment.ms", "60000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET),
    ])
    with pytest.raises(KafkaException) as e:
        admin.incremental_alter_configs([res])[res].result(TIMEOUT)
    assert e.value.args[0].name() == "INVALID_CONFIG", e.value
    d = describe_topic(admin, good)
    assert d["retention.ms"].value == "1000000"
    assert d["segment.ms"].source == ConfigSource.DEFAULT_CONFIG.value  # nothing applied


def test_broker_configs_are_described_and_read_only(broker_factory):
    b = broker_factory.start(extra_args=["--retention-ms", "7200000",
                                         "--topic-default", "compression.type=lz4"])
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    res = ConfigResource(ConfigResource.Type.BROKER, "0")
    d = admin.describe_configs([res])[res].result(TIMEOUT)
    assert d["log.retention.ms"].value == "7200000"
    assert d["log.retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert d["log.retention.ms"].is_read_only
    assert d["compression.type"].value == "lz4"
    assert d["log.segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    # A new topic inherits the broker-wide defaults.
    admin.create_topics([NewTopic("inherits", 1, 1)])["inherits"].result(TIMEOUT)
    t = describe_topic(admin, "inherits")
    assert t["retention.ms"].value == "7200000"
    assert t["retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert t["compression.type"].value == "lz4"

    alter = ConfigResource(ConfigResource.Type.BROKER, "0", set_config={"log.retention.ms": "1"})
    with pytest.raises(KafkaException):
        admin.alter_configs([alter])[alter].result(TIMEOUT)


def test_unknown_topic_describe_and_alter(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, "nope-missing")
    with pytest.raises(KafkaException) as e:
        admin.describe_configs([res])[res].result(TIMEOUT)
    assert e.value.args[0].name() == "UNKNOWN_TOPIC_OR_PART", e.value


def test_kafka_python_admin_reads_and_alters_configs(broker):
    from kafka.admin import ConfigResource as KConfigResource, ConfigResourceType, KafkaAdminClient
    from kafka.admin import NewTopic as KNewTopic

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30000)
    try:
        admin.create_topics([KNewTopic("kp-cfg", 1, 1, topic_configs={"retention.bytes": "123456789"})])
        res = admin.describe_configs([KConfigResource(ConfigResourceType.TOPIC, "kp-cfg")])
        entries = _kafka_python_entries(res)
        assert entries["retention.bytes"] == "123456789"
        admin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "kp-cfg",
                                             configs={"retention.ms": "98765"})])
        entries = _kafka_python_entries(
            admin.describe_configs([KConfigResource(ConfigResourceType.TOPIC, "kp-cfg")]))
        assert entries["retention.ms"] == "98765"
        refused = admin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "kp-cfg",
                                                       configs={"segment.bytes": "12"})])
        assert "InvalidConfiguration" in str(refused["topic"]["kp-cfg"]), refused
        entries = _kafka_python_entries(
            admin.describe_configs([KConfigResource(ConfigResourceType.TOPIC, "kp-cfg")]))
        assert entries.get("segment.bytes", "1073741824") == "1073741824"  # unchanged
    finally:
        admin.close()


def _kafka_python_entries(described) -> dict:
    """{name: value} of the one topic in kafka-python 3's describe_configs answer:
    {"topic": {name: {config: {"value": ..., ...}}}}."""
    (configs,) = described["topic"].values()
    return {name: c["value"] for name, c in configs.items()}
