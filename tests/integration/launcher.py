"""The one launcher of corelog brokers and the one port allocator, for the integration
tests (conftest.py's fixtures), the benches (benches/*.py) and the fuzz seed capture
(fuzz/capture_seeds.py).

``Broker`` is one broker child process of the real binary (``target/release/corelog``
or ``$CORELOG_BIN``) on loopback ports from ``free_port()``, with its data directory and
log in a work directory; it can be started, killed, stopped and restarted on the same
ports and data. ``Cluster`` makes brokers one cluster (node ids, the controller quorum's
voters and observers), starts them together and tears them down at once; ``BrokerPool``
starts brokers and clusters of them for a test and tears them all down at once.

Outside pytest, put this directory on ``sys.path`` first::

    sys.path.insert(0, str(ROOT / "tests" / "integration"))
    from launcher import Broker, free_port

Environment: ``CORELOG_BIN``, the broker binary (a relative path is taken relative to
the repository root); ``CORELOG_IT_KEEP`` (``BrokerPool.close``): 1 keeps the work
directories of failed tests, ``all`` keeps every one.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BIN = "target/release/corelog"
HEALTH_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
LOG_TAIL_LINES = 80
# /health is on loopback: never route it through an http_proxy from the environment
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def corelog_bin() -> Path:
    p = Path(os.environ.get("CORELOG_BIN", DEFAULT_BIN))
    if not p.is_absolute():
        p = REPO_ROOT / p
    return p


def die_with_parent() -> None:
    """preexec_fn: SIGKILL the child if the process that started it dies (Linux prctl)."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


# Ports for brokers (and anything else that listens: proxies, Kafka, iperf3) come from
# below the kernel's ephemeral range (32768 and up by default), each handed out once per
# process: a port the kernel chose for a bind to port 0 could be chosen again for the next
# broker before the first one bound it, or be taken meanwhile as the source port of a
# client's connection (a broker then failed to start with "Address already in use").
# Each process starts at an offset set by its pid, so two running at once usually draw
# from different stretches of the range.
_PORT_FIRST, _PORT_SPAN = 20_000, 12_000
_next_port = itertools.count((os.getpid() % 120) * 100)


def free_port() -> int:
    """A loopback TCP port free now and not handed out before by this process."""
    while True:
        port = _PORT_FIRST + next(_next_port) % _PORT_SPAN
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


def free_ports(n: int) -> list[int]:
    return [free_port() for _ in range(n)]


class BrokerStartError(AssertionError):
    pass


class Broker:
    """A corelog broker child process.

    Attributes: ``port``, ``http_port``, ``controller_port``, ``bootstrap``
    ("127.0.0.1:PORT"), ``http`` ("127.0.0.1:HTTP_PORT"), ``data_dir`` (Path, default
    ``workdir/data``), ``log_path`` (Path, default ``workdir/broker.log``; appended to
    across starts), ``proc`` (Popen or None). ``shards=None`` leaves the shard count to
    the broker (one per CPU).
    """

    def __init__(self, workdir: Path, shards: int | None = 2,
                 extra_args: list[str] | None = None, name: str = "broker",
                 advertise: str | None = None, log_level: str = "info",
                 data_dir: Path | None = None, log_path: Path | None = None):
        self.name = name
        # What Metadata tells clients to connect to (a test's proxy in front, for one).
        self.advertise = advertise
        self.workdir = workdir
        self.data_dir = data_dir or workdir / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_path or workdir / "broker.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.port, self.http_port, self.controller_port = free_ports(3)
        self.shards = shards
        self.log_level = log_level
        self.extra_args = list(extra_args or [])
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.listeners_in_config = False
        # The broker's working directory; a test that runs it as a user would (relative
        # paths resolved against the directory it was started in) sets its own.
        self.cwd = REPO_ROOT
        # False leaves --data-dir out: the broker's default, `./data` in ``cwd``.
        self.pass_data_dir = True
        # The broker binary; ``None``: ``corelog_bin()`` (a rolling upgrade swaps it).
        self.binary: Path | None = None
        # Environment variables added to the test's own.
        self.env: dict[str, str] = {}

    # -- addresses ---------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def http(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def controller_address(self) -> str:
        """Where the other members reach this broker's controller port (its entry in
        ``--controller-voters``)."""
        return f"127.0.0.1:{self.controller_port}"

    def argv(self) -> list[str]:
        # Kafka's listener keys (among the extra arguments, or in a config file a
        # subclass writes) replace --listen/--advertise.
        kafka_listeners = self.listeners_in_config or "--listeners" in self.extra_args
        return [
            str(self.binary or corelog_bin()), "serve",
            *([] if kafka_listeners else ["--listen", self.bootstrap,
                                          "--advertise", self.advertise or self.bootstrap]),
            *(["--data-dir", str(self.data_dir)] if self.pass_data_dir else []),
            *(["--shards", str(self.shards)] if self.shards is not None else []),
            "--http", self.http,
            "--controller-listen", f"127.0.0.1:{self.controller_port}",
            "--log-level", self.log_level,
            *self.extra_args,
        ]

    def metric(self, name: str, **labels: str) -> float:
        """Series of /metrics whose name begins with ``name`` and that carry every label
        given (``path="kernel"``), summed (over shards)."""
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(f"http://{self.http}/metrics", timeout=5) as r:
            text = r.read().decode()
        wanted = [f'{k}="{v}"' for k, v in labels.items()]
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(name) and all(w in line for w in wanted))

    # -- lifecycle ----------------------------------------------------------
    def start(self) -> "Broker":
        self.launch()
        self.wait_healthy()
        return self

    def launch(self) -> "Broker":
        """Starts the process without waiting for it (cluster members wait for one
        another: start them all, then wait_healthy each)."""
        assert self.proc is None or self.proc.poll() is not None, "broker already running"
        binary = self.binary or corelog_bin()
        if not binary.exists():
            raise BrokerStartError(
                f"broker binary {binary} not found (build with `cargo build --release` "
                f"or set CORELOG_BIN)")
        self.starts += 1
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start #{self.starts}: {' '.join(self.argv())}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.argv(), cwd=str(self.cwd), stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, "RUST_BACKTRACE": os.environ.get("RUST_BACKTRACE", "1"), **self.env},
                preexec_fn=die_with_parent if sys.platform.startswith("linux") else None,
            )
        return self

    def health(self, timeout: float = 2.0) -> tuple[int, bytes] | None:
        """(status, body) of GET /health, or None if not reachable."""
        try:
            with _NO_PROXY.open(f"http://{self.http}/health", timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
        except (OSError, ValueError):
            return None

    def wait_healthy(self, timeout: float = HEALTH_TIMEOUT_S, poll_s: float = 0.1) -> None:
        """Until /health answers 200 "ok" (as /ready does: every shard has opened its
        partitions and listens); asked every ``poll_s``."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            rc = self.proc.poll()
            if rc is not None:
                raise BrokerStartError(
                    f"{self.name} exited with code {rc} before becoming healthy\n"
                    f"{self.log_tail()}")
            last = self.health(timeout=1.0)
            if last is not None and last[0] == 200 and last[1].strip() == b"ok":
                return
            time.sleep(poll_s)
        raise BrokerStartError(
            f"{self.name} not healthy after {timeout}s (last /health answer: {last!r})\n"
            f"{self.log_tail()}\n{self.diagnose()}")

    def diagnose(self) -> str:
        """Thread states / kernel stacks (and user stacks if gdb exists) of a stuck broker."""
        if not self.is_running():
            return "(not running)"
        pid = self.proc.pid
        out = [f"--- diagnostics for pid {pid} ---"]
        try:
            for tid in sorted(os.listdir(f"/proc/{pid}/task"), key=int):
                base = f"/proc/{pid}/task/{tid}"
                def read(name):
                    try:
                        with open(f"{base}/{name}") as f:
                            return f.read().strip()
                    except OSError:
                        return "?"
                state = read("stat").rsplit(")", 1)[-1].split()[:1]
                out.append(f"thread {tid} {read('comm')!r} state={state} wchan={read('wchan')}")
                stack = read("stack")
                if stack not in ("?", ""):
                    out.extend("    " + line for line in stack.splitlines()[:12])
        except OSError as e:
            out.append(f"(cannot read /proc: {e})")
        gdb = shutil.which("gdb")
        if gdb:
            try:
                r = subprocess.run([gdb, "-p", str(pid), "-batch", "-nx", "-ex", "thread apply all bt 30"],
                                   capture_output=True, text=True, timeout=60)
                out.append(r.stdout[-20000:])
            except (subprocess.TimeoutExpired, OSError) as e:
                out.append(f"(gdb failed: {e})")
        return "\n".join(out)

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def assert_alive(self) -> None:
        """Process still running and /health still answers 200."""
        assert self.is_running(), (
            f"{self.name} died (exit code {self.proc.returncode if self.proc else None})\n"
            f"{self.log_tail()}")
        h = self.health(timeout=5.0)
        assert h is not None and h[0] == 200, f"{self.name} /health answered {h!r}"

    def kill(self) -> int:
        """SIGKILL and wait; returns the (negative) exit status."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        return self.proc.wait(timeout=STOP_TIMEOUT_S)

    def stop(self) -> None:
        """SIGTERM, wait for a clean shutdown and assert exit code 0."""
        assert self.proc is not None
        assert self.proc.poll() is None, (
            f"{self.name} already exited with {self.proc.returncode}\n{self.log_tail()}")
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            diag = self.diagnose()
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(
                f"{self.name} did not exit within {STOP_TIMEOUT_S}s of SIGTERM\n{self.log_tail()}\n{diag}")
        assert rc == 0, f"{self.name} exited with {rc} after SIGTERM\n{self.log_tail()}"

    def restart(self) -> "Broker":
        """Start again on the same ports and data dir (after kill() or stop())."""
        if self.is_running():
            self.stop()
        return self.start()

    def teardown(self) -> None:
        self.begin_teardown()
        self.finish_teardown()

    def begin_teardown(self) -> None:
        """SIGTERM, without waiting (a stopped process is sent SIGCONT first)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)

    def finish_teardown(self, timeout: float = 10.0) -> None:
        """Waits for the exit begun by begin_teardown(), SIGKILL after ``timeout`` s."""
        if self.proc is not None:
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError as e:
            return f"(no log: {e})"
        tail = data.decode("utf-8", "replace").splitlines()[-lines:]
        return f"--- {self.log_path} (last {len(tail)} lines) ---\n" + "\n".join(tail)


def bootstrap(brokers) -> str:
    """``bootstrap.servers`` for the brokers of ``brokers`` that are running."""
    return ",".join(b.bootstrap for b in brokers if b.is_running())


def wait_until(pred, timeout: float, what, interval: float = 0.1):
    """``pred()``'s first true value, asked every ``interval`` s; an AssertionError naming
    ``what`` (a text, or a function that gives one) after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout}s waiting for {what() if callable(what) else what}")
        time.sleep(interval)


def controller_voters(brokers: list[Broker]) -> str:
    """``--controller-voters`` for these brokers (each with a ``node_id``)."""
    return ",".join(f"{b.node_id}@{b.controller_address}" for b in brokers)


def start_all(brokers: list[Broker], timeout: float = HEALTH_TIMEOUT_S) -> None:
    """Launches every broker, then waits until each is healthy (up to ``timeout`` s
    each): a cluster's member waits for a quorum, so all are started before any is waited
    for. Raises BrokerStartError (the caller tears down)."""
    for b in brokers:
        b.launch()
    for b in brokers:
        b.wait_healthy(timeout=timeout)


def stop_all(brokers: list[Broker], timeout: float = 10.0) -> None:
    """SIGTERM to every running broker at once, then waits for each (SIGKILL after
    ``timeout`` s). All at once: a cluster's brokers stopped one after another would each
    wait for a controller (controlled shutdown) once the quorum's voters are gone."""
    for b in brokers:
        b.begin_teardown()
    for b in brokers:
        b.finish_teardown(timeout=timeout)


class Cluster:
    """``brokers`` (made, not started) as one cluster: node ids 1, 2, ... in their order
    (``node_id``), the first ``voters`` (all by default) the controller quorum's voters,
    the rest observers. Each broker's arguments become ``--node-id``,
    ``--controller-voters``, the cluster's ``extra_args``, then its own extra arguments.
    ``quorum`` replaces the ``--controller-voters`` value ``controller_voters`` gives (for
    voters reached some other way, a proxy in front of each, say).

    ``start()`` launches brokers and waits until each is healthy; ``teardown()`` stops
    them all at once."""

    def __init__(self, brokers: list[Broker], voters: int | None = None,
                 extra_args: list[str] | None = None, quorum: str | None = None):
        self.brokers = list(brokers)
        for node_id, b in enumerate(self.brokers, start=1):
            b.node_id = node_id
        voters = len(self.brokers) if voters is None else voters
        self.quorum = quorum or controller_voters(self.brokers[:voters])
        for b in self.brokers:
            b.extra_args = ["--node-id", str(b.node_id), "--controller-voters", self.quorum,
                            *(extra_args or []), *b.extra_args]

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    def start(self, brokers: list[Broker] | None = None,
              timeout: float = HEALTH_TIMEOUT_S) -> "Cluster":
        """``start_all`` of ``brokers``, all of the cluster's by default."""
        start_all(self.brokers if brokers is None else brokers, timeout=timeout)
        return self

    def teardown(self, timeout: float = 10.0) -> None:
        stop_all(self.brokers, timeout=timeout)


class BrokerPool:
    """Starts brokers and tears all of them down in close()."""

    def __init__(self):
        self.brokers: list[Broker] = []
        self.workdirs: list[Path] = []
        self.failed = False

    def start(self, shards: int = 2, extra_args: list[str] | None = None, name: str | None = None,
              advertise: str | None = None, data_dir: Path | None = None) -> Broker:
        wd = Path(tempfile.mkdtemp(prefix="corelog-it-"))
        self.workdirs.append(wd)
        b = Broker(wd, shards=shards, extra_args=extra_args, name=name or f"broker{len(self.brokers)}",
                   advertise=advertise, data_dir=data_dir)
        self.brokers.append(b)
        b.start()
        return b

    __call__ = start

    def cluster(self, voters: int = 3, observers: int = 0, shards: int = 2,
                extra_args: list[str] | None = None, balancer: bool = False,
                held_back: int = 0) -> list[Broker]:
        """Brokers 1..voters+observers on loopback, the first ``voters`` the controller
        quorum's voters, the rest observers; all healthy (admitted) on return, but the
        last ``held_back`` ones, which are configured and not started (``start()`` them:
        a broker joining the cluster). The partition balancer is off unless ``balancer``:
        tests lay their partitions out on purpose."""
        brokers = []
        for node_id in range(1, voters + observers + 1):
            wd = Path(tempfile.mkdtemp(prefix=f"corelog-it-n{node_id}-"))
            self.workdirs.append(wd)
            brokers.append(Broker(wd, shards=shards, name=f"node{node_id}"))
        cluster = Cluster(brokers, voters=voters, extra_args=[
            *([] if balancer else ["--partition-balancer-enable", "false"]), *(extra_args or [])])
        self.brokers.extend(brokers)
        cluster.start(brokers[:len(brokers) - held_back])
        return brokers

    def close(self) -> None:
        stop_all(self.brokers)
        mode = os.environ.get("CORELOG_IT_KEEP", "")
        keep = mode == "all" or (mode == "1" and self.failed)
        for wd in self.workdirs:
            if keep:
                print(f"kept corelog workdir {wd}")
            else:
                shutil.rmtree(wd, ignore_errors=True)
