#!/usr/bin/env python3
"""How a large consumer group takes in one more member, classic cooperative against the
consumer protocol (KIP-848), on corelog and on Apache Kafka in the same run (issue 33,
item 10).

    python3 benches/group_rebalance.py [--quick] [--no-build] [--rounds N]
        [--members N] [--partitions P] [--brokers corelog,kafka]

The client is Kafka's own Java client (kafka-clients at the release tests/java/pom.xml
pins, from .cache/kafka/libs; `tools/kafka-cli/kafka-cli.sh --fetch`), driven by
benches/java/RebalanceBench.java, compiled once per run with javac; one JVM per case:

- a producer writes every partition of a fresh topic at a steady rate (2,000 records/s
  over 200 partitions: a record every 100 ms per partition, acks=1);
- N members (100) of a fresh group join and settle: every partition owned exactly once,
  unchanged for 2 s;
- one more member joins. Measured: the settle time (from its start to the first moment
  every partition has one owner, the new member its share, unchanged for 2 s more), the
  partitions that moved, how many old members saw their partitions change, and how long
  consumption of the partitions that did not move paused — each partition's longest gap
  between records consumed while the group settled (and 2 s after), less its longest gap
  in a quiet window of the same length just before ("excess pause"; 0 is no pause).

Protocols: `classic` (JoinGroup/SyncGroup with the cooperative-sticky assignor,
heartbeat.interval.ms 1000, session.timeout.ms 45000) and `consumer`
(group.protocol=consumer, the broker's `uniform` assignor). Both brokers run the consumer
protocol's heartbeat interval at 1000 ms (corelog `--group-consumer-heartbeat-interval-ms
1000`, Kafka `group.consumer.heartbeat.interval.ms=1000`, the minimum lowered on both), so
the two protocols heartbeat alike; everything else is each broker's default (a classic
group's first join waits group.initial.rebalance.delay.ms, 3 s, on both).

Brokers, alternated over the rounds, each fresh per case: corelog (the release binary as
benches/harness.py starts it, one shard per CPU) and a single-node KRaft Kafka as
benches/kafka_peer.py starts it. Limits in the same run: loopback TCP (iperf3); this
bench moves kilobytes, so the limit that matters is the CPU (2 cores here carry 101
consumers, the producer and the broker), which the results state.

Writes benches/results/<stamp>-group-rebalance/{summary.json,summary.md} and each JVM's
output. Default: 2 rounds; --quick: 1 round with 30 members over 60 partitions.
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness as H  # noqa: E402
import kafka_peer as P  # noqa: E402

ROOT = H.ROOT
DRIVER = ROOT / "benches" / "java" / "RebalanceBench.java"
HEARTBEAT_MS = 1000
PROTOCOLS = ("classic", "consumer")
BROKERS = {
    "corelog": "corelog, defaults, consumer-protocol heartbeat interval 1000 ms",
    "kafka": "Apache Kafka (KRaft, one node), defaults, group.consumer.heartbeat.interval.ms=1000",
}
CORELOG_FLAGS = ["--group-consumer-heartbeat-interval-ms", str(HEARTBEAT_MS),
                 "--group-consumer-min-heartbeat-interval-ms", str(HEARTBEAT_MS)]
KAFKA_EXTRA = {"group.consumer.heartbeat.interval.ms": str(HEARTBEAT_MS),
               "group.consumer.min.heartbeat.interval.ms": str(HEARTBEAT_MS)}


def log(msg: str) -> None:
    print(f"[group-rebalance] {msg}", flush=True)


def start_broker(kind: str, work: Path, out: Path, tag: str, shards: int):
    if kind == "corelog":
        return H.WorkloadBroker(work, shards, CORELOG_FLAGS)
    return P.KafkaBroker(work, P.SERVER_HEAP, KAFKA_EXTRA, log_path=out / f"{tag}-server.log")


def run_case(broker, protocol: str, args, classes: Path, out_log: Path, case: int) -> dict:
    argv = ["java", "-Xmx1g", f"-Dlog4j2.configurationFile={P.KAFKA_CLI.parent / 'log4j2.properties'}",
            "-cp", f"{classes}{os.pathsep}{P.LIBS}/*", "RebalanceBench",
            f"bootstrap={broker.bootstrap}", f"protocol={protocol}", f"members={args.members}",
            f"partitions={args.partitions}", f"rate={args.rate}", f"topic=rb-{case}-{protocol}",
            f"group=rb-{case}-{protocol}-group", f"heartbeat_ms={HEARTBEAT_MS}"]
    with open(out_log, "w") as jlog:
        jlog.write(H.portable(" ".join(argv)) + "\n")
        jlog.flush()
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=900)
        jlog.write(kept(p.stdout))
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return {"protocol": protocol, "error": f"no result (exit {p.returncode}); see {out_log.name}"}


def kept(output: str, first: int = 100) -> str:
    """The driver's output as kept: its first lines, the count of the rest (the clients'
    warnings while a fresh topic's leaders settle, or while 101 consumers close, run to
    megabytes), and every RESULT line."""
    lines = output.splitlines()
    tail = [x for x in lines[first:] if x.startswith("RESULT ")]
    dropped = len(lines[first:]) - len(tail)
    return "\n".join(lines[:first] + ([f"({dropped} more lines not kept)"] if dropped else []) + tail) + "\n"


def med(values):
    values = [v for v in values if isinstance(v, (int, float))]
    return round(statistics.median(values), 1) if values else None


def summarise(runs: dict[str, dict[str, list[dict]]]) -> dict:
    out: dict[str, dict] = {}
    for kind, by_protocol in runs.items():
        for protocol, rs in by_protocol.items():
            ok = [r for r in rs if not r.get("error")]
            out.setdefault(kind, {})[protocol] = {
                "cases": len(rs), "failed": [r["error"] for r in rs if r.get("error")],
                "initial_settle_ms": med([r.get("initial_settle_ms") for r in ok]),
                "settle_ms": med([r.get("settle_ms") for r in ok]),
                "moved_partitions": med([r.get("moved_partitions") for r in ok]),
                "old_members_changed": med([r.get("old_members_changed") for r in ok]),
                "unaffected_excess_pause_p50_ms": med([r["unaffected_excess_pause_ms"].get("p50") for r in ok]),
                "unaffected_excess_pause_p99_ms": med([r["unaffected_excess_pause_ms"].get("p99") for r in ok]),
                "unaffected_excess_pause_max_ms": med([r["unaffected_excess_pause_ms"].get("max") for r in ok]),
                "unaffected_max_gap_max_ms": med([r["unaffected_max_gap_ms"].get("max") for r in ok]),
                "unaffected_quiet_max_gap_max_ms": med([r["unaffected_quiet_max_gap_ms"].get("max") for r in ok]),
            }
    return out


def markdown(doc: dict) -> str:
    s = doc["summary"]
    lines = [f"# Group rebalance: {doc['members']} members + 1, {doc['partitions']} partitions ({doc['stamp']})",
             "", f"`{doc['command']}`; {doc['rounds']} round(s), medians; CPUs {doc['cpus']}; "
             f"loopback {doc['limits'].get('loopback_mb_s')} MB/s; Kafka {doc['kafka_version']}.", "",
             "| broker | protocol | first join settles (ms) | one more member: settle (ms) | moved | old members "
             "changed | unaffected partitions' excess pause p50 / p99 / max (ms) | their longest gap, settling / "
             "quiet (ms) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for kind, by_protocol in s.items():
        for protocol, r in by_protocol.items():
            lines.append(
                f"| {kind} | {protocol} | {r['initial_settle_ms']} | {r['settle_ms']} | {r['moved_partitions']} | "
                f"{r['old_members_changed']} | {r['unaffected_excess_pause_p50_ms']} / "
                f"{r['unaffected_excess_pause_p99_ms']} / {r['unaffected_excess_pause_max_ms']} | "
                f"{r['unaffected_max_gap_max_ms']} / {r['unaffected_quiet_max_gap_max_ms']} |"
                + (f" failed: {r['failed']}" if r["failed"] else ""))
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--members", type=int)
    ap.add_argument("--partitions", type=int)
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--brokers", default="corelog,kafka")
    ap.add_argument("--protocols", default=",".join(PROTOCOLS))
    ap.add_argument("--shards", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    args.rounds = args.rounds or (1 if args.quick else 2)
    args.members = args.members or (30 if args.quick else 100)
    args.partitions = args.partitions or (60 if args.quick else 200)
    kinds = args.brokers.split(",")
    protocols = args.protocols.split(",")
    started = time.time()
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-group-rebalance" + (
        "-quick" if args.quick else "")
    out = ROOT / "benches" / "results" / stamp
    out.mkdir(parents=True, exist_ok=True)
    if not args.no_build:
        log("building the release binary")
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "corelog"], cwd=ROOT, check=True)
    digest = hashlib.sha256(H.BROKER.read_bytes()).hexdigest()[:16]
    kafka_version = P.fetch() if "kafka" in kinds else P.version()
    work = Path(tempfile.mkdtemp(prefix="corelog-group-rebalance-", dir=os.environ.get("TMPDIR", "/tmp")))
    classes = work / "classes"
    subprocess.run(["javac", "-d", str(classes), "-cp", f"{P.LIBS}/*", str(DRIVER)], check=True)
    limits = {"loopback_mb_s": H.iperf3()}
    runs: dict[str, dict[str, list[dict]]] = {k: {p: [] for p in protocols} for k in kinds}
    case = 0
    for rnd in range(args.rounds):
        order = kinds if rnd % 2 == 0 else list(reversed(kinds))
        for kind in order:
            for protocol in protocols:
                case += 1
                tag = f"{kind}-{protocol}-r{rnd + 1}"
                log(f"round {rnd + 1}/{args.rounds}: {kind}, {protocol}")
                broker = start_broker(kind, work, out, tag, args.shards)
                try:
                    r = run_case(broker, protocol, args, classes, out / f"{tag}.log", case)
                except Exception as e:  # noqa: BLE001 — keep the other cases
                    r = {"protocol": protocol, "error": str(e)}
                finally:
                    broker.stop()
                log(f"  {json.dumps(r)}")
                runs[kind][protocol].append(r)
    doc = {
        "stamp": stamp, "command": "python3 benches/group_rebalance.py " + " ".join(sys.argv[1:]),
        "cpus": os.cpu_count(), "kernel": os.uname().release, "rounds": args.rounds,
        "members": args.members, "partitions": args.partitions, "rate": args.rate,
        "brokers": {k: BROKERS[k] for k in kinds}, "corelog_binary_sha256": digest,
        "kafka_version": kafka_version, "limits": limits,
        "summary": summarise(runs), "runs": runs,
    }
    doc["seconds"] = round(time.time() - started, 1)
    (out / "summary.json").write_text(json.dumps(doc, indent=2) + "\n")
    md = markdown(doc)
    (out / "summary.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
