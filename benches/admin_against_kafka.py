#!/usr/bin/env python3
"""The admin checks of tests/integration run against three Apache Kafka brokers (combined
KRaft mode, the release tests/java/pom.xml pins), to show that what the tests expect is
what Kafka does:

- `topic_admin_cases`: CreateTopics' and CreatePartitions' request checks, their codes and
  messages (kafka-python with raise_errors=False), and explicit replica lists for new
  partitions;
- `coordinator_move`: librdkafka consumers joining a group while the leadership of its
  `__consumer_offsets` partition moves; every consumer error the application saw
  (the joins the old coordinator held must be answered with a code clients retry);
- `admin_failover`: librdkafka's, the Java and two of kafka-python's admin clients
  creating a topic every 0.5 s while the quorum leader is SIGKILLed: librdkafka, Java and
  "kafka-python-killed" started from the broker that dies (kafka-python-killed also
  holding it as its cached controller id), "kafka-python-survivor" from one that stays
  (holding a survivor's id); the seconds from the new leader's election to each client's
  first successful create (null: none within WATCH_S of the election), and what the
  failed creates were;
- `broker_rack`: DescribeConfigs (librdkafka) of a broker resource's `broker.rack`, unset
  (broker 1 of the cluster) and set to rack-a (a single broker started with it), against
  what tests/integration/test_topic_config.py's
  test_broker_rack_is_described_as_kafka_describes_it asserts: value, source, read-only,
  synonyms.

    python3 benches/admin_against_kafka.py [--corelog]

--corelog runs the same on corelog brokers (target/release/corelog, or CORELOG_BIN)
instead. Results are printed and written to
benches/results/<stamp>-admin-against-kafka.json (-corelog.json with --corelog).
"""
from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benches"))
sys.path.insert(0, str(ROOT / "tests" / "integration"))
import admin_failover as af  # noqa: E402
import coordinator_move  # noqa: E402
import kafka_peer  # noqa: E402
import kwire  # noqa: E402
import launcher  # noqa: E402
import topic_admin_cases as cases  # noqa: E402
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource  # noqa: E402
from harness import write_json_results  # noqa: E402
from replication import CorelogCluster, KafkaCluster  # noqa: E402

# The clients that must create topics again soon after the election, and how long after
# it every client is watched (past Kafka's broker.session.timeout.ms, 9 s by default,
# after which the dead broker is fenced and no longer listed in Metadata).
RECOVERING = {"librdkafka", "java", "kafka-python-survivor"}
WATCH_S = 30.0
RACK = "rack-a"


def _source(v: int) -> str:
    try:
        return ConfigSource(v).name
    except ValueError:
        return str(v)


def describe_broker_rack(bootstrap: str, node_id: int) -> dict:
    """broker.rack of broker `node_id`'s DescribeConfigs (librdkafka asks with
    synonyms), as test_topic_config.py reads it."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ConfigResource.Type.BROKER, str(node_id))
    d = admin.describe_configs([res])[res].result(30)
    e = d.get("broker.rack")
    if e is None:
        return {"listed": False}
    return {"listed": True, "value": e.value, "source": _source(e.source),
            "is_read_only": e.is_read_only, "is_sensitive": e.is_sensitive,
            "synonyms": [[s.name, s.value, _source(s.source)] for s in e.synonyms.values()]}


def rack_mismatches(got: dict, rack: str | None) -> list[str]:
    """What differs from test_topic_config.py's assertions: set, (rack, STATIC_BROKER_CONFIG,
    read-only) and its one synonym (broker.rack, rack, STATIC_BROKER_CONFIG); unset,
    (None, DEFAULT_CONFIG, read-only) and no synonyms."""
    if not got.get("listed"):
        return ["broker.rack not listed"]
    if rack is None:
        want = {"value": None, "source": "DEFAULT_CONFIG", "is_read_only": True, "synonyms": []}
    else:
        want = {"value": rack, "source": "STATIC_BROKER_CONFIG", "is_read_only": True,
                "synonyms": [["broker.rack", rack, "STATIC_BROKER_CONFIG"]]}
    return [f"{k}: {got[k]!r}, the test asserts {v!r}" for k, v in want.items() if got[k] != v]


def broker_rack(kind: str, work: Path, cluster_bootstrap: str, node_id: int) -> dict:
    """broker.rack unset (live broker `node_id` of the cluster) and set (a single broker
    started with broker.rack / --rack, Kafka's node 1, corelog's node 0)."""
    out: dict = {"unset": describe_broker_rack(cluster_bootstrap, node_id)}
    out["unset"]["node"] = node_id
    out["unset"]["mismatches"] = rack_mismatches(out["unset"], None)
    if kind == "kafka":
        b = kafka_peer.KafkaBroker(work, extra={"broker.rack": RACK})
        try:
            out["set"] = describe_broker_rack(b.bootstrap, 1)
        finally:
            b.stop()
    else:
        b = launcher.Broker(work / "corelog-rack", name="corelog-rack", log_level="warn",
                            extra_args=["--rack", RACK])
        b.start()
        try:
            out["set"] = describe_broker_rack(b.bootstrap, 0)
        finally:
            b.teardown()
    out["set"]["mismatches"] = rack_mismatches(out["set"], RACK)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corelog", action="store_true", help="three corelog brokers instead")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="admin-against-"))
    if args.corelog:
        cluster = CorelogCluster(work, 3, 1, ["--broker-session-timeout-ms", "3000",
                                              "--broker-heartbeat-interval-ms", "500"])
        kind = "corelog"
    else:
        cluster = KafkaCluster(work)
        kind = "kafka"
    boots, procs = cluster.bootstraps, cluster.procs
    out: dict = {"broker": kind}
    try:
        out["create_topics_mismatches"] = cases.check_create_topics(",".join(boots), "checks")
        out["create_partitions_mismatches"] = cases.check_create_partitions(",".join(boots), "grow")
        errors, coordinators = coordinator_move.run(",".join(boots), "cm", "cm-group")
        out["coordinator_move"] = {"coordinators": coordinators, "consumer_errors": errors}
        leader = kwire.describe_quorum_leader(boots[0])
        victim = leader - 1  # node ids are 1..3 in both clusters
        survivors = [b for i, b in enumerate(boots) if i != victim]
        creators = af.start({"librdkafka": boots[victim], "java": boots[victim],
                             "kafka-python-survivor": survivors[0],
                             "kafka-python-killed": boots[victim]}, victim=leader)
        try:
            af.wait_first_successes(creators, 3, 120)
            killed_at = time.time()
            procs[victim].send_signal(signal.SIGKILL)
            elected_at = af.wait_new_leader(survivors, leader, 60)
            af.wait_recovered(creators, killed_at, 120, RECOVERING)
            time.sleep(max(3.0, elected_at + WATCH_S - time.time()))
        finally:
            af.stop(creators)
        out["killed_node"] = leader
        out["election_s"] = round(elected_at - killed_at, 2)
        out["recovered_s_after_election"] = af.report(creators, killed_at, elected_at)
        out["failures_after_recovery"] = {
            c.client: len(c.failures_after(f.end)) if (f := c.first_success_after(killed_at)) else None
            for c, _ in creators}
        out["failover_details"] = af.details(creators, killed_at, elected_at)
        live = 0 if victim != 0 else 1
        out["broker_rack"] = broker_rack(kind, work, boots[live], live + 1)
    finally:
        cluster.stop()
    write_json_results(f"admin-against-{kind}", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
