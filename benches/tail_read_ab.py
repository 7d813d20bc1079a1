#!/usr/bin/env python3
"""W7's tail-cache read, A against B, with the broker's CPU summed over many passes.

    python3 benches/tail_read_ab.py --a /path/to/corelog-before --b target/release/corelog

A harness W7 pass reads 576 MiB in about 0.3 s, too short a window for /proc's CPU ticks
and the VM's neighbours; here each broker (A B B A A B, a fresh one each time) is filled
as W7 fills it and read back `--passes` times, and the figure is the broker's CPU-seconds
per GB over all its passes, beside the median pass's msg/s. The summary is written to
benches/results/<stamp>-tail-read-ab.json.
"""
import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benches"))
sys.path.insert(0, str(ROOT / "tests" / "integration"))
import harness  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--a", required=True)
ap.add_argument("--b", required=True)
ap.add_argument("--passes", type=int, default=8)
ap.add_argument("--shards", type=int, default=os.cpu_count() or 1)
args = ap.parse_args()
out = Path(tempfile.mkdtemp(prefix="tail-read-ab-"))
work = Path(tempfile.mkdtemp(prefix="tail-read-ab-work-"))
parts = 384
n = parts * (3 << 19) // 1024
fill = ["--topic", "w7", "--message-size", "1024", "--acks", "1", "--partitions", str(parts),
        "--producers", "4", "--batch-size", "262144", "--messages", str(n)]
read = ["--topic", "w7", "--messages", str(n), "--consumers", "1", "--message-size", "1024"]
res = {"a": [], "b": []}
for rnd, side in enumerate(["a", "b", "b", "a", "a", "b"]):
    os.environ["CORELOG_BIN"] = str(Path(getattr(args, side)).resolve())
    broker = harness.WorkloadBroker(work, args.shards, [])
    try:
        harness.load(broker, out, f"fill-{rnd}", "produce", fill)
        cpu_s, gb, rates = 0.0, 0.0, []
        for i in range(args.passes):
            r, c = harness.load(broker, out, f"read-{rnd}-{i}", "consume", read)
            cpu_s += c["broker_process_cpu_s"]
            gb += c["gb_moved"]
            rates.append(r["msgs_per_s"])
        res[side].append((round(cpu_s / gb, 3), round(statistics.median(rates))))
        print(side, "CPU-s/GB, median msg/s:", res[side][-1], flush=True)
    finally:
        broker.stop()
summary = {side: {"binary": Path(getattr(args, side)).name,
                  "median_cpu_s_per_gb": statistics.median(x[0] for x in res[side]),
                  "median_msgs_per_s": statistics.median(x[1] for x in res[side]),
                  "brokers": [{"cpu_s_per_gb": c, "median_msgs_per_s": m}
                              for c, m in res[side]]}
           for side in ("a", "b")}
summary["passes_per_broker"] = args.passes
summary["b_over_a_cpu_s_per_gb"] = round(
    summary["b"]["median_cpu_s_per_gb"] / summary["a"]["median_cpu_s_per_gb"], 3)
harness.write_json_results("tail-read-ab", summary)
