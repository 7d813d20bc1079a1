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
- `admin_failover`: librdkafka's, the Java and kafka-python's admin clients creating a
  topic every 0.5 s while the quorum leader is SIGKILLed, librdkafka and Java started
  from the broker that dies, kafka-python from one that stays; the seconds from the new
  leader's election to each client's first successful create.

    python3 benches/admin_against_kafka.py [--corelog]

--corelog runs the same on three corelog brokers (target/release/corelog) instead.
Results are printed and written to benches/results/<stamp>-admin-against-kafka.json.
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
import kwire  # noqa: E402
import topic_admin_cases as cases  # noqa: E402
from harness import write_json_results  # noqa: E402
from replication import CorelogCluster, KafkaCluster  # noqa: E402


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
                             "kafka-python": survivors[0]}, victim=leader)
        try:
            af.wait_first_successes(creators, 3, 120)
            killed_at = time.time()
            procs[victim].send_signal(signal.SIGKILL)
            elected_at = af.wait_new_leader(survivors, leader, 60)
            af.wait_recovered(creators, killed_at, 120)
            time.sleep(3)
        finally:
            af.stop(creators)
        out["election_s"] = round(elected_at - killed_at, 2)
        out["recovered_s_after_election"] = af.report(creators, killed_at, elected_at)
        out["failures_after_recovery"] = {
            c.client: len(c.failures_after(f.end)) if (f := c.first_success_after(killed_at)) else None
            for c, _ in creators}
    finally:
        cluster.stop()
    write_json_results(f"admin-against-{kind}", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
