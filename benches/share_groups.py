#!/usr/bin/env python3
"""Share groups (KIP-932) on corelog and on Apache Kafka in the same run (issue 34, item 7).

    python3 benches/share_groups.py [--quick] [--no-build] [--rounds N] [--records M]
        [--consumers 1,4,16] [--brokers corelog,kafka]

A broker may name the group's share.isolation.level after a colon, to set one beside the
other in the same run: --brokers corelog,corelog:read_committed (the A/B of
read_committed's cost; read_uncommitted otherwise, Kafka's default).

Two measures, each on a fresh single-node broker of each kind, the kinds alternated over
the rounds:

- **Throughput through one share partition.** benches/java/ShareBench.java (Kafka's Java
  client, kafka-clients as tests/java/pom.xml pins it, from .cache/kafka/libs) fills a
  one-partition topic with M records (200,000 of 100 bytes), then N KafkaShareConsumers
  of one group (implicit acknowledgement: each poll accepts the last one's records,
  max.poll.records 500) read it from the start: records per second from their start
  until they have received all M and closed (their closes acknowledge the last poll).
  N = 1, 4, 16: a share partition is shared by all of them.
- **Redelivery after a lock expiry.** A share member (tests/integration/kwire.py's raw
  ShareFetch client) acquires 100 records and goes silent; a second member fetches in a
  loop (MaxWaitMs 100). Measured: from the first member's acquisition to the second's,
  less the lock duration (1,000 ms on both brokers: Kafka's
  group.share.record.lock.duration.ms with its minimum lowered, corelog's
  --group-share-record-lock-duration-ms): how late the records come back.

Both brokers at their defaults otherwise; Kafka's share-state topic at one replica (a
single node). Limits in the same run: loopback TCP (iperf3, when installed); on 2 cores
the clients and the broker share the CPU, which the results state.

Writes benches/results/<stamp>-share-groups/{summary.json,summary.md} and each JVM's
output. Default: 2 rounds; --quick: 1 round, 50,000 records.
"""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness as H  # noqa: E402
import kafka_peer as P  # noqa: E402

ROOT = H.ROOT
sys.path.insert(0, str(ROOT / "tests" / "integration"))
import kwire as W  # noqa: E402

DRIVER = ROOT / "benches" / "java" / "ShareBench.java"
LOCK_MS = int(os.environ.get("SHARE_BENCH_LOCK_MS", "1000"))
CORELOG_FLAGS = ["--group-share-record-lock-duration-ms", str(LOCK_MS)]
KAFKA_EXTRA = {
    "group.share.record.lock.duration.ms": str(LOCK_MS),
    "group.share.min.record.lock.duration.ms": str(LOCK_MS),
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
}
BROKERS = {
    "corelog": f"corelog, defaults, record lock {LOCK_MS} ms",
    "kafka": f"Apache Kafka (KRaft, one node), defaults, record lock {LOCK_MS} ms, share state at one replica",
}


def log(msg: str) -> None:
    print(f"[share-groups] {msg}", flush=True)


def split_kind(kind: str) -> tuple[str, str]:
    """`corelog:read_committed` -> ("corelog", "read_committed")."""
    broker, _, isolation = kind.partition(":")
    return broker, isolation or "read_uncommitted"


def start_broker(kind: str, work: Path, out: Path, tag: str, shards: int):
    if split_kind(kind)[0] == "corelog":
        return H.WorkloadBroker(work, shards, CORELOG_FLAGS)
    return P.KafkaBroker(work, P.SERVER_HEAP, KAFKA_EXTRA, log_path=out / f"{tag}-server.log")


def throughput(broker, consumers: int, records: int, classes: Path, out_log: Path, case: str,
               isolation: str) -> dict:
    argv = ["java", "-Xmx1g", f"-Dlog4j2.configurationFile={P.KAFKA_CLI.parent / 'log4j2.properties'}",
            "-cp", f"{classes}{os.pathsep}{P.LIBS}/*", "ShareBench", f"bootstrap={broker.bootstrap}",
            f"topic=sb-{case}", f"group=sb-{case}-group", f"consumers={consumers}", f"records={records}",
            "size=100", f"isolation={isolation}"]
    with open(out_log, "w") as jlog:
        jlog.write(H.portable(" ".join(argv)) + "\n")
        jlog.flush()
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
        lines = p.stdout.splitlines()
        jlog.write("\n".join(lines[:200] + [l for l in lines[200:] if l.startswith("RESULT ")]) + "\n")
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return {"consumers": consumers, "error": f"no result (exit {p.returncode}); see {out_log.name}"}


def set_earliest(bootstrap: str, group: str, isolation: str) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
    r = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("share.isolation.level", isolation, incremental_operation=AlterConfigOpType.SET)])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.incremental_alter_configs([r])[r].result(60)


def redelivery(broker, case: str, isolation: str, records: int = 100) -> dict:
    """From one member's acquisition to another's, after the first goes silent."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    boot = broker.bootstrap
    topic, group = f"rd-{case}", f"rd-{case}-group"
    admin = AdminClient({"bootstrap.servers": boot})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(60)
    set_earliest(boot, group, isolation)
    p = Producer({"bootstrap.servers": boot, "linger.ms": 5})
    for i in range(records):
        p.produce(topic, f"r{i}".encode())
    p.flush(60)
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    deadline = time.monotonic() + 60
    while True:
        joined = W.share_heartbeat(boot, group, first, 0, [topic])
        if joined["error"] == 0 and joined["assignment"]:
            break
        assert time.monotonic() < deadline, f"no assignment: {joined}"
        time.sleep(0.2)
    tid = next(iter(joined["assignment"]))
    W.share_heartbeat(boot, group, second, 0, [topic])
    a, b = W.ShareClient(boot, group, first), W.ShareClient(boot, group, second)
    try:
        epoch = 0
        while True:
            got = a.fetch(epoch, tid, max_records=records, max_wait_ms=500)["partitions"].get((tid, 0), {})
            epoch += 1
            if got.get("acquired"):
                break
            assert time.monotonic() < deadline, f"nothing acquired: {got}"
        acquired_at = time.monotonic()
        held = sum(last - f + 1 for f, last, _ in got["acquired"])
        epoch_b = 0
        while True:
            again = b.fetch(epoch_b, tid, max_records=records, max_wait_ms=100)["partitions"].get((tid, 0), {})
            epoch_b += 1
            if again.get("acquired"):
                break
            # The first member's heartbeats keep it in the group meanwhile.
            W.share_heartbeat(boot, group, first, joined["epoch"], None)
            assert time.monotonic() < deadline, "never delivered again"
        back_at = time.monotonic()
    finally:
        a.close()
        b.close()
    latency = (back_at - acquired_at) * 1000
    return {"held": held, "redelivered": sum(last - f + 1 for f, last, _ in again["acquired"]),
            "delivery_count": again["acquired"][0][2], "latency_ms": round(latency, 1),
            "excess_ms": round(latency - LOCK_MS, 1)}


def med(values):
    values = [v for v in values if isinstance(v, (int, float))]
    return round(statistics.median(values), 1) if values else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--records", type=int)
    ap.add_argument("--consumers", default="1,4,16")
    ap.add_argument("--redeliveries", type=int, default=3)
    ap.add_argument("--brokers", default="corelog,kafka")
    ap.add_argument("--shards", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--skip-redelivery", action="store_true")
    args = ap.parse_args()
    args.rounds = args.rounds or (1 if args.quick else 2)
    args.records = args.records or (50_000 if args.quick else 200_000)
    kinds = args.brokers.split(",")
    counts = [int(c) for c in args.consumers.split(",")]
    started = time.time()
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-share-groups" + (
        "-quick" if args.quick else "")
    out = ROOT / "benches" / "results" / stamp
    out.mkdir(parents=True, exist_ok=True)
    if not args.no_build:
        log("building the release binary")
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "corelog"], cwd=ROOT, check=True)
    digest = hashlib.sha256(H.BROKER.read_bytes()).hexdigest()[:16]
    kafka_version = P.fetch() if any(split_kind(k)[0] == "kafka" for k in kinds) else P.version()
    work = Path(tempfile.mkdtemp(prefix="corelog-share-groups-", dir=os.environ.get("TMPDIR", "/tmp")))
    classes = work / "classes"
    subprocess.run(["javac", "-d", str(classes), "-cp", f"{P.LIBS}/*", str(DRIVER)], check=True)
    limits = {"loopback_mb_s": H.iperf3()}
    runs: dict[str, dict] = {k: {"throughput": {c: [] for c in counts}, "redelivery": []} for k in kinds}
    case = 0
    for rnd in range(args.rounds):
        order = kinds if rnd % 2 == 0 else list(reversed(kinds))
        for kind in order:
            tag = f"{kind}-r{rnd + 1}"
            log(f"round {rnd + 1}/{args.rounds}: {kind}")
            broker = start_broker(kind, work, out, tag, args.shards)
            try:
                for c in counts:
                    case += 1
                    try:
                        r = throughput(broker, c, args.records, classes, out / f"{tag}-c{c}.log", f"{case}",
                                       split_kind(kind)[1])
                    except Exception as e:  # noqa: BLE001 — keep the other cases
                        r = {"consumers": c, "error": str(e)}
                    log(f"  throughput {json.dumps(r)}")
                    runs[kind]["throughput"][c].append(r)
                for _ in range(0 if args.skip_redelivery else args.redeliveries):
                    case += 1
                    try:
                        r = redelivery(broker, f"{case}", split_kind(kind)[1])
                    except Exception as e:  # noqa: BLE001
                        r = {"error": repr(e)}
                    log(f"  redelivery {json.dumps(r)}")
                    runs[kind]["redelivery"].append(r)
            finally:
                broker.stop()
    summary = {}
    for kind in kinds:
        summary[kind] = {
            "records_per_s": {c: med([r.get("records_per_s") for r in runs[kind]["throughput"][c]
                                      if r.get("distinct", 0) >= args.records]) for c in counts},
            "failed": [r for c in counts for r in runs[kind]["throughput"][c]
                       if r.get("error") or r.get("distinct", 0) < args.records],
            "redelivery_excess_ms": med([r.get("excess_ms") for r in runs[kind]["redelivery"]]),
            "redelivery_failed": [r for r in runs[kind]["redelivery"] if r.get("error")],
        }
    doc = {"stamp": stamp, "command": "python3 benches/share_groups.py " + " ".join(sys.argv[1:]),
           "cpus": os.cpu_count(), "kernel": os.uname().release, "rounds": args.rounds,
           "records": args.records, "record_bytes": 100, "lock_ms": LOCK_MS,
           "brokers": {k: f"{BROKERS[split_kind(k)[0]]}, share.isolation.level {split_kind(k)[1]}"
                       for k in kinds}, "corelog_binary_sha256": digest,
           "kafka_version": kafka_version, "limits": limits, "summary": summary, "runs": runs,
           "seconds": round(time.time() - started, 1)}
    (out / "summary.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
    lines = [f"# Share groups ({stamp})", "",
             f"`{doc['command']}`; {args.rounds} round(s), medians; CPUs {doc['cpus']}; loopback "
             f"{limits.get('loopback_mb_s')} MB/s; Kafka {kafka_version}; {args.records} records of 100 B.", "",
             "| broker | " + " | ".join(f"{c} consumer(s), records/s" for c in counts)
             + f" | redelivery after a {LOCK_MS} ms lock, excess (ms) |",
             "| --- | " + " | ".join("---" for _ in counts) + " | --- |"]
    for kind in kinds:
        s = summary[kind]
        lines.append(f"| {kind} | " + " | ".join(str(s["records_per_s"][c]) for c in counts)
                     + f" | {s['redelivery_excess_ms']} |"
                     + (f" failed: {s['failed'] + s['redelivery_failed']}" if s["failed"] or s["redelivery_failed"] else ""))
    md = "\n".join(lines) + "\n"
    (out / "summary.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
