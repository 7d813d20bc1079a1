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


# ---------------------------------------------------------------------------
# hostile and odd requests, by hand (kwire): a clear error code, never a crash
# ---------------------------------------------------------------------------

import kwire as W  # noqa: E402

DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS, DELETE_RECORDS = 32, 33, 44, 21
ERR_INVALID_REQUEST, ERR_INVALID_CONFIG, ERR_OFFSET_OUT_OF_RANGE, ERR_UNKNOWN_TOPIC = 42, 40, 1, 3


def _alter_results(body: bytes) -> list[tuple[int, str | None, str]]:
    r = W.Reader(body)
    r.i32()  # throttle
    out = []
    for _ in range(r.i32()):
        code, message = r.i16(), r.string()
        r.i8()
        out.append((code, message, r.string()))
    return out


def test_raw_describe_configs_of_an_unknown_resource_type(broker):
    body = W.array([W.i8(99) + W.string("x") + W.i32(-1)]) + W.i8(0)
    _, resp = W.roundtrip(broker.bootstrap, W.request(DESCRIBE_CONFIGS, 1, 7, body))
    r = W.Reader(resp)
    r.i32()
    assert r.i32() == 1
    assert r.i16() == ERR_INVALID_REQUEST
    broker.assert_alive()


def test_raw_incremental_alter_with_unknown_operation_and_huge_value(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("raw-cfg", 1, 1)])["raw-cfg"].result(TIMEOUT)
    bad_op = W.i8(2) + W.string("raw-cfg") + W.array([W.string("retention.ms") + W.i8(9) + W.string("1")])
    huge = W.i8(2) + W.string("raw-cfg") + W.array([W.string("retention.ms") + W.i8(0) + W.string("9" * 30_000)])
    missing = W.i8(2) + W.string("raw-missing") + W.array([W.string("retention.ms") + W.i8(0) + W.string("1")])
    body = W.array([bad_op]) + W.i8(0)
    _, resp = W.roundtrip(broker.bootstrap, W.request(INCREMENTAL_ALTER_CONFIGS, 0, 8, body))
    assert [c for c, _, _ in _alter_results(resp)] == [ERR_INVALID_REQUEST]
    body = W.array([huge]) + W.i8(0)
    _, resp = W.roundtrip(broker.bootstrap, W.request(INCREMENTAL_ALTER_CONFIGS, 0, 9, body))
    ((code, message, name),) = _alter_results(resp)
    assert code == ERR_INVALID_CONFIG and name == "raw-cfg" and message
    # AlterConfigs v0 on a missing topic, and a resource named twice.
    plain = W.i8(2) + W.string("raw-missing") + W.array([W.string("retention.ms") + W.string("1")])
    twice = W.i8(2) + W.string("raw-cfg") + W.array([])
    body = W.array([plain, twice, twice]) + W.i8(0)
    _, resp = W.roundtrip(broker.bootstrap, W.request(ALTER_CONFIGS, 0, 10, body))
    assert [c for c, _, _ in _alter_results(resp)] == [ERR_UNKNOWN_TOPIC, ERR_INVALID_REQUEST, ERR_INVALID_REQUEST]
    assert describe_topic(admin, "raw-cfg")["retention.ms"].value == "604800000"  # unchanged
    # A truncated DescribeConfigs body closes that connection only.
    frame = W.request(DESCRIBE_CONFIGS, 1, 11, W.array([W.i8(2) + W.string("raw-cfg")])[:-3])
    W.send_and_expect_close(broker.bootstrap, frame)
    broker.assert_alive()


def test_raw_delete_records_edge_offsets(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("raw-del", 1, 1)])["raw-del"].result(TIMEOUT)
    parts = W.array([W.i32(0) + W.i64(-7), W.i32(5) + W.i64(0), W.i32(0) + W.i64(-1)])
    body = W.array([W.string("raw-del") + parts]) + W.i32(5000)
    _, resp = W.roundtrip(broker.bootstrap, W.request(DELETE_RECORDS, 0, 12, body))
    r = W.Reader(resp)
    r.i32()
    assert r.i32() == 1 and r.string() == "raw-del"
    got = [(r.i32(), r.i64(), r.i16()) for _ in range(r.i32())]
    assert got == [(0, -1, ERR_OFFSET_OUT_OF_RANGE), (5, -1, ERR_UNKNOWN_TOPIC), (0, 0, 0)]


def test_raw_describe_configs_names_a_resource_once(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("raw-once", 1, 1)])["raw-once"].result(TIMEOUT)
    one = W.i8(2) + W.string("raw-once") + W.i32(-1)
    body = W.array([one] * 3) + W.i8(1)
    _, resp = W.roundtrip(broker.bootstrap, W.request(DESCRIBE_CONFIGS, 1, 13, body))
    r = W.Reader(resp)
    r.i32()
    codes = []
    for _ in range(r.i32()):
        code, _msg, _type, _name = r.i16(), r.string(), r.i8(), r.string()
        codes.append(code)
        for _ in range(r.i32()):  # configs: name, value, read_only, source, sensitive, synonyms
            r.string(), r.string(), r.i8(), r.i8(), r.i8()
            for _ in range(r.i32()):
                r.string(), r.string(), r.i8()
    assert codes == [0, ERR_INVALID_REQUEST, ERR_INVALID_REQUEST]


def test_offsets_topic_stays_compacted(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, "__consumer_offsets", incremental_configs=[
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as e:
        admin.incremental_alter_configs([res])[res].result(TIMEOUT)
    assert e.value.args[0].name() == "INVALID_CONFIG", e.value
    assert describe_topic(admin, "__consumer_offsets")["cleanup.policy"].value == "compact"
