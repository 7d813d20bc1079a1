"""The disk failing on purpose (`--storage-fault-injection`, corelog_storage::fault): an
fsync error, EIO and ENOSPC on a write, a torn write and a power loss that drops what was
not synced. What must hold whatever the disk does: nothing acknowledged is lost, nothing
unsynced is acknowledged as durable, the broker answers with Kafka's error and stays up,
and recovery never serves a hole or a torn batch."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

import kwire as W
from storage_faults import FAULTS, Load, check_log, fault, power_loss, read_log

KAFKA_STORAGE_ERROR = 56
TIMEOUT = 30


def create(bootstrap: str, topic: str, partitions: int, rf: int = 1, config: dict | None = None):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=rf,
                                        config=config or {})])[topic]
    fut.result(TIMEOUT)
    deadline = time.monotonic() + TIMEOUT
    while True:
        md = admin.list_topics(topic, timeout=10).topics[topic]
        if len(md.partitions) == partitions and all(p.leader >= 0 for p in md.partitions.values()):
            return
        assert time.monotonic() < deadline, f"{topic} has no leaders"
        time.sleep(0.1)


_corr = iter(range(1, 1 << 30))
_keys = iter(range(1 << 62))


def produce_raw(bootstrap: str, topic: str, partition: int, values: list[bytes], acks: int = -1,
                timeout_ms: int = 10_000) -> dict:
    """One Produce v3 of one batch; returns the partition's result."""
    ts = int(time.time() * 1000)
    batch = W.record_batch([(b"raw-%d" % next(_keys), v, [], ts) for v in values], base_timestamp=ts)
    _, body = W.roundtrip(bootstrap, W.produce_v3(next(_corr), topic, {partition: batch}, acks=acks,
                                                  timeout_ms=timeout_ms), timeout=timeout_ms / 1000 + 20)
    return W.parse_produce_v3(body)[(topic, partition)]


def wait_high_watermarks(bootstrap: str, topic: str, partitions: int, acked, timeout: float = 60):
    """Until every partition's high watermark is past its highest acknowledged offset."""
    from confluent_kafka import Consumer, TopicPartition
    want = {p: max((o for (q, o) in acked if q == p), default=-1) + 1 for p in range(partitions)}
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "hw-wait"})
    try:
        deadline = time.monotonic() + timeout
        while True:
            have = {}
            for p in range(partitions):
                try:
                    have[p] = c.get_watermark_offsets(TopicPartition(topic, p), timeout=5, cached=False)[1]
                except Exception:  # noqa: BLE001 - a leader not elected yet
                    have[p] = -1
            if all(have[p] >= want[p] for p in want):
                return
            assert time.monotonic() < deadline, f"high watermarks {have}, acknowledged up to {want}"
            time.sleep(0.2)
    finally:
        c.close()


def metric_sum(broker, name: str) -> float:
    """The sum over shards of one series of the broker's /metrics."""
    import urllib.request
    with urllib.request.urlopen(f"http://{broker.http}/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))


def stored(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    return {p: len(r) for p, r in read_log(bootstrap, topic, partitions).items()}


def test_an_fsync_error_is_never_acknowledged_and_fails_only_its_partition(broker_factory):
    b = broker_factory.start(extra_args=FAULTS)
    topic = "fsync-eio"
    create(b.bootstrap, topic, 2)
    for p in (0, 1):
        assert produce_raw(b.bootstrap, topic, p, [b"before"] * 10)["error_code"] == 0
    fault(b, f"fail sync eio path=/{topic}-0/ count=1")
    # The batch is written, its sync fails: never acknowledged, and the partition refuses
    # everything after it (what the disk holds past a failed fsync is unknown).
    assert produce_raw(b.bootstrap, topic, 0, [b"lost"] * 10)["error_code"] == KAFKA_STORAGE_ERROR
    for acks in (-1, 1):
        assert produce_raw(b.bootstrap, topic, 0, [b"after"], acks=acks)["error_code"] == KAFKA_STORAGE_ERROR
    # Offline: reads are refused too.
    _, body = W.roundtrip(b.bootstrap, W.fetch_v4(next(_corr), topic, {0: 0, 1: 0}))
    fetched = W.parse_fetch_v4(body)
    assert fetched[(topic, 0)]["error_code"] == KAFKA_STORAGE_ERROR, fetched[(topic, 0)]
    assert fetched[(topic, 1)]["error_code"] == 0
    # The other partition, on the same disk, is not failed by it.
    assert produce_raw(b.bootstrap, topic, 1, [b"fine"] * 5)["error_code"] == 0
    assert "partition log failed" in b.log_tail(400)
    assert metric_sum(b, "corelog_log_failures_total") == 1
    deadline = time.monotonic() + 5
    while "a log directory failed: this broker gives up leadership" not in b.log_tail(400):
        assert time.monotonic() < deadline, "the broker did not report its data directory failed"
        time.sleep(0.05)
    # A restart recovers the partition: what was acknowledged is there, the log is dense
    # and takes appends again.
    b.kill()
    b.start()
    counts = stored(b.bootstrap, topic, 2)
    assert counts[0] in (10, 20) and counts[1] == 15, counts
    assert produce_raw(b.bootstrap, topic, 0, [b"again"])["error_code"] == 0
    assert stored(b.bootstrap, topic, 2)[0] == counts[0] + 1


@pytest.mark.parametrize("where", ["segment", "leader-epoch-checkpoint"])
def test_enospc_refuses_produces_cleanly_and_service_resumes(broker_factory, where):
    """ENOSPC on a segment write, or on the leader-epoch checkpoint that the first produce
    of a new epoch (here: after a restart) writes before its batch."""
    b = broker_factory.start(extra_args=FAULTS)
    topic = "no-space"
    create(b.bootstrap, topic, 1)
    assert produce_raw(b.bootstrap, topic, 0, [b"before"] * 10)["error_code"] == 0
    if where == "segment":
        fault(b, f"fail write enospc path=/{topic}-0/")
    else:
        b.stop()
        b.start()
        fault(b, f"fail write enospc path=/{topic}-0/leader-epoch-checkpoint")
    # The first produce after the disk filled is queued and waits for space (it was never
    # acknowledged); every later one is refused at once with KAFKA_STORAGE_ERROR.
    waiting: dict = {}
    t = threading.Thread(target=lambda: waiting.update(
        produce_raw(b.bootstrap, topic, 0, [b"queued"] * 10, timeout_ms=60_000)))
    t.start()
    deadline = time.monotonic() + TIMEOUT
    while "filesystem full" not in b.log_tail(400):
        assert time.monotonic() < deadline, "the write never hit the full disk"
        time.sleep(0.05)
    full = [line for line in b.log_tail(400).splitlines() if "filesystem full" in line]
    assert (where in full[0]) == (where != "segment"), full
    for acks in (-1, 1, -1):
        assert produce_raw(b.bootstrap, topic, 0, [b"refused"], acks=acks)["error_code"] \
            == KAFKA_STORAGE_ERROR
    time.sleep(1)
    assert t.is_alive(), f"the queued produce was answered while the disk was full: {waiting}"
    # Space returns: the queued batch is written and acknowledged, produces are accepted.
    fault(b, "clear")
    t.join(TIMEOUT)
    assert waiting.get("error_code") == 0, waiting
    assert produce_raw(b.bootstrap, topic, 0, [b"after"] * 5)["error_code"] == 0
    records = read_log(b.bootstrap, topic, 1)[0]
    assert [o for o, _ in records] == list(range(25)), "dense: before, queued, after"
    assert metric_sum(b, "corelog_log_failures_total") == 0, "a full disk fails no log"
    b.assert_alive()


def test_a_torn_write_is_cut_at_recovery(broker_factory):
    b = broker_factory.start(extra_args=FAULTS)
    topic = "torn-write"
    create(b.bootstrap, topic, 1)
    for _ in range(5):
        assert produce_raw(b.bootstrap, topic, 0, [b"whole" * 50] * 20)["error_code"] == 0
    fault(b, f"tear write path=/{topic}-0/0 count=1")
    # Half of the batch reaches the file, then the write fails: the partition fails.
    assert produce_raw(b.bootstrap, topic, 0, [b"torn" * 500] * 40, acks=1)["error_code"] \
        == KAFKA_STORAGE_ERROR
    b.kill()
    b.start()
    # Recovery cuts the log at the torn batch: every whole batch, nothing of the torn one.
    assert stored(b.bootstrap, topic, 1) == {0: 100}
    assert produce_raw(b.bootstrap, topic, 0, [b"next"])["error_code"] == 0
    assert stored(b.bootstrap, topic, 1) == {0: 101}


@pytest.mark.parametrize("torn", [False, True], ids=["dropped", "torn"])
def test_a_power_loss_loses_nothing_acknowledged(broker_factory, torn):
    """acks=all under the default durability (ack-all): the ack waits for fdatasync, so a
    power loss that drops every unsynced byte (or tears the unsynced tail of every file)
    loses nothing acknowledged; recovery cuts what the loss tore."""
    b = broker_factory.start(extra_args=FAULTS)
    topic = "power-loss"
    partitions = 6
    create(b.bootstrap, topic, partitions)
    load = Load(b.bootstrap, topic).start()
    load.wait_acked(3_000)
    power_loss(b, torn=torn)
    load.stop()
    acked = {k: v[0] for k, v in load.acked.items()}
    log = b.log_tail(2000)
    # Not vacuous: the loss found written, unsynced bytes to drop.
    assert "power loss: unsynced bytes dropped" in log, log[-3000:]
    b.start()
    total = check_log(b.bootstrap, topic, partitions, acked)
    assert total >= len(acked)


def test_a_power_loss_under_interval_durability_loses_at_most_the_window(broker_factory):
    """`--durability interval` acknowledges without waiting for a sync: a power loss may
    drop what was acknowledged in the last interval (plus the sync in progress), never
    anything older."""
    interval_ms = 500
    b = broker_factory.start(extra_args=FAULTS + ["--durability", "interval",
                                                  "--flush-interval-ms", str(interval_ms)])
    topic = "power-loss-interval"
    partitions = 4
    create(b.bootstrap, topic, partitions)
    load = Load(b.bootstrap, topic).start()
    load.wait_acked(3_000)
    time.sleep(3)
    cut = time.monotonic()
    power_loss(b)
    load.stop()
    b.start()
    window = interval_ms / 1000 + 1.0
    old = {k: v[0] for k, v in load.acked.items() if v[1] < cut - window}
    assert len(old) > 1_000, f"{len(old)} acknowledged before the window"
    total = check_log(b.bootstrap, topic, partitions, old)
    print(f"acknowledged {len(load.acked)}, {len(old)} before the window, {total} recovered")


def test_an_fsync_error_on_a_leader_moves_leadership_away(broker_factory):
    """In a cluster, a leader whose fsync fails gives up leadership (its data directory is
    no longer trusted): the controller leads its partitions from other ISR members, the
    producer follows, and every acknowledged record is read back once."""
    from test_replication import FAST, partition_state
    brokers = broker_factory.cluster(3, extra_args=FAST + FAULTS)
    boot = ",".join(x.bootstrap for x in brokers)
    topic = "fsync-failover"
    partitions = 3
    create(boot, topic, partitions, rf=3, config={"min.insync.replicas": "2"})
    load = Load(boot, topic).start()
    load.wait_acked(2_000)
    leader_id = partition_state(brokers, topic)[0][0]
    failing = next(x for x in brokers if x.node_id == leader_id)
    fault(failing, f"fail sync eio path=/{topic}-0/ count=1")
    # Leadership of every partition leaves the failed broker, and it leaves every ISR.
    deadline = time.monotonic() + TIMEOUT
    while True:
        state = partition_state(brokers, topic)
        if all(leader not in (-1, leader_id) and leader_id not in isr
               for leader, _, isr in state.values()):
            break
        assert time.monotonic() < deadline, f"leadership stayed: {state}"
        time.sleep(0.2)
    before = load.count()
    load.wait_acked(before + 2_000)
    load.stop(flush=30)
    assert not load.errors, load.errors[:3]
    assert "a log directory failed: this broker gives up leadership" in failing.log_tail(2000)
    failing.assert_alive()
    others = ",".join(x.bootstrap for x in brokers if x is not failing)
    check_log(others, topic, partitions, {k: v[0] for k, v in load.acked.items()})


def test_a_power_loss_of_the_whole_cluster_loses_nothing_acknowledged(broker_factory):
    """Every broker of a 3-broker cluster loses power at once (Kafka, which acknowledges
    acks=all without fsync, can lose acknowledged records here): with the default
    durability a follower fetches past an offset only once it has synced it, so every
    acknowledged record is on the disk of every ISR member and survives."""
    from test_replication import FAST
    brokers = broker_factory.cluster(3, extra_args=FAST + FAULTS)
    boot = ",".join(x.bootstrap for x in brokers)
    topic = "cluster-power-loss"
    partitions = 3
    create(boot, topic, partitions, rf=3, config={"min.insync.replicas": "2"})
    load = Load(boot, topic).start()
    load.wait_acked(3_000)
    threads = [threading.Thread(target=power_loss, args=(x,)) for x in brokers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    load.stop()
    assert all(not x.is_running() for x in brokers)
    assert any("power loss: unsynced bytes dropped" in x.log_tail(3000) for x in brokers)
    for x in brokers:
        x.launch()
    for x in brokers:
        x.wait_healthy()
    # The high watermark a leader starts from is its last checkpoint; it reaches the end
    # of the log once the ISR has fetched it again.
    wait_high_watermarks(boot, topic, partitions, load.acked)
    total = check_log(boot, topic, partitions, {k: v[0] for k, v in load.acked.items()})
    assert total >= len(load.acked)


def test_the_fault_endpoint_exists_only_when_asked_for(broker_factory):
    import urllib.error
    plain = broker_factory.start()
    with pytest.raises(urllib.error.HTTPError) as e:
        fault(plain, "power-loss")
    assert e.value.code == 404
    plain.assert_alive()
    armed = broker_factory.start(extra_args=FAULTS)
    for bad in ("fail write eperm", "tear sync", "fail write eio count=0", "x" * 5000):
        with pytest.raises(urllib.error.HTTPError) as e:
            fault(armed, bad)
        assert e.value.code == 400, bad
    assert fault(armed, "clear") == "cleared\n"
    armed.assert_alive()
