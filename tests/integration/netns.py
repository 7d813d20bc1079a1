"""Brokers in network namespaces of their own, for tests that cut the network between
them (test_network_partition.py, test_txn_faults.py).

``Net(count)`` makes a bridge in the test's namespace and ``count`` namespaces, each with
a veth link to the bridge and a private address (10.231.N.i) that exists only for the
test; the test's own clients reach every namespace through the bridge (10.231.N.254).
``cut(i)`` takes namespace i's link down: it is cut off from everything, clients
included. ``isolate(i)`` cuts it off from the other namespaces only (blackhole routes on
both sides), so clients still reach a broker that no longer reaches its peers, as in a
partition between racks. ``NamespacedBroker`` is a launcher ``Broker`` run with ``ip netns
exec`` on the standard ports of its namespace's own stack; ``namespaced_cluster`` starts
``count`` of them as one cluster and removes everything afterwards.

Needs root (``ip netns``, veth, a bridge): ``can_make_namespaces()`` says whether this
process can make them."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from pathlib import Path

from launcher import Broker, BrokerPool, Cluster, stop_all

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
        self.isolated: set[int] = set()
        try:
            run("ip", "link", "add", self.bridge, "type", "bridge")
            run("ip", "addr", "add", f"{self.subnet}.254/24", "dev", self.bridge)
            run("ip", "link", "set", self.bridge, "up")
            for i, (ns, link) in enumerate(zip(self.namespaces, self.links), start=1):
                run("ip", "netns", "add", ns)
                run("ip", "link", "add", link, "type", "veth", "peer", "name", f"{link}p")
                run("ip", "link", "set", f"{link}p", "netns", ns)
                self.exec(i, "ip", "link", "set", f"{link}p", "name", "eth0")
                self.exec(i, "ip", "addr", "add", f"{self.subnet}.{i}/24", "dev", "eth0")
                self.exec(i, "ip", "link", "set", "eth0", "up")
                self.exec(i, "ip", "link", "set", "lo", "up")
                run("ip", "link", "set", link, "master", self.bridge)
                run("ip", "link", "set", link, "up")
        except BaseException:
            self.close()
            raise

    def exec(self, i: int, *argv: str) -> None:
        """Runs ``argv`` in namespace i."""
        run("ip", "netns", "exec", self.namespaces[i - 1], *argv)

    def host(self, i: int) -> str:
        return f"{self.subnet}.{i}"

    def cut(self, i: int) -> None:
        """Namespace i's link down: nothing reaches it and it reaches nothing."""
        run("ip", "link", "set", self.links[i - 1], "down")

    def heal(self, i: int) -> None:
        run("ip", "link", "set", self.links[i - 1], "up")

    def _peer_routes(self, i: int, verb: str) -> None:
        # A /32 blackhole route wins over the subnet's link route: packets between i and
        # each other namespace are dropped on both sides, and the bridge's address (the
        # test's clients) stays reachable.
        for j in range(1, len(self.namespaces) + 1):
            if j != i:
                self.exec(i, "ip", "route", verb, "blackhole", f"{self.host(j)}/32")
                self.exec(j, "ip", "route", verb, "blackhole", f"{self.host(i)}/32")

    def isolate(self, i: int) -> None:
        """Namespace i cut off from the other namespaces, not from the test's clients."""
        self._peer_routes(i, "add")
        self.isolated.add(i)

    def rejoin(self, i: int) -> None:
        self._peer_routes(i, "del")
        self.isolated.discard(i)

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
        # `ip netns exec` execs the broker: the child's pid is the broker's, so the
        # launcher's kill and the tests' SIGSTOP reach the broker itself.
        argv = super().argv()
        return ["ip", "netns", "exec", self.ns,
                *[a.replace("127.0.0.1", self.host) for a in argv]]


@contextlib.contextmanager
def namespaced_cluster(count: int, extra_args: list[str] | None = None,
                       pool: BrokerPool | None = None):
    """Yields (net, brokers): ``count`` brokers started as one cluster, broker i in
    namespace i (the voters at their namespaces' addresses); the brokers stopped and the
    namespaces removed at the end.

    With ``pool`` (conftest's ``broker_factory``) the brokers and their work directories
    are the pool's: a failed test's report shows their log tails, and ``CORELOG_IT_KEEP``
    keeps their directories as for any other test. Without it, the directories are
    removed (kept with ``CORELOG_IT_KEEP=all``)."""
    net = Net(count)
    brokers: list[NamespacedBroker] = []
    workdirs: list[Path] = []
    try:
        for i in range(1, count + 1):
            wd = Path(tempfile.mkdtemp(prefix=f"corelog-it-netns{i}-"))
            workdirs.append(wd)
            brokers.append(NamespacedBroker(wd, net.namespaces[i - 1], net.host(i), i))
        if pool is not None:
            pool.workdirs.extend(workdirs)
            pool.brokers.extend(brokers)
        Cluster(brokers, extra_args=extra_args).start()
        yield net, brokers
    finally:
        # Stopped before their namespaces go (a broker outliving its namespace would
        # keep it alive), whatever the pool does with them afterwards.
        stop_all(brokers)
        net.close()
        if pool is None:
            for wd in workdirs:
                if os.environ.get("CORELOG_IT_KEEP", "") == "all":
                    print(f"kept corelog workdir {wd}")
                else:
                    subprocess.run(["rm", "-rf", str(wd)])
