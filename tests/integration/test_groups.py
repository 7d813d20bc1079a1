"""Consumer groups and committed offsets against the real broker.

Written against Apache Kafka's documented behaviour for the classic group
protocol: librdkafka (confluent-kafka) consumers in threads (and one in a child
process that is SIGKILLed), the AdminClients of confluent-kafka and
kafka-python, and hand-built frames (kwire.py plus local encoders for the group
APIs) for the error codes clients rely on to rejoin.

Every wait is bounded; session timeouts are small so that failure detection is
fast (6 s is Kafka's default group.min.session.timeout.ms).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest
from confluent_kafka import (
    Consumer, ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaError, KafkaException,
    Producer, TopicPartition, OFFSET_INVALID,
)
from confluent_kafka.admin import AdminClient, NewTopic

import kwire as W
from launcher import wait_until

# Kafka error codes
ERR_NONE = 0
ERR_ILLEGAL_GENERATION = 22
ERR_INCONSISTENT_GROUP_PROTOCOL = 23
ERR_UNKNOWN_MEMBER_ID = 25
ERR_REBALANCE_IN_PROGRESS = 27
ERR_NON_EMPTY_GROUP = 68
ERR_MEMBER_ID_REQUIRED = 79
ERR_FENCED_INSTANCE_ID = 82
ERR_GROUP_SUBSCRIBED_TO_TOPIC = 86

SESSION_MS = 6000          # failure-detection test
CALM_SESSION_MS = 10000    # everything else: a slow, shared CI core must not cause a spurious rebalance
HEARTBEAT_MS = 500
MAX_POLL_MS = 20000        # librdkafka uses it as the rebalance timeout
STABLE_TIMEOUT_S = 45.0
CONSUME_TIMEOUT_S = 45.0


# ---------------------------------------------------------------------------
# helpers: topics, producing
# ---------------------------------------------------------------------------

def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)],
                        operation_timeout=30, request_timeout=30)[topic].result(timeout=30)
    deadline = time.monotonic() + 30
    while True:
        t = admin.list_topics(topic=topic, timeout=10).topics.get(topic)
        if (t is not None and t.error is None and len(t.partitions) == partitions
                and all(p.leader >= 0 and p.error is None for p in t.partitions.values())):
            return
        assert time.monotonic() < deadline, f"topic {topic} not ready in metadata: {t and t.partitions}"
        time.sleep(0.2)


def produce(bootstrap: str, topic: str, n: int, prefix: str = "k", partitions: int | None = None) -> set[tuple[int, int]]:
    """Produce n keyed messages (keyed partitioner, or round robin over explicit
    partitions when `partitions` is given); -> {(partition, offset)} from the
    delivery reports."""
    out: set[tuple[int, int]] = set()
    errors: list[str] = []

    def dr(err, msg):
        if err is not None:
            errors.append(str(err))
        else:
            out.add((msg.partition(), msg.offset()))

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                  "enable.idempotence": False, "message.timeout.ms": 30_000})
    for i in range(n):
        kw = {} if partitions is None else {"partition": i % partitions}
        while True:
            try:
                p.produce(topic, key=f"{prefix}-{i}".encode(), value=f"v-{prefix}-{i}".encode(),
                          on_delivery=dr, **kw)
                break
            except BufferError:
                p.poll(0.05)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(60) == 0, "messages left undelivered after flush(60)"
    assert not errors, f"delivery errors: {errors[:5]}"
    assert len(out) == n, f"{len(out)} distinct (partition, offset) for {n} messages"
    return out


def consumer_conf(bootstrap: str, group: str, name: str, session_ms: int = CALM_SESSION_MS, **extra) -> dict:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "client.id": name,
        "session.timeout.ms": session_ms,
        "heartbeat.interval.ms": HEARTBEAT_MS,
        "max.poll.interval.ms": MAX_POLL_MS,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "enable.partition.eof": False,
        "fetch.wait.max.ms": 100,
        "topic.metadata.refresh.interval.ms": 5000,
        **extra,
    }


# ---------------------------------------------------------------------------
# a librdkafka group member polling in its own thread
# ---------------------------------------------------------------------------

class Member(threading.Thread):
    """One confluent-kafka consumer subscribed to `topics`, polled in a thread.

    Records every consumed (partition, offset), every rebalance callback
    (kind, partitions, time), the current assignment after each poll, errors
    from poll() and error_cb, and failures of the synchronous commits it makes
    after every non-empty batch (when commit=True)."""

    def __init__(self, bootstrap: str, group: str, topics: list[str], name: str,
                 commit: bool = True, session_ms: int = CALM_SESSION_MS, **extra):
        super().__init__(name=name, daemon=True)
        self.conf = consumer_conf(bootstrap, group, name, session_ms, **extra)
        self.conf["error_cb"] = self._on_error
        self.topics = topics
        self.commit = commit
        self.lock = threading.Lock()
        self.records: list[tuple[int, int]] = []
        self.events: list[tuple[str, frozenset, float]] = []
        self.assignment: frozenset = frozenset()
        self.errors: list[str] = []
        self.commit_errors: list[str] = []
        self.cooperative = "cooperative" in str(extra.get("partition.assignment.strategy", ""))
        self.member_id: str | None = None
        self._stop_evt = threading.Event()
        self.crashed: BaseException | None = None

    # callbacks run inside consume() on this thread
    def _on_error(self, err):
        with self.lock:
            self.errors.append(f"error_cb: {err}")

    def _cb(self, kind):
        def cb(consumer, partitions):
            with self.lock:
                self.events.append((kind, frozenset(tp.partition for tp in partitions), time.monotonic()))
        return cb

    def run(self):
        try:
            c = Consumer(self.conf)
        except BaseException as e:  # pragma: no cover - config bug
            self.crashed = e
            return
        try:
            c.subscribe(self.topics, on_assign=self._cb("assign"), on_revoke=self._cb("revoke"),
                        on_lost=self._cb("lost"))
            while not self._stop_evt.is_set():
                msgs = c.consume(num_messages=500, timeout=0.2)
                good = []
                for m in msgs:
                    if m.error() is not None:
                        with self.lock:
                            self.errors.append(f"poll: {m.error()}")
                    else:
                        good.append((m.partition(), m.offset()))
                if good:
                    with self.lock:
                        self.records.extend(good)
                    if self.commit:
                        try:
                            c.commit(asynchronous=False)
                        except KafkaException as e:
                            with self.lock:
                                self.commit_errors.append(str(e))
                a = frozenset(tp.partition for tp in c.assignment())
                with self.lock:
                    self.assignment = a
                    try:
                        self.member_id = c.memberid()
                    except Exception:
                        pass
        except BaseException as e:
            self.crashed = e
        finally:
            try:
                c.close()
            except Exception as e:
                with self.lock:
                    self.errors.append(f"close: {e}")

    def stop(self, timeout: float = 20.0):
        self._stop_evt.set()
        self.join(timeout)
        assert not self.is_alive(), f"{self.name}: consumer thread did not finish within {timeout}s (close hung?)"

    # snapshots
    def snapshot(self):
        with self.lock:
            return self.assignment, list(self.events), list(self.errors)

    def got(self) -> list[tuple[int, int]]:
        with self.lock:
            return list(self.records)

    def settled(self) -> bool:
        """Eager: has been assigned and its last rebalance event is an assignment.
        Cooperative: has been assigned at least once (an incremental revoke need
        not be followed by an assign callback)."""
        with self.lock:
            if self.cooperative:
                return any(k == "assign" for k, _, _ in self.events)
            return bool(self.events) and self.events[-1][0] == "assign"

    def describe(self) -> str:
        with self.lock:
            ev = [(k, sorted(p)) for k, p, _ in self.events[-6:]]
            return (f"{self.name}: assignment={sorted(self.assignment)} events={ev} "
                    f"records={len(self.records)} errors={self.errors[-5:]} "
                    f"commit_errors={self.commit_errors[-3:]} crashed={self.crashed!r}")


def describe_all(members) -> str:
    return "\n  " + "\n  ".join(m.describe() for m in members)


def stop_all(members):
    for m in members:
        m._stop_evt.set()
    for m in members:
        m.join(20)


def assignment_ok(assignments: list[frozenset], partitions: int) -> bool:
    union: set[int] = set()
    total = 0
    for a in assignments:
        union |= a
        total += len(a)
    return union == set(range(partitions)) and total == partitions


def wait_stable(members, partitions: int, timeout: float = STABLE_TIMEOUT_S, settle: float = 2.0,
                pred=None) -> list[frozenset]:
    """Wait until every member has settled (last callback = assign), the
    assignments partition the topic exactly (each partition owned by exactly one
    member), `pred(assignments)` holds, and nothing changed for `settle` s."""
    deadline = time.monotonic() + timeout
    last, since = None, None
    while True:
        for m in members:
            assert m.crashed is None, f"{m.name} crashed: {m.crashed!r}"
        snaps = [m.snapshot() for m in members]
        assignments = [s[0] for s in snaps]
        key = (tuple(assignments), tuple(len(s[1]) for s in snaps))
        ok = (all(m.settled() for m in members) and assignment_ok(assignments, partitions)
              and (pred is None or pred(assignments)))
        now = time.monotonic()
        if ok:
            if key != last:
                last, since = key, now
            elif now - since >= settle:
                return assignments
        else:
            last, since = None, None
        if now > deadline:
            raise AssertionError(
                f"group did not stabilise within {timeout}s (each of {partitions} partitions owned "
                f"by exactly one member):{describe_all(members)}")
        time.sleep(0.1)


def wait_consumed(members, expected: set, timeout: float = CONSUME_TIMEOUT_S, extra=None):
    def have():
        got = set()
        for m in members:
            got.update(m.got())
        if extra is not None:
            got.update(extra())
        return expected <= got
    wait_until(have, timeout, lambda: (
        f"all {len(expected)} messages to be consumed; missing "
        f"{len(expected - set().union(*[set(m.got()) for m in members]))}:{describe_all(members)}"))
    time.sleep(0.5)  # a little time for duplicates to show up


def start_members(bootstrap, group, topics, names, **kw) -> list[Member]:
    ms = [Member(bootstrap, group, topics, n, **kw) for n in names]
    for m in ms:
        m.start()
    return ms


# ---------------------------------------------------------------------------
# 1. three members, twelve partitions, exactly once
# ---------------------------------------------------------------------------

def test_three_members_share_twelve_partitions_exactly_once(broker):
    topic, group = "g-three", "grp-three"
    create_topic(broker.bootstrap, topic, 12)
    members = start_members(broker.bootstrap, group, [topic], ["m0", "m1", "m2"])
    try:
        assignments = wait_stable(members, 12, pred=lambda a: all(len(x) > 0 for x in a))
        # range assignor over one topic: 12 / 3 = 4 each
        assert sorted(len(a) for a in assignments) == [4, 4, 4], describe_all(members)
        expected = produce(broker.bootstrap, topic, 6000)
        assert {p for p, _ in expected} == set(range(12))
        wait_consumed(members, expected)
        # no rebalance while consuming: assignments unchanged
        now = [m.snapshot()[0] for m in members]
        assert now == assignments, f"assignment changed while consuming:{describe_all(members)}"
        all_recs = [r for m in members for r in m.got()]
        dups = [r for r, c in Counter(all_recs).items() if c > 1]
        assert not dups, f"{len(dups)} messages consumed more than once, e.g. {dups[:5]}"
        assert set(all_recs) == expected, f"unexpected records: {sorted(set(all_recs) - expected)[:5]}"
        # every message went to the member owning its partition
        for m, a in zip(members, assignments):
            foreign = [r for r in m.got() if r[0] not in a]
            assert not foreign, f"{m.name} consumed partitions it does not own: {foreign[:5]}"
        for m in members:
            assert not m.commit_errors, m.describe()
            assert not m.errors, m.describe()
    finally:
        stop_all(members)


# ---------------------------------------------------------------------------
# 2. a member SIGKILLed without LeaveGroup
# ---------------------------------------------------------------------------

VICTIM_SCRIPT = r"""
import json, sys
from confluent_kafka import Consumer, KafkaException
bootstrap, group, topic, session_ms, hb_ms, max_poll_ms = sys.argv[1:7]
def out(**kw):
    sys.stdout.write(json.dumps(kw) + "\n"); sys.stdout.flush()
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": "victim",
              "session.timeout.ms": int(session_ms), "heartbeat.interval.ms": int(hb_ms),
              "max.poll.interval.ms": int(max_poll_ms), "auto.offset.reset": "earliest",
              "enable.auto.commit": False, "enable.partition.eof": False, "fetch.wait.max.ms": 100,
              "error_cb": lambda e: out(event="error", error=str(e))})
cb = lambda kind: (lambda consumer, parts: out(event=kind, partitions=[p.partition for p in parts]))
c.subscribe([topic], on_assign=cb("assign"), on_revoke=cb("revoke"), on_lost=cb("lost"))
out(event="started")
last = None
while True:
    msgs = c.consume(500, 0.2)
    good = [[m.partition(), m.offset()] for m in msgs if m.error() is None]
    for m in msgs:
        if m.error() is not None:
            out(event="error", error=str(m.error()))
    if good:
        try:
            res = c.commit(asynchronous=False)
            out(event="consumed", records=good,
                committed={str(tp.partition): tp.offset for tp in res if tp.error is None})
        except KafkaException as e:
            out(event="commit_error", error=str(e), records=good)
    a = sorted(tp.partition for tp in c.assignment())
    if a != last:
        out(event="assignment", partitions=a)
        last = a
"""


class Victim:
    """The victim consumer in a child process; its JSON-lines stdout is parsed in a thread."""

    def __init__(self, bootstrap, group, topic):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", VICTIM_SCRIPT, bootstrap, group, topic,
             str(SESSION_MS), str(HEARTBEAT_MS), str(MAX_POLL_MS)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lock = threading.Lock()
        self.assignment: frozenset = frozenset()
        self.events: list = []
        self.records: list[tuple[int, int]] = []
        self.committed: dict[int, int] = {}
        self.commit_errors: list[str] = []
        self.other: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                with self.lock:
                    self.other.append(line.rstrip())
                continue
            with self.lock:
                self.events.append(ev)
                kind = ev["event"]
                if kind == "assignment":
                    self.assignment = frozenset(ev["partitions"])
                elif kind == "consumed":
                    self.records.extend(tuple(r) for r in ev["records"])
                    for p, off in ev["committed"].items():
                        self.committed[int(p)] = max(off, self.committed.get(int(p), -1))
                elif kind == "commit_error":
                    self.commit_errors.append(ev["error"])
                    self.records.extend(tuple(r) for r in ev["records"])

    def settled(self) -> bool:
        with self.lock:
            cbs = [e for e in self.events if e["event"] in ("assign", "revoke", "lost")]
            return bool(cbs) and cbs[-1]["event"] == "assign"

    def snapshot(self):
        with self.lock:
            return self.assignment, list(self.events), []

    def got(self) -> list[tuple[int, int]]:
        with self.lock:
            return list(self.records)

    @property
    def crashed(self):
        rc = self.proc.poll()
        return None if rc is None else f"victim exited with {rc}: {self.other[-10:]}"

    name = "victim"

    def describe(self) -> str:
        with self.lock:
            return (f"victim: assignment={sorted(self.assignment)} records={len(self.records)} "
                    f"committed={self.committed} commit_errors={self.commit_errors[-3:]} "
                    f"last events={self.events[-5:]} other={self.other[-5:]}")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)


def test_killed_member_partitions_taken_over_nothing_lost(broker):
    topic, group, P = "g-kill", "grp-kill", 6
    create_topic(broker.bootstrap, topic, P)
    survivors = start_members(broker.bootstrap, group, [topic], ["s0", "s1"], session_ms=SESSION_MS)
    victim = Victim(broker.bootstrap, group, topic)
    everyone = [*survivors, victim]
    try:
        assignments = wait_stable(everyone, P, pred=lambda a: all(len(x) > 0 for x in a))
        victim_parts = assignments[2]
        assert len(victim_parts) == 2, describe_all(everyone)

        # phase 1: every member consumes and commits its share
        phase1 = produce(broker.bootstrap, topic, 600, prefix="before")
        wait_consumed(everyone, phase1)
        ends = {p: max(o for q, o in phase1 if q == p) + 1 for p in victim_parts}
        wait_until(lambda: all(victim.committed.get(p) == ends[p] for p in victim_parts), 20,
                   lambda: f"victim to commit {ends}: {victim.describe()}")

        # SIGKILL: no LeaveGroup, the coordinator only notices through the session timeout
        killed_at = time.monotonic()
        victim.kill()
        phase2 = produce(broker.bootstrap, topic, 600, prefix="after")

        def survivors_own_all():
            snaps = [m.snapshot() for m in survivors]
            return (all(m.settled() for m in survivors)
                    and all(any(k == "assign" and t > killed_at for k, _, t in s[1]) for s in snaps)
                    and assignment_ok([s[0] for s in snaps], P))
        wait_until(survivors_own_all, SESSION_MS / 1000 + 25,
                   lambda: f"survivors to own all {P} partitions after the victim's session timeout:"
                           f"{describe_all(survivors)}")
        taken_over_after = time.monotonic() - killed_at
        # Kafka drops a member only at session expiry (or LeaveGroup), not when its TCP
        # connection closes: the takeover cannot come much before session.timeout.ms
        # (minus the heartbeat interval, with slack for a loaded machine)
        assert taken_over_after >= SESSION_MS / 1000 - 2.5, (
            f"survivors took over {taken_over_after:.1f}s after SIGKILL, before the "
            f"{SESSION_MS} ms session timeout could have expired")
        final = wait_stable(survivors, P, timeout=20)
        assert sorted(len(a) for a in final) == [3, 3], describe_all(survivors)

        wait_consumed(survivors, phase2)
        surv = [r for m in survivors for r in m.got()]
        assert phase2 <= set(surv), (
            f"messages produced after the kill lost: {sorted(phase2 - set(surv))[:10]}")
        # the victim's committed offsets are where the survivors resumed: nothing re-read, nothing skipped
        all_recs = surv + list(victim.records)
        dups = [r for r, c in Counter(all_recs).items() if c > 1]
        assert not dups, (f"{len(dups)} messages consumed twice although everything was committed "
                          f"synchronously, e.g. {sorted(dups)[:8]}; victim committed {victim.committed}")
        assert set(all_recs) == phase1 | phase2
        for m in survivors:
            assert not m.commit_errors, m.describe()
        print(f"takeover {taken_over_after:.1f}s after SIGKILL (session timeout {SESSION_MS} ms)")
    finally:
        victim.kill()
        stop_all(survivors)


# ---------------------------------------------------------------------------
# 3. cooperative-sticky: a joining member moves only what it needs
# ---------------------------------------------------------------------------

def test_cooperative_sticky_join_moves_only_needed_partitions(broker):
    topic, group, P = "g-coop", "grp-coop", 6
    create_topic(broker.bootstrap, topic, P)
    coop = {"partition.assignment.strategy": "cooperative-sticky"}
    a = Member(broker.bootstrap, group, [topic], "coop-a", **coop)
    a.start()
    members = [a]
    try:
        (a_initial,) = wait_stable([a], P)
        assert a_initial == frozenset(range(P))
        before = produce(broker.bootstrap, topic, 300, prefix="before")
        wait_consumed([a], before)
        with a.lock:
            a_events_before = len(a.events)

        b = Member(broker.bootstrap, group, [topic], "coop-b", **coop)
        b.start()
        members.append(b)
        a_final, b_final = wait_stable(members, P, pred=lambda x: all(len(y) > 0 for y in x))

        with a.lock:
            new_events = a.events[a_events_before:]
        revoked = frozenset().union(*[p for k, p, _ in new_events if k == "revoke"])
        lost = [e for e in new_events if e[0] == "lost"]
        assert not lost, f"coop-a lost partitions: {lost}"
        assert sorted([len(a_final), len(b_final)]) == [3, 3], describe_all(members)
        assert a_final <= a_initial
        # the heart of it: only the partitions that moved were revoked from A
        assert revoked == b_final, (
            f"coop-a revoked {sorted(revoked)} but only {sorted(b_final)} moved to coop-b; "
            f"events after B joined: {[(k, sorted(p)) for k, p, _ in new_events]}")
        assert not (revoked & a_final), f"partitions kept by coop-a were revoked: {sorted(revoked & a_final)}"
        # incremental assignment: B's assign callbacks add up to exactly its partitions
        with b.lock:
            b_assigned = frozenset().union(*[p for k, p, _ in b.events if k == "assign"])
        assert b_assigned == b_final, describe_all(members)

        # B resumes where A committed: nothing before the join is read again; new data flows to both
        after = produce(broker.bootstrap, topic, 600, prefix="after")
        wait_consumed(members, after)
        all_recs = a.got() + b.got()
        dups = [r for r, c in Counter(all_recs).items() if c > 1]
        assert not dups, f"{len(dups)} messages consumed twice, e.g. {sorted(dups)[:8]}"
        assert set(all_recs) == before | after
        for m in members:
            assert not m.commit_errors, m.describe()
    finally:
        stop_all(members)


# ---------------------------------------------------------------------------
# 4. committed offsets survive a broker restart
# ---------------------------------------------------------------------------

def _committed(consumer, tps, timeout=30.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            return consumer.committed(tps, timeout=10)
        except KafkaException as e:
            if time.monotonic() > deadline:
                raise AssertionError(f"committed() kept failing for {timeout}s: {e}")
            time.sleep(0.5)


def test_commit_restart_resume_at_committed_offsets(broker):
    topic, group, P = "g-restart", "grp-restart", 3
    create_topic(broker.bootstrap, topic, P)
    produce(broker.bootstrap, topic, 300, partitions=P)  # 100 per partition
    commit_at = {0: 10, 1: 25, 2: 60}

    c1 = Consumer(consumer_conf(broker.bootstrap, group, "before-restart"))
    try:
        c1.subscribe([topic])
        deadline = time.monotonic() + STABLE_TIMEOUT_S
        while len(c1.assignment()) < P:
            c1.poll(0.2)
            assert time.monotonic() < deadline, f"consumer never got its assignment: {c1.assignment()}"
        res = c1.commit(offsets=[TopicPartition(topic, p, o, f"meta-{p}") for p, o in commit_at.items()],
                        asynchronous=False)
        assert all(tp.error is None for tp in res), f"commit errors: {res}"
        got = _committed(c1, [TopicPartition(topic, p) for p in range(P)])
        assert {tp.partition: tp.offset for tp in got} == commit_at, f"committed() before restart: {got}"
    finally:
        c1.close()

    broker.stop()
    broker.restart()

    # auto.offset.reset=error: a lost commit shows up as an error, not as silently re-read data
    c2 = Consumer(consumer_conf(broker.bootstrap, group, "after-restart", **{"auto.offset.reset": "error"}))
    try:
        got = _committed(c2, [TopicPartition(topic, p) for p in range(P)])
        assert {tp.partition: tp.offset for tp in got} == commit_at, f"committed() after restart: {got}"
        assert {tp.partition: tp.metadata for tp in got} == {p: f"meta-{p}" for p in range(P)}, (
            f"commit metadata after restart: {[(tp.partition, tp.metadata) for tp in got]}")
        c2.subscribe([topic])
        first: dict[int, int] = {}
        count = Counter()
        errors = []
        want = sum(100 - o for o in commit_at.values())
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while sum(count.values()) < want:
            assert time.monotonic() < deadline, (
                f"consumed {dict(count)} of {want} after restart; first offsets {first}; errors {errors[:5]}")
            for m in c2.consume(500, 0.2):
                if m.error() is not None:
                    errors.append(str(m.error()))
                    continue
                first.setdefault(m.partition(), m.offset())
                count[m.partition()] += 1
        assert first == commit_at, f"first consumed offsets {first} != committed {commit_at}"
        assert dict(count) == {p: 100 - o for p, o in commit_at.items()}
        assert not errors, errors[:5]
    finally:
        c2.close()


# ---------------------------------------------------------------------------
# 5. two groups on one topic each get every message
# ---------------------------------------------------------------------------

def test_two_groups_each_get_every_message(broker):
    topic, P = "g-two", 4
    create_topic(broker.bootstrap, topic, P)
    g1 = start_members(broker.bootstrap, "grp-two-a", [topic], ["a0", "a1"])
    g2 = start_members(broker.bootstrap, "grp-two-b", [topic], ["b0"])
    try:
        wait_stable(g1, P, pred=lambda a: all(len(x) > 0 for x in a))
        wait_stable(g2, P)
        expected = produce(broker.bootstrap, topic, 1000)
        wait_consumed(g1, expected)
        wait_consumed(g2, expected)
        for name, g in (("grp-two-a", g1), ("grp-two-b", g2)):
            recs = [r for m in g for r in m.got()]
            dups = [r for r, c in Counter(recs).items() if c > 1]
            assert not dups, f"{name}: {len(dups)} duplicates, e.g. {dups[:5]}"
            assert set(recs) == expected, f"{name}: missing {len(expected - set(recs))}"
    finally:
        stop_all(g1 + g2)


# ---------------------------------------------------------------------------
# 6. admin: list, describe, offsets, delete
# ---------------------------------------------------------------------------

def _kerr_code(exc: BaseException) -> int | None:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0].code()
    return None


def _listed(admin, **kw) -> dict:
    res = admin.list_consumer_groups(request_timeout=15, **kw).result(timeout=20)
    assert not res.errors, f"list_consumer_groups errors: {res.errors}"
    return {g.group_id: g for g in res.valid}


def _offsets(admin, group, tps) -> dict[int, int]:
    fut = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)],
                                            request_timeout=15)[group]
    res = fut.result(timeout=20)
    for tp in res.topic_partitions:
        assert tp.error is None, f"list_consumer_group_offsets({group}): {tp}"
    return {tp.partition: tp.offset for tp in res.topic_partitions}


def test_admin_list_describe_alter_delete(broker):
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTP
    from kafka.structs import OffsetAndMetadata
    import kafka.errors as KErr

    topic, P = "g-admin", 3
    active, idle = "grp-admin-active", "grp-admin-empty"
    create_topic(broker.bootstrap, topic, P)
    produce(broker.bootstrap, topic, 30, partitions=P)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    tps = [TopicPartition(topic, p) for p in range(P)]

    # an Empty group that only stores offsets (admin commit: generation -1, no member id)
    res = admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(idle, [TopicPartition(topic, p, 5 + p) for p in range(P)])],
        request_timeout=15)[idle].result(timeout=20)
    assert all(tp.error is None for tp in res.topic_partitions), f"alter on a new group: {res.topic_partitions}"
    assert _offsets(admin, idle, tps) == {0: 5, 1: 6, 2: 7}

    # a Stable group with one member
    m = Member(broker.bootstrap, active, [topic], "adm-m0", commit=True)
    m.start()
    kadmin = None
    try:
        wait_stable([m], P)
        wait_until(lambda: len(m.got()) >= 30, 30, lambda: m.describe())
        time.sleep(0.5)  # last synchronous commit done

        # list, with and without a state filter
        groups = _listed(admin)
        assert {active, idle} <= set(groups), f"list_consumer_groups: {sorted(groups)}"
        assert groups[active].state == ConsumerGroupState.STABLE, groups[active].state
        assert groups[idle].state == ConsumerGroupState.EMPTY, groups[idle].state
        assert groups[active].is_simple_consumer_group is False
        stable = _listed(admin, states={ConsumerGroupState.STABLE})
        assert active in stable and idle not in stable, f"states={{STABLE}}: {sorted(stable)}"
        empty = _listed(admin, states={ConsumerGroupState.EMPTY})
        assert idle in empty and active not in empty, f"states={{EMPTY}}: {sorted(empty)}"

        # describe
        futs = admin.describe_consumer_groups([active, idle], request_timeout=15)
        d = futs[active].result(timeout=20)
        assert d.state == ConsumerGroupState.STABLE, d.state
        assert d.partition_assignor == "range", d.partition_assignor  # librdkafka's first choice
        assert len(d.members) == 1, d.members
        (mem,) = d.members
        assert mem.client_id == "adm-m0", mem.client_id
        assert mem.member_id and mem.member_id == m.member_id, (mem.member_id, m.member_id)
        assert sorted((tp.topic, tp.partition) for tp in mem.assignment.topic_partitions) == \
            [(topic, p) for p in range(P)], mem.assignment.topic_partitions
        assert d.coordinator is not None and d.coordinator.port == broker.port, d.coordinator
        e = futs[idle].result(timeout=20)
        assert e.state == ConsumerGroupState.EMPTY and not e.members, (e.state, e.members)

        # offsets committed by the member
        assert _offsets(admin, active, tps) == {p: 10 for p in range(P)}

        # alter: only when the group is empty (Kafka: UNKNOWN_MEMBER_ID for a live group)
        code = None
        try:
            r = admin.alter_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(active, [TopicPartition(topic, 0, 1)])],
                request_timeout=15)[active].result(timeout=20)
            code = next((tp.error.code() for tp in r.topic_partitions if tp.error is not None), None)
        except KafkaException as ex:
            code = _kerr_code(ex)
        assert code == ERR_UNKNOWN_MEMBER_ID, f"alter offsets of a Stable group: error {code}, want 25"
        r = admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(idle, [TopicPartition(topic, 0, 2)])],
            request_timeout=15)[idle].result(timeout=20)
        assert all(tp.error is None for tp in r.topic_partitions), r.topic_partitions
        assert _offsets(admin, idle, tps) == {0: 2, 1: 6, 2: 7}

        # delete a non-empty group -> GROUP_NOT_EMPTY (68)
        with pytest.raises(KafkaException) as ei:
            admin.delete_consumer_groups([active], request_timeout=15)[active].result(timeout=20)
        assert _kerr_code(ei.value) == ERR_NON_EMPTY_GROUP, f"delete of a Stable group: {ei.value}"

        # kafka-python: the second client library
        kadmin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id="corelog-it-kadmin",
                                  request_timeout_ms=20_000)
        listed = {g["group_id"]: g for g in kadmin.list_groups()}
        assert {active, idle} <= set(listed), listed
        assert listed[active]["protocol_type"] == "consumer", listed[active]
        k_stable = {g["group_id"] for g in kadmin.list_groups(states_filter=["Stable"])}
        assert active in k_stable and idle not in k_stable, k_stable
        offs = kadmin.list_group_offsets([active, idle])  # OffsetFetch, multi-group form on v8
        assert {tp.partition: o.offset for tp, o in offs[idle].items() if tp.topic == topic} == {0: 2, 1: 6, 2: 7}, offs
        assert {tp.partition: o.offset for tp, o in offs[active].items() if tp.topic == topic} == \
            {p: 10 for p in range(P)}, offs
        kd = kadmin.describe_groups([active])[active]
        assert kd["error"] is None and kd["group_state"] == "Stable" and len(kd["members"]) == 1, kd

        # OffsetDelete: refused for a topic the group is subscribed to, allowed for an empty group
        r = kadmin.delete_group_offsets(active, [KTP(topic, 0)])
        assert r == {KTP(topic, 0): KErr.GroupSubscribedToTopicError}, f"OffsetDelete on a subscribed topic: {r}"
        r = kadmin.delete_group_offsets(idle, [KTP(topic, 1)])
        assert r == {KTP(topic, 1): KErr.NoError}, f"OffsetDelete on an empty group: {r}"
        after = _offsets(admin, idle, tps)
        assert after == {0: 2, 1: OFFSET_INVALID, 2: 7}, f"offsets after deleting partition 1: {after}"

        # the last member leaves (close -> LeaveGroup): the group becomes Empty and can be deleted
        m.stop()
        wait_until(lambda: _listed(admin).get(active) is not None
                   and _listed(admin)[active].state == ConsumerGroupState.EMPTY, 20,
                   lambda: f"{active} to be Empty after its member left: {_listed(admin).get(active)}")
        for g in (active, idle):
            admin.delete_consumer_groups([g], request_timeout=15)[g].result(timeout=20)
        left = _listed(admin)
        assert active not in left and idle not in left, f"deleted groups still listed: {sorted(left)}"
        assert _offsets(admin, idle, tps) == {p: OFFSET_INVALID for p in range(P)}, "offsets survive group deletion"
    finally:
        m._stop_evt.set()
        m.join(20)
        if kadmin is not None:
            kadmin.close()


# ---------------------------------------------------------------------------
# 7. more members than partitions
# ---------------------------------------------------------------------------

def test_more_members_than_partitions_extra_members_idle(broker):
    topic, group, P = "g-extra", "grp-extra", 2
    create_topic(broker.bootstrap, topic, P)
    members = start_members(broker.bootstrap, group, [topic], ["x0", "x1", "x2", "x3"])
    try:
        assignments = wait_stable(members, P)
        assert sorted(len(a) for a in assignments) == [0, 0, 1, 1], describe_all(members)
        expected = produce(broker.bootstrap, topic, 200)
        wait_consumed(members, expected)
        time.sleep(1.0)
        assert [m.snapshot()[0] for m in members] == assignments, f"assignment changed:{describe_all(members)}"
        recs = [r for m in members for r in m.got()]
        assert sorted(recs) == sorted(expected)
        for m, a in zip(members, assignments):
            assert not m.errors, f"member errored: {m.describe()}"
            assert m.crashed is None
            if not a:
                assert not m.got(), m.describe()
    finally:
        stop_all(members)


# ---------------------------------------------------------------------------
# raw group protocol frames (non-flexible versions unless noted)
# ---------------------------------------------------------------------------

API_OFFSET_COMMIT, API_FIND_COORDINATOR, API_JOIN_GROUP = 8, 10, 11
API_HEARTBEAT, API_LEAVE_GROUP, API_SYNC_GROUP = 12, 13, 14


def consumer_subscription(topics: list[str]) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics, user_data."""
    return W.i16(0) + W.array([W.string(t) for t in topics]) + W.kbytes(None)


def consumer_assignment(assigned: dict[str, list[int]]) -> bytes:
    """ConsumerProtocolAssignment v0: version, [topic, [partition]], user_data."""
    return (W.i16(0) + W.array([W.string(t) + W.array([W.i32(p) for p in ps]) for t, ps in assigned.items()])
            + W.kbytes(None))


def join_group_v5(cid, group, member_id, protocols, protocol_type="consumer",
                  session_ms=30_000, rebalance_ms=30_000, instance_id=None) -> bytes:
    body = (W.string(group) + W.i32(session_ms) + W.i32(rebalance_ms) + W.string(member_id)
            + W.string(instance_id) + W.string(protocol_type)
            + W.array([W.string(n) + W.kbytes(m) for n, m in protocols]))
    return W.request(API_JOIN_GROUP, 5, cid, body)


def parse_join_group_v5(body: bytes) -> dict:
    r = W.Reader(body)
    out = {"throttle": r.i32(), "error_code": r.i16(), "generation_id": r.i32(),
           "protocol_name": r.string(), "leader": r.string(), "member_id": r.string()}
    out["members"] = [(r.string(), r.string(), r.kbytes()) for _ in range(r.i32())]
    assert r.remaining() == 0, f"{r.remaining()} trailing bytes after JoinGroup v5 response"
    return out


def sync_group_v3(cid, group, generation, member_id, assignments: list[tuple[str, bytes]],
                  instance_id: str | None = None) -> bytes:
    body = (W.string(group) + W.i32(generation) + W.string(member_id) + W.string(instance_id)
            + W.array([W.string(m) + W.kbytes(a) for m, a in assignments]))
    return W.request(API_SYNC_GROUP, 3, cid, body)


def parse_sync_group_v3(body: bytes) -> dict:
    r = W.Reader(body)
    out = {"throttle": r.i32(), "error_code": r.i16(), "assignment": r.kbytes()}
    assert r.remaining() == 0, f"{r.remaining()} trailing bytes after SyncGroup v3 response"
    return out


def heartbeat_v3(cid, group, generation, member_id, instance_id: str | None = None) -> bytes:
    return W.request(API_HEARTBEAT, 3, cid,
                     W.string(group) + W.i32(generation) + W.string(member_id) + W.string(instance_id))


def parse_heartbeat_v3(body: bytes) -> int:
    r = W.Reader(body)
    r.i32()
    err = r.i16()
    assert r.remaining() == 0, f"{r.remaining()} trailing bytes after Heartbeat v3 response"
    return err


def offset_commit_v7(cid, group, generation, member_id, topic, offsets: dict[int, int]) -> bytes:
    parts = [W.i32(p) + W.i64(o) + W.i32(-1) + W.string("") for p, o in offsets.items()]
    body = (W.string(group) + W.i32(generation) + W.string(member_id) + W.string(None)
            + W.array([W.string(topic) + W.array(parts)]))
    return W.request(API_OFFSET_COMMIT, 7, cid, body)


def parse_offset_commit_v7(body: bytes) -> dict[tuple[str, int], int]:
    r = W.Reader(body)
    r.i32()
    out = {}
    for _ in range(r.i32()):
        name = r.string()
        for _ in range(r.i32()):
            p = r.i32()
            out[(name, p)] = r.i16()
    assert r.remaining() == 0, f"{r.remaining()} trailing bytes after OffsetCommit v7 response"
    return out


def leave_group_v3(cid, group, member_ids: list[str], instance_ids: list[str | None] | None = None) -> bytes:
    instance_ids = instance_ids or [None] * len(member_ids)
    return W.request(API_LEAVE_GROUP, 3, cid,
                     W.string(group) + W.array([W.string(m) + W.string(i) for m, i in zip(member_ids, instance_ids)]))


def parse_leave_group_v3(body: bytes) -> dict:
    r = W.Reader(body)
    r.i32()
    err = r.i16()
    members = [(r.string(), r.string(), r.i16()) for _ in range(r.i32())]
    assert r.remaining() == 0
    return {"error_code": err, "members": members}


def find_coordinator_v2(cid, key: str, key_type: int = 0) -> bytes:
    return W.request(API_FIND_COORDINATOR, 2, cid, W.string(key) + W.i8(key_type))


def parse_find_coordinator_v2(body: bytes) -> dict:
    r = W.Reader(body)
    out = {"throttle": r.i32(), "error_code": r.i16(), "error_message": r.string(),
           "node_id": r.i32(), "host": r.string(), "port": r.i32()}
    assert r.remaining() == 0, f"{r.remaining()} trailing bytes after FindCoordinator v2 response"
    return out


def _compact_array(items: list[bytes]) -> bytes:
    return W.uvarint(len(items) + 1) + b"".join(items)


def _r_compact_string(r: W.Reader):
    n = r.uvarint()
    return None if n == 0 else r.take(n - 1).decode()


def _r_skip_tags(r: W.Reader):
    for _ in range(r.uvarint()):
        r.uvarint()
        r.take(r.uvarint())


def find_coordinator_v4(cid, keys: list[str], key_type: int = 0) -> bytes:
    """Flexible: request header v2, compact array of compact strings (KIP-699)."""
    body = W.i8(key_type) + _compact_array([W.compact_string(k) for k in keys]) + W.uvarint(0)
    return W.request(API_FIND_COORDINATOR, 4, cid, body, header_v2=True)


def parse_find_coordinator_v4(body: bytes) -> list[dict]:
    r = W.Reader(body)
    _r_skip_tags(r)  # response header v1 tagged fields
    r.i32()          # throttle
    out = []
    for _ in range(r.uvarint() - 1):
        c = {"key": _r_compact_string(r), "node_id": r.i32(), "host": _r_compact_string(r),
             "port": r.i32(), "error_code": r.i16(), "error_message": _r_compact_string(r)}
        _r_skip_tags(r)
        out.append(c)
    _r_skip_tags(r)
    assert r.remaining() == 0, f"{r.remaining()} trailing bytes after FindCoordinator v4 response"
    return out


class Raw:
    """One raw connection; sequential request/response with a per-call timeout."""

    def __init__(self, bootstrap):
        self.sock = W.connect(bootstrap)
        self.cid = 100

    def call(self, build, *args, timeout: float = 15.0, **kw) -> bytes:
        self.cid += 1
        self.sock.sendall(build(self.cid, *args, **kw))
        try:
            cid, body = W.recv_response(self.sock, timeout)
        except (W.Closed, TimeoutError) as e:
            raise AssertionError(f"{build.__name__}: no response ({e})")
        assert cid == self.cid, f"correlation id {cid} != {self.cid}"
        return body

    def close(self):
        self.sock.close()


def test_raw_group_errors(broker):
    topic, group = "g-raw", "grp-raw"
    create_topic(broker.bootstrap, topic, 2)
    meta = consumer_subscription([topic])
    raw = Raw(broker.bootstrap)
    try:
        # KIP-394: JoinGroup v4+ without a member id -> MEMBER_ID_REQUIRED plus the id to use
        j = parse_join_group_v5(raw.call(join_group_v5, group, "", [("range", meta)]))
        assert j["error_code"] == ERR_MEMBER_ID_REQUIRED, f"first JoinGroup v5 with empty member id: {j}"
        member = j["member_id"]
        assert member, f"MEMBER_ID_REQUIRED without a member id: {j}"

        j = parse_join_group_v5(raw.call(join_group_v5, group, member, [("range", meta)], timeout=30))
        assert j["error_code"] == ERR_NONE, f"JoinGroup with the assigned member id: {j}"
        gen = j["generation_id"]
        assert gen >= 1 and j["member_id"] == member and j["leader"] == member, j
        assert j["protocol_name"] == "range", j
        assert j["members"] == [(member, None, meta)], f"leader's member list: {j['members']}"

        assignment = consumer_assignment({topic: [0, 1]})
        s = parse_sync_group_v3(raw.call(sync_group_v3, group, gen, member, [(member, assignment)]))
        assert s["error_code"] == ERR_NONE and s["assignment"] == assignment, f"SyncGroup by the leader: {s}"
        assert parse_heartbeat_v3(raw.call(heartbeat_v3, group, gen, member)) == ERR_NONE

        # Heartbeat: unknown member id -> 25; wrong generation -> 22
        err = parse_heartbeat_v3(raw.call(heartbeat_v3, group, gen, "no-such-member"))
        assert err == ERR_UNKNOWN_MEMBER_ID, f"Heartbeat from an unknown member: {err}"
        err = parse_heartbeat_v3(raw.call(heartbeat_v3, group, gen + 1, member))
        assert err == ERR_ILLEGAL_GENERATION, f"Heartbeat with generation {gen + 1} (group at {gen}): {err}"
        err = parse_heartbeat_v3(raw.call(heartbeat_v3, group, gen - 1, member))
        assert err == ERR_ILLEGAL_GENERATION, f"Heartbeat with generation {gen - 1} (group at {gen}): {err}"

        # SyncGroup with a wrong generation -> 22
        s = parse_sync_group_v3(raw.call(sync_group_v3, group, gen + 7, member, [(member, assignment)]))
        assert s["error_code"] == ERR_ILLEGAL_GENERATION, f"SyncGroup with a wrong generation: {s}"

        # JoinGroup with another protocol type than the live members' -> 23 (checked before KIP-394)
        other = Raw(broker.bootstrap)
        try:
            j2 = parse_join_group_v5(other.call(join_group_v5, group, "", [("range", meta)],
                                                protocol_type="connect"))
            if j2["error_code"] == ERR_MEMBER_ID_REQUIRED:  # tolerate the KIP-394 step first
                j2 = parse_join_group_v5(other.call(join_group_v5, group, j2["member_id"], [("range", meta)],
                                                    protocol_type="connect"))
            assert j2["error_code"] == ERR_INCONSISTENT_GROUP_PROTOCOL, \
                f"JoinGroup with protocol_type 'connect' into a 'consumer' group: {j2}"
            # and no common protocol name -> 23 as well
            j3 = parse_join_group_v5(other.call(join_group_v5, group, "", [("roundrobin-only", meta)]))
            if j3["error_code"] == ERR_MEMBER_ID_REQUIRED:
                j3 = parse_join_group_v5(other.call(join_group_v5, group, j3["member_id"],
                                                    [("roundrobin-only", meta)]))
            assert j3["error_code"] == ERR_INCONSISTENT_GROUP_PROTOCOL, \
                f"JoinGroup with no protocol in common with the group: {j3}"
        finally:
            other.close()
        # the rejected joins did not disturb the group
        assert parse_heartbeat_v3(raw.call(heartbeat_v3, group, gen, member)) == ERR_NONE, \
            "the group left Stable after rejected joins"

        # OffsetCommit: from a non-member -> 25 (or 22); wrong generation -> 22; member -> ok
        oc = parse_offset_commit_v7(raw.call(offset_commit_v7, group, gen, "intruder", topic, {0: 1}))
        assert oc[(topic, 0)] in (ERR_UNKNOWN_MEMBER_ID, ERR_ILLEGAL_GENERATION), \
            f"OffsetCommit from a non-member: {oc}"
        oc = parse_offset_commit_v7(raw.call(offset_commit_v7, group, gen + 1, member, topic, {0: 1}))
        assert oc[(topic, 0)] == ERR_ILLEGAL_GENERATION, f"OffsetCommit with a wrong generation: {oc}"
        oc = parse_offset_commit_v7(raw.call(offset_commit_v7, group, gen, member, topic, {0: 3, 1: 4}))
        assert oc == {(topic, 0): ERR_NONE, (topic, 1): ERR_NONE}, f"OffsetCommit by the member: {oc}"
        # admin-style commit (generation -1, no member id) into a live group -> 25
        oc = parse_offset_commit_v7(raw.call(offset_commit_v7, group, -1, "", topic, {0: 1}))
        assert oc[(topic, 0)] == ERR_UNKNOWN_MEMBER_ID, f"generation -1 commit into a Stable group: {oc}"
        # a generation >= 0 commit into a group that does not exist -> 25 (or 22)
        oc = parse_offset_commit_v7(raw.call(offset_commit_v7, "grp-raw-none", 3, "ghost", topic, {0: 1}))
        assert oc[(topic, 0)] in (ERR_UNKNOWN_MEMBER_ID, ERR_ILLEGAL_GENERATION), \
            f"OffsetCommit with generation 3 to a group that does not exist: {oc}"
        # ... while a simple consumer's commit (generation -1) there is fine
        oc = parse_offset_commit_v7(raw.call(offset_commit_v7, "grp-raw-simple", -1, "", topic, {0: 1}))
        assert oc[(topic, 0)] == ERR_NONE, f"simple-consumer OffsetCommit: {oc}"

        # LeaveGroup v3 (batch form) removes the member; afterwards it is unknown
        lv = parse_leave_group_v3(raw.call(leave_group_v3, group, [member]))
        assert lv["error_code"] == ERR_NONE and lv["members"] == [(member, None, ERR_NONE)], lv
        err = parse_heartbeat_v3(raw.call(heartbeat_v3, group, gen, member))
        assert err == ERR_UNKNOWN_MEMBER_ID, f"Heartbeat after LeaveGroup: {err}"
    finally:
        raw.close()
    broker.assert_alive()


def _recv(raw: "Raw", what: str, timeout: float = 20.0) -> bytes:
    try:
        cid, body = W.recv_response(raw.sock, timeout)
    except (W.Closed, TimeoutError) as e:
        raise AssertionError(f"{what}: no response ({e})")
    assert cid == raw.cid, f"{what}: correlation id {cid} != {raw.cid}"
    return body


def _send(raw: "Raw", build, *args, **kw) -> None:
    raw.cid += 1
    raw.sock.sendall(build(raw.cid, *args, **kw))


def test_raw_static_membership(broker):
    """KIP-345 on the wire. Static members (group.instance.id) join without the
    KIP-394 step. When one comes back with no member id (a restart) while the
    group is Stable and its metadata is unchanged, it gets a fresh member id in
    the *same* generation (no rebalance; for the leader too, since Kafka 2.4's
    updateStaticMemberAndRebalance) and SyncGroup returns its assignment; the
    replaced member id is fenced (FENCED_INSTANCE_ID, 82). LeaveGroup v3 by
    instance id removes a static member."""
    topic, group = "g-static", "grp-static"
    create_topic(broker.bootstrap, topic, 2)
    meta = consumer_subscription([topic])
    socks: list[Raw] = []

    def raw() -> Raw:
        r = Raw(broker.bootstrap)
        socks.append(r)
        return r

    def join(r, inst, member="", timeout=30.0):
        return parse_join_group_v5(r.call(join_group_v5, group, member, [("range", meta)], instance_id=inst,
                                          session_ms=10_000, rebalance_ms=10_000, timeout=timeout))

    try:
        a, b = raw(), raw()
        ja = join(a, "inst-a")
        assert ja["error_code"] == ERR_NONE, f"static JoinGroup (no MEMBER_ID_REQUIRED for static members): {ja}"
        ma, gen1 = ja["member_id"], ja["generation_id"]
        assert ma and ja["leader"] == ma and ja["members"] == [(ma, "inst-a", meta)], ja
        s = parse_sync_group_v3(a.call(sync_group_v3, group, gen1, ma,
                                       [(ma, consumer_assignment({topic: [0, 1]}))], instance_id="inst-a"))
        assert s["error_code"] == ERR_NONE, s

        # a second static member: A learns of the rebalance through its heartbeat and rejoins
        _send(b, join_group_v5, group, "", [("range", meta)], instance_id="inst-b",
              session_ms=10_000, rebalance_ms=10_000)
        wait_until(lambda: parse_heartbeat_v3(a.call(heartbeat_v3, group, gen1, ma, "inst-a"))
                   == ERR_REBALANCE_IN_PROGRESS, 10, "REBALANCE_IN_PROGRESS for A after B joined")
        ja = join(a, "inst-a", ma)
        jb = parse_join_group_v5(_recv(b, "B's JoinGroup"))
        assert ja["error_code"] == ERR_NONE and jb["error_code"] == ERR_NONE, (ja, jb)
        gen2, mb = ja["generation_id"], jb["member_id"]
        assert jb["generation_id"] == gen2 > gen1 and ja["leader"] == jb["leader"] in (ma, mb), (ja, jb)
        ids = {"inst-a": ma, "inst-b": mb}
        socket_of = {"inst-a": a, "inst-b": b}
        leader_inst = "inst-a" if ja["leader"] == ma else "inst-b"
        follower_inst = "inst-b" if leader_inst == "inst-a" else "inst-a"
        asg = {"inst-a": consumer_assignment({topic: [0]}), "inst-b": consumer_assignment({topic: [1]})}
        f_sock, l_sock = socket_of[follower_inst], socket_of[leader_inst]
        _send(f_sock, sync_group_v3, group, gen2, ids[follower_inst], [], instance_id=follower_inst)
        sl = parse_sync_group_v3(l_sock.call(sync_group_v3, group, gen2, ids[leader_inst],
                                             [(ids[i], asg[i]) for i in asg], instance_id=leader_inst))
        sf = parse_sync_group_v3(_recv(f_sock, "follower's SyncGroup"))
        assert sl == {"throttle": sl["throttle"], "error_code": ERR_NONE, "assignment": asg[leader_inst]}, sl
        assert sf == {"throttle": sf["throttle"], "error_code": ERR_NONE, "assignment": asg[follower_inst]}, sf

        # restarts: the follower first, then the leader
        for inst in (follower_inst, leader_inst):
            role = "follower" if inst == follower_inst else "leader"
            fresh = raw()
            try:
                j = join(fresh, inst, timeout=6.0)
            except AssertionError as e:
                raise AssertionError(f"static {role} rejoining with an empty member id got no JoinGroup "
                                     f"answer within 6 s: the broker started a rebalance ({e})")
            assert j["error_code"] == ERR_NONE, f"static {role} rejoin: {j}"
            new_id = j["member_id"]
            assert new_id and new_id != ids[inst], f"static {role} rejoin must get a fresh member id: {j}"
            assert j["generation_id"] == gen2, (
                f"static {role} rejoin with unchanged metadata moved the group from generation "
                f"{gen2} to {j['generation_id']} (Kafka: no rebalance): {j}")
            s = parse_sync_group_v3(fresh.call(sync_group_v3, group, gen2, new_id, [], instance_id=inst))
            assert s["error_code"] == ERR_NONE and s["assignment"] == asg[inst], \
                f"SyncGroup of the restarted static {role} should return its assignment: {s}"
            err = parse_heartbeat_v3(fresh.call(heartbeat_v3, group, gen2, ids[inst], inst))
            assert err == ERR_FENCED_INSTANCE_ID, f"Heartbeat from the replaced {role} member id: {err}"
            assert parse_heartbeat_v3(fresh.call(heartbeat_v3, group, gen2, new_id, inst)) == ERR_NONE
            ids[inst] = new_id
            socket_of[inst] = fresh

        # batch LeaveGroup by instance id only (what removeMembersFromConsumerGroup sends)
        lv = parse_leave_group_v3(a.call(leave_group_v3, group, ["", ""], ["inst-a", "inst-b"]))
        assert lv["error_code"] == ERR_NONE and [e for *_, e in lv["members"]] == [ERR_NONE, ERR_NONE], lv
        err = parse_heartbeat_v3(a.call(heartbeat_v3, group, gen2, ids["inst-a"], "inst-a"))
        assert err in (ERR_UNKNOWN_MEMBER_ID, ERR_FENCED_INSTANCE_ID), f"Heartbeat after LeaveGroup: {err}"
    finally:
        for r in socks:
            r.close()
    broker.assert_alive()


# ---------------------------------------------------------------------------
# 9. FindCoordinator, batched (v4, KIP-699) and single (v2)
# ---------------------------------------------------------------------------

def test_find_coordinator_batched(broker):
    _, md = W.roundtrip(broker.bootstrap, W.metadata_v1(1, []))
    brokers = W.parse_metadata_v1(md)["brokers"]
    assert len(brokers) == 1, brokers
    ((node_id, (host, port)),) = brokers.items()

    keys = ["grp-fc-a", "grp-fc-b", "grp-fc-c", "grp-fc-" + "x" * 200]
    _, body = W.roundtrip(broker.bootstrap, find_coordinator_v4(7, keys))
    coords = parse_find_coordinator_v4(body)
    assert sorted(c["key"] for c in coords) == sorted(keys), coords
    for c in coords:
        assert c["error_code"] == ERR_NONE, c
        assert (c["node_id"], c["host"], c["port"]) == (node_id, host, port), \
            f"coordinator for {c['key']}: {c}, broker is {node_id} {host}:{port}"

    _, body = W.roundtrip(broker.bootstrap, find_coordinator_v2(8, "grp-fc-a"))
    c = parse_find_coordinator_v2(body)
    assert c["error_code"] == ERR_NONE and (c["node_id"], c["host"], c["port"]) == (node_id, host, port), c


def test_metadata_naming_the_offsets_topic_creates_it_as_the_coordinators_need_it(broker):
    """Metadata naming __consumer_offsets before any group exists (librdkafka's
    list_topics, auto-creation on) creates it as the first FindCoordinator would:
    compacted, with offsets.topic.num.partitions (50) partitions, so a group then forms.
    Created as an ordinary topic of num.partitions (1), every group hashed to another
    partition had no coordinator: its members waited without an error, for ever."""
    from confluent_kafka.admin import ConfigResource, ResourceType
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    offsets = admin.list_topics("__consumer_offsets", timeout=30).topics["__consumer_offsets"]
    assert offsets.error is None and len(offsets.partitions) == 50, offsets
    r = ConfigResource(ResourceType.TOPIC, "__consumer_offsets")
    assert admin.describe_configs([r])[r].result(30)["cleanup.policy"].value == "compact"
    topic, P = "g-after-listing", 2
    create_topic(broker.bootstrap, topic, P)
    group = start_members(broker.bootstrap, "grp-after-listing", [topic], ["l0"])
    try:
        wait_stable(group, P)
        wait_consumed(group, produce(broker.bootstrap, topic, 100))
    finally:
        stop_all(group)


def test_offsets_topic_is_compacted_and_survives_restart(broker_factory):
    """Thousands of commits on tiny __consumer_offsets segments: the log cleaner compacts
    the topic (latest record per key, small segments merged), and after a restart every
    group still resumes at its last committed offsets."""
    import glob as _glob
    import os as _os
    from confluent_kafka import Consumer as _Consumer, TopicPartition as _TP
    from confluent_kafka.admin import AdminClient as _Admin, NewTopic as _NewTopic

    b = broker_factory.start(extra_args=["--offsets-topic-segment-bytes", "8192",
                                         "--cleaner-backoff-ms", "300"])
    topic = "compacted-commits"
    admin = _Admin({"bootstrap.servers": b.bootstrap})
    admin.create_topics([_NewTopic(topic, 10, 1)])[topic].result(30)
    c = _Consumer({"bootstrap.servers": b.bootstrap, "group.id": "churn", "enable.auto.commit": False})
    last = {}
    for i in range(1500):
        offsets = [_TP(topic, p, i * 10 + p) for p in range(10)]
        c.commit(offsets=offsets, asynchronous=False)
        last = {tp.partition: tp.offset for tp in offsets}
    c.close()

    def offsets_segments() -> int:
        return len(_glob.glob(_os.path.join(str(b.data_dir), "__consumer_offsets-*", "*.log")))

    # Without compaction ~1 MB of commits on 8 KiB segments is > 100 segments.
    deadline = time.time() + 20
    while time.time() < deadline and offsets_segments() > 50 + 10:
        time.sleep(0.5)
    assert offsets_segments() <= 50 + 10, offsets_segments()

    b.stop()
    b.restart()
    c = _Consumer({"bootstrap.servers": b.bootstrap, "group.id": "churn", "enable.auto.commit": False})
    committed = c.committed([_TP(topic, p) for p in range(10)], timeout=30)
    c.close()
    assert {tp.partition: tp.offset for tp in committed} == last


def test_offsets_of_an_empty_group_expire_after_retention(broker_factory):
    """offsets.retention: an empty group's old offsets expire (KIP-211); a group with
    members keeps them however old they are."""
    from confluent_kafka import Consumer as _Consumer, TopicPartition as _TP
    from confluent_kafka.admin import AdminClient as _Admin, NewTopic as _NewTopic

    b = broker_factory.start(extra_args=["--offsets-retention-ms", "3000",
                                         "--group-initial-rebalance-delay-ms", "0"])
    topic = "retained"
    admin = _Admin({"bootstrap.servers": b.bootstrap})
    admin.create_topics([_NewTopic(topic, 2, 1)])[topic].result(30)

    # "idle": committed once from outside the group protocol, then nobody is a member.
    idle = _Consumer({"bootstrap.servers": b.bootstrap, "group.id": "idle", "enable.auto.commit": False})
    idle.commit(offsets=[_TP(topic, 0, 5), _TP(topic, 1, 7)], asynchronous=False)
    idle.close()
    # "busy": a live member that keeps heartbeating.
    busy = _Consumer({"bootstrap.servers": b.bootstrap, "group.id": "busy", "enable.auto.commit": False,
                      "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    busy.subscribe([topic])
    deadline = time.time() + 20
    while not busy.assignment() and time.time() < deadline:
        busy.poll(0.2)
    assert busy.assignment(), "busy joined its group"
    busy.commit(offsets=[_TP(topic, 0, 3)], asynchronous=False)

    check = _Consumer({"bootstrap.servers": b.bootstrap, "group.id": "idle", "enable.auto.commit": False})
    first = check.committed([_TP(topic, 0), _TP(topic, 1)], timeout=10)
    assert [tp.offset for tp in first] == [5, 7]
    deadline = time.time() + 20
    while time.time() < deadline:
        busy.poll(0.2)
        now = check.committed([_TP(topic, 0), _TP(topic, 1)], timeout=10)
        if all(tp.offset < 0 for tp in now):
            break
        time.sleep(0.3)
    assert all(tp.offset < 0 for tp in now), now  # expired: no committed offset
    check.close()
    kept = busy.committed([_TP(topic, 0)], timeout=10)
    busy.close()
    assert kept[0].offset == 3
