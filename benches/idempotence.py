#!/usr/bin/env python3
"""What idempotence costs the broker: the same produce load as a plain producer and as an
idempotent one (InitProducerId, a producer id and sequence numbers in every batch, so the
broker checks each batch against the producer's last five and records it).

Runs alternate (plain, idempotent, plain, idempotent, ...) on a fresh broker each, so slow
drifts of this shared machine hit both sides alike. Small messages and small batches, where
a per-batch cost shows most: 100 B values, 16 KiB batches, acks=all, 4 producers as fast as
they can (closed loop), 6 partitions. The disk's direct-write bandwidth (fio) is measured
in the same run as the limit.

Usage: python3 benches/idempotence.py [--rounds 2] [--duration 10s] [--shards N]
Writes benches/results/<stamp>-idempotence/{summary.json,summary.md,*.json,*.hgrm}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness as H  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--duration", default="10s")
    ap.add_argument("--shards", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    out, work, disk = H.prepare("idempotence")
    runs: dict[str, list[dict]] = {"plain": [], "idempotent": []}
    for rnd in range(args.rounds):
        for mode in ("plain", "idempotent"):
            broker = H.WorkloadBroker(work, args.shards, [])
            try:
                flags = ["--topic", "t", "--partitions", "6", "--producers", "4",
                         "--message-size", "100", "--batch-size", "16384", "--linger-ms", "1",
                         "--acks", "all", "--duration", args.duration, "--warmup", "2s"]
                if mode == "idempotent":
                    flags.append("--idempotent")
                res, cpu = H.load(broker, out, f"{mode}-{rnd}", "produce", flags)
                runs[mode].append({"msgs_per_s": res.get("msgs_per_s"), "mb_per_s": res.get("mb_per_s"),
                                   "errors": res.get("errors"), "latency_ms": res.get("latency_ms"),
                                   "cpu": cpu})
                H.log(f"{mode} round {rnd}: {runs[mode][-1]}")
            finally:
                broker.stop()

    def med(mode: str, key: str, sub: str | None = None) -> float:
        vals = [(r[key][sub] if sub else r[key]) for r in runs[mode]]
        return statistics.median(v for v in vals if v is not None)

    summary = {
        "command": "python3 benches/idempotence.py " + " ".join(sys.argv[1:]),
        "disk_write_mb_s": disk, "runs": runs,
        "throughput_ratio_idempotent_to_plain": round(med("idempotent", "msgs_per_s") / med("plain", "msgs_per_s"), 3),
        "p99_ratio_idempotent_to_plain": round(med("idempotent", "latency_ms", "p99") / med("plain", "latency_ms", "p99"), 3),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    lines = ["| run | msg/s | MB/s (share of disk) | p50 ms | p99 ms | broker CPU (cores) | errors |",
             "|---|---|---|---|---|---|---|"]
    for mode, rs in runs.items():
        for i, r in enumerate(rs):
            lat = r["latency_ms"]
            share = f"{r['mb_per_s'] / disk:.2f}" if disk else "n/a"
            lines.append(f"| {mode} #{i} | {r['msgs_per_s']} | {r['mb_per_s']} ({share}) | {lat.get('p50')} | "
                         f"{lat.get('p99')} | {r['cpu']['broker_total']} | {r['errors']} |")
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(json.dumps({k: summary[k] for k in ("throughput_ratio_idempotent_to_plain",
                                                "p99_ratio_idempotent_to_plain")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
