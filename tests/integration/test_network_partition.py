"""A network partition between brokers: three brokers, each in a network namespace of
its own on a bridge the test creates (private addresses that exist only for the test),
and the partition leader's link cut while a producer inside its namespace goes on
writing to it at acks=all. The isolated leader cannot acknowledge anything: its
followers no longer fetch, and it cannot shrink the ISR without the controller. The
majority fences it and elects another leader, which acknowledges; once the link is back
the old leader follows, cuts what diverged, and every replica holds the same log.

Needs root (network namespaces, veth, a bridge); skipped otherwise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from launcher import Broker, Cluster, stop_all
from launcher import wait_until
from test_replication import (FAST, assert_exactly_once, batches_on_disk, consume_everything,
                              create, partition_state)

KAFKA, CONTROLLER, HTTP = 9092, 9093, 9644


def run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True)


def can_make_namespaces() -> bool:
    if os.geteuid() != 0:
        return False
    name = f"clprobe{os.getpid() % 100000}"
    try:
        run("ip", "netns", "add", name)
        run("ip", "netns", "del", name)
        return True
    except (OSError, subprocess.CalledProcessError):
        return False


class Net:
    """A bridge in the test's namespace and one namespace per broker, linked to it."""

    def __init__(self, count: int):
        tag = os.getpid() % 100000
        self.subnet = f"10.231.{os.getpid() % 250}"
        self.bridge = f"clb{tag}"
        self.links = [f"clv{tag}x{i}" for i in range(1, count + 1)]
        self.namespaces = [f"cl{tag}n{i}" for i in range(1, count + 1)]
        run("ip", "link", "add", self.bridge, "type", "bridge")
        run("ip", "addr", "add", f"{self.subnet}.254/24", "dev", self.bridge)
        run("ip", "link", "set", self.bridge, "up")
        for i, (ns, link) in enumerate(zip(self.namespaces, self.links), start=1):
            run("ip", "netns", "add", ns)
            run("ip", "link", "add", link, "type", "veth", "peer", "name", f"{link}p")
            run("ip", "link", "set", f"{link}p", "netns", ns)
            run("ip", "netns", "exec", ns, "ip", "link", "set", f"{link}p", "name", "eth0")
            run("ip", "netns", "exec", ns, "ip", "addr", "add", f"{self.subnet}.{i}/24", "dev", "eth0")
            run("ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up")
            run("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
            run("ip", "link", "set", link, "master", self.bridge)
            run("ip", "link", "set", link, "up")

    def host(self, i: int) -> str:
        return f"{self.subnet}.{i}"

    def cut(self, i: int) -> None:
        run("ip", "link", "set", self.links[i - 1], "down")

    def heal(self, i: int) -> None:
        run("ip", "link", "set", self.links[i - 1], "up")

    def close(self) -> None:
        for ns in self.namespaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)


class NamespacedBroker(Broker):
    """A broker in namespace `ns` at `host`, on the standard ports of its own stack."""

    def __init__(self, workdir: Path, ns: str, host: str, node_id: int):
        super().__init__(workdir, shards=2, name=f"node{node_id}")
        self.ns, self.host = ns, host
        self.port, self.http_port, self.controller_port = KAFKA, HTTP, CONTROLLER

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{KAFKA}"

    @property
    def http(self) -> str:
        return f"{self.host}:{HTTP}"

    @property
    def controller_address(self) -> str:
        return f"{self.host}:{CONTROLLER}"

    def argv(self) -> list[str]:
        argv = super().argv()
        return ["ip", "netns", "exec", self.ns,
                *[a.replace("127.0.0.1", self.host) for a in argv]]


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
def netns_cluster():
    if not can_make_namespaces():
        pytest.skip("network namespaces need root (ip netns, veth, bridge)")
    net = Net(3)
    brokers: list[NamespacedBroker] = []
    workdirs = []
    try:
        for i in (1, 2, 3):
            wd = Path(tempfile.mkdtemp(prefix=f"corelog-it-netns{i}-"))
            workdirs.append(wd)
            brokers.append(NamespacedBroker(wd, net.namespaces[i - 1], net.host(i), i))
        # The voters at their namespaces' addresses (NamespacedBroker.controller_address).
        Cluster(brokers, extra_args=FAST).start()
        yield net, brokers
    finally:
        stop_all(brokers)
        net.close()
        for wd in workdirs:
            subprocess.run(["rm", "-rf", str(wd)])


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
