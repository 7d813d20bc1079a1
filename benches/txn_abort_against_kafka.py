#!/usr/bin/env python3
"""A client's abort in the states a network partition leaves a transaction in
(tests/integration/txn_abort_states.py: nothing reached the coordinator, a commit before
it, the coordinator's own abort of the timed out transaction under transaction versions 1
and 2), asked of Apache Kafka (single KRaft node, the release tests/java/pom.xml pins)
and of corelog (target/release/corelog, or CORELOG_BIN), in the same raw frames; prints
both answers per state and writes benches/results/<stamp>-txn-abort-against-kafka.json.
Exits 1 where corelog answers otherwise than Kafka.

    python3 benches/txn_abort_against_kafka.py
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "integration"))
sys.path.insert(0, str(ROOT / "benches"))

import kafka_peer  # noqa: E402
import txn_abort_states  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from launcher import Broker  # noqa: E402

TOPIC = "txn-abort-states"
# Both brokers look for timed out transactions every 500 ms.
INTERVAL_MS = "500"


def answers_of(bootstrap: str, tag: str) -> dict:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(60)
    time.sleep(1)
    return txn_abort_states.abort_answers(bootstrap, TOPIC, tag)


def main() -> int:
    kafka_peer.fetch()
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        kafka = kafka_peer.KafkaBroker(work, extra={
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": INTERVAL_MS})
        try:
            from_kafka = answers_of(kafka.bootstrap, "kafka")
        finally:
            kafka.stop()
        corelog = Broker(work / "corelog", extra_args=[
            "--transaction-abort-timed-out-transaction-cleanup-interval-ms", INTERVAL_MS]).start()
        try:
            from_corelog = answers_of(corelog.bootstrap, "corelog")
        finally:
            corelog.stop()
    print(f"{'state':<14} {'Kafka ' + kafka_peer.version():<28} corelog")
    for state in from_kafka:
        print(f"{state:<14} {str(from_kafka[state]):<28} {from_corelog[state]}")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = ROOT / "benches" / "results" / f"{stamp}-txn-abort-against-kafka.json"
    out.write_text(json.dumps({"kafka": from_kafka, "corelog": from_corelog}, indent=2) + "\n")
    print(f"written {out.relative_to(ROOT)}")
    return 0 if from_kafka == from_corelog else 1


if __name__ == "__main__":
    sys.exit(main())
