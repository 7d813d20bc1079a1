"""Topic configuration through real admin clients: CreateTopics with configs,
DescribeConfigs (values, sources, synonyms), AlterConfigs, IncrementalAlterConfigs,
broker configs, and INVALID_CONFIG for unknown keys and bad values — with nothing
changed when a change is refused. librdkafka (confluent-kafka) and kafka-python both
drive it."""

from __future__ import annotations

import time
import uuid

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


def test_broker_configs_are_described_with_their_sources(broker_factory):
    b = broker_factory.start(extra_args=["--retention-ms", "7200000",
                                         "--topic-default", "compression.type=lz4"])
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    res = ConfigResource(ConfigResource.Type.BROKER, "0")
    d = admin.describe_configs([res])[res].result(TIMEOUT)
    assert d["log.retention.ms"].value == "7200000"
    assert d["log.retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert not d["log.retention.ms"].is_read_only  # dynamic, as in Kafka
    assert d["log.dirs"].is_read_only
    assert d["compression.type"].value == "lz4"
    assert d["log.segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert d["log.flush.interval.messages"].value == str(2**63 - 1)
    # A new topic inherits the broker-wide defaults.
    admin.create_topics([NewTopic("inherits", 1, 1)])["inherits"].result(TIMEOUT)
    t = describe_topic(admin, "inherits")
    assert t["retention.ms"].value == "7200000"
    assert t["retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert t["compression.type"].value == "lz4"

    # Static settings stay static (Kafka's INVALID_REQUEST).
    for key, code in (("log.dirs", "INVALID_REQUEST"), ("num.partitions", "INVALID_REQUEST")):
        alter = ConfigResource(ConfigResource.Type.BROKER, "0",
                               incremental_configs=[ConfigEntry(key, "1", incremental_operation=AlterConfigOpType.SET)])
        with pytest.raises(KafkaException) as e:
            admin.incremental_alter_configs([alter])[alter].result(TIMEOUT)
        assert e.value.args[0].name() == code, (key, e.value)
    # Another node's id is not this broker (by hand: librdkafka would wait for node 7).
    code, message = raw_incremental_alter(b.bootstrap, 4, "7", [("log.retention.ms", 0, "1")])
    assert code == ERR_INVALID_REQUEST, message


def test_every_kafka_broker_config_is_taken_and_described_as_kafka_does(broker_factory, tmp_path):
    """Kafka 4.4's whole broker vocabulary: keys corelog does not act on are taken (in the
    file and dynamically), described with Kafka's defaults and logged once; Kafka's refusals
    (read-only keys, per-broker keys on the default, values of the wrong type, APPEND of an
    unknown key) with Kafka's codes and words, as Apache Kafka 4.4 answers them."""
    config = tmp_path / "corelog.toml"
    config.write_text('"num.network.threads" = "8"\n'          # Kafka's, not acted on
                      '"transaction.max.timeout.ms" = 600000\n'  # corelog's own, by Kafka's name
                      '"log.cleanup.policy" = "compact"\n'     # a topic default by its broker name
                      '"connections.max.reauth.ms" = 600000\n')  # a security setting
    b = broker_factory.start(extra_args=["--config", str(config)])
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    res = ConfigResource(ConfigResource.Type.BROKER, "0")

    def describe():
        return admin.describe_configs([res])[res].result(TIMEOUT)

    d = describe()
    # Kafka's whole vocabulary (350 keys in 4.4), corelog's own start-up settings with
    # the values they took.
    assert len(d) >= 350, len(d)
    threads = d["num.network.threads"]
    assert (threads.value, threads.source, threads.is_read_only) == (
        "8", ConfigSource.STATIC_BROKER_CONFIG.value, False), threads
    reauth = d["connections.max.reauth.ms"]
    assert (reauth.value, reauth.source, reauth.is_read_only) == (
        "600000", ConfigSource.STATIC_BROKER_CONFIG.value, True), reauth
    assert d["connection.failed.authentication.delay.ms"].value == "100"
    assert d["ssl.client.auth"].value == "none"
    unset = d["sasl.enabled.mechanisms"]  # listed as Kafka lists a key it has no value for
    assert (unset.value, unset.is_read_only, unset.is_sensitive) == (None, True, False), unset
    assert d["sasl.server.max.receive.size"].value == "524288"
    io = d["num.io.threads"]
    assert (io.value, io.source) == ("8", ConfigSource.DEFAULT_CONFIG.value), io
    kept = d["group.consumer.session.timeout.ms"]  # corelog's default is Kafka's
    assert (kept.value, kept.source, kept.is_read_only) == (
        "45000", ConfigSource.DEFAULT_CONFIG.value, True), kept
    own = d["transaction.max.timeout.ms"]
    assert (own.value, own.source, own.is_read_only) == (
        "600000", ConfigSource.STATIC_BROKER_CONFIG.value, True), own
    password = d["ssl.key.password"]
    assert password.is_sensitive and password.value is None, password
    assert d["log.cleanup.policy"].value == "compact"
    admin.create_topics([NewTopic("from-file", 1, 1)])["from-file"].result(TIMEOUT)
    assert describe_topic(admin, "from-file")["cleanup.policy"].value == "compact"

    def alter(name, key, value, op=AlterConfigOpType.SET):
        if name:
            r = ConfigResource(ConfigResource.Type.BROKER, name, incremental_configs=[
                ConfigEntry(key, value, incremental_operation=op)])
            try:
                admin.incremental_alter_configs([r])[r].result(TIMEOUT)
                return 0, None
            except KafkaException as e:
                return e.args[0].code(), e.args[0].str()
        return raw_incremental_alter(b.bootstrap, 4, "", [(key, int(op.value), value)])

    relogin = "sasl.kerberos.min.time.before.relogin"
    assert alter("0", relogin, "70000") == (0, None)
    code, message = alter("", relogin, "70000")
    assert (code, message) == (ERR_INVALID_REQUEST, "Cannot update these configs at default "
                               f"cluster level, broker id must be specified: [{relogin}]")
    assert alter("", "num.network.threads", "5")[0] == 0
    code, message = alter("0", "connections.max.reauth.ms", "1000")
    assert (code, message) == (ERR_INVALID_REQUEST,
                               "Cannot update these configs dynamically: [connections.max.reauth.ms]")
    code, message = alter("0", "num.io.threads", "abc")
    assert (code, message) == (ERR_INVALID_REQUEST, "Invalid value abc for configuration "
                               "num.io.threads: Not a number of type INT")
    # corelog reads its security settings at start only (Kafka would ask for a listener
    # prefix here; both refuse with INVALID_REQUEST).
    code, message = alter("0", "ssl.key.password", "x")
    assert code == ERR_INVALID_REQUEST and "[ssl.key.password]" in message, message
    assert "x" not in message.replace("ssl.key.password", "")
    # Kafka takes keys outside its vocabulary (plugins read their own), as possible secrets.
    assert alter("0", "plugin.own.key", "s3cret") == (0, None)
    code, message = alter("0", "plugin.other.key", "x", AlterConfigOpType.APPEND)
    assert (code, message) == (ERR_INVALID_CONFIG, "Unknown config name: plugin.other.key")
    assert alter("0", "sasl.enabled.mechanisms", "PLAIN", AlterConfigOpType.APPEND)[0] == ERR_INVALID_REQUEST
    assert alter("0", "num.io.threads", "", AlterConfigOpType.DELETE) == (0, None)

    for _ in range(2):
        d = describe()
        r = d[relogin]
        assert (r.value, r.source, r.is_read_only) == (
            "70000", ConfigSource.DYNAMIC_BROKER_CONFIG.value, False), r
        assert d["num.network.threads"].value == "5"
        assert d["num.network.threads"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
        plugin = d["plugin.own.key"]
        assert plugin.is_sensitive and plugin.value is None and plugin.is_read_only, plugin
        assert raw_describe(b.bootstrap, 4, "") == {"num.network.threads": ("5", 3)}
        b.restart()
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
    log = b.log_path.read_text()
    assert log.count(f"key={relogin}") >= 1 and "does not act on it" in log
    assert "s3cret" not in log

    # A typo in the file is still an error.
    bad = tmp_path / "typo.toml"
    bad.write_text('"num.netwrok.threads" = 8\n')
    with pytest.raises(Exception):
        broker_factory.start(extra_args=["--config", str(bad)])


def test_broker_rack_is_described_as_kafka_describes_it(broker_factory):
    """broker.rack: the start-up value (STATIC_BROKER_CONFIG, read-only, its own synonym),
    or listed with a null value from Kafka's default when unset."""
    racked = broker_factory.start(extra_args=["--rack", "rack-a"])
    admin = AdminClient({"bootstrap.servers": racked.bootstrap})
    res = ConfigResource(ConfigResource.Type.BROKER, "0")
    d = admin.describe_configs([res])[res].result(TIMEOUT)
    rack = d["broker.rack"]
    assert (rack.value, rack.source, rack.is_read_only) == (
        "rack-a", ConfigSource.STATIC_BROKER_CONFIG.value, True), rack
    assert [(s.name, s.value, s.source) for s in rack.synonyms.values()] == [
        ("broker.rack", "rack-a", ConfigSource.STATIC_BROKER_CONFIG.value)]
    plain = broker_factory.start()
    admin = AdminClient({"bootstrap.servers": plain.bootstrap})
    d = admin.describe_configs([res])[res].result(TIMEOUT)
    rack = d["broker.rack"]
    assert (rack.value, rack.source, rack.is_read_only) == (
        None, ConfigSource.DEFAULT_CONFIG.value, True), rack
    assert not rack.synonyms


def test_dynamic_broker_configs_apply_to_topics_at_once_and_persist(broker_factory):
    b = broker_factory.start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("dyn", 1, 1, config={"segment.bytes": "1048576"}),
                         NewTopic("dyn-own", 1, 1, config={"retention.ms": "3600000"})])["dyn"].result(TIMEOUT)
    time.sleep(0.5)

    def alter(name, entries):
        if name:
            res = ConfigResource(ConfigResource.Type.BROKER, name, incremental_configs=[
                ConfigEntry(k, v, incremental_operation=op) for k, v, op in entries])
            admin.incremental_alter_configs([res])[res].result(TIMEOUT)
        else:  # librdkafka cannot name the cluster-wide default: by hand
            code, message = raw_incremental_alter(b.bootstrap, 4, "", [(k, int(op.value), v) for k, v, op in entries])
            assert code == 0, message

    SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE
    # The cluster-wide default, then this node's own (stronger) value.
    alter("", [("log.retention.ms", "86400000", SET), ("log.cleanup.policy", "compact,delete", SET)])
    t = describe_topic(admin, "dyn")
    assert t["retention.ms"].value == "86400000"
    assert t["retention.ms"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    assert set(t["cleanup.policy"].value.split(",")) == {"compact", "delete"}
    alter("0", [("log.retention.ms", "43200000", SET)])
    t = describe_topic(admin, "dyn")
    assert t["retention.ms"].value == "43200000"
    assert t["retention.ms"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    # A topic's own override still wins.
    assert describe_topic(admin, "dyn-own")["retention.ms"].value == "3600000"
    # The "" resource describes just the cluster-wide layer.
    assert raw_describe(b.bootstrap, 4, "") == {"log.retention.ms": ("86400000", 3),
                                                "log.cleanup.policy": ("compact,delete", 3)}
    # Bad values change nothing.
    with pytest.raises(KafkaException) as e:
        alter("0", [("log.segment.bytes", "12", SET)])
    assert e.value.args[0].name() == "INVALID_CONFIG"
    # A default that a topic's own configs cannot live with is refused: the compacted
    # topic keeps its settings instead of falling back to the (deleting) defaults.
    admin.create_topics([NewTopic("dyn-compacted", 1, 1, config={
        "cleanup.policy": "compact", "min.compaction.lag.ms": "86400000"})])["dyn-compacted"].result(TIMEOUT)
    with pytest.raises(KafkaException) as e:
        alter("0", [("log.cleaner.max.compaction.lag.ms", "3600000", SET)])
    assert e.value.args[0].name() == "INVALID_CONFIG" and "dyn-compacted" in str(e.value)
    assert describe_topic(admin, "dyn-compacted")["cleanup.policy"].value == "compact"

    b.restart()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    t = describe_topic(admin, "dyn")
    assert t["retention.ms"].value == "43200000"
    alter("0", [("log.retention.ms", "", DELETE)])
    assert describe_topic(admin, "dyn")["retention.ms"].value == "86400000"
    alter("", [("log.retention.ms", "", DELETE), ("log.cleanup.policy", "", DELETE)])
    t = describe_topic(admin, "dyn")
    assert t["retention.ms"].value == "604800000"
    assert t["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value


def test_dynamic_segment_bytes_rolls_existing_partitions(broker_factory):
    """The new default reaches the open partitions' logs, not just the descriptions."""
    b = broker_factory.start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("rolls", 1, 1)])["rolls"].result(TIMEOUT)
    res = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
        ConfigEntry("log.segment.bytes", "65536", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(TIMEOUT)
    from confluent_kafka import Producer
    # Batches of about 10 KB, so that several fill each 64 KiB segment.
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "batch.size": 10_000})
    for i in range(400):
        p.produce("rolls", value=b"x" * 1000)
    assert p.flush(TIMEOUT) == 0
    segments = list((b.data_dir).glob("**/rolls-0/*.log"))
    assert len(segments) >= 4, segments


def test_flush_configs_are_accepted_and_applied(broker_factory):
    b = broker_factory.start(extra_args=["--durability", "interval"])
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("flushed", 1, 1, config={"flush.messages": "1"}),
                         NewTopic("flushed-ms", 1, 1, config={"flush.ms": "10"})])["flushed"].result(TIMEOUT)
    t = describe_topic(admin, "flushed")
    assert t["flush.messages"].value == "1" and t["flush.ms"].value == str(2**63 - 1)
    assert describe_topic(admin, "flushed-ms")["flush.ms"].value == "10"
    assert t["flush.messages"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    with pytest.raises(KafkaException):
        admin.create_topics([NewTopic("bad-flush", 1, 1, config={"flush.messages": "0"})])[
            "bad-flush"].result(TIMEOUT)
    # flush.messages=1: every acknowledged produce waited for an fdatasync, even in
    # interval mode (where nothing else waits for one, and the background sync runs once
    # a second): the sync count grows with them.
    from confluent_kafka import Producer
    import urllib.request

    def syncs() -> float:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
                f"http://{b.http}/metrics", timeout=5) as r:
            text = r.read().decode()
        total = 0.0
        for line in text.splitlines():
            if line.startswith("corelog_stage_latency_seconds_count") and 'stage="fsync"' in line:
                total += float(line.rsplit(" ", 1)[1])
        return total
    before = syncs()
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": 1, "linger.ms": 0})
    for i in range(20):
        p.produce("flushed", value=b"v")
        assert p.flush(TIMEOUT) == 0
    assert syncs() - before >= 20


def test_group_configs_are_described_altered_within_bounds_and_applied(broker_factory):
    """GROUP is ConfigResource type 32 (Kafka 4); librdkafka has no such type, so by hand.
    A group's consumer.* configs are stored, described as DYNAMIC_GROUP_CONFIG (source 8),
    checked against the broker's group.consumer.min/max.* bounds, and applied to the
    group's heartbeats."""
    from test_consumer_protocol import join

    broker = broker_factory()
    configs = raw_describe(broker.bootstrap, 32, "some-group")
    assert configs["consumer.session.timeout.ms"] == ("45000", 5)
    assert configs["consumer.heartbeat.interval.ms"] == ("5000", 5)
    assert configs["share.auto.offset.reset"] == ("latest", 5)
    alter = lambda ops: raw_incremental_alter(broker.bootstrap, 32, "some-group", ops)  # noqa: E731
    # SET (op 0) within Kafka's default bounds: stored, described as the group's.
    assert alter([("consumer.session.timeout.ms", 0, "50000"),
                  ("consumer.heartbeat.interval.ms", 0, "6000")]) == (0, None)
    configs = raw_describe(broker.bootstrap, 32, "some-group")
    assert configs["consumer.session.timeout.ms"] == ("50000", 8)
    assert configs["consumer.heartbeat.interval.ms"] == ("6000", 8)
    assert raw_describe(broker.bootstrap, 32, "other-group")["consumer.session.timeout.ms"] == ("45000", 5)
    # Out of bounds (a share group's key too), not a number, an unknown key:
    # INVALID_CONFIG, said why, and nothing of the request is stored.
    for ops, why in [
        ([("consumer.session.timeout.ms", 0, "1000")], "group.consumer.min.session.timeout.ms"),
        ([("consumer.heartbeat.interval.ms", 0, "16000")], "group.consumer.max.heartbeat.interval.ms"),
        ([("consumer.session.timeout.ms", 0, "soon")], "integer"),
        ([("consumer.heartbeat.interval.ms", 0, "5000"), ("share.session.timeout.ms", 0, "4500")],
         "group.share.min.session.timeout.ms"),
        ([("share.isolation.level", 0, "read_commit")], "read_committed or read_uncommitted"),
        ([("consumer.nope", 0, "1")], "not a group config"),
    ]:
        code, message = alter(ops)
        assert code == ERR_INVALID_CONFIG and why in (message or ""), (ops, code, message)
    assert raw_describe(broker.bootstrap, 32, "some-group")["consumer.heartbeat.interval.ms"] == ("6000", 8)
    # The group's heartbeats are answered with its own interval.
    answer = join(broker.bootstrap, "some-group", str(uuid.uuid4()), ["gc-topic"])
    assert (answer["error"], answer["interval"]) == (0, 6000), answer
    # DELETE (op 1): back to the broker's value.
    assert alter([("consumer.heartbeat.interval.ms", 1, None)]) == (0, None)
    assert raw_describe(broker.bootstrap, 32, "some-group")["consumer.heartbeat.interval.ms"] == ("5000", 5)
    # A broker started with its own session timeout: a static broker config (source 4),
    # and the bounds widen to take it in.
    tuned = broker_factory(extra_args=["--group-consumer-session-timeout-ms", "30000"])
    configs = raw_describe(tuned.bootstrap, 32, "some-group")
    assert configs["consumer.session.timeout.ms"] == ("30000", 4)
    assert configs["consumer.heartbeat.interval.ms"] == ("5000", 5)
    assert raw_incremental_alter(tuned.bootstrap, 32, "g2", [("consumer.session.timeout.ms", 0, "30000")]) == (0, None)


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


def raw_incremental_alter(bootstrap: str, rtype: int, name: str,
                          ops: list[tuple[str, int, str | None]]) -> tuple[int, str | None]:
    """IncrementalAlterConfigs v0 of one resource -> (error code, message)."""
    entries = [W.string(k) + W.i8(op) + W.string(v) for k, op, v in ops]
    body = W.array([W.i8(rtype) + W.string(name) + W.array(entries)]) + W.i8(0)
    _, resp = W.roundtrip(bootstrap, W.request(INCREMENTAL_ALTER_CONFIGS, 0, 6, body))
    [(code, message, answered)] = _alter_results(resp)
    assert answered == name
    return code, message


def raw_describe(bootstrap: str, rtype: int, name: str) -> dict[str, tuple[str | None, int]]:
    """DescribeConfigs v1 of one resource -> {key: (value, source)}."""
    body = W.array([W.i8(rtype) + W.string(name) + W.i32(-1)]) + W.i8(0)
    _, resp = W.roundtrip(bootstrap, W.request(DESCRIBE_CONFIGS, 1, 5, body))
    r = W.Reader(resp)
    r.i32()
    assert r.i32() == 1
    code, message, answered_type, answered = r.i16(), r.string(), r.i8(), r.string()
    assert (code, answered_type, answered) == (0, rtype, name), message
    configs = {}
    for _ in range(r.i32()):
        key, value, _read_only, source, _sensitive = r.string(), r.string(), r.i8(), r.i8(), r.i8()
        for _ in range(r.i32()):
            r.string(); r.string(); r.i8()
        configs[key] = (value, source)
    assert r.remaining() == 0
    return configs


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
    # The topic is made by the first group request (FindCoordinator), as in Kafka.
    from confluent_kafka import ConsumerGroupTopicPartitions
    admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions("g-compacted")])["g-compacted"].result(TIMEOUT)
    res = ConfigResource(ConfigResource.Type.TOPIC, "__consumer_offsets", incremental_configs=[
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as e:
        admin.incremental_alter_configs([res])[res].result(TIMEOUT)
    assert e.value.args[0].name() == "INVALID_CONFIG", e.value
    assert describe_topic(admin, "__consumer_offsets")["cleanup.policy"].value == "compact"
