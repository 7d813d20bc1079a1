"""The partition balancer and decommissioning, end to end: a broker that joins a
cluster is given replicas and preferred leaderships until every broker's counts are
even (within 10 % of the mean), and a broker decommissioned with `corelog admin
decommission` is drained under acks=all load — and the drain completes and loses
nothing even when the broker dies half way. Real broker processes on loopback;
librdkafka produces and consumes."""

from __future__ import annotations

import math
import subprocess
import time
from collections import Counter

from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from confluent_kafka import Consumer, KafkaException

from launcher import corelog_bin
from launcher import wait_until
from test_reassignment import in_progress, produce_bytes, reassign, set_configs
from test_replication import (FAST, TIMEOUT, Load, admin, assert_exactly_once, bootstrap,
                              by_id, consume_everything, controller_of, create, partition_state)

# Waves every second, and preferred leaders handed back every second. The brokers share
# the host's filesystem, however full it is: none is kept from taking replicas by it.
QUICK = [*FAST, "--partition-balancer-interval-ms", "1000",
         "--leader-imbalance-check-interval-seconds", "1",
         "--partition-balancer-max-disk-usage-percent", "100"]


def counts(brokers, topic: str) -> tuple[Counter, Counter, Counter]:
    """Per broker: replicas, preferred leaderships (first replicas), leaderships."""
    state = partition_state(brokers, topic)
    replicas = Counter(b for _, r, _ in state.values() for b in r)
    preferred = Counter(r[0] for _, r, _ in state.values())
    leaders = Counter(leader for leader, _, _ in state.values())
    return replicas, preferred, leaders


def throttle_marks(brokers, topic: str) -> set[tuple[str, str]]:
    """The topic's throttled-replica lists that are set: (key, value)."""
    client = admin(brokers)  # held: the future fails if its client is collected first
    r = ConfigResource(ResourceType.TOPIC, topic)
    entries = client.describe_configs([r])[r].result(TIMEOUT)
    return {(k, e.value) for k, e in entries.items()
            if k.endswith("replication.throttled.replicas") and e.value}


def test_a_joining_broker_is_given_replicas_and_leaders_until_counts_are_even(broker_factory):
    """Twelve partitions with two replicas each on brokers 1-3 (8 replicas and 4 leaders
    each); broker 4 joins while an acks=all producer writes. The balancer, on by
    default, moves replicas to it and then preferences, until each of the four holds 6
    replicas and leads 3 partitions, its moves marked for the replication throttles
    while they run; every acknowledged record is read back once."""
    brokers = broker_factory.cluster(voters=3, observers=1, held_back=1, balancer=True,
                                     extra_args=QUICK)
    voters, b4 = brokers[:3], by_id(brokers, 4)
    create(voters, "bal", 12, 2,
           assignment=[[i % 3 + 1, (i + 1) % 3 + 1] for i in range(12)])
    with Load(voters, "bal") as load:
        time.sleep(1.5)
        assert counts(voters, "bal")[0] == Counter({1: 8, 2: 8, 3: 8}), "balanced on three"
        b4.start()
        marks_seen = set()

        def even() -> bool:
            marks_seen.update(throttle_marks(brokers, "bal"))
            replicas, preferred, leaders = counts(brokers, "bal")
            return (replicas == Counter({1: 6, 2: 6, 3: 6, 4: 6})
                    and preferred == leaders == Counter({1: 3, 2: 3, 3: 3, 4: 3}))
        wait_until(even, 90, "replicas and leaders even over four brokers")
        # The moves were marked for the replication throttles while they ran (broker 4
        # the follower of each), and unmarked once done.
        assert any(":4" in v for k, v in marks_seen if k.startswith("follower")), marks_seen
        wait_until(lambda: not throttle_marks(brokers, "bal"), 20, "the throttle marks cleared")
        time.sleep(1)
    assert not load.errors, load.errors[:3]
    assert load.acked, "records acknowledged"
    state = partition_state(brokers, "bal")
    assert all(sorted(r) == sorted(isr) for _, r, isr in state.values()), state
    values = consume_everything(brokers, "bal", 12, len(load.acked))
    assert_exactly_once(load.acked, values, load.epoch_bumps)


def within(counts: Counter, brokers: int, total: int) -> bool:
    """Every one of `brokers` brokers holds a count within the balancer's bounds (the
    mean ± 10 %, widened to the whole numbers around it)."""
    mean = total / brokers
    lower = min(math.ceil(mean * 0.9), math.floor(mean))
    upper = max(math.floor(mean * 1.1), math.ceil(mean))
    return len(counts) == brokers and all(lower <= n <= upper for n in counts.values())


def test_a_joining_broker_takes_its_share_of_a_busy_topic_beside_the_offsets_topic(
        broker_factory):
    """A 24-partition, three-replica topic under acks=all load and read by a consumer
    group (so __consumer_offsets' 50 three-replica partitions are on the same three
    brokers), right after a reassignment; broker 4 joins. It takes its share of the busy
    topic's replicas and preferred leaderships (17-19 of 72, 6 of 24), not just of the
    cluster's total: before, its whole share came from __consumer_offsets, whose
    partitions the balancer looked at first, and the busy topic never reached it."""
    brokers = broker_factory.cluster(voters=3, observers=1, held_back=1, balancer=True,
                                     extra_args=QUICK)
    voters, b4 = brokers[:3], by_id(brokers, 4)
    create(voters, "busy", 24, 3)
    with Load(voters, "busy") as load:
        group = Consumer({"bootstrap.servers": bootstrap(voters), "group.id": "busy-readers",
                          "auto.offset.reset": "earliest"})
        group.subscribe(["busy"])
        wait_until(lambda: group.consume(100, timeout=0.5) and group.assignment(), 30,
                   "the group reads the topic")
        replicas = partition_state(voters, "busy")[0][1]
        assert reassign(voters, "busy", {0: replicas[::-1]}) == {0: None}
        wait_until(lambda: not in_progress(voters, "busy"), 30, "the reassignment completes")
        b4.start()

        def shared() -> bool:
            group.consume(100, timeout=0.1)
            replicas, preferred, _ = counts(brokers, "busy")
            return within(replicas, 4, 72) and within(preferred, 4, 24)
        wait_until(shared, 180, "broker 4 holds its share of the busy topic")
        offsets, _, _ = counts(brokers, "__consumer_offsets")
        assert within(offsets, 4, 150), offsets
        group.close()
    assert not load.errors, load.errors[:3]
    values = consume_everything(brokers, "busy", 24, len(load.acked))
    assert_exactly_once(load.acked, values, load.epoch_bumps)


def test_marks_of_moves_under_way_when_the_controller_dies_come_off_when_they_complete(
        broker_factory):
    """Six two-replica partitions on brokers 1-3 with 1 MB each and the leaders' replication
    throttle at 128 KiB/s, so the moves to a joining broker 4 take seconds. While they
    run, the active controller is killed (and restarted: whichever controller leads next
    has not started them). Once the moves complete, the throttled-replica lists are empty
    again, as they were before: which marks are the balancer's is kept with the cluster's
    metadata, not in the memory of the controller that made them."""
    brokers = broker_factory.cluster(voters=3, observers=1, held_back=1, balancer=True,
                                     extra_args=QUICK)
    voters, b4 = brokers[:3], by_id(brokers, 4)
    create(voters, "fo", 6, 2, assignment=[[i % 3 + 1, (i + 1) % 3 + 1] for i in range(6)])
    produce_bytes(voters, "fo", 6 << 20)
    for n in ("1", "2", "3"):
        set_configs(voters, ResourceType.BROKER, n,
                    {"leader.replication.throttled.rate": str(128 * 1024)})
    assert not throttle_marks(voters, "fo")
    b4.start()
    wait_until(lambda: throttle_marks(brokers, "fo") and in_progress(brokers, "fo"), 30,
               "the balancer's moves marked and under way")
    dead = controller_of(voters)
    dead.kill()
    time.sleep(1)
    assert in_progress([b for b in brokers if b is not dead], "fo"), "still moving"
    dead.start()
    wait_until(lambda: counts(brokers, "fo")[0] == Counter({1: 3, 2: 3, 3: 3, 4: 3}), 120,
               "three replicas on each of the four brokers")
    wait_until(lambda: not in_progress(brokers, "fo"), 60, "every move complete")
    wait_until(lambda: not throttle_marks(brokers, "fo"), 20,
               "the throttle marks cleared by the controller leading now")


def decommission(broker, node: int, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [str(corelog_bin()), "admin", "decommission", "--node", str(node),
         "--bootstrap", broker.bootstrap, *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_decommission_drains_a_broker_under_load_even_when_it_dies_half_way(broker_factory):
    """Eight two-replica partitions over four brokers under acks=all load: `corelog
    admin decommission --node 4 --wait` moves the replicas off broker 4 one wave at a
    time (two moves at once here); broker 4 is killed once the first ones are done.
    The rest still move (their other replicas lead and feed the new ones), the command
    reports broker 4 empty, nothing acknowledged is lost, and a new topic places
    nothing on broker 4."""
    brokers = broker_factory.cluster(
        voters=3, observers=1, balancer=True,
        extra_args=[*QUICK, "--partition-balancer-max-moves", "2"])
    voters, b4 = brokers[:3], by_id(brokers, 4)
    create(voters, "dc", 8, 2)
    on_4 = [p for p, (_, r, _) in partition_state(voters, "dc").items() if 4 in r]
    assert len(on_4) == 4, partition_state(voters, "dc")
    with Load(voters, "dc") as load:
        time.sleep(1.5)
        cli = decommission(voters[0], 4, "--wait", "--timeout-seconds", "120")
        wait_until(lambda: sum(4 in r for _, r, _ in partition_state(voters, "dc").values()) < 4,
                   60, "the first moves off broker 4 complete")
        b4.kill()
        out, _ = cli.communicate(timeout=150)
        assert cli.returncode == 0, out
        assert "broker 4 holds no replica" in out, out
        time.sleep(1)
    state = partition_state(voters, "dc")
    assert not any(4 in r for _, r, _ in state.values()), state
    assert all(len(r) == 2 and len(set(r)) == 2 for _, r, _ in state.values()), state
    assert not load.errors, load.errors[:3]
    values = consume_everything(voters, "dc", 8, len(load.acked))
    assert_exactly_once(load.acked, values, load.epoch_bumps)
    create(voters, "after", 6, 2)
    assert not any(4 in r for _, r, _ in partition_state(voters, "after").values())


def test_decommission_is_a_per_broker_boolean_and_can_be_cancelled(broker_factory):
    """The config is refused with a value that is not a boolean; the command sets it
    through any broker, and `--cancel` deletes it (the broker takes replicas again)."""
    brokers = broker_factory.cluster(voters=3, extra_args=FAST)
    client = admin(brokers)  # held: the future fails if its client is collected first

    def alter(name: str, value: str) -> None:
        r = ConfigResource(ResourceType.BROKER, name, incremental_configs=[
            ConfigEntry("corelog.decommission", value,
                        incremental_operation=AlterConfigOpType.SET)])
        client.incremental_alter_configs([r])[r].result(TIMEOUT)

    for name, value in [("2", "soon"), ("3", "")]:
        try:
            alter(name, value)
        except KafkaException as e:
            assert e.args[0].name() == "INVALID_CONFIG", e
        else:
            raise AssertionError(f"corelog.decommission={value} on '{name}' accepted")
    cli = decommission(brokers[0], 3)
    out, _ = cli.communicate(timeout=60)
    assert cli.returncode == 0 and "decommission of broker 3 started" in out, out
    r = ConfigResource(ResourceType.BROKER, "3")
    entries = client.describe_configs([r])[r].result(TIMEOUT)
    assert entries["corelog.decommission"].value == "true"
    cli = decommission(brokers[0], 3, "--cancel")
    out, _ = cli.communicate(timeout=60)
    assert cli.returncode == 0 and "cancelled" in out, out
    entries = client.describe_configs([r])[r].result(TIMEOUT)
    assert entries["corelog.decommission"].value == "false"
