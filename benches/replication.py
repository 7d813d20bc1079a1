#!/usr/bin/env python3
"""What replication costs: the harness's W2 (produce 1 KiB, acks=all) and W4 (produce +
consume at a fixed rate, acks=all) on one corelog broker with replication factor 1 and
on three corelog brokers on this machine with replication factor 3 (min.insync.replicas
2), and, with --peer kafka, on three Apache Kafka brokers (combined KRaft mode, the
release tests/java/pom.xml pins) with replication factor 3 beside them.

    python3 benches/replication.py [--quick] [--peer kafka] [--shards N] [--sweep] [--runs N]
                                   [--tools | --only-tools]

The same corelog-load command drives every run (the topic created by it with the
replication factor); W4's rate is half of corelog's W2 rate at replication factor 3, the
same for all three. Every broker runs on this machine, so three brokers share its cores
and its disk: the figures measure what replication costs here, not what three machines
would do. Durability as run: corelog's default `ack-all` (an acks=all produce is
answered once every ISR member has synced it: a follower fetches offset X only after
syncing everything below X); Kafka's defaults (acks=all waits for the ISR's fetches, no
fsync anywhere). Each corelog run has a fresh cluster, and after it the stage histograms
of every broker (`/histograms?format=json`) name where an acks=all produce spent its
time: append and fsync (leader and follower writes), replica_fetch (a follower's fetch
round trip), follower_append (a follower's fetched batches from append to sync),
replication_wait (a leader's batch from its own sync to the high watermark), and the
Produce request itself. With --sweep, latency against load too: W4's e2e run at 10 %,
25 % and 50 % of corelog's RF 3 W2 rate, --runs times each (3 by default; the median run
is reported, with the spread of p99 over the runs), on one cluster per side (a fresh topic
per run): three corelog brokers with RF 3, one with RF 1, and with --peer kafka three
Kafka brokers with RF 3. With --tools, Kafka's own kafka-producer-perf-test and
kafka-e2e-latency as the independent check of corelog-load on the same sides (--only-tools:
that check alone, after the RF 3 W2 run that sets its rates). Results:
benches/results/<stamp>-replication/results.{md,json}.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kafka_peer  # noqa: E402
from kafka_peer import KafkaCluster  # noqa: E402,F401 (others import it from here)
from harness import LOAD, ROOT, log, prepare  # noqa: E402

# The broker launcher and port allocator the integration tests use (tests/integration/launcher.py).
sys.path.insert(0, str(ROOT / "tests" / "integration"))
import launcher  # noqa: E402


class CorelogCluster(launcher.Cluster):
    """`n` corelog brokers on loopback (tests/integration/launcher.py's Cluster), node ids
    1..n, each with `shards` shards, all voters of one quorum, the partition balancer off;
    data in work/corelog-<id>, logs (warnings and above) in work/corelog-<id>.log."""

    def __init__(self, work: Path, n: int, shards: int, extra_args: list[str] | None = None):
        super().__init__(
            [launcher.Broker(work, shards=shards, name=f"corelog-{node_id}", log_level="warn",
                             data_dir=work / f"corelog-{node_id}",
                             log_path=work / f"corelog-{node_id}.log")
             for node_id in range(1, n + 1)],
            # The partition balancer off: a run measures one workload, and a leadership the
            # balancer moves in the middle of it (two topics' leaders add up unevenly)
            # would count as the load generator's errors, which it does not retry. Kafka's
            # own leader rebalance looks every 300 s, after a run.
            extra_args=["--topic-default", f"min.insync.replicas={min(2, n)}",
                        "--partition-balancer-enable", "false", *(extra_args or [])])
        try:
            self.start(timeout=60)
        except BaseException:
            self.stop()
            raise

    @property
    def bootstraps(self) -> list[str]:
        return [b.bootstrap for b in self.brokers]

    @property
    def procs(self) -> list[subprocess.Popen]:
        """The brokers' processes, by node id (1 first)."""
        return [b.proc for b in self.brokers]

    def stop(self) -> None:
        self.teardown(timeout=60)
        for b in self.brokers:
            shutil.rmtree(b.data_dir, ignore_errors=True)


# The stages of an acks=all produce, in the order a batch meets them.
STAGES = ["request_queue", "append", "fsync", "replica_fetch", "follower_append",
          "replication_wait", "Produce"]


def stage_breakdown(cluster: "CorelogCluster") -> dict:
    """Per stage, the p50 / p99 / p99.9 (ms) and count of every broker's histograms."""
    import urllib.request
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    out = {}
    for b in cluster.brokers:
        with opener.open(f"http://{b.http}/histograms?format=json", timeout=10) as r:
            hist = json.load(r)["histograms"]
        out[b.name] = {s: {k: hist[s][k] for k in ("count", "p50", "p99", "p999")}
                       for s in STAGES if s in hist}
    return out


def run_load(bootstrap: str, out: Path, name: str, mode: str, args: list[str]) -> dict:
    j = out / f"{name}.json"
    cmd = [str(LOAD), mode, "--bootstrap", bootstrap, "--json", str(j), *args]
    log(f"{name}: {' '.join(cmd[1:])}")
    with open(out / f"{name}.log", "w") as f:
        subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, check=True, timeout=600)
    return json.loads(j.read_text())


def sched_sample(cluster: "CorelogCluster") -> dict:
    """The scheduler's accounting now: per broker and thread name, CPU time and time spent
    runnable but waiting for a CPU (`/proc/<pid>/task/<tid>/schedstat`, ns), and the time
    some thread of the machine waited for a CPU (pressure stall information,
    `/proc/pressure/cpu` "some", µs; None where the kernel has none)."""
    threads = {}
    for b in cluster.brokers:
        for task in Path(f"/proc/{b.proc.pid}/task").glob("*"):
            try:
                comm = (task / "comm").read_text().strip()
                cpu, wait, _ = (int(x) for x in (task / "schedstat").read_text().split())
            except (OSError, ValueError):
                continue
            key = (b.name, comm.rstrip("0123456789#-"))
            c, w = threads.get(key, (0, 0))
            threads[key] = (c + cpu, w + wait)
    machine = None
    try:
        for line in Path("/proc/pressure/cpu").read_text().splitlines():
            if line.startswith("some "):
                machine = int(line.rsplit("total=", 1)[1])
    except (OSError, ValueError, IndexError):
        pass
    return {"at": time.monotonic(), "threads": threads, "machine_some_us": machine}


def sched_delta(before: dict, after: dict) -> dict:
    """Over the run: per broker, CPU seconds and seconds its threads waited for a CPU
    (and which thread waited most); and the share of the run during which some thread of
    the machine waited for a CPU."""
    span = after["at"] - before["at"]
    brokers: dict = {}
    for key, (cpu, wait) in after["threads"].items():
        c0, w0 = before["threads"].get(key, (0, 0))
        b = brokers.setdefault(key[0], {"cpu_s": 0.0, "wait_s": 0.0, "waits_most": None, "_w": 0})
        b["cpu_s"] += (cpu - c0) / 1e9
        b["wait_s"] += (wait - w0) / 1e9
        if wait - w0 > b["_w"]:
            b["_w"], b["waits_most"] = wait - w0, key[1]
    for b in brokers.values():
        b.pop("_w")
        b["cpu_s"], b["wait_s"] = round(b["cpu_s"], 2), round(b["wait_s"], 2)
    some = None
    if span and before["machine_some_us"] is not None and after["machine_some_us"] is not None:
        some = round((after["machine_some_us"] - before["machine_some_us"]) / 1e6 / span, 2)
    return {"seconds": round(span, 1), "machine_cpu_pressure": some, "brokers": brokers}


def wait_table(waits: dict) -> list[str]:
    """What the machine was doing over each corelog run, as markdown."""
    if not waits:
        return []
    out = ["", "What the machine was doing over each corelog run (scheduler accounting: CPU seconds, "
           "seconds runnable but waiting for a CPU, and the thread that waited most, per broker; "
           "the share of the run during which some thread of the machine waited for a CPU, "
           "from /proc/pressure/cpu):", "",
           "| run | seconds | some thread waiting (machine) | per broker: CPU s / waiting s (most waiting) |",
           "| --- | --- | --- | --- |"]
    for run, w in waits.items():
        per = "; ".join(f"{name}: {b['cpu_s']} / {b['wait_s']} ({b['waits_most']})"
                        for name, b in w["brokers"].items())
        out.append(f"| {run} | {w['seconds']} | {w['machine_cpu_pressure']} | {per} |")
    return out


SWEEP_FRACTIONS = [0.1, 0.25, 0.5]


def run_sweep(work: Path, out: Path, a, capacity: float, w4) -> list[dict]:
    """W4 at each fraction of `capacity`, `a.runs` times, on one cluster per side; every
    run's produce latency, and per (side, rate) the median run by p99 and p99's spread."""
    sides = [("corelog", 3), ("corelog", 1)] + ([("kafka", 3)] if a.peer == "kafka" else [])
    rows = []
    for who, rf in sides:
        cluster = KafkaCluster(work) if who == "kafka" else CorelogCluster(work, 3 if rf == 3 else 1, a.shards)
        try:
            for frac in SWEEP_FRACTIONS:
                rate = max(1000, int(capacity * frac))
                runs = []
                for i in range(a.runs):
                    args = w4(rf, rate)
                    args[args.index("--topic") + 1] = f"sweep-{int(frac * 100)}-{i}"
                    r = run_load(cluster.bootstrap, out, f"sweep-{who}-rf{rf}-{int(frac * 100)}pct-{i + 1}", "e2e", args)
                    lat = r.get("latency_ms", {})
                    runs.append({k: lat.get(k) for k in ("p50", "p99", "p999")} | {"msgs_per_s": r.get("msgs_per_s"), "errors": r.get("errors")})
                p99s = sorted(x["p99"] for x in runs if x.get("p99") is not None)
                median = sorted(runs, key=lambda x: x.get("p99") or 0)[len(runs) // 2]
                mid = p99s[len(p99s) // 2] if p99s else None
                spread = [round(v / mid - 1, 2) for v in (p99s[0], p99s[-1])] if mid else None
                rows.append({"broker": who, "replication_factor": rf, "fraction": frac, "rate": rate,
                             "median": median, "p99_spread": spread, "runs": runs})
        finally:
            cluster.stop()
    return rows


TOOLS_FRACTIONS = [0.1, 0.25]


def run_tools(work: Path, out: Path, a, capacity: float) -> list[dict]:
    """Kafka's own tools as the independent check of corelog-load on the acks=all
    workloads, on one cluster per side: at 10 % and 25 % of `capacity`,
    kafka-producer-perf-test (one Java producer, 1 KiB, acks=all, linger.ms=1, 8
    partitions) beside corelog-load producing the same shape at the same rate (one
    producer), each after 2 s of warm-up that its figures leave out; then kafka-e2e-latency (one record at a time, acks=all, produced and
    consumed back) on a one-partition topic. The tools report whole milliseconds."""
    sides = [("corelog", 3), ("corelog", 1)] + ([("kafka", 3)] if a.peer == "kafka" else [])
    seconds = 8 if a.quick else 30
    rows = []
    for who, rf in sides:
        cluster = KafkaCluster(work) if who == "kafka" else CorelogCluster(work, rf, a.shards)
        try:
            for frac in TOOLS_FRACTIONS:
                rate = max(1000, int(capacity * frac))
                pct = int(frac * 100)
                name = f"tools-{who}-rf{rf}-{pct}pct"
                topic = f"perf-{pct}"
                kafka_peer.cli("kafka-topics", "--bootstrap-server", cluster.bootstrap, "--create",
                               "--topic", topic, "--partitions", "8", "--replication-factor", str(rf))
                log(f"{name}: kafka-producer-perf-test at {rate:,} msg/s")
                # Its first 2 s of records are warm-up, as corelog-load's --warmup 2s.
                perf = kafka_peer.producer_perf_test(
                    cluster.bootstrap, topic, rate * (seconds + 2), 1024,
                    {"acks": "all", "linger.ms": "1", "batch.size": "65536"},
                    out / f"{name}-producer-perf-test.log", throughput=rate, warmup=rate * 2)
                load = run_load(cluster.bootstrap, out, f"{name}-corelog-load", "produce", [
                    "--topic", f"load-{pct}", "--message-size", "1024", "--acks", "all",
                    "--partitions", "8", "--producers", "1", "--rate", str(rate), "--linger-ms", "1",
                    "--batch-size", "65536", "--replication-factor", str(rf), "--duration", f"{seconds}s",
                    "--warmup", "2s", "--threads", "1", "--max-in-flight", "5"])
                lat = load.get("latency_ms", {})
                rows.append({"broker": who, "replication_factor": rf, "tool": "producer-perf-test",
                             "fraction": frac, "rate": rate,
                             "perf_test": perf["latency_ms"] | {"msgs_per_s": perf["msgs_per_s"]},
                             "corelog_load": {k: lat.get(k) for k in ("p50", "p99", "p999")}
                             | {"msgs_per_s": load.get("msgs_per_s"), "errors": load.get("errors")}})
            kafka_peer.cli("kafka-topics", "--bootstrap-server", cluster.bootstrap, "--create",
                           "--topic", "e2e", "--partitions", "1", "--replication-factor", str(rf))
            records = 2000 if a.quick else 10000
            log(f"tools-{who}-rf{rf}: kafka-e2e-latency, {records:,} records")
            e2e = kafka_peer.e2e_latency(cluster.bootstrap, "e2e", records, 1024, "all",
                                         out / f"tools-{who}-rf{rf}-e2e-latency.log")
            rows.append({"broker": who, "replication_factor": rf, "tool": "e2e-latency",
                         "records": records, "e2e": e2e["latency_ms"]})
        finally:
            cluster.stop()
    return rows


def tools_table(rows: list[dict]) -> list[str]:
    """Kafka's tools beside corelog-load, as markdown."""
    if not rows:
        return []
    out = ["", "Kafka's own tools as the cross-check (acks=all, 1 KiB; kafka-producer-perf-test and "
           "corelog-load each one producer, linger 1 ms, 8 partitions, at the same rate; produce "
           "latency p50 / p99 / p99.9 ms, the tool's in whole ms; achieved msg/s):", "",
           "| broker | RF | rate (msg/s) | kafka-producer-perf-test | corelog-load |",
           "| --- | --- | --- | --- | --- |"]
    for r in rows:
        if r["tool"] != "producer-perf-test":
            continue
        p, c = r["perf_test"], r["corelog_load"]
        out.append(f"| {r['broker']} | {r['replication_factor']} | {r['rate']:,} ({r['fraction']:.0%}) | "
                   f"{p['p50']:g} / {p['p99']:g} / {p['p999']:g} ({p['msgs_per_s']:,}) | "
                   f"{c['p50']} / {c['p99']} / {c['p999']} ({c['msgs_per_s']:,.0f}, errors {c['errors']}) |")
    out += ["", "kafka-e2e-latency (one record at a time: acks=all produce, then consumed back; ms):", "",
            "| broker | RF | records | mean | p50 | p99 | p99.9 |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if r["tool"] == "e2e-latency":
            e = r["e2e"]
            out.append(f"| {r['broker']} | {r['replication_factor']} | {r['records']:,} | {e['mean']:.2f} | "
                       f"{e['p50']:g} | {e['p99']:g} | {e['p999']:g} |")
    return out


def sweep_table(rows: list[dict]) -> list[str]:
    """Latency against load as markdown: each side's median run per rate, and RF 3 / RF 1."""
    if not rows:
        return []
    by = {(r["broker"], r["replication_factor"], r["fraction"]): r for r in rows}
    sides = sorted({(r["broker"], r["replication_factor"]) for r in rows}, key=lambda s: (s[0] != "corelog", -s[1]))
    out = ["", "Latency against load (W4 e2e; produce p50 / p99 / p99.9 ms of the median run of "
           f"{len(rows[0]['runs'])} by p99, and p99's spread over them from the median):", "",
           "| rate (msg/s) | " + " | ".join(f"{b} RF {rf}" for b, rf in sides) + " | corelog RF 3 / RF 1 p50, p99 |",
           "| --- |" + " --- |" * (len(sides) + 1)]
    for frac in SWEEP_FRACTIONS:
        cells, rate = [], None
        for b, rf in sides:
            r = by.get((b, rf, frac))
            if r is None:
                cells.append("-")
                continue
            rate = r["rate"]
            m = r["median"]
            sp = r["p99_spread"]
            cells.append(f"{m['p50']} / {m['p99']} / {m['p999']} ({sp[0]:+.0%}..{sp[1]:+.0%})" if sp else "-")
        rf3, rf1 = by.get(("corelog", 3, frac)), by.get(("corelog", 1, frac))
        ratio = "-"
        if rf3 and rf1 and rf1["median"]["p50"] and rf1["median"]["p99"]:
            ratio = (f"{rf3['median']['p50'] / rf1['median']['p50']:.2f}, "
                     f"{rf3['median']['p99'] / rf1['median']['p99']:.2f}")
        out.append(f"| {rate:,} ({frac:.0%}) | " + " | ".join(cells) + f" | {ratio} |")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--peer", choices=["kafka"])
    ap.add_argument("--shards", type=int, default=1, help="shards of each corelog broker")
    ap.add_argument("--sweep", action="store_true", help="latency against load (10-50 %% of RF 3 capacity)")
    ap.add_argument("--runs", type=int, default=3, help="runs per rate in the sweep")
    ap.add_argument("--tools", action="store_true",
                    help="Kafka's kafka-producer-perf-test and kafka-e2e-latency beside corelog-load")
    ap.add_argument("--only-tools", action="store_true",
                    help="only the tools' check (W2 at RF 3 first, for the rates)")
    a = ap.parse_args()
    # Builds, makes the results directory and a scratch one, measures the disk.
    out, scratch, disk = prepare("replication")
    stamp = out.name
    duration = "8s" if a.quick else "30s"
    common = ["--duration", duration, "--warmup", "2s", "--threads", "1", "--max-in-flight", "5"]

    def w2(rf: int) -> list[str]:
        return ["--topic", f"w2-rf{rf}", "--message-size", "1024", "--acks", "all",
                "--partitions", "8", "--producers", "4", "--batch-size", "65536",
                "--linger-ms", "2", "--replication-factor", str(rf), *common]

    def w4(rf: int, rate: int) -> list[str]:
        return ["--topic", f"w4-rf{rf}", "--message-size", "1024", "--acks", "all",
                "--partitions", "8", "--producers", "2", "--consumers", "1", "--rate", str(rate),
                "--linger-ms", "1", "--replication-factor", str(rf), *common]

    runs = []
    work = scratch
    try:
        results = {}
        stages = {}
        waits = {}
        main_runs = [("corelog", 3, 3)] if a.only_tools else [("corelog", 3, 3), ("corelog", 1, 1)]
        for who, n, rf in main_runs:
            for w in ("W2",) if a.only_tools else ("W2", "W4"):
                cluster = CorelogCluster(work, n, a.shards)
                try:
                    before = sched_sample(cluster)
                    if w == "W2":
                        results[(who, rf, w)] = run_load(cluster.bootstrap, out, f"W2-{who}-rf{rf}", "produce", w2(rf))
                        if rf == 3:
                            rate = max(1000, int(results[(who, rf, w)]["msgs_per_s"] / 2))
                    else:
                        results[(who, rf, w)] = run_load(cluster.bootstrap, out, f"W4-{who}-rf{rf}", "e2e", w4(rf, rate))
                    stages[f"{w}-{who}-rf{rf}"] = stage_breakdown(cluster)
                    waits[f"{w}-{who}-rf{rf}"] = sched_delta(before, sched_sample(cluster))
                finally:
                    cluster.stop()
        sweep, tools = [], []
        if a.tools or a.only_tools:
            capacity = results[("corelog", 3, "W2")]["msgs_per_s"]
            tools = run_tools(work, out, a, capacity)
        if a.sweep:
            capacity = results[("corelog", 3, "W2")]["msgs_per_s"]
            sweep = run_sweep(work, out, a, capacity, w4)
        if a.peer == "kafka" and not a.only_tools:
            cluster = KafkaCluster(work)
            try:
                results[("kafka", 3, "W2")] = run_load(cluster.bootstrap, out, "W2-kafka-rf3", "produce", w2(3))
                results[("kafka", 3, "W4")] = run_load(cluster.bootstrap, out, "W4-kafka-rf3", "e2e", w4(3, rate))
            finally:
                cluster.stop()
        for (who, rf, w), r in results.items():
            lat = r.get("latency_ms", {})
            e2e = r.get("e2e_latency_ms", {})
            # Every replica writes what the producers send, all on this one disk.
            replica_mb_s = (r.get("mb_per_s") or 0) * rf
            runs.append({"broker": who, "replication_factor": rf, "workload": w,
                         "msgs_per_s": r.get("msgs_per_s"), "mb_per_s": r.get("mb_per_s"),
                         "replica_writes_mb_per_s": round(replica_mb_s, 1),
                         "of_disk_limit": round(replica_mb_s / disk, 2) if disk else None,
                         "errors": r.get("errors"), "produce_ms": {k: lat.get(k) for k in ("p50", "p99", "p999")},
                         "e2e_ms": {k: e2e.get(k) for k in ("p50", "p99", "p999")} if e2e else None})
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    doc = {"stamp": stamp, "quick": a.quick, "shards_per_corelog_broker": a.shards, "sweep": sweep, "tools": tools,
           "cpu_waits": waits,
           "disk_write_mb_s": disk,
           "cpus": os.cpu_count(), "w4_rate": rate, "runs": runs, "stages": stages}
    (out / "results.json").write_text(json.dumps(doc, indent=2))
    lines = [f"# Replication cost ({stamp}{', quick' if a.quick else ''})", "",
             f"{os.cpu_count()} CPUs; corelog brokers with {a.shards} shard(s) each; W4 at {rate:,} msg/s; "
             f"disk direct write {disk} MB/s (fio); all brokers on this one disk.",
             "", "| broker | RF | workload | msg/s | MB/s | replica writes MB/s (of disk) | produce p50 / p99 / p99.9 ms | e2e p50 / p99 / p99.9 ms |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in runs:
        p, e = r["produce_ms"], r["e2e_ms"] or {}
        lines.append(f"| {r['broker']} | {r['replication_factor']} | {r['workload']} | {r['msgs_per_s']:,.0f} | "
                     f"{r['mb_per_s']:,.1f} | {r['replica_writes_mb_per_s']:,.1f} ({r['of_disk_limit']}) | "
                     f"{p.get('p50')} / {p.get('p99')} / {p.get('p999')} | "
                     f"{e.get('p50', '-')} / {e.get('p99', '-')} / {e.get('p999', '-')} |")
    for run, brokers in stages.items():
        lines += ["", f"Stages of {run} (p50 / p99 / p99.9 ms, count), per broker:", "",
                  "| stage | " + " | ".join(brokers) + " |",
                  "| --- |" + " --- |" * len(brokers)]
        for s in STAGES:
            cells = []
            for b in brokers.values():
                v = b.get(s)
                cells.append(f"{v['p50']} / {v['p99']} / {v['p999']} ({v['count']:,})" if v and v["count"] else "-")
            lines.append(f"| {s} | " + " | ".join(cells) + " |")
    lines += wait_table(waits)
    lines += sweep_table(sweep)
    lines += tools_table(tools)
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
