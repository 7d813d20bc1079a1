"""Moving partitions and leaders between brokers: reassignment (Kafka's
AlterPartitionReassignments and ListPartitionReassignments, KIP-455) — the added replicas
fetch and join the ISR before the new replica set is committed, a leader being removed
hands over in that same change, a cancel restores the original replicas, a move survives
the active controller's death — and preferred leaders (ElectLeaders, and the active
controller's auto.leader.rebalance.enable). Real broker processes on loopback;
kafka-python's admin client drives the moves and elections, librdkafka produces and
consumes."""

from __future__ import annotations

import os
import signal
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaTopicPartition
from kafka.errors import KafkaConnectionError

from launcher import wait_until
from test_replication import (FAST, TIMEOUT, Load, admin, assert_exactly_once,
                              batches_on_disk, bootstrap, by_id, consume_everything, controller_of, create,
                              end_offset, partition_state)


def kafka_admin(brokers) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap(brokers), request_timeout_ms=30_000)


def with_admin(brokers, call):
    """`call(client)` with a fresh kafka-python admin client, again while a broker that
    just died is still in the metadata it learnt (its admin client gives up on the first
    connection refused instead of trying another broker)."""
    deadline = time.monotonic() + 20
    while True:
        client = kafka_admin(brokers)
        try:
            return call(client)
        except KafkaConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
        finally:
            client.close()


def in_progress(brokers, topic: str) -> dict[int, tuple[list[int], list[int], list[int]]]:
    """partition -> (replicas, adding, removing) of the moves in progress of `topic`."""
    listed = with_admin(brokers, lambda c: c.list_partition_reassignments())
    return {tp.partition: (list(r["replicas"]), list(r["adding_replicas"]),
                           list(r["removing_replicas"]))
            for tp, r in listed.items() if tp.topic == topic}


def reassign(brokers, topic: str, moves: dict[int, list[int] | None]) -> dict[int, str | None]:
    """Moves (a list of brokers) or cancels (None) partitions of `topic`: partition ->
    the name of its error class, None when accepted."""
    result = with_admin(brokers, lambda c: c.alter_partition_reassignments(
        {KafkaTopicPartition(topic, p): target for p, target in moves.items()}))
    return {tp.partition: (e.__name__ if e else None) for tp, e in result.items()}


def stop_until_fenced(broker, others) -> None:
    """SIGSTOPs `broker` and waits until the controller has fenced it (Metadata from
    `others` no longer lists it), so that no client still picks it to ask for metadata."""
    os.kill(broker.proc.pid, signal.SIGSTOP)
    wait_until(lambda: broker.node_id not in admin(others).list_topics(timeout=TIMEOUT).brokers,
               20, f"broker {broker.node_id} fenced")


def partition_dir(broker, topic: str, partition: int):
    return broker.data_dir / f"{topic}-{partition}"


def set_configs(brokers, resource_type, name: str, configs: dict[str, str | None]) -> None:
    """IncrementalAlterConfigs: SET each key with a value, DELETE each with None."""
    resource = ConfigResource(resource_type, name, incremental_configs=[
        ConfigEntry(k, v or "", incremental_operation=(
            AlterConfigOpType.SET if v is not None else AlterConfigOpType.DELETE))
        for k, v in configs.items()])
    client = admin(brokers)  # held: the future fails if its client is collected first
    client.incremental_alter_configs([resource])[resource].result(TIMEOUT)


def produce_bytes(brokers, topic: str, total: int, record: int = 1000) -> float:
    """Writes `total` bytes in records of `record` bytes with acks=all; the seconds it took
    until every record was acknowledged."""
    p = Producer({"bootstrap.servers": bootstrap(brokers), "acks": "all", "linger.ms": 5})
    started = time.monotonic()
    for i in range(total // record):
        while True:
            try:
                p.produce(topic, value=b"x" * record, key=str(i).encode())
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0, "every record acknowledged"
    return time.monotonic() - started


def test_moving_a_partition_from_1_2_to_2_3_under_acks_all_load_loses_nothing(broker_factory):
    """A replication-factor-2 partition led by broker 1 moves to brokers 2 and 3 while an
    idempotent acks=all producer writes to it: broker 3 fetches everything and joins the
    ISR, which completes the move; broker 1, removed, hands leadership to 2 in that same
    change and drops its copy. Every acknowledged record is read back once, and the two
    replicas' logs are identical."""
    brokers = broker_factory.cluster(voters=3, extra_args=FAST)
    create(brokers, "mv", 1, 2, assignment=[[1, 2]])
    b1, b2, b3 = (by_id(brokers, n) for n in (1, 2, 3))
    wait_until(lambda: partition_state(brokers, "mv")[0] == (1, [1, 2], [1, 2]), 20,
               "broker 1 leads, 2 in sync")
    with Load(brokers, "mv") as load:
        time.sleep(1.5)
        assert reassign(brokers, "mv", {0: [2, 3]}) == {0: None}
        wait_until(lambda: not in_progress(brokers, "mv"), 60, "the move completes")
        time.sleep(1.5)
    assert partition_state(brokers, "mv")[0] == (2, [2, 3], [2, 3])
    assert not load.errors, load.errors[:3]
    assert load.acked, "records acknowledged"
    values = consume_everything(brokers, "mv", 1, len(load.acked))
    assert_exactly_once(load.acked, values, load.epoch_bumps)
    wait_until(lambda: not partition_dir(b1, "mv", 0).exists(), 20,
               "the removed replica drops its copy")
    for b in brokers:
        b.stop()
    a, b = (batches_on_disk(x.data_dir, "mv", 0) for x in (b2, b3))
    assert end_offset(a) == end_offset(b) >= len(load.acked) and a == b


def test_a_cancelled_move_restores_the_original_replicas(broker_factory):
    """A move to a broker that cannot catch up (stopped) stays in progress and is listed
    with its adding and removing replicas; cancelled, the partition has its original
    replicas again, and the broker that was being added drops what it had fetched. A
    second cancel finds nothing to cancel."""
    # Brokers 1-3 vote; broker 4, outside the quorum, is the one stopped.
    brokers = broker_factory.cluster(voters=3, observers=1, extra_args=FAST)
    create(brokers, "cx", 1, 2, assignment=[[1, 2]])
    b4 = by_id(brokers, 4)
    voters = brokers[:3]
    with Load(voters, "cx") as load:
        time.sleep(1)
        stop_until_fenced(b4, voters)
        try:
            assert reassign(voters, "cx", {0: [1, 4]}) == {0: None}
            time.sleep(2)
            moving = in_progress(voters, "cx")
            assert moving == {0: ([1, 4, 2], [4], [2])}, moving
            assert reassign(voters, "cx", {0: None}) == {0: None}
            assert in_progress(voters, "cx") == {}
            leader, replicas, isr = partition_state(voters, "cx")[0]
            assert (replicas, isr) == ([1, 2], [1, 2]), (replicas, isr)
        finally:
            os.kill(b4.proc.pid, signal.SIGCONT)
        time.sleep(1)
    assert reassign(voters, "cx", {0: None}) == {0: "NoReassignmentInProgressError"}
    wait_until(lambda: not partition_dir(b4, "cx", 0).exists(), 20,
               "the replica that was being added drops its copy")
    assert not load.errors, load.errors[:3]
    values = consume_everything(voters, "cx", 1, len(load.acked))
    assert_exactly_once(load.acked, values, load.epoch_bumps)


def test_a_move_survives_the_active_controllers_death(broker_factory):
    """A move in progress is metadata: the active controller killed, the next one lists
    it and completes it once the added replica catches up."""
    brokers = broker_factory.cluster(voters=3, observers=2, extra_args=FAST)
    create(brokers, "cf", 1, 1, assignment=[[4]])
    b5 = by_id(brokers, 5)
    others = [b for b in brokers if b is not b5]
    with Load(others, "cf") as load:
        time.sleep(1)
        stop_until_fenced(b5, others)
        try:
            assert reassign(others, "cf", {0: [5]}) == {0: None}
            controller = controller_of(others)
            controller.kill()
            alive = [b for b in brokers if b.is_running() and b is not b5]

            def another_controller() -> bool:
                try:
                    return controller_of(alive) is not controller
                except StopIteration:  # Metadata still names the dead one
                    return False
            wait_until(another_controller, 30, "another controller")
            assert in_progress(alive, "cf") == {0: ([5, 4], [5], [4])}
        finally:
            os.kill(b5.proc.pid, signal.SIGCONT)
        wait_until(lambda: not in_progress(alive, "cf"), 60,
                   "the move completes under the new controller")
        time.sleep(1)
    assert partition_state(alive, "cf")[0] == (5, [5], [5])
    assert not load.errors, load.errors[:3]
    values = consume_everything(alive, "cf", 1, len(load.acked))
    assert_exactly_once(load.acked, values, load.epoch_bumps)


def test_reassignments_are_checked(broker_factory):
    """Kafka's errors, per partition: a target naming an unknown broker or one twice is
    INVALID_REPLICA_ASSIGNMENT, an unknown partition UNKNOWN_TOPIC_OR_PARTITION, a cancel
    of nothing NO_REASSIGNMENT_IN_PROGRESS; nothing moves."""
    brokers = broker_factory.cluster(voters=3, extra_args=FAST)
    create(brokers, "chk", 1, 2, assignment=[[1, 2]])
    for partition, target, error in ((0, [1, 9], "InvalidReplicationAssignmentError"),
                                     (0, [3, 3], "InvalidReplicationAssignmentError"),
                                     (0, None, "NoReassignmentInProgressError"),
                                     (7, [1, 2], "UnknownTopicOrPartitionError")):
        assert reassign(brokers, "chk", {partition: target}) == {partition: error}, target
    assert partition_state(brokers, "chk")[0][1:] == ([1, 2], [1, 2])
    assert in_progress(brokers, "chk") == {}


PREFERRED = {0: 1, 1: 2, 2: 3}


def leaders(brokers, topic: str) -> dict[int, int]:
    return {p: s[0] for p, s in partition_state(brokers, topic).items()}


def lead_elsewhere_after_a_restart_of_broker_1(brokers, topic: str) -> None:
    """Three partitions preferring brokers 1, 2, 3; broker 1 killed and restarted: once it
    is back in every ISR, partition 0 is still led by another broker."""
    create(brokers, topic, 3, 3, assignment=[[1, 2, 3], [2, 3, 1], [3, 1, 2]])
    wait_until(lambda: leaders(brokers, topic) == PREFERRED, 20, "preferred leaders")
    b1 = by_id(brokers, 1)
    b1.kill()
    others = [b for b in brokers if b is not b1]
    wait_until(lambda: leaders(others, topic)[0] in (2, 3), 20, "partition 0 fails over")
    b1.restart()
    wait_until(lambda: all(sorted(s[2]) == [1, 2, 3]
                           for s in partition_state(brokers, topic).values()), 30,
               "broker 1 back in every ISR")


def test_preferred_leaders_come_back_on_request(broker_factory):
    """With auto.leader.rebalance.enable off, a broker that returns leads nothing until
    asked: ElectLeaders (preferred, kafka-python) hands partition 0 back to broker 1; a
    second election is ELECTION_NOT_NEEDED everywhere."""
    brokers = broker_factory.cluster(
        voters=3, extra_args=FAST + ["--auto-leader-rebalance-enable", "false"])
    lead_elsewhere_after_a_restart_of_broker_1(brokers, "pl")
    time.sleep(2)
    assert leaders(brokers, "pl")[0] != 1, "nothing moved it back by itself"
    with_admin(brokers, lambda c: c.elect_leaders(0, {"pl": [0, 1, 2]}))
    assert leaders(brokers, "pl") == PREFERRED
    again = with_admin(brokers, lambda c: c.elect_leaders(0, {"pl": [0, 1, 2]},
                                                          raise_errors=False))
    codes = [p.error_code for t in again.replica_election_results for p in t.partition_result]
    assert codes == [84, 84, 84], codes  # ELECTION_NOT_NEEDED


def test_the_active_controller_hands_preferred_leaders_back(broker_factory):
    """auto.leader.rebalance.enable (the default), checked every second here: once broker
    1 is back in the ISR, the active controller gives it partition 0 back by itself."""
    brokers = broker_factory.cluster(
        voters=3, extra_args=FAST + ["--leader-imbalance-check-interval-seconds", "1"])
    lead_elsewhere_after_a_restart_of_broker_1(brokers, "ab")
    wait_until(lambda: leaders(brokers, "ab") == PREFERRED, 20,
               "preferred leaders restored by the controller")


def test_a_throttled_move_keeps_to_its_rate_and_in_sync_replicas_are_not_held(broker_factory):
    """Replication throttles (KIP-73): with leader and follower rates of 256 KiB/s and
    both throttled-replica lists naming the partition's replicas, an acks=all producer to
    the in-sync pair is not slowed (in-sync followers are never held back: 2 MB would take
    8 s at the rate), while a third replica added by a reassignment, outside the ISR until
    it catches up, copies the same 2 MB no faster than the rate allows. Deleting the rates
    and lists, as `kafka-reassign-partitions --verify` does, is accepted."""
    brokers = broker_factory.cluster(voters=3, extra_args=FAST)
    create(brokers, "th", 1, 2, assignment=[[1, 2]])
    wait_until(lambda: partition_state(brokers, "th")[0] == (1, [1, 2], [1, 2]), 20,
               "broker 1 leads, 2 in sync")
    rate = 256 * 1024
    for n in (1, 2, 3):
        set_configs(brokers, ResourceType.BROKER, str(n), {
            "leader.replication.throttled.rate": str(rate),
            "follower.replication.throttled.rate": str(rate)})
    set_configs(brokers, ResourceType.TOPIC, "th", {
        "leader.replication.throttled.replicas": "0:1,0:2",
        "follower.replication.throttled.replicas": "0:3"})
    took = produce_bytes(brokers, "th", 2 << 20)
    assert took < 4, f"an acks=all produce to in-sync replicas is not throttled: {took:.1f} s"
    assert partition_state(brokers, "th")[0] == (1, [1, 2], [1, 2])

    started = time.monotonic()
    assert reassign(brokers, "th", {0: [1, 2, 3]}) == {0: None}
    wait_until(lambda: not in_progress(brokers, "th"), 60, "the move completes")
    took = time.monotonic() - started
    print(f"throttled move of 2 MB at 256 KiB/s: {took:.1f} s")
    # 2 MB at 256 KiB/s is 8 s; the buckets start with one second's worth.
    assert took > 5, f"the added replica was held to the rate: {took:.1f} s"
    assert partition_state(brokers, "th")[0] == (1, [1, 2, 3], [1, 2, 3])

    for n in (1, 2, 3):
        set_configs(brokers, ResourceType.BROKER, str(n), {
            "leader.replication.throttled.rate": None,
            "follower.replication.throttled.rate": None,
            "replica.alter.log.dirs.io.max.bytes.per.second": None})
    set_configs(brokers, ResourceType.TOPIC, "th", {
        "leader.replication.throttled.replicas": None,
        "follower.replication.throttled.replicas": None})
    client = admin(brokers)
    resource = ConfigResource(ResourceType.BROKER, "1")
    entries = client.describe_configs([resource])[resource].result(TIMEOUT)
    assert entries["leader.replication.throttled.rate"].value == "9223372036854775807"
