#!/usr/bin/env python3
"""A/B of two broker binaries on the harness's workloads, runs alternated.

    python3 benches/ab.py --a /path/to/corelog-before --b target/release/corelog \\
        --only W1,W2,W6,W7 --rounds 3

Each round runs benches/harness.sh once per binary (`--no-build`, the broker named by
CORELOG_BIN; the same corelog-load for both), A then B in even rounds and B then A in
odd ones, so a drift of the machine over the run falls on both sides alike. The summary
is each workload's median over the rounds of each side — msg/s, produce p50/p99/p99.9
(W7: the read) — and B / A; it is written with every run's results under
benches/results/<stamp>-ab/. Build A from the commit to compare against (for example in
a `git worktree`, with a CARGO_TARGET_DIR of its own) and B from the working tree.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def harness(binary: Path, out: Path, only: str, quick: bool, shards: int | None) -> dict:
    cmd = ["bash", str(ROOT / "benches" / "harness.sh"), "--no-build", "--only", only,
           "--out", str(out)]
    if quick:
        cmd.append("--quick")
    if shards:
        cmd += ["--shards", str(shards)]
    env = dict(os.environ, CORELOG_BIN=str(binary))
    with open(out.parent / f"{out.name}.log", "w") as log:
        subprocess.run(cmd, cwd=ROOT, env=env, check=True, stdout=log, stderr=subprocess.STDOUT)
    return json.loads((out / "results.json").read_text())


def figures(row: dict) -> dict:
    lat = row.get("latency_ms") or {}
    cpu = row.get("cpu") or {}
    return {"msgs_per_s": row.get("msgs_per_s"), "mb_per_s": row.get("mb_per_s"),
            "cpu_s_per_gb": cpu.get("cpu_s_per_gb"),
            "p50": lat.get("p50"), "p99": lat.get("p99"), "p99.9": lat.get("p999"),
            "errors": row.get("errors")}


def median(values: list) -> float | None:
    values = [v for v in values if isinstance(v, (int, float))]
    return round(statistics.median(values), 3) if values else None


def num(v) -> str:
    return "—" if v is None else f"{v:,.0f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", type=Path, required=True, help="the baseline broker binary")
    ap.add_argument("--b", type=Path, required=True, help="the broker binary under test")
    ap.add_argument("--only", default="W1,W2,W6,W7")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--shards", type=int, default=None)
    ap.add_argument("--label-a", default="A")
    ap.add_argument("--label-b", default="B")
    args = ap.parse_args()
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-ab"
    top = ROOT / "benches" / "results" / stamp
    top.mkdir(parents=True)
    runs: dict[str, list[dict]] = {"a": [], "b": []}
    for r in range(args.rounds):
        order = ["a", "b"] if r % 2 == 0 else ["b", "a"]
        for side in order:
            binary = args.a if side == "a" else args.b
            print(f"round {r + 1}/{args.rounds}: {side} ({binary})", flush=True)
            doc = harness(binary.resolve(), top / f"{side}-{r + 1}", args.only, args.quick, args.shards)
            runs[side].append(doc)
    workloads = [w for w in args.only.split(",")]
    summary = []
    for w in workloads:
        row = {"workload": w}
        for side in ("a", "b"):
            per_run = [figures(x) for d in runs[side] for x in d["workloads"] if x["workload"] == w]
            row[side] = {k: median([f[k] for f in per_run]) for k in
                         ("msgs_per_s", "mb_per_s", "cpu_s_per_gb", "p50", "p99", "p99.9", "errors")}
            row[side]["runs_msgs_per_s"] = [f["msgs_per_s"] for f in per_run]
            row[side]["runs_cpu_s_per_gb"] = [f["cpu_s_per_gb"] for f in per_run]
        a, b = row["a"], row["b"]
        row["b_over_a"] = {k: (round(b[k] / a[k], 3) if a[k] and b[k] is not None else None)
                           for k in ("msgs_per_s", "cpu_s_per_gb", "p50", "p99", "p99.9")}
        summary.append(row)
    limits = [d.get("limits") for side in ("a", "b") for d in runs[side]]
    doc = {"stamp": stamp, "a": str(args.a), "b": str(args.b), "label_a": args.label_a,
           "label_b": args.label_b, "rounds": args.rounds, "quick": args.quick,
           "only": args.only, "limits_per_run": limits, "summary": summary}
    (top / "results.json").write_text(json.dumps(doc, indent=2))
    lines = [f"# A/B: {args.label_a} vs {args.label_b}", "",
             f"`python3 benches/ab.py --only {args.only} --rounds {args.rounds}"
             f"{' --quick' if args.quick else ''}`: medians over {args.rounds} alternated runs "
             "of each (A B, B A, ...), each on a fresh broker.", "",
             "Broker CPU-seconds per GB moved is the figure to read for a CPU-bound workload "
             "(W6): throughput on a shared VM moves with its neighbours, CPU per byte less.", "",
             "| workload | A msg/s (runs) | B msg/s (runs) | B/A | A CPU-s/GB | B CPU-s/GB | B/A "
             "| A p50 / p99 / p99.9 ms | B p50 / p99 / p99.9 ms |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in summary:
        a, b = row["a"], row["b"]
        lines.append(f"| {row['workload']} | {num(a['msgs_per_s'])} {a['runs_msgs_per_s']} | "
                     f"{num(b['msgs_per_s'])} {b['runs_msgs_per_s']} | {row['b_over_a']['msgs_per_s']} | "
                     f"{a['cpu_s_per_gb']} | {b['cpu_s_per_gb']} | {row['b_over_a']['cpu_s_per_gb']} | "
                     f"{a['p50']} / {a['p99']} / {a['p99.9']} | {b['p50']} / {b['p99']} / {b['p99.9']} |")
    (top / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"results in {top.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
