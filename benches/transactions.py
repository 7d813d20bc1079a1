#!/usr/bin/env python3
"""What transactions cost, on corelog and on Apache Kafka in the same run (issue 30).

    python3 benches/transactions.py [--quick] [--no-build] [--rounds N]
        [--brokers corelog,kafka,kafka-flush] [--duration S] [--warmup S]

The client is Kafka's own Java client (kafka-clients at the release tests/java/pom.xml
pins, from .cache/kafka/libs; `tools/kafka-cli/kafka-cli.sh --fetch`), driven by
benches/java/TxnBench.java, compiled once per run with javac and run with those jars:
one JVM per broker and round serves every case in turn (one JIT warm-up), pausing
between cases so that corelog's /metrics can be read around each.

1. Transactional produce. For transactions of 1, 100 and 10,000 records (100-byte
   values, a topic of 6 partitions, replication factor 1 on one broker, acks=all, the
   client's defaults otherwise: linger.ms 5, batch.size 16 KiB), one producer runs
   begin / send x N / commitTransaction in a closed loop for a fixed time after a
   warm-up; record i of a transaction goes to partition i mod 6 (so a transaction of
   100 or 10,000 records touches every partition, one of 1 record the next partition
   each time). The baseline is an idempotent, non-transactional producer doing the same
   with flush() in place of the commit. Reported: records/s, MB/s (10^6 B of values), the
   "transactions"/s, the latency of commitTransaction() (of flush() for the baseline) and
   of the whole transaction, p50/p99 over every transaction of the window, and the broker
   process's CPU over the window.
   A commitTransaction (or flush) that has not completed after 20 s (max.block.ms) fails
   its case, which the results say, and the next case runs.
2. read_committed against read_uncommitted. After the produce cases (in the last round)
   a fill of transactions of 500 records (one batch per partition), every 5th aborted
   (after a flush(), so that its records are on the log), its producer retrying after
   10 ms (retry.backoff.ms; the fill is not measured); then one consumer (no group,
   every partition assigned from the beginning, until it reaches the end offsets it saw
   at its start: the last stable offset for read_committed) reads the topic,
   read_uncommitted and read_committed alternately, five times each; the median of each
   is kept.
3. Brokers, one at a time, alternated (A B C, then C B A, ...), each fresh for its round,
   data in the same scratch directory:
   - corelog: the release binary (CORELOG_BIN or target/release/corelog) as
     benches/harness.py starts it (tests/integration/launcher.py, one shard per CPU),
     defaults: durability `ack-all` (an acks=all produce, and the transaction-state
     records an EndTxn waits for, are answered after an fdatasync that covers them).
   - kafka: a single-node KRaft Kafka as benches/kafka_peer.py starts it, Kafka's
     defaults (nothing is fsynced before it is acknowledged).
   - kafka-flush: the same with `log.flush.interval.messages=1`, so every append to
     every log — data, markers, __transaction_state — is fsynced before it is answered:
     the durability corelog gives.
   Limits measured in the same run, as the harness does: direct sequential disk write
   (fio) for the produce MB/s, loopback TCP (iperf3) for the reads.

Writes benches/results/<stamp>-transactions/{summary.json,summary.md} and every JVM's
output (`<broker>-r<round>.log`, the client's warnings counted per case and the first
few written). Default: 2 rounds of 6 s cases after 2 s of warm-up, a 200,000-record fill
(7–8 minutes on a 2-core VM); --quick: 1 round of 4 s after 1 s, a 50,000-record fill
(about 3.5 minutes). Builds the broker first (cargo) unless --no-build.
"""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness as H  # noqa: E402
import kafka_peer as P  # noqa: E402

ROOT = H.ROOT
DRIVER = ROOT / "benches" / "java" / "TxnBench.java"
SIZES = (1, 100, 10_000)
PARTITIONS = 6
VALUE = 100
FILL_TXN = 500
FILL_ABORT_EVERY = 5
# The fill's producer retries after 10 ms, not the client's default 100 ms: the fill is
# not measured, and a broker that sends batches back to retry should not make it long.
FILL_BACKOFF_MS = 10
# A commitTransaction (or flush) that has not completed after this fails its case.
MAX_BLOCK_MS = 20_000
# Client warnings written to a JVM's log per case (the rest are only counted).
WARN_LINES_PER_CASE = 12
READ_PASSES = 5
BROKERS = {
    "corelog": "corelog defaults (durability ack-all: fdatasync before an acks=all answer)",
    "kafka": "Kafka defaults (no fsync before an answer)",
    "kafka-flush": "Kafka with log.flush.interval.messages=1 (every append fsynced before "
                   "its answer: data, markers, __transaction_state)",
}
KAFKA_EXTRA = {"kafka": {}, "kafka-flush": {"log.flush.interval.messages": "1"}}
WARN_ERROR = re.compile(r"Error: ([A-Z_]+)")


def log(msg: str) -> None:
    print(f"[transactions {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------- metrics

def scrape(http: str) -> dict[str, float]:
    """corelog's /metrics: {series with labels: value}."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://{http}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                pass
    return out


def labels(series: str) -> dict[str, str]:
    inner = series[series.index("{") + 1:series.rindex("}")] if "{" in series else ""
    out = {}
    for part in inner.split(","):
        k, _, v = part.partition("=")
        if k:
            out[k] = v.strip('"')
    return out


def metrics_delta(before: dict[str, float], after: dict[str, float]) -> dict:
    """What a case did on corelog, from two /metrics scrapes: requests by API (count and
    mean latency, summed over shards), error codes by API, fsync and append stages."""
    d = {k: after[k] - before.get(k, 0.0) for k in after}
    req: dict[str, dict] = {}
    errors: dict[str, float] = {}
    stages: dict[str, dict] = {}
    for k, v in d.items():
        if not v:
            continue
        name = k.split("{", 1)[0]
        lab = labels(k)
        if name == "corelog_request_latency_seconds_sum":
            req.setdefault(lab["api"], {"count": 0, "sum_s": 0.0})["sum_s"] += v
        elif name == "corelog_request_latency_seconds_count":
            req.setdefault(lab["api"], {"count": 0, "sum_s": 0.0})["count"] += v
        elif name == "corelog_errors_total":
            key = f"{lab['api']} {lab.get('error', lab.get('code'))}"
            errors[key] = errors.get(key, 0) + v
        elif name == "corelog_stage_latency_seconds_sum":
            stages.setdefault(lab["stage"], {"count": 0, "sum_s": 0.0})["sum_s"] += v
        elif name == "corelog_stage_latency_seconds_count":
            stages.setdefault(lab["stage"], {"count": 0, "sum_s": 0.0})["count"] += v
    for group in (req, stages):
        for v in group.values():
            v["count"] = int(v["count"])
            v["mean_ms"] = round(v["sum_s"] / v["count"] * 1e3, 3) if v["count"] else None
            v["sum_s"] = round(v["sum_s"], 4)
    return {"requests": req, "errors": {k: int(v) for k, v in errors.items()},
            "stages": {k: v for k, v in stages.items() if k in ("append", "fsync", "mesh")}}


# ---------------------------------------------------------------------------- one broker, one round

def cases_for(bootstrap: str, rnd: int, last: bool, args) -> list[list[str]]:
    """The driver's cases for one broker and round: features, topics, produce cases
    (transactional and baseline alternated, the order flipped on odd rounds), and in the
    last round the fill and the reads."""
    bs = f"bootstrap={bootstrap}"
    topics = [f"{m}-{n}" for n in SIZES for m in ("txn", "idem")] + ["mixed"]
    cases = [["features", bs],
             ["create", bs, "topics=" + ",".join(topics), f"partitions={PARTITIONS}"]]
    for n in SIZES:
        modes = ("txn", "idem") if rnd % 2 == 0 else ("idem", "txn")
        for m in modes:
            cases.append(["produce", bs, f"topic={m}-{n}", f"partitions={PARTITIONS}",
                          f"mode={m}", f"records={n}", f"seconds={args.duration}",
                          f"warmup={args.warmup}", f"value={VALUE}", f"max_block_ms={MAX_BLOCK_MS}"])
    if last:
        cases.append(["produce", bs, "topic=mixed", f"partitions={PARTITIONS}", "mode=txn",
                      f"records={FILL_TXN}", f"total={args.fill}",
                      f"abort_every={FILL_ABORT_EVERY}", f"value={VALUE}",
                      f"backoff_ms={FILL_BACKOFF_MS}", f"max_block_ms={MAX_BLOCK_MS}"])
        for _ in range(READ_PASSES):
            for iso in ("read_uncommitted", "read_committed"):
                cases.append(["consume", bs, "topic=mixed", f"isolation={iso}"])
    return cases


def run_driver(broker, kind: str, cases: list[list[str]], classes: Path, out_log: Path,
               timeout: float) -> list[dict]:
    """Runs the cases in one JVM against `broker`; returns their results, each with the
    broker's CPU over its window and (corelog) what /metrics says it did."""
    sampler = H.CpuSampler(broker.proc.pid, period=0.1)
    wall_to_mono = time.time() - time.monotonic()
    # The client's warnings (retried errors, with the broker's message) on stderr, as
    # Kafka's CLI tools log (tools/kafka-cli/log4j2.properties).
    argv = ["java", f"-Dlog4j2.configurationFile={P.KAFKA_CLI.parent / 'log4j2.properties'}",
            "-cp", f"{classes}{os.pathsep}{P.LIBS}/*", "TxnBench"]
    for i, c in enumerate(cases):
        argv += c + ([";"] if i < len(cases) - 1 else [])
    env = dict(os.environ, TXNBENCH_STEP="1")
    results = []
    deadline = time.monotonic() + timeout
    with open(out_log, "w") as jlog:
        jlog.write("java -cp '.cache/kafka/libs/*' benches/java/TxnBench.java "
                   + " ".join(c if c != ";" else "';'" for c in argv[5:]) + "\n")
        jlog.flush()
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=env)
        before = None
        warnings: dict[str, int] = {}
        warn_lines = 0
        try:
            for line in proc.stdout:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"driver ran past {timeout:.0f} s")
                if " WARN " in line or " ERROR " in line:
                    m = WARN_ERROR.search(line)
                    key = m.group(1) if m else ("other ERROR" if " ERROR " in line else "other WARN")
                    warnings[key] = warnings.get(key, 0) + 1
                    warn_lines += 1
                    if warn_lines > WARN_LINES_PER_CASE:
                        continue
                jlog.write(line)
                jlog.flush()
                if line.startswith("READY"):
                    warnings, warn_lines = {}, 0
                    before = scrape(broker.http) if kind == "corelog" else None
                    proc.stdin.write("\n")
                    proc.stdin.flush()
                elif line.startswith("RESULT "):
                    r = json.loads(line[len("RESULT "):])
                    r["client_warnings"] = warnings
                    if warn_lines > WARN_LINES_PER_CASE:
                        jlog.write(f"({warn_lines - WARN_LINES_PER_CASE} more client warnings "
                                   f"of this case not written; by error: {warnings})\n")
                    if kind == "corelog" and before is not None:
                        r["corelog_metrics"] = metrics_delta(before, scrape(broker.http))
                    if "window_start_ms" in r:
                        t0 = r["window_start_ms"] / 1e3 - wall_to_mono
                        t1 = r["window_end_ms"] / 1e3 - wall_to_mono
                        proc_s, busy_s = sampler.window(t0, t1)
                        w = max(t1 - t0, 1e-9)
                        r["broker_cores"] = round(proc_s / w, 3)
                        r["machine_busy_cores"] = round(busy_s / w, 3)
                        if r.get("transactions"):
                            r["broker_cpu_ms_per_txn"] = round(proc_s * 1e3 / r["transactions"], 3)
                    results.append(r)
                    log(f"  {kind}: {summary_line(r)}")
            rc = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            sampler.stop()
        if rc != 0:
            raise RuntimeError(f"TxnBench exited {rc}; see {out_log.name}")
    return results


def case_key(r: dict) -> str:
    """txn-100, idem-10000, txn-500-fill: a produce result's case."""
    n = r.get("records_per_txn", r.get("records"))
    fill = r.get("aborted") or r.get("abort_every")
    return f"{r.get('mode')}-{n}" + ("-fill" if fill else "")


def summary_line(r: dict) -> str:
    if r.get("error"):
        return f"{r['command']} {case_key(r) if r['command'] == 'produce' else ''} FAILED: {r['error']}"
    if r["command"] == "produce":
        c = r["commit_latency_ms"]
        return (f"{r['mode']} x{r['records_per_txn']}: {r['records_per_s']:,.0f} rec/s, "
                f"{r['txns_per_s']:,.1f} txn/s, commit p50 {c.get('p50')} p99 {c.get('p99')} ms, "
                f"{r['transactions']} txns")
    if r["command"] == "consume":
        return (f"{r['isolation']}: {r['records']:,} records in {r['seconds']:.3f} s, "
                f"{r['records_per_s']:,.0f} rec/s")
    if r["command"] == "features":
        return f"features {r.get('finalized')}"
    return f"{r['command']} {r.get('seconds', '')}"


def start_broker(kind: str, work: Path, out: Path, tag: str, shards: int):
    if kind == "corelog":
        return H.WorkloadBroker(work, shards, [])
    return P.KafkaBroker(work, P.SERVER_HEAP, KAFKA_EXTRA[kind], log_path=out / f"{tag}-server.log")


# ---------------------------------------------------------------------------- summary

def med(values):
    values = [v for v in values if isinstance(v, (int, float))]
    return round(statistics.median(values), 3) if values else None


def ratio(a, b, digits=2):
    return round(a / b, digits) if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None


def summarise(runs: dict[str, list[list[dict]]], limits: dict) -> dict:
    """Per broker: each produce case's medians over the rounds, the reads' medians over
    the passes; then corelog against each Kafka."""
    produce: dict[str, dict] = {}
    reads: dict[str, dict] = {}
    features: dict[str, dict] = {}
    failures: dict[str, dict[str, list[str]]] = {}
    for kind, rounds in runs.items():
        produce[kind] = {}
        for results in rounds:
            for r in results:
                if r["command"] == "features":
                    features[kind] = r.get("finalized")
                if r["command"] != "produce" or r.get("aborted") or r.get("abort_every"):
                    continue
                if r.get("error"):
                    failures.setdefault(kind, {}).setdefault(case_key(r), []).append(r["error"])
                    continue
                produce[kind].setdefault(case_key(r), []).append(r)
        for key, rs in list(produce[kind].items()):
            produce[kind][key] = {
                "mode": rs[0]["mode"], "records_per_txn": rs[0]["records_per_txn"],
                "records_per_s": med([r["records_per_s"] for r in rs]),
                "mb_per_s": med([r["mb_per_s"] for r in rs]),
                "txns_per_s": med([r["txns_per_s"] for r in rs]),
                "commit_p50_ms": med([r["commit_latency_ms"].get("p50") for r in rs]),
                "commit_p99_ms": med([r["commit_latency_ms"].get("p99") for r in rs]),
                "txn_p50_ms": med([r["txn_latency_ms"].get("p50") for r in rs]),
                "txn_p99_ms": med([r["txn_latency_ms"].get("p99") for r in rs]),
                "broker_cores": med([r.get("broker_cores") for r in rs]),
                "broker_cpu_ms_per_txn": med([r.get("broker_cpu_ms_per_txn") for r in rs]),
                "transactions_per_run": [r["transactions"] for r in rs],
                "records_per_s_per_run": [round(r["records_per_s"]) for r in rs],
                "ratio_to_disk_write": ratio(med([r["mb_per_s"] for r in rs]),
                                             limits.get("disk_write_mb_s"), 4),
            }
        fill = [r for rounds_ in rounds for r in rounds_ if r["command"] == "produce" and r.get("aborted")]
        cons = [r for rounds_ in rounds for r in rounds_ if r["command"] == "consume" and not r.get("error")]
        if cons:
            reads[kind] = {"fill": {k: fill[0].get(k) for k in ("transactions", "aborted", "records",
                                                                 "window_s", "records_per_s")} if fill else None}
            for iso in ("read_uncommitted", "read_committed"):
                rs = [r for r in cons if r["isolation"] == iso]
                reads[kind][iso] = {
                    "records": rs[0]["records"], "log_offsets": rs[0]["log_offsets"],
                    "records_per_s": med([r["records_per_s"] for r in rs]),
                    "mb_per_s": med([r["mb_per_s"] for r in rs]),
                    "offsets_per_s": med([r["offsets_per_s"] for r in rs]),
                    "seconds_per_pass": [round(r["seconds"], 3) for r in rs],
                    "broker_cores": med([r.get("broker_cores") for r in rs]),
                    "timed_out": any(r.get("timed_out") for r in rs),
                    "ratio_to_loopback": ratio(med([r["mb_per_s"] for r in rs]),
                                               limits.get("loopback_mb_s"), 4),
                }
            ru, rc = reads[kind]["read_uncommitted"], reads[kind]["read_committed"]
            reads[kind]["committed_over_uncommitted_offsets_per_s"] = ratio(rc["offsets_per_s"], ru["offsets_per_s"])
    for kind in produce:
        for n in SIZES:
            t, i = produce[kind].get(f"txn-{n}"), produce[kind].get(f"idem-{n}")
            if t and i:
                t["txn_over_idem_records_per_s"] = ratio(t["records_per_s"], i["records_per_s"])
    comparison = []
    if "corelog" in produce:
        for peer in [k for k in produce if k != "corelog"]:
            for key, c in produce["corelog"].items():
                p = produce[peer].get(key)
                if not p:
                    continue
                comparison.append({
                    "case": key, "peer": peer,
                    "records_per_s_ratio": ratio(c["records_per_s"], p["records_per_s"]),
                    "commit_p50_ratio": ratio(c["commit_p50_ms"], p["commit_p50_ms"]),
                    "commit_p99_ratio": ratio(c["commit_p99_ms"], p["commit_p99_ms"]),
                })
            if "corelog" in reads and peer in reads:
                for iso in ("read_uncommitted", "read_committed"):
                    comparison.append({
                        "case": iso, "peer": peer,
                        "records_per_s_ratio": ratio(reads["corelog"][iso]["records_per_s"],
                                                     reads[peer][iso]["records_per_s"]),
                    })
    return {"features": features, "produce": produce, "failures": failures, "reads": reads,
            "comparison": comparison}


def fmt(v, digits=1):
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return f"{v:,}"


def markdown(doc: dict) -> str:
    s, lim = doc["summary"], doc["limits"]
    kinds = list(s["produce"])
    lines = [
        f"# Transactions, corelog beside Apache Kafka {doc['kafka_version']} ({doc['stamp']})",
        "",
        f"`{doc['command']}` — {doc['cpus']} CPUs, {doc['rounds']} round(s) of {doc['duration_s']} s "
        f"cases after {doc['warmup_s']} s of warm-up, brokers alternated; took {doc['seconds']} s. "
        f"Client: kafka-clients {doc['kafka_version']} (Java), acks=all, one producer, "
        f"{VALUE} B values, {PARTITIONS} partitions (record i of a transaction to partition i mod "
        f"{PARTITIONS}), replication factor 1, one broker.",
        "",
        f"Limits measured in this run: disk direct sequential write {fmt(lim.get('disk_write_mb_s'))} MB/s "
        f"(fio, 1 MiB blocks); loopback TCP {fmt(lim.get('loopback_mb_s'))} MB/s (iperf3).",
        "",
        "Brokers: " + "; ".join(f"**{k}**: {BROKERS[k]}" for k in kinds) + ".",
        "",
        "transaction.version finalized, as Admin describeFeatures reports: "
        + ", ".join(f"{k} {v.get('transaction.version') if v else '—'}" for k, v in s["features"].items()) + ".",
        "",
        "## Produce: transactions (begin, send × N, commitTransaction) against an idempotent "
        "producer (send × N, flush)",
        "",
        "Medians over the rounds; latency: of commitTransaction() (flush() for idem) and of the "
        "whole transaction, p50 / p99 over the window's transactions.",
        "",
        "| case | broker | records/s | MB/s (÷ disk) | txn/s | commit p50 / p99 ms | txn p50 / p99 ms "
        "| txn ÷ idem records/s | broker cores | broker CPU ms per txn | txns counted per run |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for n in SIZES:
        for m in ("txn", "idem"):
            for k in kinds:
                r = s["produce"][k].get(f"{m}-{n}")
                failed = s["failures"].get(k, {}).get(f"{m}-{n}", [])
                if failed:
                    lines.append(f"| {m} × {n:,} | {k} | FAILED in {len(failed)} run(s): "
                                 f"`{failed[0][:160]}` | | | | | | | | |")
                if not r:
                    continue
                lines.append(
                    f"| {m} × {n:,} | {k} | {fmt(r['records_per_s'], 0)} | {fmt(r['mb_per_s'], 2)} "
                    f"({fmt(r['ratio_to_disk_write'], 4)}) | {fmt(r['txns_per_s'], 1)} "
                    f"| {fmt(r['commit_p50_ms'], 2)} / {fmt(r['commit_p99_ms'], 2)} "
                    f"| {fmt(r['txn_p50_ms'], 2)} / {fmt(r['txn_p99_ms'], 2)} "
                    f"| {fmt(r.get('txn_over_idem_records_per_s'), 2)} | {fmt(r['broker_cores'], 2)} "
                    f"| {fmt(r['broker_cpu_ms_per_txn'], 2)} | {r['transactions_per_run']} |")
    peers = [k for k in kinds if k != "corelog"]
    if "corelog" in kinds and peers:
        lines += ["", "corelog ÷ each Kafka (records/s; commit latency p50, p99: below 1 is corelog faster):", "",
                  "| case | " + " | ".join(f"÷ {p} records/s | ÷ {p} commit p50 | ÷ {p} commit p99" for p in peers) + " |",
                  "| --- |" + " --- | --- | --- |" * len(peers)]
        cases = [f"{m}-{n}" for n in SIZES for m in ("txn", "idem")]
        for case in cases:
            cells = []
            for p in peers:
                c = next((c for c in s["comparison"] if c["case"] == case and c["peer"] == p), None)
                cells += [fmt(c and c["records_per_s_ratio"], 2), fmt(c and c["commit_p50_ratio"], 2),
                          fmt(c and c["commit_p99_ratio"], 2)]
            lines.append(f"| {case} | " + " | ".join(cells) + " |")
    if s["reads"]:
        lines += ["", "## Consumption: read_committed against read_uncommitted", "",
                  f"A fill of transactions of {FILL_TXN:,} records, every {FILL_ABORT_EVERY}th aborted "
                  f"({doc['fill']:,} records sent), then one consumer from the beginning to the end "
                  f"offsets of its start; median of {READ_PASSES} passes each, alternated.", "",
                  "| broker | isolation | records delivered / log offsets | records/s | MB/s (÷ loopback) "
                  "| offsets/s | read_committed ÷ read_uncommitted (offsets/s) | broker cores | seconds per pass "
                  "| fill txn/s |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for k, r in s["reads"].items():
            fill = r.get("fill") or {}
            fill_rate = (fmt(fill["transactions"] / fill["window_s"], 1)
                         if fill.get("window_s") else "—")
            for iso in ("read_uncommitted", "read_committed"):
                x = r[iso]
                lines.append(
                    f"| {k} | {iso} | {x['records']:,} / {x['log_offsets']:,} | {fmt(x['records_per_s'], 0)} "
                    f"| {fmt(x['mb_per_s'], 1)} ({fmt(x['ratio_to_loopback'], 4)}) | {fmt(x['offsets_per_s'], 0)} "
                    f"| {fmt(r['committed_over_uncommitted_offsets_per_s'], 2) if iso == 'read_committed' else ''} "
                    f"| {fmt(x['broker_cores'], 2)} | {x['seconds_per_pass']}{' TIMED OUT' if x['timed_out'] else ''} | {fill_rate} |")
        if "corelog" in s["reads"]:
            rr = [c for c in s["comparison"] if c["case"].startswith("read_")]
            if rr:
                lines += ["", "corelog ÷ Kafka, records/s: " + "; ".join(
                    f"{c['case']} ÷ {c['peer']} {fmt(c['records_per_s_ratio'], 2)}" for c in rr) + "."]
    cm = doc.get("corelog_where")
    if cm:
        lines += ["", "## Where corelog's time goes (its /metrics around each case, first round)", "",
                  "| case | Produce requests (mean ms) | EndTxn (mean ms) | WriteTxnMarkers (mean ms) "
                  "| fsyncs (mean ms) | error answers |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for case, m in cm.items():
            req, st = m["requests"], m["stages"]

            def rq(api):
                x = req.get(api)
                return f"{x['count']:,} ({fmt(x['mean_ms'], 2)})" if x else "0"
            fs = st.get("fsync")
            fsyncs = f"{fs['count']:,} ({fmt(fs['mean_ms'], 2)})" if fs else "0"
            # (The client's first ApiVersions asks a version newer than the broker's and
            # is answered UNSUPPORTED_VERSION by design: left out.)
            errs = ", ".join(f"{k} × {v:,}" for k, v in m["errors"].items()
                             if k != "ApiVersions UNSUPPORTED_VERSION") or "none"
            lines.append(f"| {case} | {rq('Produce')} | {rq('EndTxn')} | {rq('WriteTxnMarkers')} "
                         f"| {fsyncs} | {errs} |")
    lines += ["", "Per-run results (every case, every round): `summary.json`; each JVM's output: "
              "`<broker>-r<round>.log`.", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------- main

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1 round, 4 s cases after 1 s of warm-up")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--duration", type=float, default=None, help="seconds measured per case")
    ap.add_argument("--warmup", type=float, default=None)
    ap.add_argument("--fill", type=int, default=None,
                    help="records of the read phase's fill (default 200,000 full, 50,000 quick)")
    ap.add_argument("--brokers", default="corelog,kafka,kafka-flush")
    ap.add_argument("--shards", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--no-build", action="store_true",
                    help="use the broker binary as it is (CORELOG_BIN or target/release/corelog)")
    args = ap.parse_args()
    args.rounds = args.rounds or (1 if args.quick else 2)
    args.duration = args.duration or (4 if args.quick else 6)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 2)
    args.fill = args.fill or (50_000 if args.quick else 200_000)
    kinds = args.brokers.split(",")
    for k in kinds:
        if k not in BROKERS:
            ap.error(f"unknown broker {k!r} (one of {', '.join(BROKERS)})")
    started = time.time()
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-transactions" + (
        "-quick" if args.quick else "")
    out = ROOT / "benches" / "results" / stamp
    out.mkdir(parents=True, exist_ok=True)
    if not args.no_build:
        log("building release binaries")
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "corelog"], cwd=ROOT, check=True)
    binary = H.BROKER
    digest = hashlib.sha256(binary.read_bytes()).hexdigest()[:16]
    log(f"corelog binary sha256 {digest}")
    kafka_version = P.fetch() if any(k.startswith("kafka") for k in kinds) else P.version()
    work = Path(tempfile.mkdtemp(prefix="corelog-transactions-", dir=os.environ.get("TMPDIR", "/tmp")))
    try:
        classes = work / "classes"
        subprocess.run(["javac", "-d", str(classes), "-cp", f"{P.LIBS}/*", str(DRIVER)], check=True)
        log("measuring limits")
        limits = {"disk_write_mb_s": H.fio(work, "write", "256M" if args.quick else "1G"),
                  "loopback_mb_s": H.iperf3()}
        log(f"limits: {limits}")
        runs: dict[str, list[list[dict]]] = {k: [] for k in kinds}
        errors = []
        corelog_where = None
        for rnd in range(args.rounds):
            order = kinds if rnd % 2 == 0 else list(reversed(kinds))
            last = rnd == args.rounds - 1
            for kind in order:
                tag = f"{kind}-r{rnd + 1}"
                log(f"round {rnd + 1}/{args.rounds}: {kind}")
                broker = start_broker(kind, work, out, tag, args.shards)
                try:
                    cases = cases_for(broker.bootstrap, rnd, last, args)
                    per_case = args.duration + args.warmup + 30
                    results = run_driver(broker, kind, cases, classes, out / f"{tag}.log",
                                         timeout=len(cases) * per_case + 600)
                    runs[kind].append(results)
                    if kind == "corelog" and corelog_where is None:
                        corelog_where = {case_key(r): r["corelog_metrics"]
                                         for r in results if r["command"] == "produce"
                                         and "corelog_metrics" in r}
                except Exception as e:  # noqa: BLE001 — keep the other brokers' figures
                    log(f"{tag} failed: {e}")
                    errors.append(f"{tag}: {e}")
                finally:
                    broker.stop()
                    if kind == "corelog":
                        text = broker.log_path.read_text(errors="replace")
                        if len([x for x in text.splitlines() if x.strip()]) > 1:
                            (out / f"{tag}-broker.log").write_text(text)
        doc = {
            "stamp": stamp,
            "command": "python3 benches/transactions.py " + " ".join(sys.argv[1:]),
            "cpus": os.cpu_count(), "kernel": os.uname().release, "quick": args.quick,
            "rounds": args.rounds, "duration_s": args.duration, "warmup_s": args.warmup,
            "fill": args.fill, "brokers": {k: BROKERS[k] for k in kinds},
            "corelog_shards": args.shards, "corelog_binary_sha256": digest,
            "kafka_version": kafka_version, "kafka_heap": P.SERVER_HEAP,
            "client": {"library": f"kafka-clients {kafka_version}", "acks": "all",
                       "enable.idempotence": True, "value_bytes": VALUE,
                       "partitions": PARTITIONS, "other settings": "client defaults"},
            "limits": limits, "errors": errors,
            "summary": summarise(runs, limits),
            "corelog_where": corelog_where,
            "runs": runs,
        }
        doc["seconds"] = round(time.time() - started, 1)
        (out / "summary.json").write_text(json.dumps(doc, indent=2) + "\n")
        md = markdown(doc)
        if errors:
            md += "\nErrors:\n\n" + "\n".join(f"- {e}" for e in errors) + "\n"
        (out / "summary.md").write_text(md)
        print(md)
        log(f"done in {doc['seconds']} s; results in {out.relative_to(ROOT)}")
        return 1 if errors else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
