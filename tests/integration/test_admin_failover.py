"""Admin requests across the death of the active controller (SIGKILL), with admin
clients that live through it: librdkafka's, the Java AdminClient and kafka-python's
(`admin_failover.py`). Any broker takes admin requests and carries them to the active
controller; Metadata names the broker that answers as the one to send them to, so a
client keeps using a live broker, and a client whose broker died reconnects to another
that names itself. Before, Metadata named the Raft leader: clients kept sending to the
dead broker until their periodic metadata refresh (librdkafka: 5 minutes).

librdkafka and the Java client start from the broker that is killed (the worst case:
the broker they asked and were sent to is the one that dies). kafka-python caches the
controller id it was first told for the client's whole life and never asks again after
a connection failure, against Kafka as here; it asks a random broker it knows, so its
creates count only once it has cached a broker that stays up (`admin_failover.start`'s
`victim`), which before this change still sent it to the Raft leader."""
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
        "kafka-python": survivors[0].bootstrap,
    }, victim=victim.node_id)
    try:
        af.wait_first_successes(creators, 3, 60)
        killed_at = time.time()
        victim.kill()
        elected_at = af.wait_new_leader([b.bootstrap for b in survivors], leader, 20)
        af.wait_recovered(creators, killed_at, 60)
        time.sleep(3)  # a few creates more after recovery, which must all succeed
    finally:
        af.stop(creators)
    gaps = af.report(creators, killed_at, elected_at)
    print(f"new quorum leader {elected_at - killed_at:.2f} s after the kill; "
          f"first create after it succeeded (s after the election): {gaps}")
    for c, _ in creators:
        first = c.first_success_after(killed_at)
        assert first is not None, f"{c.client}: no create succeeded after the kill: {c.creates[-5:]}"
        assert first.end - elected_at < RECOVERY_S, (
            f"{c.client} recovered {first.end - elected_at:.1f} s after the election: "
            f"{c.failures_after(killed_at)[:5]}")
        assert not c.failures_after(first.end), (
            f"{c.client}: creates failed after it had recovered: {c.failures_after(first.end)}")
