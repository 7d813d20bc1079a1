"""Admin requests across the death of the active controller (SIGKILL), with admin
clients that live through it: librdkafka's, the Java AdminClient and two of
kafka-python's (`admin_failover.py`). Any broker takes admin requests and carries them
to the active controller; Metadata names the broker that answers as the one to send them
to, so a client keeps using a live broker, and a client whose broker died reconnects to
another that names itself. Before, Metadata named the Raft leader: clients kept sending
to the dead broker until their periodic metadata refresh (librdkafka: 5 minutes).

librdkafka and the Java client start from the broker that is killed (the worst case:
the broker they asked and were sent to is the one that dies); each must create topics
again within RECOVERY_S of the new leader's election, without being recreated.

kafka-python keeps the controller id of its first Metadata answer for the client's life
and asks again only when a response says NOT_CONTROLLER, never after a connection
failure (`KafkaAdminClient._send_request_to_controller`). Its client bootstrapped from a
survivor, whose cached controller is not the broker killed, must recover as the others
do. Its client bootstrapped from the broker killed, whose cached controller is that
broker, goes on sending every CreateTopics to the dead node (connection errors, then
UnknownBrokerIdError once Metadata no longer lists it) and never succeeds; the same
happens against Apache Kafka (`benches/admin_against_kafka.py`), and no broker answer can
change it, since the client sends nothing controller-bound to another broker. This test
holds that measured behaviour: if a kafka-python release re-resolves the controller after
a connection failure, the assertion on it fails and should become the recovery one."""
from __future__ import annotations

import shutil
import time

import pytest

import admin_failover as af
import kwire

FAST = ["--broker-session-timeout-ms", "3000", "--broker-heartbeat-interval-ms", "500",
        "--group-initial-rebalance-delay-ms", "0"]
# After the new leader is elected, each client's creates succeed again within this.
RECOVERY_S = 5.0
# How long after the election the clients are watched: past the session timeout (3 s
# here), after which the dead broker is fenced and no longer listed in Metadata.
WATCH_S = 12.0
RECOVERING = {"librdkafka", "java", "kafka-python-survivor"}
# What kafka-python's client that cached the dead broker as its controller gets from
# sending to it: the connection lost or refused, the node in reconnect backoff, then the
# node unknown once Metadata no longer lists it.
DEAD_NODE_ERRORS = {"KafkaConnectionError", "NodeNotReadyError", "UnknownBrokerIdError",
                    "KafkaTimeoutError", "RequestTimedOutError"}


@pytest.mark.skipif(shutil.which("java") is None or not af.LIBS.is_dir(),
                    reason="needs Java and Kafka's jars (test.sh fetches them)")
def test_admin_clients_survive_the_active_controllers_death(broker_factory):
    brokers = broker_factory.cluster(voters=3, extra_args=FAST)
    leader = kwire.describe_quorum_leader(brokers[0].bootstrap)
    victim = next(b for b in brokers if b.node_id == leader)
    survivors = [b for b in brokers if b is not victim]
    creators = af.start({
        "librdkafka": victim.bootstrap,
        "java": victim.bootstrap,
        "kafka-python-survivor": survivors[0].bootstrap,
        "kafka-python-killed": victim.bootstrap,
    }, victim=victim.node_id)
    try:
        af.wait_first_successes(creators, 3, 60)
        killed_at = time.time()
        victim.kill()
        elected_at = af.wait_new_leader([b.bootstrap for b in survivors], leader, 20)
        af.wait_recovered(creators, killed_at, 60, RECOVERING)
        # A few creates more after recovery, which must all succeed, and the watch.
        time.sleep(max(3.0, elected_at + WATCH_S - time.time()))
    finally:
        af.stop(creators)
    gaps = af.report(creators, killed_at, elected_at)
    details = af.details(creators, killed_at, elected_at)
    print(f"new quorum leader {elected_at - killed_at:.2f} s after the kill; "
          f"first create after it succeeded (s after the election): {gaps}; {details}")
    for c, _ in creators:
        first = c.first_success_after(killed_at)
        if c.client not in RECOVERING:
            continue
        assert first is not None, f"{c.client}: no create succeeded after the kill: {c.creates[-5:]}"
        assert first.end - elected_at < RECOVERY_S, (
            f"{c.client} recovered {first.end - elected_at:.1f} s after the election: "
            f"{c.failures_after(killed_at)[:5]}")
        assert not c.failures_after(first.end), (
            f"{c.client}: creates failed after it had recovered: {c.failures_after(first.end)}")
    (killed,) = [c for c, _ in creators if c.client == "kafka-python-killed"]
    d = details["kafka-python-killed"]
    assert killed.first_success_after(killed_at) is None, (
        "kafka-python's client whose cached controller died created a topic again: "
        f"kafka-python now re-resolves the controller; assert its recovery instead: {d}")
    assert killed.cached_controller == victim.node_id, d
    assert d["watched_until_s_after_election"] >= WATCH_S - 2, d
    assert set(d["errors_after_kill"]) <= DEAD_NODE_ERRORS, d
