#!/usr/bin/env python3
"""The scale workload: many partitions of one message each on one broker.

    python3 benches/scale.py                        # 10,000 partitions (10 topics x 1,000)
    python3 benches/scale.py --partitions 2000 --topics 4 --quick

Measures, on a fresh data directory and the release binary:
  - CreateTopics for all partitions (wall time, confluent-kafka's AdminClient);
  - one message produced to every partition (librdkafka, acks=all);
  - a Metadata request for every topic (raw Metadata v1, all topics: send to last byte
    received, best of 5, and the response size);
  - resident memory per idle partition ((RSS after - RSS before creating) / partitions);
  - descriptors the broker holds just after producing and after 40 s idle (/proc/PID/fd;
    idle segment files close after 30 s), and its disk use (du);
  - time to ready (/ready answers 200) after a clean stop (SIGTERM) and after SIGKILL,
    and that every partition's message reads back after each.
Targets (issue 13, item 6): CreateTopics <= 30 s, ready <= 5 s after either stop,
Metadata <= 100 ms, <= 64 KiB resident per idle partition.

Writes benches/results/<stamp>-scale/results.{md,json}.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import metadata_wire
from harness import ROOT, results_dir

# The broker launcher the integration tests use (tests/integration/launcher.py).
sys.path.insert(0, str(ROOT / "tests" / "integration"))
import launcher  # noqa: E402


def log(msg: str) -> None:
    print(f"[scale {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class ScaleBroker(launcher.Broker):
    """The run's broker (tests/integration/launcher.py's), its data in `data`, its log
    `logfile`; `shards` None leaves the count to the broker (one per CPU)."""

    def __init__(self, data: Path, logfile: Path, shards: int | None):
        super().__init__(data.parent, shards=shards, data_dir=data, log_path=logfile,
                         name="scale broker")

    def start(self) -> float:
        """Starts the broker; returns seconds until it is ready (/health answers 200 "ok",
        as /ready does), asked every 20 ms."""
        started = time.monotonic()
        self.launch()
        self.wait_healthy(timeout=120, poll_s=0.02)
        return time.monotonic() - started

    def signal_and_wait(self, sig: int) -> None:
        assert self.proc
        self.proc.send_signal(sig)
        self.proc.wait(timeout=120)

    @property
    def pid(self) -> int:
        assert self.proc
        return self.proc.pid

    def rss_kib(self) -> int:
        return rss_kib(self.pid)

    def descriptors(self) -> int:
        return descriptors(self.pid)


def rss_kib(pid: int) -> int:
    """Resident memory of process `pid`, KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def descriptors(pid: int) -> int:
    """Descriptors process `pid` holds open."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def metadata_all(port: int) -> tuple[float, int, int]:
    """One Metadata v1 request for every topic: (seconds, response bytes, partitions)."""
    took, resp = metadata_wire.call(port, 1, all_topics=True, timeout=None)
    return took, len(resp) + 4, len(metadata_wire.parse(resp, 1).leaders)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--topics", type=int, default=10)
    ap.add_argument("--shards", type=int, default=None)
    ap.add_argument("--quick", action="store_true", help="skip the SIGKILL restart")
    args = ap.parse_args()
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    out = results_dir("scale", "corelog")
    work = Path(tempfile.mkdtemp(prefix="corelog-scale-", dir=os.environ.get("TMPDIR", "/tmp")))
    per_topic = args.partitions // args.topics
    total = per_topic * args.topics
    topics = [f"scale-{i}" for i in range(args.topics)]
    broker = ScaleBroker(work / "data", out / "broker.log", args.shards)
    r: dict = {"partitions": total, "topics": args.topics, "shards": args.shards,
               "command": "python3 benches/scale.py " + " ".join(
                   f"--{k} {v}" for k, v in vars(args).items() if v not in (None, False))}
    try:
        r["ready_fresh_s"] = round(broker.start(), 3)
        bootstrap = f"127.0.0.1:{broker.port}"
        rss0 = broker.rss_kib()
        admin = AdminClient({"bootstrap.servers": bootstrap})
        t = time.monotonic()
        futures = admin.create_topics(
            [NewTopic(n, num_partitions=per_topic, replication_factor=1) for n in topics],
            request_timeout=120, operation_timeout=120)
        for f in futures.values():
            f.result(timeout=180)
        r["create_topics_s"] = round(time.monotonic() - t, 2)
        log(f"CreateTopics for {total} partitions: {r['create_topics_s']} s")

        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                             "queue.buffering.max.messages": total * 2})
        failures = []
        t = time.monotonic()
        for name in topics:
            for p in range(per_topic):
                producer.produce(name, value=f"{name}/{p}".encode(), partition=p,
                                 on_delivery=lambda err, _m: err and failures.append(err))
            producer.poll(0)
        producer.flush(120)
        r["produce_one_each_s"] = round(time.monotonic() - t, 2)
        assert not failures, failures[:5]
        log(f"one message to each partition: {r['produce_one_each_s']} s")

        time.sleep(2)
        best = min(metadata_all(broker.port) for _ in range(5))
        r["metadata_ms"], r["metadata_bytes"], seen = round(best[0] * 1e3, 1), best[1], best[2]
        assert seen >= total, f"Metadata named {seen} partitions of {total}"
        log(f"Metadata for all {seen} partitions: {r['metadata_ms']} ms, {best[1]} bytes")
        rss1 = broker.rss_kib()
        r["rss_before_kib"], r["rss_after_kib"] = rss0, rss1
        r["rss_per_partition_kib"] = round((rss1 - rss0) / total, 1)
        r["descriptors_idle"] = broker.descriptors()
        du = subprocess.run(["du", "-sk", str(work / "data")], capture_output=True, text=True)
        r["disk_kib"] = int(du.stdout.split()[0]) if du.returncode == 0 else None
        log(f"resident per idle partition: {r['rss_per_partition_kib']} KiB; "
            f"descriptors: {r['descriptors_idle']}; disk: {r['disk_kib']} KiB")

        # Idle segment files close after 30 s (storage file_cache::IDLE_CLOSE_AFTER),
        # checked every 7.5 s.
        time.sleep(40)
        r["descriptors_after_idle"] = broker.descriptors()
        log(f"descriptors after 40 s idle: {r['descriptors_after_idle']}")

        def verify(label: str) -> None:
            c = Consumer({"bootstrap.servers": f"127.0.0.1:{broker.port}", "group.id": label,
                          "enable.auto.commit": False, "fetch.wait.max.ms": 10})
            want = {(n, p) for n in topics for p in range(per_topic)}
            c.assign([TopicPartition(n, p, 0) for n, p in want])
            deadline = time.monotonic() + 180
            while want and time.monotonic() < deadline:
                for m in c.consume(10_000, timeout=1):
                    if m.error() is None:
                        assert m.value() == f"{m.topic()}/{m.partition()}".encode()
                        want.discard((m.topic(), m.partition()))
            c.close()
            assert not want, f"{label}: {len(want)} partitions did not read back"
            log(f"{label}: every partition reads its message back")

        broker.signal_and_wait(signal.SIGTERM)
        r["ready_after_clean_stop_s"] = round(broker.start(), 3)
        log(f"ready after a clean stop: {r['ready_after_clean_stop_s']} s")
        verify("after-clean-stop")
        if not args.quick:
            broker.signal_and_wait(signal.SIGKILL)
            r["ready_after_sigkill_s"] = round(broker.start(), 3)
            log(f"ready after SIGKILL: {r['ready_after_sigkill_s']} s")
            verify("after-sigkill")
        broker.signal_and_wait(signal.SIGTERM)
    finally:
        if broker.proc and broker.proc.poll() is None:
            broker.proc.kill()
        shutil.rmtree(work, ignore_errors=True)
    (out / "results.json").write_text(json.dumps(r, indent=2) + "\n")
    rows = [("CreateTopics, all partitions", f"{r['create_topics_s']} s", "<= 30 s"),
            ("Metadata, all topics", f"{r['metadata_ms']} ms ({r['metadata_bytes']} B)", "<= 100 ms"),
            ("resident per idle partition", f"{r['rss_per_partition_kib']} KiB", "<= 64 KiB"),
            ("ready after clean stop", f"{r['ready_after_clean_stop_s']} s", "<= 5 s"),
            ("ready after SIGKILL", f"{r.get('ready_after_sigkill_s', '-')} s", "<= 5 s"),
            ("descriptors just after producing", str(r["descriptors_idle"]), ""),
            ("descriptors after 40 s idle", str(r["descriptors_after_idle"]), "far below partitions"),
            ("disk", f"{r['disk_kib']} KiB", "")]
    md = [f"# Scale: {total} partitions, one message each", "", f"`{r['command']}`", "",
          "| measure | value | target |", "| --- | --- | --- |"]
    md += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    (out / "results.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
