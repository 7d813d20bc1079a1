"""The consumer group protocol of KIP-848 against the real broker.

librdkafka (confluent-kafka, ``group.protocol=consumer``) consumers in threads, and
hand-built ConsumerGroupHeartbeat frames (kwire's flexible encoding) for the error codes
and for a group that must come back exactly after the broker restarts (the group's
records in ``__consumer_offsets``, replayed by the coordinator).
"""

from __future__ import annotations

import threading
import time
import uuid

from confluent_kafka import Consumer, KafkaError
from confluent_kafka.admin import AdminClient, NewTopic

import kwire as W
from coordinator_move import java_hash
from launcher import bootstrap, wait_until
from test_cluster import FAST, leaders, produce as cluster_produce
from test_groups import create_topic, produce

CONSUMER_GROUP_HEARTBEAT = 68
OFFSET_FETCH = 9
SESSION_MS = 6000
HEARTBEAT_MS = 500
FLAGS = ["--group-consumer-session-timeout-ms", str(SESSION_MS),
         "--group-consumer-heartbeat-interval-ms", str(HEARTBEAT_MS)]

ERR_NONE = 0
ERR_INVALID_REQUEST = 42
ERR_GROUP_ID_NOT_FOUND = 69
ERR_UNKNOWN_MEMBER_ID = 25
ERR_FENCED_MEMBER_EPOCH = 110
ERR_UNSUPPORTED_ASSIGNOR = 112
ERR_INVALID_REGULAR_EXPRESSION = 128


def consumer(bootstrap: str, group: str, **extra) -> Consumer:
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
            "auto.offset.reset": "earliest", "enable.auto.commit": False}
    conf.update(extra)
    return Consumer(conf)


def heartbeat(bootstrap: str, group: str, member: str, epoch: int, *, topics: list[str] | None = None,
              regex: str | None = None, assignor: str | None = None, owned: list | None = None,
              rebalance_timeout: int = -1, version: int = 1) -> dict:
    """One ConsumerGroupHeartbeat; returns the answer's fields."""
    owned_b = None if owned is None else [
        tid + W.c_array([W.i32(p) for p in ps]) + W.tags() for tid, ps in owned]
    body = (W.compact_string(group) + W.compact_string(member) + W.i32(epoch)
            + W.compact_string(None) + W.compact_string(None) + W.i32(rebalance_timeout)
            + W.c_array(None if topics is None else [W.compact_string(t) for t in topics])
            + (W.compact_string(regex) if version >= 1 else b"")
            + W.compact_string(assignor) + W.c_array(owned_b) + W.tags())
    r = W.flex_roundtrip(bootstrap, CONSUMER_GROUP_HEARTBEAT, version, body)
    out = {"throttle": r.i32(), "error": r.i16(), "message": r.c_string(), "member": r.c_string(),
           "epoch": r.i32(), "interval": r.i32(), "assignment": r.nullable_assignment()}
    r.skip_tags()
    return out


def join(bootstrap: str, group: str, member: str, topics: list[str], **kw) -> dict:
    return heartbeat(bootstrap, group, member, 0, topics=topics, owned=[], rebalance_timeout=30000, **kw)


def test_librdkafka_members_split_the_partitions_and_one_takes_all_when_the_other_leaves(broker_factory):
    b = broker_factory(extra_args=FLAGS)
    topic, group = "kip848-rdk", "kip848-rdk-group"
    create_topic(b.bootstrap, topic, 6)
    produce(b.bootstrap, topic, 600)
    seen: dict[tuple[int, int], str] = {}
    dupes: list = []
    lock = threading.Lock()
    stop = {"a": threading.Event(), "b": threading.Event()}
    assigned = {"a": set(), "b": set()}

    def run(name: str) -> None:
        c = consumer(b.bootstrap, group)
        c.subscribe([topic])
        try:
            while not stop[name].is_set():
                m = c.poll(0.2)
                assigned[name] = {tp.partition for tp in c.assignment()}
                if m is None or m.error():
                    continue
                with lock:
                    key = (m.partition(), m.offset())
                    if key in seen:
                        dupes.append((key, seen[key], name))
                    seen[key] = name
                c.commit(message=m, asynchronous=False)
        finally:
            c.close()

    threads = {n: threading.Thread(target=run, args=(n,), daemon=True) for n in ("a", "b")}
    threads["a"].start()
    wait_until(lambda: assigned["a"] == set(range(6)), 30, "a alone owns every partition")
    threads["b"].start()
    wait_until(lambda: len(assigned["b"]) == 3 and len(assigned["a"]) == 3, 30,
               lambda: f"a and b share the partitions: {assigned}")
    assert not assigned["a"] & assigned["b"], assigned
    stop["a"].set()
    threads["a"].join(30)
    wait_until(lambda: assigned["b"] == set(range(6)), 30, lambda: f"b owns all once a left: {assigned}")
    wait_until(lambda: len(seen) == 600, 30, lambda: f"every record consumed ({len(seen)} of 600)")
    stop["b"].set()
    threads["b"].join(30)
    assert dupes == [], "records consumed twice"


def test_the_migration_policy_decides_whether_a_classic_group_is_upgraded(broker_factory):
    """group.consumer.migration.policy: with `disabled` a consumer-protocol member cannot
    join a classic group with members (GROUP_ID_NOT_FOUND, as Kafka answers); with the
    default, `bidirectional`, it joins and the group is a consumer group, the classic
    member inside it."""
    for policy, expected in (("disabled", ERR_GROUP_ID_NOT_FOUND), ("bidirectional", ERR_NONE)):
        b = broker_factory(extra_args=FLAGS + ["--group-consumer-migration-policy", policy])
        create_topic(b.bootstrap, "mig", 2)
        group = f"mig-{policy}"
        classic = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group,
                            "partition.assignment.strategy": "cooperative-sticky",
                            "auto.offset.reset": "earliest"})
        classic.subscribe(["mig"])
        try:
            wait_until(lambda: classic.poll(0.2) is None and len(classic.assignment()) == 2, 30,
                       "the classic member owns both partitions")
            answer = join(b.bootstrap, group, str(uuid.uuid4()), ["mig"])
            assert answer["error"] == expected, (policy, answer)
            if expected == ERR_NONE:
                # The classic member goes on inside the consumer group: the newcomer is
                # given nothing until the classic member has given something up.
                assert answer["assignment"] == {}, answer
        finally:
            classic.close()


def offset_fetch_v9(bootstrap: str, group: str, member: str | None, epoch: int) -> int:
    """OffsetFetch v9 of partition 0 of "t" by `member` at `epoch` -> the group's error."""
    body = (W.c_array([W.compact_string(group) + W.compact_string(member) + W.i32(epoch)
                       + W.c_array([W.compact_string("t") + W.c_array([W.i32(0)]) + W.tags()])
                       + W.tags()])
            + W.i8(0) + W.tags())
    r = W.flex_roundtrip(bootstrap, OFFSET_FETCH, 9, body)
    r.i32()  # throttle
    assert r.c_len() == 1
    assert r.c_string() == group
    for _ in range(r.c_len()):
        r.c_string()
        for _ in range(r.c_len()):
            r.i32(), r.i64(), r.i32(), r.c_string(), r.i16()
            r.skip_tags()
        r.skip_tags()
    error = r.i16()
    r.skip_tags()
    return error


def test_offset_fetch_v9_checks_the_member_and_its_epoch(broker_factory):
    """OffsetFetch v9 (KIP-848): a member fetches at its epoch; another epoch is
    STALE_MEMBER_EPOCH, an unknown member UNKNOWN_MEMBER_ID; an admin client (no member,
    epoch -1) is not checked."""
    broker = broker_factory()
    bs = broker.bootstrap
    create_topic(bs, "t", 2)
    member = str(uuid.uuid4())
    a = join(bs, "fetch-group", member, ["t"])
    assert a["error"] == 0 and a["epoch"] > 0, a
    assert offset_fetch_v9(bs, "fetch-group", member, a["epoch"]) == 0
    assert offset_fetch_v9(bs, "fetch-group", member, a["epoch"] + 1) == 113  # STALE_MEMBER_EPOCH
    assert offset_fetch_v9(bs, "fetch-group", "nobody", a["epoch"]) == 25  # UNKNOWN_MEMBER_ID
    assert offset_fetch_v9(bs, "fetch-group", None, -1) == 0
    # A group that does not exist has no offsets, and no member to check.
    assert offset_fetch_v9(bs, "no-such-group", member, 3) == 0


def test_heartbeat_errors_are_kafkas(broker_factory):
    b = broker_factory(extra_args=FLAGS)
    create_topic(b.bootstrap, "kip848-err", 2)
    g = "kip848-err-group"
    member = str(uuid.uuid4())
    assert join(b.bootstrap, g, member, ["kip848-err"], assignor="sticky")["error"] == ERR_UNSUPPORTED_ASSIGNOR
    bad = heartbeat(b.bootstrap, g, member, 0, regex="kip848-(", owned=[], rebalance_timeout=30000)
    assert bad["error"] == ERR_INVALID_REGULAR_EXPRESSION, bad
    # A first heartbeat must say what it subscribes to, and own nothing.
    assert heartbeat(b.bootstrap, g, member, 0, owned=[], rebalance_timeout=30000)["error"] == ERR_INVALID_REQUEST
    # v1 members name themselves.
    assert join(b.bootstrap, g, "", ["kip848-err"])["error"] == ERR_INVALID_REQUEST
    # Not a member, not a group yet.
    assert heartbeat(b.bootstrap, g, member, 3)["error"] == ERR_GROUP_ID_NOT_FOUND
    ok = join(b.bootstrap, g, member, ["kip848-err"])
    assert (ok["error"], ok["epoch"], ok["member"]) == (ERR_NONE, 1, member), ok
    assert heartbeat(b.bootstrap, g, str(uuid.uuid4()), 1)["error"] == ERR_UNKNOWN_MEMBER_ID
    assert heartbeat(b.bootstrap, g, member, 7)["error"] == ERR_FENCED_MEMBER_EPOCH
    # v0: the broker names a joining member.
    v0 = heartbeat(b.bootstrap, g, "", 0, topics=["kip848-err"], owned=[], rebalance_timeout=30000, version=0)
    assert v0["error"] == ERR_NONE and v0["member"], v0
    # librdkafka surfaces an unknown assignor as a fatal error.
    c = consumer(b.bootstrap, "kip848-err-rdk", **{"group.remote.assignor": "sticky"})
    c.subscribe(["kip848-err"])
    errors = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not errors:
        m = c.poll(0.5)
        if m is not None and m.error():
            errors.append(m.error())
    c.close()
    # librdkafka raises it as its fatal error, with the broker's message for the code.
    assert errors and errors[0].code() == KafkaError._FATAL, [(e.code(), e.str()) for e in errors]
    assert "assignor or its version range is not supported" in errors[0].str(), errors[0].str()


def test_a_group_comes_back_exactly_after_a_restart(broker_factory):
    b = broker_factory(extra_args=FLAGS)
    create_topic(b.bootstrap, "kip848-restart", 4)
    g = "kip848-restart-group"
    a, c = str(uuid.uuid4()), str(uuid.uuid4())
    first = join(b.bootstrap, g, a, ["kip848-restart"])
    assert first["epoch"] == 1 and sum(len(p) for p in first["assignment"].values()) == 4, first
    second = join(b.bootstrap, g, c, ["kip848-restart"])
    assert second["epoch"] == 2 and second["assignment"] == {}, "nothing is free until a revokes"
    owned = list(first["assignment"].items())
    step = heartbeat(b.bootstrap, g, a, 1, owned=owned)
    kept = list(step["assignment"].items())
    assert sum(len(p) for _, p in kept) == 2, step

    b.restart()
    wait_until(lambda: heartbeat(b.bootstrap, g, a, 1, owned=kept)["error"] == ERR_NONE, 30,
               "a's heartbeat at its epoch is accepted by the reloaded group")
    after = heartbeat(b.bootstrap, g, a, 2, owned=kept)
    assert (after["error"], after["epoch"]) == (ERR_NONE, 2), "the group epoch went on where it was"
    got = heartbeat(b.bootstrap, g, c, 2, owned=[])
    assert got["error"] == ERR_NONE and sum(len(p) for p in got["assignment"].values()) == 2, got
    assert not set((t, p) for t, ps in got["assignment"].items() for p in ps) & \
        set((t, p) for t, ps in kept for p in ps), "no partition is given to both"


def test_the_group_moves_to_a_new_coordinator_mid_rebalance_and_goes_on(broker_factory):
    """Three brokers; a consumer-protocol group of two librdkafka members on a topic of six
    partitions at RF 3. Right after a third member joins (the group reconciling), the broker
    that coordinates the group (leads its `__consumer_offsets` partition) is killed. The
    new coordinator replays the group's records: the three members end up owning the six
    partitions between them, none twice, and every record written before and after the
    kill is consumed."""

    brokers = broker_factory.cluster(voters=3, extra_args=[*FAST, *FLAGS])
    bs = bootstrap(brokers)
    topic, group = "kip848-failover", "kip848-failover-group"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, num_partitions=6, replication_factor=3)],
                        operation_timeout=30)[topic].result(timeout=30)
    wait_until(lambda: all(l >= 0 for l in leaders(brokers, topic).values()) and len(leaders(brokers, topic)) == 6,
               30, "the topic's leaders")
    cluster_produce(brokers, topic, 300, "before")
    seen: dict[tuple[int, int], int] = {}
    lock = threading.Lock()
    stop = threading.Event()
    members: dict[str, dict] = {}

    def run(name: str) -> None:
        c = consumer(bs, group, **{"client.id": name})
        c.subscribe([topic])
        members[name] = {"owned": set(), "errors": []}
        try:
            while not stop.is_set():
                m = c.poll(0.2)
                members[name]["owned"] = {tp.partition for tp in c.assignment()}
                if m is None:
                    continue
                if m.error():
                    members[name]["errors"].append(m.error().str())
                    continue
                with lock:
                    seen[(m.partition(), m.offset())] = seen.get((m.partition(), m.offset()), 0) + 1
                try:
                    c.commit(message=m, asynchronous=False)
                except Exception as e:  # a commit across the failover: the next one covers it
                    members[name]["errors"].append(str(e))
        finally:
            c.close()

    threads = []
    for name in ("m1", "m2"):
        t = threading.Thread(target=run, args=(name,), daemon=True)
        t.start()
        threads.append(t)
    owned = lambda: [members.get(n, {}).get("owned", set()) for n in list(members)]  # noqa: E731
    wait_until(lambda: len(members) == 2 and sorted(len(o) for o in owned()) == [3, 3], 60,
               lambda: f"two members share the partitions: {members}")
    offsets_partition = java_hash(group) % 50
    coordinator = leaders(brokers, "__consumer_offsets")[offsets_partition]
    t = threading.Thread(target=run, args=("m3",), daemon=True)
    t.start()
    threads.append(t)
    # m3 holds its first partition: it has joined and the group is handing partitions
    # over (the others revoke one each, m3 gets each once it is released).
    wait_until(lambda: members.get("m3", {}).get("owned"), 30, "m3 gets a partition")
    victim = next(b for b in brokers if b.node_id == coordinator)
    victim.kill()
    survivors = [b for b in brokers if b is not victim]
    wait_until(lambda: leaders(survivors, "__consumer_offsets").get(offsets_partition, -1)
               not in (-1, coordinator), 60, "a new coordinator")
    cluster_produce(survivors, topic, 300, "after")
    try:
        def settled():
            o = owned()
            union = set().union(*o)
            return len(o) == 3 and sorted(len(x) for x in o) == [2, 2, 2] and union == set(range(6))
        wait_until(settled, 90, lambda: f"three members own two partitions each: {members}")
        wait_until(lambda: len(seen) >= 600, 60, lambda: f"every record consumed ({len(seen)} of 600)")
        o = owned()
        assert sum(len(x) for x in o) == len(set().union(*o)) == 6, f"a partition owned twice: {members}"
    finally:
        stop.set()
        for t in threads:
            t.join(30)


def test_a_pattern_matches_internal_topics_as_kafkas_coordinator_does(broker_factory):
    """Kafka's group coordinator resolves a member's regex against every topic of the
    cluster, internal ones included (franz-go's tests rely on it): a member subscribed to
    `__consumer_offsets` by pattern is assigned its partitions."""
    b = broker_factory(extra_args=FLAGS + ["--offsets-topic-partitions", "3"])
    create_topic(b.bootstrap, "kip848-internal-other", 2)
    g, member = "kip848-internal", str(uuid.uuid4())
    a = heartbeat(b.bootstrap, g, member, 0, regex="__consumer_off.*", owned=[],
                  rebalance_timeout=30000)
    assert a["error"] == ERR_NONE, a
    epoch, got = a["epoch"], a["assignment"]

    def assigned() -> bool:
        nonlocal epoch, got
        if got and sum(len(ps) for ps in got.values()) == 3:
            return True
        r = heartbeat(b.bootstrap, g, member, epoch, owned=[])
        assert r["error"] == ERR_NONE, r
        epoch = r["epoch"]
        got = r["assignment"] if r["assignment"] is not None else got
        return bool(got) and sum(len(ps) for ps in got.values()) == 3

    wait_until(assigned, 30, lambda: f"__consumer_offsets assigned: {got}")
    assert len(got) == 1 and list(got.values())[0] == [0, 1, 2], got
