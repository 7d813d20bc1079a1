"""A fenced broker costs the cluster nothing beyond its fencing: with one broker of three
paused (SIGSTOP) and fenced, the leaders of idle partitions it replicated must not
propose it back into their ISRs on their other follower's fetches (it stopped fetching
at the log end of an idle partition, so it looked caught up), and the controller writes
no entry for a proposal it refuses. Measured by the metadata log's high watermark
(DescribeQuorum): before, each refused proposal was a committed entry, about 1,200 a
second in a 3-broker cluster."""
from __future__ import annotations

import os
import signal
import time

import kwire
from launcher import wait_until
from test_replication import FAST, admin, by_id, controller_of, create, partition_state


def quorum_high_watermark(brokers) -> int:
    for b in brokers:
        try:
            leader, hw = kwire.describe_quorum(b.bootstrap)
        except (OSError, AssertionError, kwire.Closed, TimeoutError):
            continue
        if leader != -1:
            return hw
    raise AssertionError("no broker answers DescribeQuorum")


def proposals(brokers) -> tuple[float, float]:
    """ISR expansions the leaders on ``brokers`` proposed, and proposals refused."""
    return (sum(b.metric("corelog_isr_expand_proposals") for b in brokers),
            sum(b.metric("corelog_isr_proposals_refused") for b in brokers))


def test_a_fenced_broker_causes_no_metadata_writes(broker_factory):
    brokers = broker_factory.cluster(voters=3, extra_args=FAST)
    create(brokers, "idle", 12, 3)
    # Every partition idle (empty) and fully in sync.
    wait_until(lambda: all(sorted(isr) == [1, 2, 3]
                           for _, _, isr in partition_state(brokers, "idle").values()),
               30, "every ISR full")
    controller = controller_of(brokers)
    paused = next(b for b in brokers if b is not controller)
    alive = [b for b in brokers if b is not paused]
    os.kill(paused.proc.pid, signal.SIGSTOP)
    try:
        wait_until(lambda: paused.node_id not in admin(alive).list_topics(timeout=10).brokers,
                   20, f"broker {paused.node_id} fenced")
        wait_until(lambda: all(paused.node_id not in isr
                               for _, _, isr in partition_state(alive, "idle").values()),
                   20, "the fenced broker out of every ISR")
        time.sleep(1)  # what the fencing itself wrote is committed
        before = quorum_high_watermark(alive)
        proposed = proposals(alive)
        time.sleep(6)  # the live followers fetch every partition many times meanwhile
        after = quorum_high_watermark(alive)
        assert after == before, (
            f"{after - before} metadata log entries written while broker {paused.node_id} "
            f"was fenced and nothing else changed")
        # Not written, and not even proposed: the leaders know the broker is fenced.
        assert proposals(alive) == proposed, (
            f"ISR proposals (expand, refused) went from {proposed} to {proposals(alive)} "
            f"while broker {paused.node_id} was fenced")
    finally:
        os.kill(paused.proc.pid, signal.SIGCONT)
    # Back, it rejoins every ISR (its own fetches propose it).
    wait_until(lambda: all(sorted(isr) == [1, 2, 3]
                           for _, _, isr in partition_state(brokers, "idle").values()),
               40, "every ISR full again")
