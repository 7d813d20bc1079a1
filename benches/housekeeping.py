#!/usr/bin/env python3
"""Produce tail latency with retention and compaction running beside it, versus without.

Two runs on the same broker settings and the same offered load:

* ``off``: the measured topic ``fg`` and a background topic ``bg`` keep everything
  (cleanup.policy=delete, no size limit): no deletion, no compaction ever runs. Both
  have 4 MiB segments as in ``on``, so segment rolls are the same in both runs.
* ``on``: ``fg`` has 4 MiB segments and retention.bytes of 16 MiB per partition, so
  retention deletes a segment of every partition every few seconds; ``bg`` is compacted
  (4 MiB segments, min.cleanable.dirty.ratio 0.1, 2000 keys), so the cleaner rewrites
  segments continuously.

In both runs a background corelog-load produces keyed 512 B messages to ``bg`` at a fixed
rate, and the measured corelog-load produces 1 KiB messages with acks=all to ``fg`` at a
fixed open-loop rate; its coordinated-omission-corrected latency percentiles are compared.
The disk's direct-write bandwidth (fio) is measured in the same run as the limit.

Usage: python3 benches/housekeeping.py [--rate 30000] [--duration 30s] [--shards N]
Writes benches/results/<stamp>-housekeeping/{summary.json,summary.md,*.json,*.hgrm}.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness as H  # noqa: E402

MIB = 1 << 20


def create_topics(bootstrap: str, configs: dict[str, dict]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fs = admin.create_topics([NewTopic(t, 4, 1, config=c) for t, c in configs.items()])
    for f in fs.values():
        f.result(30)


def low_watermarks(bootstrap: str, topic: str) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "hk-bench"})
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[0] for p in range(4)]
    finally:
        c.close()


def compacted_upto(data: Path, topic: str) -> list[int]:
    out = []
    for p in range(4):
        f = data / f"{topic}-{p}" / "cleaner-offset-checkpoint"
        out.append(int(f.read_text().strip()) if f.exists() else 0)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=int, default=30000, help="measured producer, msg/s")
    ap.add_argument("--bg-rate", type=int, default=10000, help="background keyed producer, msg/s")
    ap.add_argument("--duration", default="30s")
    ap.add_argument("--shards", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--only", choices=["retention", "compaction"],
                    help="in the 'on' run, enable only this one (to tell their costs apart)")
    ap.add_argument("--broker-arg", action="append", default=[],
                    help="extra broker flag for both runs, e.g. --broker-arg=--cleaner-io-max-bytes-per-second=0")
    args = ap.parse_args()
    out, work, disk = H.prepare("housekeeping" + (f"-{args.only}-only" if args.only else ""))
    seconds = float(args.duration.rstrip("s"))
    runs = {}
    for mode in ("off", "on"):
        # Same segment size in both runs, so both roll equally often: the only
        # difference is deletion and compaction.
        seg = {"segment.bytes": str(4 * MIB)}
        retention = mode == "on" and args.only != "compaction"
        compaction = mode == "on" and args.only != "retention"
        fg_cfg = {**seg, "retention.bytes": str(16 * MIB)} if retention else seg
        bg_cfg = ({**seg, "cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.1"}
                  if compaction else seg)
        broker = H.WorkloadBroker(work, args.shards, ["--retention-check-interval-ms", "1000",
                                                      "--cleaner-backoff-ms", "1000",
                                                      *args.broker_arg])
        try:
            create_topics(broker.bootstrap, {"fg": fg_cfg, "bg": bg_cfg})
            bg_cmd = [str(H.LOAD), "produce", "--bootstrap", broker.bootstrap, "--topic", "bg",
                      "--message-size", "512", "--keys", "uniform:2000", "--rate", str(args.bg_rate),
                      "--acks", "1", "--duration", f"{seconds + 15}s"]
            bg_log = open(out / f"bg-{mode}.log", "w")
            bg = subprocess.Popen(bg_cmd, stdout=bg_log, stderr=subprocess.STDOUT)
            time.sleep(8)  # segments fill, housekeeping has work before the measurement
            res, cpu = H.load(broker, out, f"fg-{mode}", "produce", [
                "--topic", "fg", "--rate", str(args.rate), "--message-size", "1024", "--acks", "all",
                "--batch-size", "65536", "--linger-ms", "2", "--duration", args.duration,
                "--warmup", "3s"])
            bg.wait()
            bg_log.close()
            runs[mode] = {
                "msgs_per_s": res.get("msgs_per_s"), "mb_per_s": res.get("mb_per_s"),
                "errors": res.get("errors"), "latency_ms": res.get("latency_ms"), "cpu": cpu,
                "fg_log_start_offsets": low_watermarks(broker.bootstrap, "fg"),
                "bg_compacted_upto": compacted_upto(broker.data, "bg"),
            }
            H.log(f"{mode}: {runs[mode]}")
        finally:
            broker.stop()
    off, on = runs["off"]["latency_ms"], runs["on"]["latency_ms"]
    summary = {
        "command": "python3 benches/housekeeping.py " + " ".join(sys.argv[1:]),
        "disk_write_mb_s": disk, "rate": args.rate, "bg_rate": args.bg_rate, "runs": runs,
        "p99_ratio_on_to_off": round(on["p99"] / off["p99"], 2) if off.get("p99") else None,
        "p999_ratio_on_to_off": round(on["p999"] / off["p999"], 2) if off.get("p999") else None,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    lines = ["| run | msg/s | MB/s (share of disk) | p50 ms | p99 ms | p99.9 ms | max ms |",
             "|---|---|---|---|---|---|---|"]
    for mode, r in runs.items():
        lat = r["latency_ms"]
        share = f"{r['mb_per_s'] / disk:.2f}" if disk else "n/a"
        lines.append(f"| {mode} | {r['msgs_per_s']} | {r['mb_per_s']} ({share}) | {lat.get('p50')} | "
                     f"{lat.get('p99')} | {lat.get('p999')} | {lat.get('max')} |")
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(json.dumps({k: summary[k] for k in ("p99_ratio_on_to_off", "p999_ratio_on_to_off")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
