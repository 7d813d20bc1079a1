"""A network partition between brokers: three brokers, each in a network namespace of
its own on a bridge the test creates (private addresses that exist only for the test;
netns.py), and the partition leader's link cut while a producer inside its namespace goes
on writing to it at acks=all. The isolated leader cannot acknowledge anything: its
followers no longer fetch, and it cannot shrink the ISR without the controller. The
majority fences it and elects another leader, which acknowledges; once the link is back
the old leader follows, cuts what diverged, and every replica holds the same log.

Needs root (network namespaces, veth, a bridge); skipped otherwise."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest
from confluent_kafka import Producer

from launcher import wait_until
from netns import can_make_namespaces, namespaced_cluster
from test_replication import (FAST, assert_exactly_once, batches_on_disk, consume_everything,
                              create, partition_state)

# Writes one record every 10 ms at acks=all and logs each delivery: (value, acked, time).
PRODUCER = textwrap.dedent("""
    import json, sys, time
    from confluent_kafka import Producer
    bootstrap, topic, out = sys.argv[1:4]
    f = open(out, "w", buffering=1)
    def done(err, msg):
        f.write(json.dumps({"value": msg.value().decode(), "ok": err is None,
                            "error": str(err) if err else None, "at": time.time()}) + "\\n")
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "message.timeout.ms": 6000, "request.timeout.ms": 3000})
    i = 0
    while True:
        p.produce(topic, value=f"iso-{i}".encode(), on_delivery=done)
        i += 1
        p.poll(0.01)
""")


@pytest.fixture
def netns_cluster(broker_factory):
    if not can_make_namespaces():
        pytest.skip("network namespaces need root (ip netns, veth, bridge)")
    with namespaced_cluster(3, FAST, pool=broker_factory) as (net, brokers):
        yield net, brokers


def test_an_isolated_leader_acknowledges_nothing(netns_cluster, tmp_path):
    net, brokers = netns_cluster
    create(brokers, "iso", 1, 3, {"min.insync.replicas": "2"})
    leader_id = partition_state(brokers, "iso")[0][0]
    leader = brokers[leader_id - 1]
    others = [b for b in brokers if b is not leader]
    script = tmp_path / "producer.py"
    script.write_text(PRODUCER)
    deliveries = tmp_path / "deliveries.jsonl"
    inside = subprocess.Popen(["ip", "netns", "exec", leader.ns, sys.executable, str(script),
                               leader.bootstrap, "iso", str(deliveries)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: deliveries.exists() and deliveries.read_text().count('"ok": true') > 50,
                   30, "the producer inside the leader's namespace writes")
        net.cut(leader_id)
        cut_at = time.time()
        # The majority fences the isolated broker and elects an in-sync follower, which
        # takes acks=all writes.
        wait_until(lambda: partition_state(others, "iso")[0][0] not in (leader_id, -1), 30,
                   "a leader on the majority side")
        majority = Producer({"bootstrap.servers": ",".join(b.bootstrap for b in others),
                             "acks": "all", "enable.idempotence": True})
        for i in range(200):
            majority.produce("iso", value=f"maj-{i}".encode())
        assert majority.flush(30) == 0, "the majority acknowledges"
        # Long enough for every write sent to the isolated leader to time out there.
        time.sleep(max(0.0, cut_at + 12 - time.time()))
        healed_at = time.time()
        net.heal(leader_id)
        wait_until(lambda: sorted(partition_state(brokers, "iso")[0][2]) == [1, 2, 3], 60,
                   "the isolated broker back in the ISR")
        time.sleep(2)
    finally:
        inside.kill()
        inside.wait()

    events = [json.loads(line) for line in deliveries.read_text().splitlines() if line.strip()]
    during = [e for e in events if e["ok"] and cut_at + 0.5 < e["at"] < healed_at]
    assert not during, f"{len(during)} writes acknowledged while the leader was cut off: {during[:3]}"
    assert any(not e["ok"] for e in events), "writes to the isolated leader failed"
    acked = [e["value"].encode() for e in events if e["ok"]] + [f"maj-{i}".encode() for i in range(200)]
    assert_exactly_once(acked, consume_everything(brokers, "iso", 1, len(acked)))
    for b in brokers:
        b.stop()
    logs = [batches_on_disk(b.data_dir, "iso", 0) for b in brokers]
    assert logs[0] == logs[1] == logs[2], "every replica holds the same log"
