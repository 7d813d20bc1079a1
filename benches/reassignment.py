#!/usr/bin/env python3
"""What moving partitions costs the traffic beside them: produce latency on a topic
while the partitions of another topic are moved between brokers, next to the same load
with no move, with and without a replication throttle, on four corelog brokers on this
machine and, with --peer kafka, on four Apache Kafka brokers (combined KRaft mode, the
release tests/java/pom.xml pins) in the same harness.

    python3 benches/reassignment.py [--quick] [--peer kafka] [--shards N] [--throttle B/s]
                                    [--rate MSGS] [--no-build]

Set-up, the same for both brokers: topic `bulk` (4 partitions, replicas 1:2, 2:1, 1:2,
2:1, created with kafka-topics --replica-assignment) is filled with 400 MB of 1 KiB
messages (--quick: 100 MB; acks=1, one corelog-load run) and waited for until every
follower is in sync; topic `load` (8 partitions, also on brokers 1 and 2, so a move
competes with it on the same leaders and the same disk) takes the measured load: one
corelog-load produce run per phase, 1 KiB messages, acks=all (min.insync.replicas 2),
at a fixed rate (5,000 msg/s) for 20 s (--quick: 8 s) after a 2 s warm-up.
Phases, in this order:

  idle            no move (kafka-topics --describe runs where the others run
                  --execute, so every phase carries the same JVM start on these cores)
  move            every `bulk` partition moved from {1,2} to {3,4} with
                  kafka-reassign-partitions --execute, no throttle, started 2 s into the
                  load run (as its measured window starts)
  throttled-move  `bulk` moved back from {3,4} to {1,2} with --execute --throttle
                  (20 MB/s, --quick: 10 MB/s; each broker's leader and follower
                  replication rate, so about twice that in all with two followers)

A move's time runs from the first Metadata answer (polled every 0.05 s, a few bytes on
loopback, not a JVM) that lists a `bulk` partition's new replicas to the first in which
every partition's replicas and ISR are exactly its target; `--verify` is then run
until it reports every partition completed (and clears the throttles). "done in phase"
says whether that was before the load run ended, "of it in window" how many of the
move's seconds fell inside the load's measured window (the CLI's JVM takes seconds to
start on a busy machine, so a move may begin late in it). "busy cores": every CPU's busy
time over the load run, which also shows anything else running on the machine. Move
MB/s: record bytes of `bulk` x 2 (both replicas of every partition are new) / move
seconds, also as a share of the disk's direct-write bandwidth (fio, as every focused
benchmark measures it).

Where corelog has its partition balancer (on by default) its brokers run with
`--partition-balancer-enable false`: it would otherwise even out the placement set up
here on its own (Kafka has no such balancer). --no-build runs the binaries in
target/release as they are instead of building them first (harness.prepare does).

Every broker, the load generator and the CLI tools share this machine's cores and its
one disk: the figures say what a move costs the traffic beside it here, not on four
machines. Durability as run: corelog's default `ack-all`; Kafka's defaults (no fsync).
Results: benches/results/<stamp>-reassignment/results.{md,json}, each run's corelog-load
JSON and log, the CLI tools' output and the brokers' logs (warnings) beside them.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kafka_peer  # noqa: E402
import replication  # noqa: E402
from harness import BROKER, CLK_TCK, ROOT, fio, log, machine_busy_ticks, prepare  # noqa: E402
from replication import CorelogCluster, KafkaCluster, run_load  # noqa: E402

HOME = [[1, 2], [2, 1], [1, 2], [2, 1]]      # `bulk` before the move and after the move back
AWAY = [[3, 4], [4, 3], [3, 4], [4, 3]]      # `bulk` after the first move
LOAD_ASSIGNMENT = [[1, 2], [2, 1]] * 4       # `load`: 8 partitions on brokers 1 and 2


# ---------------------------------------------------------------------------- Metadata

def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(min(1 << 20, n - len(buf)))
        if not chunk:
            raise OSError("connection closed")
        buf += chunk
    return buf


def partitions_of(port: int, topic: str) -> dict[int, tuple[int, list[int], list[int]]] | None:
    """{partition: (leader, replicas, isr)} of `topic` from a Metadata v4 answer of the
    broker on `port`; None when it does not answer or knows no such topic."""
    client, name = b"reassignment-bench", topic.encode()
    body = (struct.pack(">hhih", 3, 4, 7, len(client)) + client
            + struct.pack(">ih", 1, len(name)) + name + struct.pack(">b", 0))
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.settimeout(2)
            s.sendall(struct.pack(">i", len(body)) + body)
            size = struct.unpack(">i", _recv_exact(s, 4))[0]
            buf = _recv_exact(s, size)
    except OSError:
        return None
    pos = 0

    def take(fmt: str):
        nonlocal pos
        v = struct.unpack_from(fmt, buf, pos)
        pos += struct.calcsize(fmt)
        return v[0] if len(v) == 1 else v

    def string() -> str | None:
        nonlocal pos
        n = take(">h")
        if n < 0:
            return None
        v = buf[pos:pos + n].decode()
        pos += n
        return v

    try:
        if take(">i") != 7:
            return None
        take(">i")  # throttle
        for _ in range(take(">i")):  # brokers
            take(">i"), string(), take(">i"), string()
        string()  # cluster id
        take(">i")  # controller
        for _ in range(take(">i")):
            err, tname, _internal = take(">h"), string(), take(">b")
            parts = {}
            for _ in range(take(">i")):
                _perr, index, leader = take(">hii")
                replicas = [take(">i") for _ in range(take(">i"))]
                isr = [take(">i") for _ in range(take(">i"))]
                parts[index] = (leader, replicas, isr)
            if tname == topic and err == 0 and parts:
                return parts
    except (struct.error, UnicodeDecodeError):
        return None
    return None


class MoveWatch:
    """Polls Metadata every `period` seconds on a thread and notes the first time any
    partition's replicas differ from `source` (the move has started) and the first time
    every partition's replicas and ISR are exactly `target` (it is complete)."""

    def __init__(self, port: int, topic: str, source: list[list[int]], target: list[list[int]],
                 period: float = 0.05):
        self.port, self.topic, self.period = port, topic, period
        self.source = {i: sorted(r) for i, r in enumerate(source)}
        self.target = {i: sorted(r) for i, r in enumerate(target)}
        self.started: float | None = None
        self.completed: float | None = None
        self.last: dict | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            t = time.monotonic()
            parts = partitions_of(self.port, self.topic)
            if parts is not None:
                self.last = parts
                if self.started is None and any(sorted(parts[i][1]) != self.source[i]
                                                for i in self.source if i in parts):
                    self.started = t
                if all(i in parts and sorted(parts[i][1]) == self.target[i]
                       and sorted(parts[i][2]) == self.target[i] for i in self.target):
                    self.completed = t
                    return
            self._stop.wait(self.period)

    def wait(self, timeout: float) -> bool:
        self._thread.join(timeout)
        return self.completed is not None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def wait_in_sync(port: int, topic: str, timeout: float = 180) -> None:
    """Until every partition of `topic` has a leader and its whole replica list in sync."""
    deadline = time.time() + timeout
    parts = None
    while time.time() < deadline:
        parts = partitions_of(port, topic)
        if parts and all(leader >= 0 and sorted(r) == sorted(isr)
                         for leader, r, isr in parts.values()):
            return
        time.sleep(0.5)
    raise RuntimeError(f"{topic}: not every replica in sync within {timeout} s: {parts}")


# ---------------------------------------------------------------------------- phases

class Bench:
    def __init__(self, who: str, cluster, out: Path, quick: bool, rate: int, throttle: int):
        self.who, self.cluster, self.out = who, cluster, out
        self.bs = cluster.bootstrap
        self.port = int(self.bs.split(",")[0].rsplit(":", 1)[1])
        self.quick, self.rate, self.throttle = quick, rate, throttle
        self.cli_log = open(out / f"cli-{who}.log", "w")

    def cli(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        t = time.monotonic()
        p = kafka_peer.cli(tool, *args, check=False)
        self.cli_log.write(f"$ {tool} {' '.join(args)}  # rc {p.returncode}, "
                           f"{time.monotonic() - t:.1f} s\n{p.stdout}{p.stderr}\n")
        self.cli_log.flush()
        if check and p.returncode != 0:
            raise RuntimeError(f"{self.who}: {tool} {' '.join(args)} failed ({p.returncode}):\n"
                               f"{p.stdout[-2000:]}{p.stderr[-2000:]}")
        return p

    def create(self, topic: str, assignment: list[list[int]]) -> None:
        self.cli("kafka-topics", "--bootstrap-server", self.bs, "--create", "--topic", topic,
                 "--replica-assignment", ",".join(":".join(map(str, r)) for r in assignment))
        kafka_peer.wait_partitions(self.bs, topic, len(assignment))
        wait_in_sync(self.port, topic)

    def plan(self, name: str, assignment: list[list[int]]) -> Path:
        p = self.out / f"plan-{self.who}-{name}.json"
        p.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": "bulk", "partition": i, "replicas": r}
            for i, r in enumerate(assignment)]}))
        return p

    def load_args(self) -> list[str]:
        return ["--topic", "load", "--message-size", "1024", "--acks", "all",
                "--producers", "2", "--rate", str(self.rate), "--linger-ms", "1",
                "--duration", "8s" if self.quick else "20s", "--warmup", "2s",
                "--threads", "1", "--max-in-flight", "5"]

    def fill(self, mb: int) -> dict:
        messages = mb * 1_000_000 // 1024
        r = run_load(self.bs, self.out, f"fill-{self.who}", "produce",
                     ["--topic", "bulk", "--message-size", "1024", "--acks", "1",
                      "--messages", str(messages), "--producers", "4", "--batch-size", "262144",
                      "--linger-ms", "5", "--threads", "1", "--max-in-flight", "5"])
        wait_in_sync(self.port, "bulk")
        return r

    def phase(self, name: str, source=None, target=None, throttle: int | None = None) -> dict:
        held: dict = {}

        def drive() -> None:
            try:
                held["result"] = run_load(self.bs, self.out, f"{name}-{self.who}", "produce",
                                          self.load_args())
            except Exception as e:  # noqa: BLE001 - reported below
                held["error"] = e

        watch = MoveWatch(self.port, "bulk", source, target) if target else None
        t0, busy0 = time.monotonic(), machine_busy_ticks()
        driver = threading.Thread(target=drive)
        driver.start()
        time.sleep(2.0)
        t_cli = time.monotonic()
        if target:
            args = ["--bootstrap-server", self.bs, "--reassignment-json-file",
                    str(self.plan(name, target)), "--execute"]
            if throttle:
                args += ["--throttle", str(throttle)]
            self.cli("kafka-reassign-partitions", *args)
        else:
            self.cli("kafka-topics", "--bootstrap-server", self.bs, "--describe", "--topic", "bulk")
        t_cli_end = time.monotonic()
        driver.join()
        t_load_end, busy1 = time.monotonic(), machine_busy_ticks()
        if "error" in held:
            if watch:
                watch.stop()
            raise held["error"]
        row = {"broker": self.who, "phase": name, "throttle_bytes_per_s": throttle,
               "cli_started_s": round(t_cli - t0, 2), "cli_s": round(t_cli_end - t_cli, 2),
               "load_s": round(t_load_end - t0, 2), "load": held["result"],
               # Every CPU's busy time over the load run, in cores: anything else running
               # on this machine shows here (the CLI's seconds above tell it too).
               "machine_busy_cores": round((busy1 - busy0) / CLK_TCK / (t_load_end - t0), 2)}
        # The load generator's measured window: its last duration_s seconds.
        w1 = t_load_end
        w0 = w1 - float(held["result"].get("duration_s") or 0)
        if target:
            ok = watch.wait(240)
            watch.stop()
            if not ok:
                raise RuntimeError(f"{self.who} {name}: the move did not complete within 240 s "
                                   f"of the load's end; last Metadata: {watch.last}")
            started = watch.started if watch.started is not None else t_cli_end
            row.update({"move_started_s": round(started - t0, 2),
                        "move_completed_s": round(watch.completed - t0, 2),
                        "move_s": round(watch.completed - started, 2),
                        "move_start_seen": watch.started is not None,
                        "done_in_phase": watch.completed <= t_load_end,
                        "move_in_window_s": round(max(0.0, min(watch.completed, w1) - max(started, w0)), 2)})
            row["verify"] = self.verify(self.plan(name, target))
        return row

    def verify(self, plan: Path, timeout: float = 120) -> dict:
        """--verify until every partition is reported completed (which clears throttles)."""
        deadline, t0, runs = time.monotonic() + timeout, time.monotonic(), 0
        while True:
            p = self.cli("kafka-reassign-partitions", "--bootstrap-server", self.bs,
                         "--reassignment-json-file", str(plan), "--verify", check=False)
            runs += 1
            done = [f"bulk-{i}" for i in range(len(HOME))
                    if f"Reassignment of partition bulk-{i} is completed" in p.stdout]
            if p.returncode == 0 and len(done) == len(HOME):
                return {"runs": runs, "seconds": round(time.monotonic() - t0, 1),
                        "cleared_throttles": "Clearing broker-level throttles" in p.stdout}
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.who}: --verify did not report every partition "
                                   f"completed within {timeout} s:\n{p.stdout[-2000:]}{p.stderr[-1000:]}")
            time.sleep(1)

    def run(self, fill_mb: int) -> tuple[dict, list[dict]]:
        self.create("bulk", HOME)
        self.create("load", LOAD_ASSIGNMENT)
        fill = self.fill(fill_mb)
        rows = [self.phase("idle"),
                self.phase("move", HOME, AWAY),
                self.phase("throttled-move", AWAY, HOME, self.throttle)]
        return fill, rows


def prepare_without_build(name: str) -> tuple[Path, Path, float | None]:
    """harness.prepare without its cargo build: the binaries in target/release as they are
    (for a tree someone is editing, which may not build, or may build something else)."""
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + name
    out = ROOT / "benches" / "results" / stamp
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"corelog-{name}-", dir=os.environ.get("TMPDIR", "/tmp")))
    disk = fio(work, "write", "256M")
    log(f"disk direct write: {disk} MB/s")
    return out, work, disk


def keep_logs(work: Path, out: Path, prefix: str) -> None:
    """Copies the brokers' logs (warnings; the last 256 KiB of each) next to the results."""
    for f in sorted(work.glob(f"{prefix}-*.log")):
        data = f.read_bytes()[-(256 << 10):]
        (out / f"broker-{f.name}").write_bytes(data)


def fmt(v, nd: int = 1) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.{nd}f}"
    return f"{v:,}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--peer", choices=["kafka"])
    ap.add_argument("--shards", type=int, default=1, help="shards of each corelog broker")
    ap.add_argument("--rate", type=int, default=5000, help="msg/s of the measured load")
    ap.add_argument("--throttle", type=int, help="bytes/s of the throttled move's rates "
                    "(default 20 MB/s, --quick 10 MB/s)")
    ap.add_argument("--no-build", action="store_true", help="run the binaries in target/release "
                    "as they are (no cargo build)")
    a = ap.parse_args()
    command = "python3 benches/reassignment.py" + "".join(f" {x}" for x in sys.argv[1:])
    fill_mb = 100 if a.quick else 400
    throttle = a.throttle or (10_000_000 if a.quick else 20_000_000)
    # Builds, makes the results directory and a scratch one, measures the disk.
    out, scratch, disk = (prepare_without_build if a.no_build else prepare)("reassignment")
    # corelog's partition balancer would even out the placement set up here (every
    # partition on brokers 1 and 2) on its own; Kafka has none.
    balancer_off = True
    built = dt.datetime.fromtimestamp(BROKER.stat().st_mtime, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    stamp = out.name
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True).stdout.strip())
    runs: list[dict] = []
    fills: dict = {}
    failures: dict = {}
    keep_scratch = False
    # (CorelogCluster runs every broker with `--partition-balancer-enable false`.)
    brokers = [("corelog", lambda: CorelogCluster(scratch, 4, a.shards), "corelog")]
    if a.peer == "kafka":
        brokers.append(("kafka", lambda: KafkaCluster(scratch, 4), "kafka"))
    try:
        for who, make, prefix in brokers:
            log(f"{who}: starting 4 brokers")
            try:
                cluster = make()
            except Exception as e:  # noqa: BLE001 - reported in the results
                log(f"{who}: {e}")
                failures[who] = f"cluster did not come up: {e}"
                keep_logs(scratch, out, prefix)
                continue
            bench = Bench(who, cluster, out, a.quick, a.rate, throttle)
            try:
                fill, rows = bench.run(fill_mb)
                fills[who] = {"messages": fill.get("messages"), "bytes": fill.get("bytes"),
                              "msgs_per_s": fill.get("msgs_per_s"), "mb_per_s": fill.get("mb_per_s"),
                              "errors": fill.get("errors")}
                copied = 2 * int(fill.get("bytes") or 0)
                for r in rows:
                    lat = r["load"].get("latency_ms", {})
                    r["produce_ms"] = {k: lat.get(k) for k in ("p50", "p99", "p999", "max")}
                    r["msgs_per_s"] = r["load"].get("msgs_per_s")
                    r["errors"] = r["load"].get("errors")
                    if r.get("move_s"):
                        r["moved_bytes"] = copied
                        r["move_mb_per_s"] = round(copied / 1e6 / r["move_s"], 1)
                        r["move_of_disk_limit"] = round(r["move_mb_per_s"] / disk, 3) if disk else None
                    del r["load"]
                    runs.append(r)
            except Exception as e:  # noqa: BLE001 - reported in the results
                log(f"{who}: FAILED: {e}")
                failures[who] = str(e)
                keep_scratch = True
            finally:
                bench.cli_log.close()
                cluster.stop()
                keep_logs(scratch, out, prefix)
    finally:
        if keep_scratch:
            log(f"scratch directory kept: {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    doc = {"stamp": stamp, "command": command, "commit": head, "dirty": dirty,
           "corelog_binary_mtime": built, "corelog_partition_balancer_disabled": balancer_off,
           "quick": a.quick,
           "shards_per_corelog_broker": a.shards, "cpus": os.cpu_count(),
           "disk_write_mb_s": disk, "rate": a.rate, "message_bytes": 1024,
           "throttle_bytes_per_s": throttle, "bulk_fill_mb": fill_mb, "fills": fills,
           "failures": failures, "runs": runs}
    (out / "results.json").write_text(json.dumps(doc, indent=2))
    secs = 8 if a.quick else 20
    lines = [f"# Produce latency during partition reassignment ({stamp}{', quick' if a.quick else ''})", "",
             f"`{command}` at {head}{' (with uncommitted changes)' if dirty else ''}; "
             f"target/release/corelog built {built}"
             f"{', run with `--partition-balancer-enable false`' if balancer_off else ''}.", "",
             f"{os.cpu_count()} CPUs; 4 brokers of each kind on this machine (corelog: {a.shards} shard(s) each); "
             f"disk direct write {disk} MB/s (fio); all brokers on this one disk. "
             f"Load: topic `load` (8 partitions on brokers 1,2, RF 2, min.insync.replicas 2), "
             f"1 KiB, acks=all, {a.rate:,} msg/s, {secs} s after a 2 s warm-up. "
             f"Moved: topic `bulk` (4 partitions, RF 2), {fill_mb} MB of records, "
             f"{{1,2}} → {{3,4}} unthrottled, then back with `--throttle {throttle}` "
             f"({throttle / 1e6:g} MB/s per broker and direction). Move MB/s counts both new "
             "replicas of every partition; \"of disk\" is its share of the fio figure. "
             "\"of it in window\": seconds of the move inside the load's measured window; "
             "\"busy cores\": every CPU's busy time over the load run (this benchmark's "
             "brokers, load generator and CLI tools, and anything else running here).", "",
             "| broker | phase | msg/s | produce p50 / p99 / p99.9 / max ms | errors | busy cores | move s | of it in window s | done in phase | move MB/s (of disk) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in runs:
        p = r["produce_ms"]
        mv = (f"{fmt(r.get('move_mb_per_s'))} ({fmt(r.get('move_of_disk_limit'), 3)})"
              if r.get("move_mb_per_s") else "-")
        lines.append(f"| {r['broker']} | {r['phase']} | {fmt(r['msgs_per_s'], 0)} | "
                     f"{p.get('p50')} / {p.get('p99')} / {p.get('p999')} / {p.get('max')} | "
                     f"{fmt(r.get('errors'))} | {fmt(r.get('machine_busy_cores'), 2)} | {fmt(r.get('move_s'), 2)} | "
                     f"{fmt(r.get('move_in_window_s'), 2)} | "
                     f"{fmt(r.get('done_in_phase')) if 'done_in_phase' in r else '-'} | {mv} |")
    if fills:
        lines += ["", "Fill of `bulk` (acks=1): " + "; ".join(
            f"{w} {f['bytes'] / 1e6:,.0f} MB at {fmt(f['mb_per_s'])} MB/s" for w, f in fills.items()) + "."]
    for w, why in failures.items():
        lines += ["", f"**{w} failed**: {why.splitlines()[0] if why else '?'} (see results.json and the logs here)."]
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
