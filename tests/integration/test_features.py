"""Cluster-wide feature levels (KIP-584) as Kafka's own ``kafka-features`` tool sees and
changes them: every broker advertises the levels the metadata log finalized (ApiVersions
v3 ``finalized_features``), ``kafka-features upgrade|downgrade|disable`` changes them
through UpdateFeatures for the whole cluster, refusals come back in Kafka's words, the
levels survive restarts, and a feature at level 0 takes its APIs away (the consumer group
protocol at ``group.version`` 0) and the transaction coordinator follows
``transaction.version``.

The expectations were read off a real Kafka 4.4 broker with the same tool (the messages
of FeatureControlManager)."""

from __future__ import annotations

import re

import pytest

import kwire as W
from test_kafka_cli import kafka, kafka_tools  # noqa: F401  (the fixture: jars, a JVM archive)

API_CONSUMER_GROUP_HEARTBEAT = 68


def api_versions_v3(bootstrap: str) -> tuple[set[int], dict[str, tuple[int, int]], dict[str, int], int]:
    """-> (api keys, supported {name: (min, max)}, finalized {name: level}, epoch)."""
    body = W.compact_string("corelog-it") + W.compact_string("1") + W.uvarint(0)
    frame = W.request(W.API_VERSIONS, 3, 1, body, header_v2=True)
    _, resp = W.roundtrip(bootstrap, frame)
    r = W.Reader(resp)
    assert r.i16() == 0
    apis = set()
    for _ in range(r.uvarint() - 1):
        apis.add(r.i16())
        r.i16(), r.i16()
        assert r.uvarint() == 0
    r.i32()  # throttle
    supported, finalized, epoch = {}, {}, -1
    for _ in range(r.uvarint()):
        tag, size = r.uvarint(), r.uvarint()
        t = W.Reader(r.take(size))
        if tag == 0:
            for _ in range(t.uvarint() - 1):
                name = t.take(t.uvarint() - 1).decode()
                supported[name] = (t.i16(), t.i16())
                assert t.uvarint() == 0
        elif tag == 1:
            epoch = t.i64()
        elif tag == 2:
            for _ in range(t.uvarint() - 1):
                name = t.take(t.uvarint() - 1).decode()
                hi, lo = t.i16(), t.i16()
                assert hi == lo
                finalized[name] = hi
                assert t.uvarint() == 0
    return apis, supported, finalized, epoch


def features(run) -> dict[str, tuple[str, str, str]]:
    """kafka-features describe -> {feature: (supported min, supported max, finalized)}."""
    out = {}
    for line in run.lines:
        m = re.match(r"Feature: (\S+)\s+SupportedMinVersion: (\S+)\s+SupportedMaxVersion: (\S+)\s+"
                     r"FinalizedVersionLevel: (\S+)", line)
        if m:
            out[m.group(1)] = (m.group(2), m.group(3), m.group(4))
    return out


@pytest.fixture(scope="module")
def cluster(kafka_tools, module_broker_factory):  # noqa: F811
    return module_broker_factory.cluster(voters=3, shards=1)


def test_a_new_cluster_is_finalized_at_the_newest_levels_on_every_broker(cluster):
    d = features(kafka("kafka-features", "--bootstrap-server", cluster[0].bootstrap, "describe"))
    assert d["metadata.version"] == ("3.3-IV3", "4.4-IV2", "4.4-IV2"), d
    assert d["transaction.version"] == ("0", "2", "2"), d
    assert d["group.version"] == ("0", "1", "1"), d
    assert d["share.version"] == ("0", "1", "1"), d
    for b in cluster:
        apis, supported, finalized, epoch = api_versions_v3(b.bootstrap)
        assert finalized == {"metadata.version": 33, "transaction.version": 2,
                             "group.version": 1, "share.version": 1}, (b.name, finalized)
        assert supported["metadata.version"] == (7, 33)
        assert API_CONSUMER_GROUP_HEARTBEAT in apis
        assert epoch > 0


def test_levels_change_for_the_whole_cluster_through_any_broker(cluster):
    boot = cluster[1].bootstrap
    r = kafka("kafka-features", "--bootstrap-server", boot, "downgrade", "--feature", "transaction.version=1")
    assert "transaction.version was downgraded to 1." in r.out, r.why()
    r = kafka("kafka-features", "--bootstrap-server", boot, "disable", "--feature", "group.version")
    assert "group.version was disabled." in r.out, r.why()
    for b in cluster:
        apis, _, finalized, _ = api_versions_v3(b.bootstrap)
        assert finalized.get("transaction.version") == 1, (b.name, finalized)
        assert "group.version" not in finalized, (b.name, finalized)
        # Kafka leaves a level-0 feature's APIs out of ApiVersions.
        assert API_CONSUMER_GROUP_HEARTBEAT not in apis, b.name
    r = kafka("kafka-features", "--bootstrap-server", boot, "upgrade", "--feature", "transaction.version=2",
              "--feature", "group.version=1", "--dry-run")
    assert "transaction.version can be upgraded to 2." in r.out, r.why()
    assert api_versions_v3(boot)[2].get("transaction.version") == 1, "a dry run changes nothing"
    r = kafka("kafka-features", "--bootstrap-server", boot, "upgrade", "--feature", "transaction.version=2",
              "--feature", "group.version=1")
    assert "transaction.version was upgraded to 2." in r.out, r.why()
    for b in cluster:
        apis, _, finalized, _ = api_versions_v3(b.bootstrap)
        assert finalized["transaction.version"] == 2 and finalized["group.version"] == 1
        assert API_CONSUMER_GROUP_HEARTBEAT in apis


def test_refusals_are_kafkas(cluster):
    boot = cluster[2].bootstrap

    def refused(*args: str) -> str:
        r = kafka("kafka-features", "--bootstrap-server", boot, *args, check=False)
        assert r.rc != 0, r.why()
        return r.text

    t = refused("upgrade", "--feature", "bogus.version=1")
    assert "Invalid update version 1 for feature bogus.version." in t and "does not support this feature" in t, t
    t = refused("upgrade", "--feature", "transaction.version=9")
    assert "Invalid update version 9 for feature transaction.version." in t and "only supports versions 0-2" in t, t
    t = refused("downgrade", "--metadata", "3.9")
    assert ("Unsupported metadata.version downgrade from 33 to 21. Refusing to perform the requested "
            "downgrade because it might delete metadata information.") in t, t
    t = refused("upgrade", "--feature", "transaction.version=1")
    assert "Can't downgrade the version of this feature without setting the upgrade type" in t, t
    # Nothing of a refused request was applied.
    assert api_versions_v3(boot)[2]["transaction.version"] == 2


def test_levels_survive_a_restart_of_the_whole_cluster(cluster):
    kafka("kafka-features", "--bootstrap-server", cluster[0].bootstrap, "downgrade",
          "--feature", "share.version=0")
    for b in cluster:
        b.stop()
    from launcher import start_all
    start_all(cluster)
    for b in cluster:
        _, _, finalized, _ = api_versions_v3(b.bootstrap)
        assert "share.version" not in finalized and finalized["metadata.version"] == 33, (b.name, finalized)
    kafka("kafka-features", "--bootstrap-server", cluster[0].bootstrap, "upgrade", "--feature", "share.version=1")
