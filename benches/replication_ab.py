#!/usr/bin/env python3
"""A/B of two broker binaries on the replicated W4 shape, each on a fresh cluster.

    python3 benches/replication_ab.py --a /path/to/corelog-before --b target/release/corelog \\
        --rates 27358,68396

For each side in turn (A, then B): three corelog brokers of `--shards` shards each on
loopback (benches/replication.py's CorelogCluster, the partition balancer off), then
for each rate `--runs` runs of corelog-load's e2e mode in the W4 shape (1 KiB, acks=all,
8 partitions at RF 3, 2 producers, 1 consumer, linger 1 ms, 8 s after 2 s of warm-up),
each run on a topic of its own; then the cluster's stage histograms (what every run of
the side added up to). The summary gives, per rate and side, every run's produce p50 /
p99 (ms) and the median run by p99, and is written with each run's JSON under
benches/results/<stamp>-replication-ab/. Build A from the commit to compare against (a
`git worktree` with a CARGO_TARGET_DIR of its own) and B from the working tree.

What it does not do: alternate the sides (the cluster of a side lives through all its
runs), or measure capacity — give rates from a `benches/replication.py` run on the same
machine (its W2 at RF 3 is the capacity the sweep's percentages refer to).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import results_dir  # noqa: E402
from replication import CorelogCluster, run_load, stage_breakdown  # noqa: E402


def side(label: str, binary: Path, rates: list[int], runs: int, shards: int, out: Path) -> dict:
    os.environ["CORELOG_BIN"] = str(binary)
    work = Path(tempfile.mkdtemp(prefix=f"replication-ab-{label}-"))
    cluster = CorelogCluster(work, 3, shards)
    result: dict = {"binary": str(binary), "rates": {}}
    try:
        for rate in rates:
            latencies = []
            for i in range(runs):
                args = ["--topic", f"ab-{rate}-{i}", "--message-size", "1024", "--acks", "all",
                        "--partitions", "8", "--producers", "2", "--consumers", "1",
                        "--rate", str(rate), "--linger-ms", "1", "--replication-factor", "3",
                        "--duration", "8s", "--warmup", "2s", "--threads", "1",
                        "--max-in-flight", "5"]
                r = run_load(cluster.bootstrap, out, f"{label}-{rate}-{i}", "e2e", args)
                latencies.append({"p50": r["latency_ms"]["p50"], "p99": r["latency_ms"]["p99"]})
            by_p99 = sorted(latencies, key=lambda l: l["p99"])
            result["rates"][rate] = {"runs": latencies, "median": by_p99[len(by_p99) // 2]}
        result["stages"] = stage_breakdown(cluster)
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", type=Path, required=True, help="the broker binary to compare against")
    ap.add_argument("--b", type=Path, required=True, help="the broker binary under test")
    ap.add_argument("--rates", required=True, help="msg/s, comma-separated")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--shards", type=int, default=1)
    a = ap.parse_args()
    rates = [int(r) for r in a.rates.split(",")]
    out = results_dir("replication-ab", "corelog-load")
    sides = {label: side(label, binary.resolve(), rates, a.runs, a.shards, out)
             for label, binary in (("A", a.a), ("B", a.b))}
    lines = ["| rate (msg/s) | A p50 / p99 ms (median run) | B p50 / p99 ms (median run) | B / A p50, p99 |",
             "| --- | --- | --- | --- |"]
    for rate in rates:
        ma, mb = sides["A"]["rates"][rate]["median"], sides["B"]["rates"][rate]["median"]
        lines.append(f"| {rate:,} | {ma['p50']} / {ma['p99']} | {mb['p50']} / {mb['p99']} | "
                     f"{mb['p50'] / ma['p50']:.2f}, {mb['p99'] / ma['p99']:.2f} |")
    for label in ("A", "B"):
        lines += ["", f"Stages of side {label} (p50 / p99 ms, count), per broker:", ""]
        for broker, stages in sides[label]["stages"].items():
            cells = ", ".join(f"{k} {v['p50']} / {v['p99']} ({v['count']:,})"
                              for k, v in stages.items())
            lines.append(f"- {broker}: {cells}")
    summary = "\n".join(lines)
    (out / "results.json").write_text(json.dumps(sides, indent=1))
    (out / "results.md").write_text(summary + "\n")
    print(summary)
    for label in ("A", "B"):
        for rate in rates:
            runs = sides[label]["rates"][rate]["runs"]
            print(f"{label} {rate}: p50 {statistics.median(r['p50'] for r in runs)} "
                  f"over runs {[(r['p50'], r['p99']) for r in runs]}")


if __name__ == "__main__":
    main()
