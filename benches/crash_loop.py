#!/usr/bin/env python3
"""A crash loop: corelog brokers SIGKILLed and restarted over and over under an idempotent
acks=all produce load, then every acknowledged record read back. A bench script, not a
CI test (it takes minutes and its timings depend on the machine).

    python3 benches/crash_loop.py --mode single [--cycles 100] [--quick]
    python3 benches/crash_loop.py --mode cluster [--cycles 100] [--quick]
        [--seconds-per-cycle 2] [--seed 1] [--rate 2000] [--shards 2] [--log-level info]
        [--down-seconds 0] [--keep-logs]
        [--fault sigkill|power-loss|power-loss-torn] [--all-at-once]

--fault power-loss (or power-loss-torn) starts the brokers with
`--storage-fault-injection true` and, instead of a SIGKILL, cuts a broker's power through
`POST /faults`: the broker drops every byte it wrote but had not fdatasync'ed (or, torn,
the second half of each file's unsynced bytes), right after a write completes, and dies
of SIGKILL (corelog_storage::fault). --all-at-once (cluster mode) fails every broker in
each cycle at the same moment, a correlated power loss.

Modes:
  single   one broker, `corelog serve` with its defaults (durability ack-all) and 2 shards
           (--shards); topic `crash` with 8 partitions, replication factor 1.
  cluster  three brokers on loopback, all three the controller quorum's voters, started
           with the flags benches/replication.py's CorelogCluster gives them (the
           defaults, `--topic-default min.insync.replicas=2`, the partition balancer on),
           2 shards each; topic `crash` with 8 partitions, replication factor 3,
           min.insync.replicas 2. The brokers are tests/integration/launcher.py's (one
           launcher.Cluster), as CorelogCluster's are; built here rather than by
           CorelogCluster to add the loop's markers and power-loss fault to each.

Load: one confluent-kafka producer in a thread, enable.idempotence=True, acks=all,
message.timeout.ms 300 s (rides out any restart), paced at --rate messages a second,
each value unique (`<cycle>-<i>`), keys spreading them over the partitions. A value
counts as acknowledged when its delivery callback reports success. A fatal producer error
(an idempotent producer that can no longer guarantee order) is recorded and the producer
replaced by a new one, so the load goes on.

Each cycle: the load runs for --seconds-per-cycle (times a random factor in [0.75, 1.25]
from --seed), then one broker is SIGKILLed, reaped and started again on the same ports
and data directory, at once or after --down-seconds; its HTTP /health is polled (every
50 ms) until it answers 200, and the cycle then waits until every partition has had an
acknowledgement after that (so that the longest any partition went without an
acknowledgement, the cycle's stall as the producer sees it, closes inside the cycle).
Which broker: single mode, the broker; cluster mode, in turn the active controller (the
quorum leader DescribeQuorum names) on even cycles and the broker leading the most
partitions of `crash` (lowest id on a tie) on odd cycles. In cluster mode the cycle then
also waits (up to 60 s) until every partition's ISR holds all three replicas again, so
that every kill hits a whole cluster; that time is recorded too. Per cycle: which broker,
time from restart to healthy, (cluster) time to a full ISR and how many partitions the
victim led before the kill and after the cycle, the longest gap between two
acknowledgements of one partition, produce errors, acknowledged records.

Read the cluster figures with the defaults in mind: the broker session timeout is 9 s, so
a broker SIGKILLed and restarted at once (0.2-0.4 s here) is back before the controller
would fence it; its partitions do not fail over, their ISR does not shrink, and the
producer waits for the restarted leader. `--down-seconds 12` keeps each victim down past
the session timeout: then a plain leader's partitions fail over after about 9 s, but a
killed active controller's partitions wait for it (a newly elected controller gives every
broker one session timeout from its election before fencing it). Restart to healthy
includes admission: the controller unfences a restarted broker at a heartbeat (every 2 s
by default) that shows it has applied its own registration, so it is 0.2-0.4 s when the
first heartbeat does and about 2.2 s when the next one has to. After a controller kill
the new controller often also leads the most partitions, so an odd cycle may kill the
controller again (the "why" column says which rule chose the broker, not every role it
had).

At the end the load stops (flush), and a consumer assigned every partition from offset 0
reads up to the end offsets (high watermarks) taken after the flush. Checked: every
acknowledged value is present (lost must be 0); duplicates are counted (idempotence should
make them 0; reported, not asserted); values whose delivery failed but that are present are
noted (allowed: "possibly persisted").

Results: benches/results/<UTC stamp>-crash-loop-<mode>/results.{md,json}. The brokers'
logs (the last 256 KiB of each, restarts marked in them) and the client's log are kept
there only if something acknowledged was lost, a broker failed to come back, died on its
own, or did not rejoin the ISR (or with --keep-logs). Exit code 1 if anything acknowledged was lost or a broker
was not healthy within 60 s of its restart (or died on its own).

Uses target/release/corelog as it is (it builds nothing).
"""
from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import logging
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request
from array import array
from pathlib import Path

import confluent_kafka
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import ROOT  # noqa: E402

sys.path.insert(0, str(ROOT / "tests" / "integration"))
import kwire  # noqa: E402
import launcher  # noqa: E402

NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
TOPIC = "crash"
PARTITIONS = 8
HEALTHY_WITHIN = 60.0
ISR_WITHIN = 60.0
ACK_WITHIN = 60.0
KEEP_LOG_BYTES = 256 * 1024
ANSI = re.compile(rb"\x1b\[[0-9;]*m")


def log(msg: str) -> None:
    print(f"[crash-loop {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------- brokers

class Node(launcher.Broker):
    """One corelog broker of the loop: tests/integration/launcher.py's Broker (started
    again on the same ports and data directory, its output appended to one log file
    across restarts), data in work/corelog-<id>, log in work/corelog-<id>.log. What the
    loop adds: a power loss through POST /faults besides a SIGKILL, and a timestamped
    marker line in the log at every start, kill and stop."""

    def __init__(self, work: Path, node_id: int, shards: int, log_level: str):
        super().__init__(work, shards=shards, name=f"node{node_id}", log_level=log_level,
                         data_dir=work / f"corelog-{node_id}",
                         log_path=work / f"corelog-{node_id}.log")
        self.node_id = node_id

    @property
    def id(self) -> int:
        return self.node_id

    def _mark(self, what: str) -> None:
        with open(self.log_path, "a") as f:
            f.write(f"===== crash_loop: {what} at {dt.datetime.now(dt.timezone.utc).isoformat()}\n")

    def launch(self) -> "Node":
        self._mark(f"start #{self.starts + 1} of node {self.id}")
        return super().launch()

    def kill(self, fault: str = "sigkill") -> int:
        """Fails the broker (SIGKILL, or a power loss that ends in one) and reaps it."""
        assert self.proc is not None
        if fault != "sigkill":
            body = b"power-loss torn" if fault == "power-loss-torn" else b"power-loss"
            req = urllib.request.Request(f"http://{self.http}/faults", data=body, method="POST")
            try:
                NO_PROXY.open(req, timeout=20).read()
            except OSError:
                pass  # the process dies with the connection open
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                pass  # SIGKILLed below
        rc = super().kill()
        self._mark(f"{fault} of node {self.id} (exit {rc})")
        return rc

    def seconds_to_healthy(self, within: float) -> float | None:
        """Seconds until /health answers (polled every 50 ms), or None (not within
        ``within`` s, or the process exited)."""
        t0 = time.monotonic()
        try:
            self.wait_healthy(timeout=within, poll_s=0.05)
        except launcher.BrokerStartError:
            return None
        return time.monotonic() - t0

    def finish_teardown(self, timeout: float = 60.0) -> None:
        if self.proc is None:
            return
        super().finish_teardown(timeout)
        self._mark(f"stop of node {self.id} (exit {self.proc.returncode})")


def make_nodes(mode: str, work: Path, shards: int, log_level: str,
               extra_args: list[str]) -> list[Node]:
    """The broker (single), or three voters of one quorum with the flags
    replication.CorelogCluster gives its brokers (cluster); configured, not started."""
    if mode == "single":
        node = Node(work, 1, shards, log_level)
        node.extra_args += extra_args
        return [node]
    return launcher.Cluster([Node(work, i, shards, log_level) for i in (1, 2, 3)],
                            extra_args=["--topic-default", "min.insync.replicas=2",
                                        *extra_args]).brokers


# ---------------------------------------------------------------------------- load

class Load:
    """An idempotent acks=all producer in a thread, recording every acknowledged value
    with the partition and offset its delivery report gave."""

    def __init__(self, bootstrap: str, rate: int, client_log: logging.Logger):
        self.rate = rate
        self.config = {"bootstrap.servers": bootstrap, "acks": "all",
                       "enable.idempotence": True, "linger.ms": 5,
                       "message.timeout.ms": 300_000, "request.timeout.ms": 10_000,
                       "logger": client_log, "error_cb": self.on_error}
        self.cycle = 0
        self.sent = 0                     # values handed to the producer: 0..sent-1
        self.cycle_of = array("i")        # cycle in which value i was produced
        self.acked = array("q")           # value index i of every acknowledgement
        self.acked_at = array("q")        # (partition << 48) | offset of the same
        self.failed = array("q")          # value index of every failed delivery
        self.delivery_errors: collections.Counter = collections.Counter()
        self.client_errors: collections.Counter = collections.Counter()
        self.fatal: list[str] = []
        self.producers = 0
        self.unflushed = 0
        self.last_ack: dict[int, float] = {}   # partition -> time of its last ack
        self.max_gap = 0.0                        # longest a partition went without an ack
        self.stop = threading.Event()
        self._fatal = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def value(self, i: int) -> bytes:
        return f"{self.cycle_of[i]}-{i}".encode()

    @staticmethod
    def index(value: bytes) -> int:
        return int(value.split(b"-", 1)[1])

    def on_delivery(self, err, msg) -> None:
        i = self.index(msg.value())
        if err is None:
            now = time.monotonic()
            p = msg.partition()
            if p in self.last_ack:
                self.max_gap = max(self.max_gap, now - self.last_ack[p])
            self.last_ack[p] = now
            self.acked.append(i)
            self.acked_at.append((msg.partition() << 48) | msg.offset())
        else:
            self.failed.append(i)
            self.delivery_errors[err.name()] += 1

    def on_error(self, err) -> None:
        self.client_errors[err.name()] += 1
        if err.fatal():
            self.fatal.append(f"cycle {self.cycle}: {err}")
            self._fatal.set()

    def run(self) -> None:
        per_tick = max(1, self.rate // 100)
        while True:
            p = Producer(self.config)
            self.producers += 1
            self._fatal.clear()
            next_tick = time.monotonic()
            while not self.stop.is_set() and not self._fatal.is_set():
                n = 0
                while n < per_tick and not self._fatal.is_set():
                    i = self.sent
                    self.cycle_of.append(self.cycle)
                    try:
                        p.produce(TOPIC, key=str(i % 64).encode(), value=self.value(i),
                                  on_delivery=self.on_delivery)
                    except BufferError:
                        self.cycle_of.pop()
                        p.poll(0.05)
                        continue
                    self.sent += 1
                    n += 1
                next_tick += 0.01
                while not self._fatal.is_set():
                    left = next_tick - time.monotonic()
                    if left <= 0:
                        break
                    p.poll(left)      # returns early whenever it served a callback
                if time.monotonic() - next_tick > 1.0:   # fell behind (a stall): do not burst
                    next_tick = time.monotonic()
            if self._fatal.is_set() and not self.stop.is_set():
                # The fatal error fails what is queued; a new producer carries on.
                p.purge()
                p.flush(30)
                continue
            self.unflushed = p.flush(310)
            return

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(400)


# ---------------------------------------------------------------------------- metadata

def partition_state(admin: AdminClient) -> tuple[int, dict[int, tuple[int, list[int], list[int]]]]:
    """(controller id, partition -> (leader, replicas, isr)) as one Metadata answers it."""
    md = admin.list_topics(topic=TOPIC, timeout=10)
    t = md.topics[TOPIC]
    if t.error is not None:
        raise KafkaException(t.error)
    return md.controller_id, {p.id: (p.leader, list(p.replicas), list(p.isrs))
                              for p in t.partitions.values()}


def active_controller(nodes) -> int:
    """The quorum leader by DescribeQuorum (Metadata's controller_id names the broker
    that answers, a live one, not the leader)."""
    for n in nodes:
        try:
            return kwire.describe_quorum_leader(f"127.0.0.1:{n.port}", timeout=3)
        except Exception:  # noqa: BLE001 - a dead broker: ask the next
            continue
    return -1


def isr_full(admin: AdminClient, rf: int) -> bool:
    try:
        _, parts = partition_state(admin)
    except Exception:
        return False
    return len(parts) == PARTITIONS and all(
        leader >= 0 and len(isr) == rf for leader, _, isr in parts.values())


def wait_isr_full(admin: AdminClient, rf: int, within: float) -> float | None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < within:
        if isr_full(admin, rf):
            return time.monotonic() - t0
        time.sleep(0.1)
    return None


def leads_of(admin: AdminClient, node: "Node") -> int | None:
    try:
        _, parts = partition_state(admin)
    except Exception:  # noqa: BLE001
        return None
    return sum(1 for leader, _, _ in parts.values() if leader == node.id)


def choose_victim(mode: str, cycle: int, nodes: list[Node], admin: AdminClient) -> tuple[Node, str]:
    if mode == "single":
        return nodes[0], "the broker"
    try:
        _, parts = partition_state(admin)
        controller = active_controller(nodes)
    except Exception as e:  # noqa: BLE001
        n = nodes[cycle % len(nodes)]
        return n, f"round-robin (Metadata failed: {e})"
    if cycle % 2 == 0 and controller in {n.id for n in nodes}:
        return next(n for n in nodes if n.id == controller), "active controller"
    leads = collections.Counter(leader for leader, _, _ in parts.values() if leader >= 0)
    best = min(nodes, key=lambda n: (-leads.get(n.id, 0), n.id))
    return best, f"most leaderships ({leads.get(best.id, 0)}/{PARTITIONS})"


# ---------------------------------------------------------------------------- verify

def read_everything(bootstrap: str, client_log: logging.Logger, within: float = 300.0) -> dict:
    """Every record of every partition from offset 0 up to the high watermark taken
    before reading: {partition: {offset: value}}, the watermarks, and whether it
    finished."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"crash-loop-verify-{time.time()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "enable.partition.eof": True, "logger": client_log})
    seen: dict[int, dict[int, bytes]] = {p: {} for p in range(PARTITIONS)}
    marks = {}
    try:
        for p in range(PARTITIONS):
            marks[p] = c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)
        c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        pending = {p for p in range(PARTITIONS) if marks[p][1] > 0}
        deadline = time.monotonic() + within
        while pending and time.monotonic() < deadline:
            for m in c.consume(1000, timeout=1.0):
                if m.error():
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        raise KafkaException(m.error())
                    continue
                p, o = m.partition(), m.offset()
                if o in seen[p]:
                    raise RuntimeError(f"offset {o} of partition {p} delivered twice to the reader")
                seen[p][o] = m.value()
                if o + 1 >= marks[p][1]:
                    pending.discard(p)
    finally:
        c.close()
    return {"seen": seen, "marks": marks, "complete": not pending, "pending": sorted(pending)}


def verify(load: Load, read: dict) -> dict:
    counts: collections.Counter = collections.Counter()
    where: dict[int, tuple[int, int]] = {}
    foreign = 0
    for p, recs in read["seen"].items():
        for o, v in recs.items():
            try:
                i = Load.index(v)
            except (ValueError, IndexError):
                foreign += 1
                continue
            counts[i] += 1
            where.setdefault(i, (p, o))
    acked = set(load.acked)
    lost = sorted(i for i in acked if counts[i] == 0)
    failed = set(load.failed)
    lost_detail = []
    for i in lost[:20]:
        k = load.acked.index(i)
        at = load.acked_at[k]
        p, o = at >> 48, at & ((1 << 48) - 1)
        now = read["seen"].get(p, {}).get(o)
        lost_detail.append({"value": load.value(i).decode(), "cycle": load.cycle_of[i],
                            "acked_partition": p, "acked_offset": o,
                            "now_at_that_offset": now.decode() if now is not None else None,
                            "high_watermark": read["marks"].get(p, (None, None))[1]})
    dup_values = [i for i, n in counts.items() if n > 1]
    return {
        "read_complete": read["complete"],
        "partitions_not_read_to_end": read["pending"],
        "watermarks": {p: list(m) for p, m in read["marks"].items()},
        "records_read": sum(counts.values()) + foreign,
        "distinct_values_read": len(counts),
        "acknowledged": len(acked),
        "lost": len(lost),
        "lost_examples": lost_detail,
        "duplicates": sum(counts[i] - 1 for i in dup_values),
        "duplicated_values": len(dup_values),
        "duplicated_examples": [{"value": load.value(i).decode(), "copies": counts[i]}
                                for i in dup_values[:10]],
        "failed_delivery": len(failed),
        "failed_but_present": sum(1 for i in failed if counts[i] > 0),
        "neither_acked_nor_failed_but_present": sum(
            1 for i in counts if i not in acked and i not in failed),
        "values_not_produced_here": foreign + sum(1 for i in counts if i >= load.sent),
    }


# ---------------------------------------------------------------------------- report

def pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(-(-q * len(s) // 1)) - 1))   # nearest rank
    return s[k]


def summary(xs: list[float]) -> dict:
    return {"median": round(statistics.median(xs), 3) if xs else None,
            "p90": round(pct(xs, 0.9), 3) if xs else None,
            "max": round(max(xs), 3) if xs else None, "n": len(xs)}


def fmt(x, unit="s") -> str:
    return "-" if x is None else f"{x:.3f} {unit}".strip()


def markdown(doc: dict) -> str:
    v = doc["verification"]
    r, isr, gap = doc["recovery_s"], doc.get("isr_full_s"), doc["max_ack_gap_s"]
    ok = "PASS" if doc["passed"] else "FAIL"
    lines = [f"# Crash loop, {doc['mode']} ({doc['stamp']}): {ok}", "",
             f"`{doc['command']}`", ""]
    if doc.get("error"):
        lines += [f"**The run broke off: {doc['error']}**", ""]
    lines += [
             f"{doc['machine']['cpus']} CPUs, load average at the start {doc['machine']['loadavg_start']}; "
             f"{doc['setup']}", "",
             "| figure | value |", "| --- | --- |",
             f"| cycles ({doc.get('fault', 'sigkill')}{' of every broker at once' if doc.get('all_at_once') else ''} + restart) | {doc['cycles_done']} of {doc['cycles']} |",
             f"| seconds under load per cycle | {doc['seconds_per_cycle']} x [0.75, 1.25] (seed {doc['seed']}) |",
             f"| killed broker down before its restart | {doc['down_seconds']} s |",
             *([f"| files whose unsynced bytes a power loss dropped (all cycles) | {doc['power_loss_files_cut']} |"]
               if doc.get('fault', 'sigkill') != 'sigkill' else []),
             f"| records produced | {doc['produced']:,} at {doc['rate']:,}/s |",
             f"| acknowledged records | {v['acknowledged']:,} |",
             f"| **lost (acknowledged, not read back)** | **{v['lost']}** |",
             f"| duplicates (extra copies read) | {v['duplicates']} ({v['duplicated_values']} values) |",
             f"| failed deliveries / of them present | {v['failed_delivery']} / {v['failed_but_present']} |",
             f"| records read back | {v['records_read']:,} (to the high watermarks: {'yes' if v['read_complete'] else 'NO'}) |",
             f"| restart to healthy (/health 200) median / p90 / max | {fmt(r['median'])} / {fmt(r['p90'])} / {fmt(r['max'])} |",
             ]
    if isr:
        lines.append(f"| restart to full ISR (all 8 partitions, 3 replicas) median / p90 / max | "
                     f"{fmt(isr['median'])} / {fmt(isr['p90'])} / {fmt(isr['max'])} |")
    lines += [f"| longest a partition went without an ack in a cycle, median / p90 / max | "
              f"{fmt(gap['median'])} / {fmt(gap['p90'])} / {fmt(gap['max'])} |",
              f"| brokers not healthy within {HEALTHY_WITHIN:.0f} s / died on their own | "
              f"{doc['failed_to_come_back']} / {doc['died_on_their_own']} |",
              f"| producers (fatal errors replace one) | {doc['producers']} |"]
    if doc["mode"] == "cluster":
        lines.append(f"| cycles whose ISR was not full within {ISR_WITHIN:.0f} s | {doc['isr_not_full']} |")
    lines += ["", "Errors the producer saw (delivery reports; client errors through error_cb, "
              "e.g. a refused connection while the broker restarts):", "",
              "| kind | error | count |", "| --- | --- | --- |"]
    for k, n in sorted(doc["delivery_errors"].items()):
        lines.append(f"| delivery | {k} | {n} |")
    for k, n in sorted(doc["client_errors"].items()):
        lines.append(f"| client | {k} | {n} |")
    if not doc["delivery_errors"] and not doc["client_errors"]:
        lines.append("| - | none | 0 |")
    for f in doc["fatal_errors"]:
        lines.append(f"\nFatal producer error: {f}")
    if v["lost_examples"]:
        lines += ["", "Lost (first 20):", "", "| value | cycle | acked partition | acked offset | now at that offset | high watermark |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for e in v["lost_examples"]:
            lines.append(f"| {e['value']} | {e['cycle']} | {e['acked_partition']} | {e['acked_offset']} | "
                         f"{e['now_at_that_offset']} | {e['high_watermark']} |")
    if doc.get("kept_logs"):
        lines += ["", "Kept logs (last 256 KiB each): " + ", ".join(doc["kept_logs"])]
    lines += ["", "Per cycle:", "",
              "| cycle | killed | why | under load s | restart to healthy s |"
              + (" to full ISR s | victim's leaderships before / after |" if doc["mode"] == "cluster" else "")
              + " longest ack gap s | acked in cycle | produce errors in cycle |",
              "| --- | --- | --- | --- | --- |" + (" --- | --- |" if doc["mode"] == "cluster" else "")
              + " --- | --- | --- |"]
    for c in doc["per_cycle"]:
        lines.append(f"| {c['cycle']} | {c['killed']} | {c['why']} | {c['under_load_s']} | "
                     f"{c['healthy_s'] if c['healthy_s'] is not None else 'NOT HEALTHY'} |"
                     + (f" {c['isr_full_s'] if c['isr_full_s'] is not None else 'not full'} |"
                        f" {c['victim_leads_before']} / {c['victim_leads_after']} |"
                        if doc["mode"] == "cluster" else "")
                     + f" {c['max_ack_gap_s']} | {c['acked']} | {c['errors']} |")
    return "\n".join(lines) + "\n"


def dropped_unsynced(nodes: list[Node]) -> int:
    """How many times a power loss found a file with unsynced bytes and dropped them (the
    brokers log each): a power-loss run that dropped nothing tested nothing."""
    n = 0
    for node in nodes:
        try:
            n += node.log_path.read_text(errors="replace").count("power loss: unsynced bytes dropped")
        except OSError:
            pass
    return n


def keep_logs(nodes: list[Node], work: Path, out: Path) -> list[str]:
    kept = []
    for f in [n.log_path for n in nodes] + [work / "client.log"]:
        if f.exists():
            size = f.stat().st_size
            with open(f, "rb") as src:
                src.seek(max(0, size - KEEP_LOG_BYTES))
                (out / f.name).write_bytes(ANSI.sub(b"", src.read()))
            kept.append(f.name)
    return kept


# ---------------------------------------------------------------------------- main

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["single", "cluster"], required=True)
    ap.add_argument("--cycles", type=int, default=100)
    ap.add_argument("--quick", action="store_true", help="10 cycles")
    ap.add_argument("--seconds-per-cycle", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rate", type=int, default=2000, help="messages a second")
    ap.add_argument("--shards", type=int, default=2, help="shards of each broker")
    ap.add_argument("--log-level", default="info", help="the brokers' --log-level")
    ap.add_argument("--down-seconds", type=float, default=0.0,
                    help="how long a killed broker stays down before its restart (default 0: "
                         "at once; above the 9 s broker session timeout the controller fences "
                         "it and its partitions fail over)")
    ap.add_argument("--keep-logs", action="store_true", help="keep the logs even on a clean run")
    ap.add_argument("--fault", choices=["sigkill", "power-loss", "power-loss-torn"], default="sigkill",
                    help="how a broker is failed (power loss: unsynced bytes dropped, then SIGKILL)")
    ap.add_argument("--all-at-once", action="store_true",
                    help="cluster mode: fail every broker in each cycle at once")
    a = ap.parse_args()
    if a.all_at_once and a.mode != "cluster":
        ap.error("--all-at-once needs --mode cluster")
    cycles = 10 if a.quick else a.cycles
    rng = random.Random(a.seed)
    rf = 1 if a.mode == "single" else 3

    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    suffix = ("" if a.fault == "sigkill" else f"-{a.fault}") + ("-all" if a.all_at_once else "")
    out = ROOT / "benches" / "results" / f"{stamp}-crash-loop-{a.mode}{suffix}"
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"crash-loop-{a.mode}-", dir=os.environ.get("TMPDIR", "/tmp")))
    client_log = logging.getLogger("rdkafka")
    client_log.setLevel(logging.INFO)
    client_log.propagate = False
    client_log.addHandler(logging.FileHandler(work / "client.log"))

    loadavg_start = os.getloadavg()[0]
    nodes = make_nodes(a.mode, work, a.shards, a.log_level,
                       [] if a.fault == "sigkill" else ["--storage-fault-injection", "true"])
    per_cycle: list[dict] = []
    failed_to_come_back = 0
    died = 0
    isr_not_full = 0
    verification = None
    load = None
    error = None
    try:
        launcher.start_all(nodes, timeout=HEALTHY_WITHIN)
        bootstrap = ",".join(f"127.0.0.1:{n.port}" for n in nodes)
        admin = AdminClient({"bootstrap.servers": bootstrap, "logger": client_log})
        configs = {"min.insync.replicas": "2"} if a.mode == "cluster" else {}
        deadline = time.monotonic() + 60
        while True:
            try:
                admin.create_topics([NewTopic(TOPIC, PARTITIONS, rf, config=configs)],
                                    request_timeout=30)[TOPIC].result(30)
                break
            except KafkaException as e:
                if time.monotonic() > deadline:
                    raise
                log(f"create topic: {e}; again")
                time.sleep(1)
        if wait_isr_full(admin, rf, 60) is None:
            raise RuntimeError("the topic's partitions did not get leaders and a full ISR")
        log(f"{a.mode}: {len(nodes)} broker(s) up, topic {TOPIC} {PARTITIONS} partitions RF {rf}; "
            f"{cycles} cycles, scratch {work}")

        load = Load(bootstrap, a.rate, client_log)
        with load:
            time.sleep(1.0)   # the producer connects and gets its producer id
            for cycle in range(cycles):
                load.cycle = cycle
                acked0 = len(load.acked)
                err0 = sum(load.delivery_errors.values()) + sum(load.client_errors.values())
                load.max_gap = 0.0
                under = round(a.seconds_per_cycle * rng.uniform(0.75, 1.25), 3)
                time.sleep(under)
                dead = [n for n in nodes if not n.is_running()]
                if dead:
                    died += len(dead)
                    log(f"cycle {cycle}: node(s) {[n.id for n in dead]} exited on their own "
                        f"(exit {[n.proc.returncode for n in dead]})")
                    break
                victim, why = choose_victim(a.mode, cycle, nodes, admin)
                if a.all_at_once:
                    why = "all at once"
                leads_before = leads_of(admin, victim) if a.mode == "cluster" else None
                victims = nodes if a.all_at_once else [victim]
                killers = [threading.Thread(target=v.kill, args=(a.fault,)) for v in victims]
                for k in killers:
                    k.start()
                for k in killers:
                    k.join()
                if a.down_seconds:
                    time.sleep(a.down_seconds)
                for v in victims:
                    v.launch()
                t_start = time.monotonic()
                came_back = all([v.seconds_to_healthy(HEALTHY_WITHIN) is not None for v in victims])
                healthy = time.monotonic() - t_start if came_back else None
                isr_s = None
                if healthy is not None:
                    # A partition's stall shows in the gap that its first ack after the
                    # restart closes: wait for one on every partition (within reason).
                    t_wait = time.monotonic()
                    while (any(t < t_wait for t in list(load.last_ack.values()))
                           and time.monotonic() - t_wait < ACK_WITHIN):
                        time.sleep(0.01)
                if healthy is not None and a.mode == "cluster":
                    isr_s = wait_isr_full(admin, rf, ISR_WITHIN)
                    if isr_s is not None:
                        isr_s += healthy
                    else:
                        isr_not_full += 1
                row = {"cycle": cycle, "killed": victim.id, "why": why, "under_load_s": under,
                       "victim_leads_before": leads_before,
                       "victim_leads_after": leads_of(admin, victim) if a.mode == "cluster" else None,
                       "healthy_s": round(healthy, 3) if healthy is not None else None,
                       "isr_full_s": round(isr_s, 3) if isr_s is not None else None,
                       "max_ack_gap_s": round(load.max_gap, 3),
                       "acked": len(load.acked) - acked0,
                       "errors": sum(load.delivery_errors.values()) + sum(load.client_errors.values()) - err0}
                per_cycle.append(row)
                log(f"cycle {cycle}: killed node {victim.id} ({why}); healthy after "
                    f"{fmt(healthy)}" + (f", full ISR after {fmt(isr_s)}" if a.mode == "cluster" else "")
                    + f"; acked {row['acked']} (total {len(load.acked)}), errors {row['errors']}")
                if healthy is None:
                    failed_to_come_back += 1
                    log(f"cycle {cycle}: node {victim.id} not healthy within {HEALTHY_WITHIN:.0f} s "
                        f"(alive: {victim.is_running()})")
                    break
            log("stopping the load (flush)")
        log(f"produced {load.sent}, acknowledged {len(load.acked)}, failed {len(load.failed)}, "
            f"left unflushed {load.unflushed}")
        if a.mode == "cluster" and wait_isr_full(admin, rf, ISR_WITHIN) is None:
            log("the ISR is not full before reading back; reading anyway")
        read = read_everything(bootstrap, client_log)
        verification = verify(load, read)
        log(f"read {verification['records_read']}: lost {verification['lost']}, "
            f"duplicates {verification['duplicates']}")
    except Exception as e:  # noqa: BLE001 -- recorded, the run fails, results still written
        error = f"{type(e).__name__}: {e}"
        log(f"run broke off: {error}\n{traceback.format_exc()}")
    finally:
        launcher.stop_all(nodes, timeout=60)

    healthy_s = [c["healthy_s"] for c in per_cycle if c["healthy_s"] is not None]
    isr_s = [c["isr_full_s"] for c in per_cycle if c["isr_full_s"] is not None]
    gaps = [c["max_ack_gap_s"] for c in per_cycle]
    lost = verification["lost"] if verification else None
    passed = (error is None and lost == 0 and verification["read_complete"]
              and failed_to_come_back == 0 and died == 0)
    setup = (f"one broker, `corelog serve` defaults, {a.shards} shards; topic {TOPIC}: {PARTITIONS} partitions, RF 1"
             if a.mode == "single" else
             f"three brokers on loopback (one quorum of three voters), {a.shards} shards each, "
             f"defaults + min.insync.replicas=2; topic {TOPIC}: {PARTITIONS} partitions, RF 3, "
             f"min.insync.replicas 2; victims: active controller on even cycles, most leaderships on odd")
    ck, lib = confluent_kafka.version(), confluent_kafka.libversion()
    ck, lib = (ck[0] if isinstance(ck, tuple) else ck), (lib[0] if isinstance(lib, tuple) else lib)
    setup += (f"; idempotent acks=all producer (confluent-kafka {ck}, librdkafka {lib}), "
              f"{a.rate:,} msg/s, message.timeout.ms 300000; "
              f"brokers' --log-level {a.log_level}.")
    doc = {
        "stamp": stamp, "mode": a.mode, "passed": passed, "error": error,
        "command": "python3 benches/crash_loop.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "loadavg_start": round(loadavg_start, 2),
                    "loadavg_end": round(os.getloadavg()[0], 2)},
        "setup": setup, "cycles": cycles, "cycles_done": len(per_cycle),
        "seconds_per_cycle": a.seconds_per_cycle, "seed": a.seed, "rate": a.rate,
        "down_seconds": a.down_seconds, "fault": a.fault, "all_at_once": a.all_at_once,
        "power_loss_files_cut": dropped_unsynced(nodes),
        "shards": a.shards, "broker_command": nodes[0].argv(),
        "produced": load.sent if load else 0, "producers": load.producers if load else 0,
        "unflushed_at_end": load.unflushed if load else None,
        "verification": verification or {"acknowledged": len(load.acked) if load else 0, "lost": None,
                                         "duplicates": None, "duplicated_values": None,
                                         "failed_delivery": None, "failed_but_present": None,
                                         "records_read": 0, "read_complete": False, "lost_examples": []},
        "recovery_s": summary(healthy_s), "isr_full_s": summary(isr_s) if a.mode == "cluster" else None,
        "max_ack_gap_s": summary(gaps),
        "failed_to_come_back": failed_to_come_back, "died_on_their_own": died,
        "isr_not_full": isr_not_full,
        "delivery_errors": dict(load.delivery_errors) if load else {},
        "client_errors": dict(load.client_errors) if load else {},
        "fatal_errors": load.fatal if load else [],
        "per_cycle": per_cycle,
    }
    if a.keep_logs or not passed or isr_not_full or (verification and verification["lost"]):
        doc["kept_logs"] = keep_logs(nodes, work, out)
    (out / "results.json").write_text(json.dumps(doc, indent=2))
    md = markdown(doc)
    (out / "results.md").write_text(md)
    print(md)
    shutil.rmtree(work, ignore_errors=True)
    log(f"results: {out.relative_to(ROOT)}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
