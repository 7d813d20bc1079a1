"""The current broker opens data directories written by the previous release (the cheap
half of the upgrade tests, run on every commit; tests/upgrade/rolling_upgrade.py is the
rolling upgrade itself). Each fixture in tests/fixtures/previous-format is a single node's
data directory as that release left it after a clean stop (tests/upgrade/make_fixture.py
writes them), with a JSON file saying what it holds: records, topic configs, committed
offsets, committed and aborted transactions, and a metadata log that has finalized no
feature levels.

The current broker must serve all of it unchanged, keep serving the levels the earlier
release served until they are finalized (metadata.version 3.3-IV3, the rest as
configured), then finalize them through UpdateFeatures and keep everything across a
restart."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from launcher import REPO_ROOT
from test_features import api_versions_v3
from test_kafka_cli import kafka, kafka_tools  # noqa: F401  (the fixture: Kafka's jars)

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "previous-format"
CASES = sorted(FIXTURES.glob("*.json"))


def read_all(bootstrap: str, topic: str, partitions: int, isolation: str = "read_uncommitted") -> list[list[bytes]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "previous-format-reader",
                  "enable.auto.commit": False, "enable.partition.eof": True,
                  "isolation.level": isolation})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[list[bytes]] = [[] for _ in range(partitions)]
    eof: set[int] = set()
    for _ in range(600):
        if len(eof) == partitions:
            break
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                eof.add(m.partition())
            continue
        out[m.partition()].append(m.value())
    c.close()
    assert len(eof) == partitions, f"{topic}: not every partition read to its end"
    return out


def check_contents(bootstrap: str, want: dict) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    md = admin.list_topics(timeout=30)
    for topic, t in want["topics"].items():
        assert len(md.topics[topic].partitions) == t["partitions"], topic
    kept = want["topics"]["kept"]
    parts = read_all(bootstrap, "kept", kept["partitions"])
    assert [len(p) for p in parts][:3] >= [kept["records_per_partition"]] * 3
    assert parts[0][:3] == [b"v0", b"v3", b"v6"], "records in the order they were written"
    res = ConfigResource(ConfigResource.Type.TOPIC, "kept")
    configs = admin.describe_configs([res])[res].result()
    for k, v in kept["configs"].items():
        assert configs[k].value == v, k
    txn = want["topics"]["txn-topic"]
    committed = read_all(bootstrap, "txn-topic", 1, "read_committed")[0]
    assert [v for v in committed if v.startswith(b"committed")] == [f"committed{i}".encode() for i in range(txn["committed"])]
    assert not [v for v in committed if v.startswith(b"aborted")], "aborted records stay hidden"
    uncommitted = read_all(bootstrap, "txn-topic", 1)[0]
    assert len([v for v in uncommitted if v.startswith(b"aborted")]) == txn["aborted"]
    for group, topics in want["groups"].items():
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
        for topic, offsets in topics.items():
            got = c.committed([TopicPartition(topic, p) for p in range(len(offsets))], timeout=30)
            assert [tp.offset for tp in got] == offsets, (group, topic)
        c.close()


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_the_current_broker_serves_a_previous_release_data_directory(case: Path, kafka_tools,  # noqa: F811
                                                                     broker_factory, tmp_path):
    want = json.loads(case.read_text())
    with tarfile.open(case.with_suffix(".tar.gz")) as tar:
        tar.extractall(tmp_path, filter="data")
    b = broker_factory(data_dir=tmp_path / "data")
    check_contents(b.bootstrap, want)

    # Not finalized yet: what the earlier release served.
    _, _, finalized, _ = api_versions_v3(b.bootstrap)
    assert finalized == {"metadata.version": 7, "transaction.version": 2, "group.version": 1,
                         "share.version": 1}, finalized

    # The transactional id goes on (its epoch is fenced forward, not lost).
    t = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": want["transactional_ids"][0]})
    t.init_transactions(30)
    t.begin_transaction()
    t.produce("txn-topic", value=b"after-upgrade")
    t.commit_transaction(30)

    # Finalized through the metadata log: the same levels, now the cluster's, then a restart.
    r = kafka("kafka-features", "--bootstrap-server", b.bootstrap, "upgrade", "--metadata", "4.4")
    assert "metadata.version was upgraded to 33." in r.out, r.why()
    b.restart()
    _, _, finalized, _ = api_versions_v3(b.bootstrap)
    assert finalized == {"metadata.version": 33, "transaction.version": 2, "group.version": 1,
                         "share.version": 1}, finalized
    check_contents(b.bootstrap, want)
    assert read_all(b.bootstrap, "txn-topic", 1, "read_committed")[0][-1] == b"after-upgrade"
