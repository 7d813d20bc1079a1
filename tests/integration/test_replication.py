"""Replication across corelog broker processes on loopback: followers fetch from their
leaders, the ISR shrinks and expands through the controller, acks=all waits for the ISR,
the high watermark bounds what consumers see, and leaders fail over without losing an
acknowledged record.

Every broker is a real process with its own ports and data directory; the clients are
librdkafka (confluent-kafka) and kafka-python. Replica logs are compared on disk, batch
by batch, once the brokers have stopped."""

from __future__ import annotations

import os
import signal
import struct
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from test_kafka_python import wait_until

# Short sessions and lag times so that failures show within seconds.
FAST = ["--broker-session-timeout-ms", "3000", "--broker-heartbeat-interval-ms", "500",
        "--replica-lag-time-max-ms", "3000", "--group-initial-rebalance-delay-ms", "0"]
TIMEOUT = 30


def bootstrap(brokers) -> str:
    return ",".join(b.bootstrap for b in brokers if b.is_running())


def admin(brokers) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap(brokers)})


def create(brokers, name: str, partitions: int, replication_factor: int,
           configs: dict[str, str] | None = None, assignment=None) -> None:
    client = admin(brokers)
    if assignment is not None:
        topic = NewTopic(name, num_partitions=len(assignment), replica_assignment=assignment,
                         config=configs or {})
    else:
        topic = NewTopic(name, num_partitions=partitions, replication_factor=replication_factor,
                         config=configs or {})
    futures = client.create_topics([topic], request_timeout=TIMEOUT)
    futures[name].result(TIMEOUT)


def partition_state(brokers, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition -> (leader, replicas, isr) as Metadata answers it."""
    md = admin(brokers).list_topics(topic=topic, timeout=TIMEOUT)
    return {p.id: (p.leader, list(p.replicas), list(p.isrs))
            for p in md.topics[topic].partitions.values()}


def by_id(brokers, node_id: int):
    return next(b for b in brokers if b.node_id == node_id)


def leader_of(brokers, topic: str, partition: int = 0):
    return by_id(brokers, partition_state(brokers, topic)[partition][0])


def assert_exactly_once(acked: list[bytes], values: list[bytes]) -> None:
    """Every acknowledged record was read back, and none twice."""
    missing = set(acked) - set(values)
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}"
    dups = len(values) - len(set(values))
    assert dups == 0, f"{dups} records duplicated"


def batches_on_disk(data_dir: Path, topic: str, partition: int) -> list[bytes]:
    """Every whole record batch in the partition's segment files, in offset order (the
    preallocated zeros after the last batch end the scan)."""
    out = []
    d = data_dir / f"{topic}-{partition}"
    for seg in sorted(d.glob("*.log"), key=lambda p: int(p.stem)):
        data = seg.read_bytes()
        pos = 0
        while pos + 12 <= len(data):
            _, length = struct.unpack_from(">qi", data, pos)
            if length <= 0 or pos + 12 + length > len(data):
                break
            out.append(data[pos:pos + 12 + length])
            pos += 12 + length
    return out


def base_and_last(batch: bytes) -> tuple[int, int]:
    base, = struct.unpack_from(">q", batch, 0)
    delta, = struct.unpack_from(">i", batch, 23)
    return base, base + delta


def committed(batches: list[bytes], high_watermark: int) -> list[bytes]:
    return [b for b in batches if base_and_last(b)[1] < high_watermark]


def end_offset(batches: list[bytes]) -> int:
    return base_and_last(batches[-1])[1] + 1 if batches else 0


class Load:
    """An idempotent acks=all producer in a thread, recording what was acknowledged."""

    def __init__(self, brokers, topic: str, extra: dict | None = None):
        self.topic = topic
        self.acked: list[bytes] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.config = {"bootstrap.servers": bootstrap(brokers), "acks": "all",
                       "enable.idempotence": True, "linger.ms": 2,
                       "message.timeout.ms": 120_000, "request.timeout.ms": 10_000,
                       **(extra or {})}
        self.thread = threading.Thread(target=self.run, daemon=True)

    def on_delivery(self, err, msg):
        if err is None:
            self.acked.append(msg.value())
        else:
            self.errors.append(str(err))

    def run(self):
        p = Producer(self.config)
        i = 0
        while not self.stop.is_set():
            try:
                p.produce(self.topic, key=str(i % 64).encode(), value=f"v{i}".encode(),
                          on_delivery=self.on_delivery)
                i += 1
            except BufferError:
                p.poll(0.05)
            if i % 50 == 0:
                p.poll(0)
                time.sleep(0.005)
        p.flush(150)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(180)


def consume_everything(brokers, topic: str, partitions: int, expect: int) -> list[bytes]:
    """Reads every partition from the start until `expect` records or quiet, with the
    high watermark of every fetch checked against the offsets returned."""
    c = Consumer({"bootstrap.servers": bootstrap(brokers), "group.id": f"all-{time.time()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen: list[bytes] = []
    deadline = time.monotonic() + 90
    quiet_since = time.monotonic()
    try:
        while time.monotonic() < deadline:
            msgs = c.consume(1000, timeout=1.0)
            if not msgs and len(seen) >= expect and time.monotonic() - quiet_since > 2:
                break
            for m in msgs:
                if m.error():
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        raise KafkaException(m.error())
                    continue
                quiet_since = time.monotonic()
                _, high = c.get_watermark_offsets(TopicPartition(topic, m.partition()),
                                                  cached=True)
                assert high < 0 or m.offset() < high, (
                    f"offset {m.offset()} of partition {m.partition()} at or above the "
                    f"high watermark {high}")
                seen.append(m.value())
    finally:
        c.close()
    return seen


def test_replicated_topic_acks_all_through_isr_and_logs_match(broker_factory):
    brokers = broker_factory.cluster(voters=3, extra_args=FAST)
    create(brokers, "r3", 4, 3, {"min.insync.replicas": "2"})
    for p, (leader, replicas, isr) in partition_state(brokers, "r3").items():
        assert sorted(replicas) == [1, 2, 3] and sorted(isr) == [1, 2, 3], (p, replicas, isr)
    p = Producer({"bootstrap.servers": bootstrap(brokers), "acks": "all",
                  "enable.idempotence": True, "linger.ms": 5})
    for i in range(20_000):
        p.produce("r3", key=str(i).encode(), value=f"r{i}".encode())
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(TIMEOUT) == 0
    values = consume_everything(brokers, "r3", 4, 20_000)
    assert sorted(values) == sorted(f"r{i}".encode() for i in range(20_000))

    # Every replica holds the same batches, byte for byte (offsets and epochs included).
    for b in brokers:
        b.stop()
    for part in range(4):
        logs = [batches_on_disk(b.data_dir, "r3", part) for b in brokers]
        assert logs[0] and logs[0] == logs[1] == logs[2], f"partition {part} differs"


def metric(broker, name: str, label: str = "") -> float:
    """A metric summed over the broker's shards (from /metrics), over the series whose
    labels include `label`."""
    import urllib.request
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    text = opener.open(f"http://{broker.http}/metrics", timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if (line.startswith(name + "{") or line.startswith(name + " ")) and label in line)


def test_follower_down_isr_shrinks_catches_up_and_expands(broker_factory):
    brokers = broker_factory.cluster(voters=3, extra_args=FAST)
    create(brokers, "lag", 1, 3, {"min.insync.replicas": "2"})
    leader, replicas, _ = partition_state(brokers, "lag")[0]
    follower = by_id(brokers, next(r for r in replicas if r != leader))
    follower.kill()
    alive = [b for b in brokers if b is not follower]
    wait_until(lambda: follower.node_id not in partition_state(alive, "lag")[0][2], 20,
               "the ISR shrinks without the dead follower")
    lead = by_id(brokers, leader)
    wait_until(lambda: metric(lead, "corelog_under_replicated_partitions") == 1, 10,
               "the leader counts the partition under-replicated")

    # acks=all goes on with two in-sync replicas.
    p = Producer({"bootstrap.servers": bootstrap(alive), "acks": "all",
                  "enable.idempotence": True, "linger.ms": 20, "batch.size": 1 << 20})
    n = 300_000
    for i in range(n):
        while True:
            try:
                p.produce("lag", value=b"x" * 20)
                break
            except BufferError:
                p.poll(0.1)
    assert p.flush(60) == 0

    follower.restart()
    wait_until(lambda: sorted(partition_state(brokers, "lag")[0][2]) == [1, 2, 3], 60,
               "the returning follower rejoins the ISR")
    assert metric(lead, "corelog_under_replicated_partitions") == 0
    assert metric(lead, "corelog_isr_expands_total") >= 1
    assert metric(follower, "corelog_stage_latency_seconds_count", 'stage="replica_fetch"') > 0
    assert metric(follower, "corelog_follower_partitions") >= 1
    for b in brokers:
        b.stop()
    logs = [batches_on_disk(b.data_dir, "lag", 0) for b in brokers]
    assert end_offset(logs[0]) == n
    assert logs[0] == logs[1] == logs[2], "every replica's log is the leader's"


def high_watermark(brokers, topic: str, partition: int) -> int:
    c = Consumer({"bootstrap.servers": bootstrap(brokers), "group.id": "hw"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
    finally:
        c.close()


def test_min_insync_replicas_refuses_acks_all_and_holds_the_high_watermark(broker_factory):
    # Brokers 1-3 vote; the topic lives on 1, 4 and 5, so that 4 and 5 can die while the
    # quorum fences them and shrinks the ISR to broker 1 alone.
    brokers = broker_factory.cluster(voters=3, observers=2, extra_args=FAST)
    create(brokers, "mi", 1, 3, {"min.insync.replicas": "2"}, assignment=[[1, 4, 5]])
    p = Producer({"bootstrap.servers": bootstrap(brokers), "acks": "all"})
    for i in range(10):
        p.produce("mi", value=f"a{i}".encode())
    assert p.flush(TIMEOUT) == 0
    assert high_watermark(brokers, "mi", 0) == 10
    for n in (4, 5):
        by_id(brokers, n).kill()
    alive = brokers[:3]
    wait_until(lambda: partition_state(alive, "mi")[0][2] == [1], 30, "the ISR is broker 1 alone")

    # acks=all is refused before anything is written; acks=1 is taken.
    errors = []
    p = Producer({"bootstrap.servers": bootstrap(alive), "acks": "all",
                  "message.timeout.ms": 4000, "retries": 0})
    p.produce("mi", value=b"refused", on_delivery=lambda e, m: errors.append(e))
    p.flush(10)
    assert errors and errors[0] is not None and \
        errors[0].code() == KafkaError.NOT_ENOUGH_REPLICAS, errors
    p1 = Producer({"bootstrap.servers": bootstrap(alive), "acks": "1"})
    for i in range(5):
        p1.produce("mi", value=f"b{i}".encode())
    assert p1.flush(TIMEOUT) == 0
    # ... but consumers do not see it: the high watermark waits for min.insync.replicas.
    time.sleep(1)
    assert high_watermark(alive, "mi", 0) == 10

    # A follower returns and catches up: the ISR reaches two and the mark moves.
    by_id(brokers, 4).restart()
    wait_until(lambda: sorted(partition_state(alive, "mi")[0][2]) == [1, 4], 60,
               "broker 4 back in the ISR")
    wait_until(lambda: high_watermark(alive, "mi", 0) == 15, 20, "the high watermark moves")
    values = consume_everything(alive, "mi", 1, 15)
    assert values == [f"a{i}".encode() for i in range(10)] + [f"b{i}".encode() for i in range(5)]


def controller_of(brokers):
    md = admin(brokers).list_topics(timeout=TIMEOUT)
    return by_id(brokers, md.controller_id)


def test_leaders_killed_under_idempotent_acks_all_load_lose_nothing(broker_factory):
    """Partition leaders and the active controller are killed (-9) in turn, one every few
    seconds, under acks=all idempotent load. CORELOG_CHAOS_ROUNDS (default 4) sets the
    number of kills; a few hundred make a run of several minutes."""
    rounds = int(os.environ.get("CORELOG_CHAOS_ROUNDS", "4"))
    brokers = broker_factory.cluster(voters=3, extra_args=FAST)
    create(brokers, "chaos", 6, 3, {"min.insync.replicas": "2"})
    with Load(brokers, "chaos") as load:
        time.sleep(3)
        for round_ in range(rounds):
            if round_ % 2:
                victim = controller_of(brokers)
            else:
                victim = leader_of(brokers, "chaos", round_ % 6)
            victim.kill()
            time.sleep(4)
            victim.restart()
            wait_until(lambda: all(len(isr) == 3 for _, _, isr in
                                   partition_state(brokers, "chaos").values()), 60,
                       f"round {round_}: ISR whole again")
        time.sleep(2)
    assert load.acked, "the load acknowledged records"
    values = consume_everything(brokers, "chaos", 6, len(load.acked))
    print(f"chaos: {rounds} kills, {len(load.acked)} records acknowledged, {len(values)} read back")
    assert_exactly_once(load.acked, values)


def test_a_diverged_leader_truncates_its_tail_when_it_returns(broker_factory):
    # Brokers 1-3 vote; 4 and 5 hold the topic, so that stopping them never touches the
    # quorum.
    # A lag time long enough that the stopped follower stays in the ISR until the leader
    # dies, so that it may lead after it.
    slow_shrink = [a if a != "3000" or FAST[i - 1] != "--replica-lag-time-max-ms" else "20000"
                   for i, a in enumerate(FAST)]
    brokers = broker_factory.cluster(voters=3, observers=2, extra_args=slow_shrink)
    create(brokers, "div", 1, 2, assignment=[[4, 5]])
    l4, f5 = by_id(brokers, 4), by_id(brokers, 5)
    p = Producer({"bootstrap.servers": bootstrap(brokers), "acks": "all"})
    for i in range(100):
        p.produce("div", value=f"c{i}".encode())
    assert p.flush(TIMEOUT) == 0

    # The follower stops fetching; the leader takes acks=1 writes only it holds, and dies.
    # (The follower's fetch waiting at the leader is answered, empty, before the writes.)
    os.kill(f5.proc.pid, signal.SIGSTOP)
    time.sleep(1.5)
    p1 = Producer({"bootstrap.servers": l4.bootstrap, "acks": "1"})
    for i in range(50):
        p1.produce("div", value=f"lost{i}".encode())
    assert p1.flush(TIMEOUT) == 0
    l4.kill()
    os.kill(f5.proc.pid, signal.SIGCONT)
    wait_until(lambda: partition_state(brokers[:3], "div")[0][0] == 5, 30,
               "the in-sync follower leads")

    # The new leader's epoch takes new writes at the same offsets.
    p2 = Producer({"bootstrap.servers": bootstrap(brokers[:3]), "acks": "all"})
    for i in range(30):
        p2.produce("div", value=f"n{i}".encode())
    assert p2.flush(TIMEOUT) == 0

    # The old leader returns, truncates what diverged, and follows.
    l4.restart()
    wait_until(lambda: sorted(partition_state(brokers, "div")[0][2]) == [4, 5], 60,
               "the returning replica rejoins the ISR")
    values = consume_everything(brokers, "div", 1, 130)
    assert values == [f"c{i}".encode() for i in range(100)] + \
        [f"n{i}".encode() for i in range(30)]
    for b in brokers:
        b.stop()
    a, b = (batches_on_disk(x.data_dir, "div", 0) for x in (l4, f5))
    assert end_offset(a) == end_offset(b) == 130 and a == b


def test_a_stopped_leader_is_replaced_and_acknowledges_nothing_after(broker_factory):
    brokers = broker_factory.cluster(voters=3, extra_args=FAST)
    create(brokers, "zombie", 1, 3, {"min.insync.replicas": "2"})
    with Load(brokers, "zombie") as load:
        time.sleep(2)
        leader = leader_of(brokers, "zombie")
        others = [b for b in brokers if b is not leader]
        os.kill(leader.proc.pid, signal.SIGSTOP)
        try:
            # Past the session timeout: fenced, and an ISR member leads. The producer's
            # requests in flight to the stopped leader wait in its socket meanwhile.
            wait_until(lambda: partition_state(others, "zombie")[0][0] not in
                       (leader.node_id, -1), 30, "a new leader")
            time.sleep(1)
        finally:
            os.kill(leader.proc.pid, signal.SIGCONT)
        # Resumed, it finds it was replaced: what it took as leader meanwhile is never
        # acknowledged (its followers fetch elsewhere, so its high watermark cannot
        # pass it), it follows, cuts what diverged, and rejoins the ISR.
        wait_until(lambda: sorted(partition_state(brokers, "zombie")[0][2]) == [1, 2, 3], 60,
                   "the old leader back in the ISR")
        acked = len(load.acked)
        wait_until(lambda: len(load.acked) > acked + 100, 60, "the load goes on")
    assert not load.errors, load.errors[:3]
    assert_exactly_once(load.acked, consume_everything(brokers, "zombie", 1, len(load.acked)))
    for b in brokers:
        b.stop()
    logs = [batches_on_disk(b.data_dir, "zombie", 0) for b in brokers]
    assert logs[0] == logs[1] == logs[2], "every replica holds the same log"


def test_controlled_shutdown_moves_leadership_first(broker_factory):
    brokers = broker_factory.cluster(voters=3, extra_args=FAST)
    create(brokers, "cs", 6, 3, {"min.insync.replicas": "2"})
    with Load(brokers, "cs") as load:
        time.sleep(2)
        victim = leader_of(brokers, "cs")
        started = time.monotonic()
        victim.stop()  # SIGTERM, clean exit
        took = time.monotonic() - started
        others = [b for b in brokers if b is not victim]
        state = partition_state(others, "cs")
        assert all(leader != victim.node_id and leader >= 0 for leader, _, _ in state.values()), state
        assert all(victim.node_id not in isr for _, _, isr in state.values()), state
        assert "leadership moved away for the shutdown" in victim.log_path.read_text()
        time.sleep(2)
        victim.restart()
        wait_until(lambda: all(len(isr) == 3 for _, _, isr in partition_state(brokers, "cs").values()),
                   60, "the restarted broker rejoins every ISR")
        time.sleep(1)
    assert took < 15, f"the shutdown took {took:.1f}s"
    # Nothing the producer saw failed: only retriable errors, retried.
    assert not load.errors, load.errors[:5]
    assert_exactly_once(load.acked, consume_everything(brokers, "cs", 6, len(load.acked)))


def java_hash(s: str) -> int:
    """Java's String.hashCode, made non-negative as Kafka's Utils.abs does (n & 0x7fffffff)."""
    h = 0
    for ch in s:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h & 0x7FFFFFFF


def test_group_offsets_survive_their_coordinators_death(broker_factory):
    brokers = broker_factory.cluster(voters=3, extra_args=FAST)
    create(brokers, "gf", 1, 3)
    p = Producer({"bootstrap.servers": bootstrap(brokers), "acks": "all"})
    for i in range(1000):
        p.produce("gf", value=f"g{i}".encode())
    assert p.flush(TIMEOUT) == 0

    def group_consumer():
        c = Consumer({"bootstrap.servers": bootstrap(brokers), "group.id": "gf-group",
                      "auto.offset.reset": "earliest", "enable.auto.commit": False})
        c.subscribe(["gf"])
        return c

    c = group_consumer()
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < 500 and time.monotonic() < deadline:
        for m in c.consume(500 - len(got), timeout=1.0):
            if not m.error():
                got.append(m.value())
    c.commit(asynchronous=False)
    c.close()
    assert len(got) == 500

    # The coordinator (the leader of the group's __consumer_offsets partition, Kafka's
    # hash of the group id over its 50 partitions) dies; the offsets are on the other
    # replicas of that partition.
    offsets = partition_state(brokers, "__consumer_offsets")
    assert all(len(replicas) == 3 for _, replicas, _ in offsets.values())
    coordinator = by_id(brokers, offsets[java_hash("gf-group") % 50][0])
    coordinator.kill()
    alive = [b for b in brokers if b is not coordinator]
    rest: list[bytes] = []
    c = Consumer({"bootstrap.servers": bootstrap(alive), "group.id": "gf-group",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe(["gf"])
    deadline = time.monotonic() + 60
    while len(rest) < 500 and time.monotonic() < deadline:
        for m in c.consume(500, timeout=1.0):
            if not m.error():
                rest.append(m.value())
    c.close()
    assert rest[:1] == [b"g500"], "the new coordinator knows the committed offset"
    assert got + rest == [f"g{i}".encode() for i in range(1000)]


def test_a_follower_behind_the_leaders_log_start_starts_over_there(broker_factory):
    brokers = broker_factory.cluster(voters=3, extra_args=FAST + ["--retention-check-interval-ms", "300"])
    create(brokers, "ret", 1, 3, {"segment.bytes": "16384", "retention.bytes": "65536"})
    leader, replicas, _ = partition_state(brokers, "ret")[0]
    follower = by_id(brokers, next(r for r in replicas if r != leader))
    follower.kill()
    alive = [b for b in brokers if b is not follower]
    wait_until(lambda: follower.node_id not in partition_state(alive, "ret")[0][2], 20,
               "the ISR shrinks without the dead follower")
    p = Producer({"bootstrap.servers": bootstrap(alive), "acks": "all", "linger.ms": 5})
    for i in range(40_000):
        p.produce("ret", value=b"%08d" % i + b"." * 92)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(TIMEOUT) == 0

    def log_start():
        c = Consumer({"bootstrap.servers": bootstrap(alive), "group.id": "ls"})
        try:
            return c.get_watermark_offsets(TopicPartition("ret", 0), timeout=10)[0]
        finally:
            c.close()
    wait_until(lambda: log_start() > 10_000, 30, "retention moves the leader's log start")

    # The follower asks for offset 0, below what the leader holds: it empties its log,
    # starts at the leader's log start, catches up and rejoins.
    follower.restart()
    wait_until(lambda: sorted(partition_state(brokers, "ret")[0][2]) == [1, 2, 3], 60,
               "the follower rejoins the ISR")
    for b in brokers:
        b.stop()
    lead_log = batches_on_disk(by_id(brokers, leader).data_dir, "ret", 0)
    follower_log = batches_on_disk(follower.data_dir, "ret", 0)
    assert end_offset(follower_log) == end_offset(lead_log) == 40_000
    first = base_and_last(follower_log[0])[0]
    assert first >= 10_000, "the follower holds nothing from before the leader's log start"
    common = [b for b in lead_log if base_and_last(b)[0] >= first]
    assert follower_log[-len(common):] == common, "where both hold batches, they are the same"
