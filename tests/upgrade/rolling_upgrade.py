#!/usr/bin/env python3
"""Rolling upgrade and downgrade of a 3-broker RF 3 cluster under load, from an earlier
commit of this repository to the current build — run before every release and recorded
in tests/upgrade/RESULTS.md; too long for CI (it builds the earlier release), whose cheap
half is tests/integration/test_previous_format.py.

What it does, in one scratch directory:
1. Builds the broker at ``--from`` (default: the commit before feature levels, the first
   release an upgrade starts from) with ``git archive`` + ``cargo build --release``,
   unless ``--old-bin`` names a binary already built.
2. Runs 3 brokers of it (every one a voter), a topic of 6 partitions at RF 3 with
   ``min.insync.replicas=2``, an idempotent ``acks=all`` producer (librdkafka) writing
   numbered records throughout, and a consumer group (classic protocol) reading them.
3. Replaces the brokers with the current build one at a time: SIGTERM (controlled
   shutdown, which must exit 0), start the new binary on the same data directory, wait
   until every partition is back to 3 in-sync replicas. The cluster has finalized no
   feature levels yet, so it then goes back the same way to the earlier release (a
   downgrade before finalizing), and forward again.
4. Finalizes the new levels with Kafka's ``kafka-features upgrade --metadata 4.4``.
5. Starts the earlier release on one broker's data directory and expects a refusal (a
   non-zero exit, or no admission, with the error it logs), then the current one again.
6. Checks: every acknowledged record is in the topic exactly once and in the order it was
   acknowledged per partition, nothing else is; the consumer group saw no error and read
   every acknowledged record; no partition was without a leader for longer than
   ``--max-offline-s`` (a leader move) at any moment.

Usage:
    python3 tests/upgrade/rolling_upgrade.py [--from COMMIT] [--old-bin PATH]
        [--new-bin target/release/corelog] [--work DIR] [--rate 300]

Exit status 0 when every check passes; the summary is printed as Markdown for RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from launcher import Broker, Cluster, wait_until  # noqa: E402

# The last commit before feature levels (issue 52's work began after it).
DEFAULT_FROM = "4b1de7b"
KAFKA_CLI = ROOT / "tools" / "kafka-cli" / "kafka-cli.sh"
TOPIC = "rolling"
PARTITIONS = 6
GROUP = "rolling-group"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def build_old(commit: str, work: Path) -> Path:
    src = work / f"src-{commit}"
    binary = work / f"target-{commit}" / "release" / "corelog"
    if binary.exists():
        return binary
    src.mkdir(parents=True, exist_ok=True)
    log(f"extracting {commit} into {src}")
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    log(f"building {commit} (cargo build --release -p corelog; minutes)")
    env = {**os.environ, "CARGO_TARGET_DIR": str(work / f"target-{commit}")}
    # build.rs of later releases reads git; an archive has none, which is fine.
    subprocess.run(["cargo", "build", "--release", "-p", "corelog"], cwd=src, env=env, check=True)
    return binary


def kafka_features(bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(KAFKA_CLI), "kafka-features", "--bootstrap-server", bootstrap, *args],
                          capture_output=True, text=True, timeout=180)


class Load:
    """The producer, the consumer group and the leader monitor, each on its own thread."""

    def __init__(self, bootstrap: str, rate: int):
        self.bootstrap, self.rate = bootstrap, rate
        self.stop = threading.Event()
        self.acked: dict[int, list[int]] = defaultdict(list)  # partition -> seqs, in ack order
        self.acked_offsets: dict[int, dict[int, int]] = defaultdict(dict)  # partition -> seq -> offset
        self.produce_errors: list[str] = []
        self.consumed: set[int] = set()
        self.group_errors: list[str] = []
        self.offline_since: dict[int, float] = {}
        self.max_offline_s = 0.0
        self.offline_events: list[tuple[int, float]] = []
        self.threads = [threading.Thread(target=f, daemon=True, name=f.__name__)
                        for f in (self._produce, self._consume, self._monitor)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=120)

    def _produce(self) -> None:
        p = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                      "linger.ms": 5, "message.timeout.ms": 300000, "retries": 2147483647})
        seq = 0

        def done(err, msg):
            if err is not None:
                self.produce_errors.append(str(err))
                return
            s = int(msg.value())
            self.acked[msg.partition()].append(s)
            self.acked_offsets[msg.partition()][s] = msg.offset()

        interval = 1.0 / self.rate
        next_at = time.monotonic()
        while not self.stop.is_set():
            p.produce(TOPIC, key=str(seq).encode(), value=str(seq).encode(), on_delivery=done)
            seq += 1
            p.poll(0)
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        remaining = p.flush(300)
        if remaining:
            self.produce_errors.append(f"{remaining} records never answered")

    def _consume(self) -> None:
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": GROUP,
                      "auto.offset.reset": "earliest", "enable.auto.commit": True,
                      "session.timeout.ms": 30000})
        c.subscribe([TOPIC])
        idle_after_stop = 0
        while True:
            m = c.poll(0.5)
            if m is None:
                if self.stop.is_set():
                    idle_after_stop += 1
                    if idle_after_stop > 20 and self._all_consumed():
                        break
                    if idle_after_stop > 240:
                        break
                continue
            if m.error():
                if m.error().code() != KafkaError._PARTITION_EOF:
                    self.group_errors.append(str(m.error()))
                continue
            self.consumed.add(int(m.value()))
        c.close()

    def _all_consumed(self) -> bool:
        return all(s in self.consumed for seqs in list(self.acked.values()) for s in seqs)

    def _monitor(self) -> None:
        brokers = self.bootstrap.split(",")
        while not self.stop.is_set():
            now = time.monotonic()
            md = None
            for b in brokers:
                try:
                    md = AdminClient({"bootstrap.servers": b}).list_topics(TOPIC, timeout=2)
                    break
                except Exception:
                    continue
            if md is not None and TOPIC in md.topics:
                for pid, pm in md.topics[TOPIC].partitions.items():
                    if pm.leader < 0:
                        self.offline_since.setdefault(pid, now)
                    elif pid in self.offline_since:
                        d = now - self.offline_since.pop(pid)
                        self.offline_events.append((pid, d))
                        self.max_offline_s = max(self.max_offline_s, d)
            time.sleep(0.2)


def wait_in_sync(bootstrap: str, timeout: float = 180) -> None:
    def full() -> bool:
        try:
            md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(TOPIC, timeout=5)
        except Exception:
            return False
        return all(len(p.isrs) == 3 and p.leader >= 0 for p in md.topics[TOPIC].partitions.values())
    wait_until(full, timeout=timeout, what="every partition back to 3 in-sync replicas")


def roll(cluster: Cluster, binary: Path, label: str, steps: list[str]) -> None:
    for b in cluster.brokers:
        log(f"{label}: {b.name} -> {binary}")
        b.stop()  # SIGTERM: controlled shutdown; asserts exit 0
        b.binary = binary
        b.start()
        wait_in_sync(b.bootstrap)
    steps.append(f"{label}: brokers replaced one at a time with `{binary.name}` ({binary.parent})")


def refused_start(b: Broker, binary: Path, timeout: float = 60) -> str:
    """Starts ``binary`` on ``b``'s data directory; returns what refused it."""
    b.binary = binary
    b.launch()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if b.proc.poll() is not None:
            break
        time.sleep(0.5)
    text = b.log_path.read_text(errors="replace").split("===== start #")[-1]
    if b.proc.poll() is None:
        b.kill()
        admitted = "admitted to the cluster" in text
        assert not admitted, f"the earlier release was admitted to a finalized cluster:\n{text[-3000:]}"
        why = [line for line in text.splitlines() if "refused" in line or "ERROR" in line]
        return f"kept out (not admitted in {timeout:.0f} s): " + (why[-1] if why else "no error logged")
    lines = [line for line in text.splitlines() if " ERROR " in line]
    return f"exit {b.proc.returncode}: " + (lines[-1].strip()[:400] if lines else text[-500:])


def verify(load: Load, bootstrap: str) -> list[str]:
    failures = []
    acked_total = sum(len(v) for v in load.acked.values())
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "rolling-verify", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "enable.partition.eof": True})
    c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    seen: dict[int, list[tuple[int, int]]] = defaultdict(list)
    eof = set()
    deadline = time.monotonic() + 300
    while len(eof) < PARTITIONS and time.monotonic() < deadline:
        m = c.poll(1)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                eof.add(m.partition())
            continue
        seen[m.partition()].append((m.offset(), int(m.value())))
    c.close()
    all_seqs = [s for v in seen.values() for _, s in v]
    dups = len(all_seqs) - len(set(all_seqs))
    if dups:
        failures.append(f"{dups} duplicated records in the topic")
    for p, seqs in load.acked.items():
        in_log = {s: off for off, s in seen[p]}
        missing = [s for s in seqs if s not in in_log]
        if missing:
            failures.append(f"partition {p}: {len(missing)} acknowledged records missing (first {missing[:5]})")
        moved = [s for s in seqs if s in in_log and in_log[s] != load.acked_offsets[p][s]]
        if moved:
            failures.append(f"partition {p}: {len(moved)} records not at the offset they were acknowledged at")
    not_consumed = [s for v in load.acked.values() for s in v if s not in load.consumed]
    if not_consumed:
        failures.append(f"the group never read {len(not_consumed)} acknowledged records")
    if load.group_errors:
        failures.append(f"consumer group errors: {load.group_errors[:5]}")
    log(f"verified {acked_total} acknowledged records, {len(all_seqs)} in the topic")
    return failures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--from", dest="commit", default=DEFAULT_FROM)
    ap.add_argument("--old-bin", type=Path)
    ap.add_argument("--new-bin", type=Path, default=ROOT / "target" / "release" / "corelog")
    ap.add_argument("--work", type=Path)
    ap.add_argument("--rate", type=int, default=300, help="records per second")
    ap.add_argument("--max-offline-s", type=float, default=10.0)
    a = ap.parse_args()
    work = a.work or Path(tempfile.mkdtemp(prefix="corelog-rolling-"))
    work.mkdir(parents=True, exist_ok=True)
    old = a.old_bin or build_old(a.commit, work)
    new = a.new_bin.resolve()
    old_version = subprocess.run([str(old), "--version"], capture_output=True, text=True).stdout.strip()
    new_version = subprocess.run([str(new), "--version"], capture_output=True, text=True).stdout.strip()
    log(f"from {old_version} ({a.commit}) to {new_version}")

    brokers = [Broker(work / f"n{i}", shards=2, name=f"n{i}") for i in (1, 2, 3)]
    for b in brokers:
        b.binary = old
    cluster = Cluster(brokers, extra_args=["--partition-balancer-enable", "false"])
    steps: list[str] = []
    failures: list[str] = []
    load = None
    try:
        cluster.start()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})])[TOPIC].result()
        wait_in_sync(cluster.bootstrap)
        load = Load(cluster.bootstrap, a.rate)
        load.start()
        time.sleep(10)
        steps.append(f"3 brokers of {old_version}; topic `{TOPIC}` {PARTITIONS}×RF3, min.insync.replicas=2; "
                     f"idempotent acks=all producer at {a.rate}/s and group `{GROUP}` running throughout")
        roll(cluster, new, "upgrade", steps)
        d = kafka_features(cluster.bootstrap, "describe")
        steps.append("not finalized yet: `kafka-features describe` → " +
                     "; ".join(line.split("Epoch")[0].strip() for line in d.stdout.splitlines()
                               if "metadata.version" in line))
        roll(cluster, old, "downgrade before finalizing", steps)
        roll(cluster, new, "upgrade again", steps)
        # Registrations a controller of the earlier release relayed lack their feature
        # ranges until the brokers send them again (every few seconds): retry meanwhile.
        deadline = time.monotonic() + 60
        while True:
            r = kafka_features(cluster.bootstrap, "upgrade", "--metadata", "4.4")
            if r.returncode == 0 or "without feature levels" not in r.stdout + r.stderr \
                    or time.monotonic() > deadline:
                break
            time.sleep(2)
        if r.returncode != 0:
            failures.append(f"kafka-features upgrade failed: {r.stdout}{r.stderr}")
        steps.append(f"finalized: `kafka-features upgrade --metadata 4.4` → {r.stdout.strip()}")
        d = kafka_features(cluster.bootstrap, "describe")
        steps.append("`kafka-features describe`:\n\n```\n" +
                     "\n".join(re.sub(r"\s+", " ", line) for line in d.stdout.splitlines() if line) + "\n```")
        time.sleep(5)
        last = cluster.brokers[-1]
        last.stop()
        why = refused_start(last, old)
        steps.append(f"the earlier release started on {last.name}'s data directory after finalizing: {why}")
        last.binary = new
        last.start()
        wait_in_sync(last.bootstrap)
        steps.append(f"{last.name} back on the current build, in sync")
        time.sleep(5)
    finally:
        if load is not None:
            load.finish()
        if load is not None and cluster.brokers[0].is_running():
            failures += verify(load, cluster.bootstrap)
            if load.produce_errors:
                failures.append(f"producer errors: {load.produce_errors[:5]}")
            if load.max_offline_s > a.max_offline_s:
                failures.append(f"a partition was offline {load.max_offline_s:.1f} s (limit {a.max_offline_s} s)")
        cluster.teardown()
    acked = sum(len(v) for v in load.acked.values()) if load else 0
    print("\n## Rolling upgrade", time.strftime("%Y-%m-%d"), f"({old_version} → {new_version})\n")
    print(f"Command: `python3 tests/upgrade/rolling_upgrade.py --from {a.commit}`\n")
    for s in steps:
        print(f"- {s}")
    print(f"\n- acknowledged records: {acked}; longest time a partition had no leader: "
          f"{load.max_offline_s if load else 0:.1f} s ({len(load.offline_events) if load else 0} leaderless spells)")
    print("- result: " + ("PASS" if not failures else "FAIL\n  - " + "\n  - ".join(failures)))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
