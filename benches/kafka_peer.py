"""Apache Kafka as the macro harness's peer (`benches/harness.sh --peer kafka`).

The release pinned in tests/java/pom.xml (kafka_2.13, kafka-clients, kafka-tools from Maven
Central, cached in .cache/kafka/libs by `tools/kafka-cli/kafka-cli.sh --fetch`) runs as a
single-node KRaft broker on this machine: combined mode (process.roles=broker,controller,
node.id=1, a static one-voter controller quorum on a loopback port), the client listener on
a free 127.0.0.1 port, log.dirs in the harness's scratch directory (the same disk as
corelog's data), every replication factor 1, otherwise Kafka's defaults. It is formatted
(kafka-storage format --cluster-id) and started fresh for each workload, as corelog is,
with the JVM settings of Kafka's own bin/kafka-server-start.sh (1 GiB heap, G1 with a
20 ms pause goal).

Also here: topic creation that waits until every partition is really led (kafka-topics,
then kafka-get-offsets), Kafka's producer benchmark (kafka-producer-perf-test) for the
cross-check, and the page-cache eviction W5 needs so that Kafka's catch-up read comes from
the disk, as corelog's O_DIRECT read does.
"""
from __future__ import annotations

import base64
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The port allocator the integration tests use (tests/integration/launcher.py).
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from launcher import free_port  # noqa: E402

import metadata_wire  # noqa: E402  (beside this file)

KAFKA_CLI = ROOT / "tools" / "kafka-cli" / "kafka-cli.sh"
LIBS = Path(os.environ.get("KAFKA_CLI_LIBS", ROOT / ".cache" / "kafka" / "libs"))
POM = ROOT / "tests" / "java" / "pom.xml"

# What bin/kafka-server-start.sh and bin/kafka-run-class.sh give the broker's JVM
# (kafka-cli.sh adds -XX:+UseG1GC -Djava.awt.headless=true itself).
SERVER_HEAP = "-Xmx1G -Xms1G"
SERVER_JVM_OPTS = ("-server -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 "
                   "-XX:+ExplicitGCInvokesConcurrent -XX:MaxInlineLevel=15")

# Durability of each workload on each broker, as the results state it.
DURABILITY = {
    "corelog": {
        "acks=1": "default `--durability ack-all`: acks=1 answered once the O_DIRECT write has "
                  "completed (survives a broker crash, not a power loss); fdatasync within "
                  "`--flush-interval-ms` (1 s)",
        "acks=all": "default `--durability ack-all`: acks=all answered only after an fdatasync "
                    "that covers the batch (group commit)",
    },
    "kafka": {
        "acks=1": "Kafka's defaults: acks=1 answered once appended to the page cache (survives "
                  "a broker crash, not a power loss); no fsync by Kafka (flush.messages and "
                  "flush.ms unset), the kernel writes back",
        "acks=all": "Kafka's defaults: acks=all on one replica is answered once appended to the "
                    "page cache; no fsync before the ack",
        "acks=all flush": "topic `flush.messages=1`: every append is fsynced (segment and "
                          "indexes) before the Produce is answered, so acks=all waits for it",
    },
}


def log(msg: str) -> None:
    print(f"[harness {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def version() -> str:
    m = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", POM.read_text())
    return m.group(1) if m else "?"


def fetch() -> str:
    """Fetches (or finds cached) Kafka's jars; returns the release. Needs mvn once."""
    if shutil.which("java") is None:
        raise RuntimeError("--peer kafka needs java (17 or newer) on PATH")
    subprocess.run([str(KAFKA_CLI), "--fetch"], check=True)
    v = version()
    if not (LIBS / f"kafka_2.13-{v}.jar").exists():
        raise RuntimeError(f"{LIBS} has no kafka_2.13-{v}.jar (rm -rf it and fetch again)")
    return v


def cli(tool: str, *args: str, timeout: float = 180, check: bool = True,
        heap: str | None = None) -> subprocess.CompletedProcess:
    """Runs one of Kafka's tools through kafka-cli.sh; stdout and stderr captured."""
    env = dict(os.environ)
    if heap:
        env["KAFKA_HEAP_OPTS"] = heap
    p = subprocess.run([str(KAFKA_CLI), tool, *args], capture_output=True, text=True,
                       timeout=timeout, env=env, check=False)
    if check and p.returncode != 0:
        raise RuntimeError(f"{tool} {' '.join(args)} failed ({p.returncode}):\n"
                           f"{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return p


def _metadata_brokers(port: int) -> int:
    """Brokers in a Metadata v4 answer (no topics), -1 when nothing answers yet."""
    try:
        _took, resp = metadata_wire.call(port, 4, all_topics=False, timeout=2)
        return len(metadata_wire.parse(resp, 4).live)
    except (OSError, struct.error):
        return -1


def server_properties(port: int, controller_port: int, data: Path,
                      extra: dict[str, str] | None = None, ssl_port: int | None = None,
                      keystore: Path | None = None) -> dict[str, str]:
    """Kafka's settings for one KRaft broker; with `ssl_port`, an SSL listener beside the
    plaintext one, its key and certificate in one PEM file (`keystore`)."""
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(data),
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
    }
    if ssl_port is not None:
        props["listeners"] += f",SSL://127.0.0.1:{ssl_port}"
        props["advertised.listeners"] += f",SSL://127.0.0.1:{ssl_port}"
        props["listener.security.protocol.map"] += ",SSL:SSL"
        props["ssl.keystore.type"] = "PEM"
        props["ssl.keystore.location"] = str(keystore)
    props.update(extra or {})
    return props


class KafkaBroker:
    """A fresh single-node KRaft Kafka in `work`; the same surface as harness.Broker
    (bootstrap, proc, stop) plus topic creation and page-cache eviction."""

    kind = "kafka"

    def __init__(self, work: Path, heap: str = SERVER_HEAP, extra: dict[str, str] | None = None,
                 log_path: Path | None = None, tls=None, client_args: list[str] | None = None):
        """`tls`: a certificate (tests/integration/certs.py's Issued) for an SSL listener,
        which the load then uses with `client_args`; set-up stays on PLAINTEXT."""
        self.port, self.controller_port = free_port(), free_port()
        self.ssl_port = free_port() if tls else None
        self._client_args = list(client_args or [])
        self.dir = work / f"kafka-{self.port}"
        self.data = self.dir / "data"
        self.dir.mkdir(parents=True)
        self.props = server_properties(self.port, self.controller_port, self.data, extra,
                                       self.ssl_port, tls.chain if tls else None)
        conf = self.dir / "server.properties"
        conf.write_text("".join(f"{k}={v}\n" for k, v in self.props.items()))
        cluster_id = "-"
        while cluster_id.startswith("-"):  # not to be read as an option
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        cli("kafka-storage", "format", "--cluster-id", cluster_id, "--config", str(conf),
            timeout=120)
        # Kafka's own log (warnings and errors: tools/kafka-cli/log4j2.properties).
        self.log = open(log_path or work / f"kafka-{self.port}.log", "w")
        env = dict(os.environ, KAFKA_HEAP_OPTS=heap,
                   KAFKA_OPTS=(SERVER_JVM_OPTS + " " + os.environ.get("KAFKA_OPTS", "")).strip())
        started = time.time()
        # kafka-cli.sh execs java, so this pid is the broker JVM's.
        self.proc = subprocess.Popen([str(KAFKA_CLI), "kafka-server-start", str(conf)],
                                     stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = started + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Kafka exited ({self.proc.returncode}) while starting; "
                                   f"see {self.log.name}")
            if _metadata_brokers(self.port) >= 1:
                self.start_s = round(time.time() - started, 1)
                return
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("Kafka did not answer Metadata with itself within 120 s")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def load_bootstrap(self) -> str:
        return f"127.0.0.1:{self.ssl_port}" if self.ssl_port else self.bootstrap

    def client_args(self) -> list[str]:
        return self._client_args

    def create_topic(self, topic: str, partitions: int, configs: dict[str, str] | None = None) -> None:
        create_topic(self.bootstrap, topic, partitions, configs)

    def evict_page_cache(self) -> int:
        """Writes back and drops from the page cache every file of Kafka's log dirs
        (fsync, then POSIX_FADV_DONTNEED); returns the bytes they occupy on disk (the
        preallocated index files are sparse). Only these files."""
        total = 0
        for path in self.data.rglob("*"):
            if not path.is_file():
                continue
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                total += os.fstat(fd).st_blocks * 512
            except OSError:
                pass
            finally:
                os.close(fd)
        return total

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(90)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class KafkaNode:
    """One broker of a KafkaCluster (combined KRaft mode): formatted once, then launched,
    killed, stopped and launched again on the same data, as launcher.Broker is (port,
    proc, name, launch, kill, stop, wait_healthy)."""

    def __init__(self, work: Path, node_id: int, port: int, controller_port: int,
                 voters: str, cluster_id: str, n: int, heap: str, extra: dict[str, str]):
        self.node_id, self.port, self.name, self.heap = node_id, port, f"kafka-{node_id}", heap
        self.dir = work / self.name
        self.dir.mkdir(parents=True)
        props = server_properties(port, controller_port, self.dir / "data", {
            "node.id": str(node_id), "controller.quorum.voters": voters,
            "offsets.topic.replication.factor": str(n),
            "default.replication.factor": str(n), "min.insync.replicas": str(min(2, n)),
            **extra})
        self.conf = self.dir / "server.properties"
        self.conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        cli("kafka-storage", "format", "--cluster-id", cluster_id, "--config", str(self.conf),
            timeout=120)
        self.log_path = work / f"{self.name}.log"
        self.proc: subprocess.Popen | None = None
        self._log = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def launch(self) -> None:
        if self._log is not None:
            self._log.close()  # the last run's, when it exited without stop()
        self._log = open(self.log_path, "a")
        env = dict(os.environ, KAFKA_HEAP_OPTS=self.heap, KAFKA_OPTS=SERVER_JVM_OPTS)
        # kafka-cli.sh execs java, so this pid is the broker JVM's.
        self.proc = subprocess.Popen([str(KAFKA_CLI), "kafka-server-start", str(self.conf)],
                                     stdout=self._log, stderr=subprocess.STDOUT, env=env)

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_healthy(self, timeout: float = 180) -> None:
        """Until this broker answers Metadata with at least itself."""
        deadline = time.time() + timeout
        while _metadata_brokers(self.port) < 1:
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"{self.name} did not come up; see {self.log_path}")
            time.sleep(0.2)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self._log.close()

    def stop(self, timeout: float = 90) -> None:
        """SIGTERM (Kafka's controlled shutdown), waited for; SIGKILL after `timeout`."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


class KafkaCluster:
    """`n` Apache Kafka brokers in combined KRaft mode on loopback, node ids 1..n, all
    voters; min.insync.replicas 2 (1 alone) and every internal topic at RF n. `extra`:
    more server settings; data and logs in `work`."""

    def __init__(self, work: Path, n: int = 3, heap: str = SERVER_HEAP,
                 extra: dict[str, str] | None = None):
        fetch()
        ports = [(free_port(), free_port()) for _ in range(n)]
        voters = ",".join(f"{i + 1}@127.0.0.1:{c}" for i, (_, c) in enumerate(ports))
        cluster_id = "-"
        while cluster_id.startswith("-"):  # not to be read as an option
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        self.nodes = [KafkaNode(work, i + 1, port, controller, voters, cluster_id, n, heap,
                                extra or {}) for i, (port, controller) in enumerate(ports)]
        for node in self.nodes:
            node.launch()
        deadline = time.time() + 180
        while _metadata_brokers(self.nodes[0].port) < n:
            if time.time() > deadline or any(x.proc.poll() is not None for x in self.nodes):
                self.stop()
                raise RuntimeError("the Kafka cluster did not come up")
            time.sleep(0.5)

    @property
    def bootstraps(self) -> list[str]:
        return [node.bootstrap for node in self.nodes]

    @property
    def bootstrap(self) -> str:
        return ",".join(self.bootstraps)

    @property
    def procs(self) -> list[subprocess.Popen]:
        """The brokers' processes, by node id (1 first)."""
        return [node.proc for node in self.nodes]

    def stop(self) -> None:
        for node in self.nodes:
            if node.proc.poll() is None:
                node.proc.send_signal(signal.SIGTERM)
        for node in self.nodes:
            node.stop()
            shutil.rmtree(node.dir, ignore_errors=True)
        # Kafka leaves its writes to the kernel's writeback: flushed here, so that they do
        # not land in the next run's measurement on the same disk.
        os.sync()


def create_topic(bootstrap: str, topic: str, partitions: int,
                 configs: dict[str, str] | None = None) -> None:
    """Creates the topic (kafka-topics, any broker) and returns once every partition
    answers ListOffsets. Kafka lists a partition's leader in Metadata before the partition
    has its log (1,000 partitions take seconds); a Produce in that window is
    NOT_LEADER_OR_FOLLOWER, which corelog-load counts as an error and does not retry."""
    args = ["--bootstrap-server", bootstrap, "--create", "--if-not-exists",
            "--topic", topic, "--partitions", str(partitions), "--replication-factor", "1"]
    for k, v in (configs or {}).items():
        args += ["--config", f"{k}={v}"]
    cli("kafka-topics", *args)
    wait_partitions(bootstrap, topic, partitions)


def wait_partitions(bootstrap: str, topic: str, partitions: int, timeout: float = 120) -> None:
    """Waits until every partition of `topic` answers ListOffsets (kafka-get-offsets: the
    admin client retries a partition whose leader is not ready yet)."""
    deadline = time.time() + timeout
    last = ""
    while time.time() < deadline:
        p = cli("kafka-get-offsets", "--bootstrap-server", bootstrap, "--topic", topic,
                "--time", "-1", check=False)
        seen = {line.rsplit(":", 2)[1] for line in p.stdout.splitlines()
                if line.startswith(topic + ":") and line.count(":") >= 2}
        if p.returncode == 0 and len(seen) >= partitions:
            return
        last = (p.stdout + p.stderr)[-1000:]
        time.sleep(0.5)
    raise RuntimeError(f"{topic}: not every partition of {partitions} answered ListOffsets "
                       f"within {timeout} s:\n{last}")


PERF_LINE = re.compile(
    r"(?P<n>\d+) (?P<steady>steady state )?records sent, (?P<rps>[\d.]+) records/sec \((?P<mibps>[\d.]+) MB/sec\), "
    r"(?P<avg>[\d.]+) ms avg latency, (?P<max>[\d.]+) ms max latency, (?P<p50>\d+) ms 50th, "
    r"(?P<p95>\d+) ms 95th, (?P<p99>\d+) ms 99th, (?P<p999>\d+) ms 99.9th")


def producer_perf_test(bootstrap: str, topic: str, records: int, size: int,
                       props: dict[str, str], log_path: Path, throughput: int = -1,
                       warmup: int = 0) -> dict:
    """kafka-producer-perf-test, as fast as it goes (or at `throughput` records/s); its
    summary line parsed, with `warmup` records its steady-state line (the records after
    the first `warmup`, whose latencies include the JVM's warm-up). Its "MB/sec" is MiB/s;
    mb_per_s here is 10^6 bytes, as corelog-load reports."""
    args = ["--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(records),
            "--record-size", str(size), "--throughput", str(throughput),
            *(["--warmup-records", str(warmup)] if warmup else []),
            "--command-property", *[f"{k}={v}" for k, v in props.items()]]
    p = cli("kafka-producer-perf-test", *args, timeout=900, check=False)
    log_path.write_text(f"kafka-producer-perf-test {' '.join(args)}\n{p.stdout}{p.stderr}")
    if p.returncode != 0:
        raise RuntimeError(f"kafka-producer-perf-test failed ({p.returncode}); see {log_path}")
    found = [m for m in PERF_LINE.finditer(p.stdout)
             if int(m.group("n")) == records - warmup and bool(m.group("steady")) == bool(warmup)]
    if not found:
        raise RuntimeError(f"no summary line in kafka-producer-perf-test's output; see {log_path}")
    m = found[-1]
    rps = float(m.group("rps"))
    return {
        "records": records, "warmup_records": warmup, "record_bytes": size, "props": props,
        "msgs_per_s": round(rps), "mb_per_s": round(rps * size / 1e6, 1),
        "latency_ms": {"mean": float(m.group("avg")), "p50": float(m.group("p50")),
                       "p95": float(m.group("p95")), "p99": float(m.group("p99")),
                       "p999": float(m.group("p999")), "max": float(m.group("max"))},
    }


E2E_AVG = re.compile(r"Avg latency: (?P<avg>[\d.]+) ms")
E2E_PCT = re.compile(r"Percentiles: 50th = (?P<p50>\d+), 99th = (?P<p99>\d+), 99.9th = (?P<p999>\d+)")


def e2e_latency(bootstrap: str, topic: str, records: int, size: int, acks: str,
                log_path: Path) -> dict:
    """kafka-e2e-latency: one record at a time, produced (and its send waited for) then
    consumed, the round trip timed; its average and percentiles (whole ms) parsed."""
    args = ["--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(records),
            "--producer-acks", acks, "--record-size", str(size)]
    p = cli("kafka-e2e-latency", *args, timeout=900, check=False)
    log_path.write_text(f"kafka-e2e-latency {' '.join(args)}\n{p.stdout}{p.stderr}")
    avg, pct = E2E_AVG.search(p.stdout), E2E_PCT.search(p.stdout)
    if p.returncode != 0 or not avg or not pct:
        raise RuntimeError(f"kafka-e2e-latency failed ({p.returncode}); see {log_path}")
    return {"records": records, "record_bytes": size, "acks": acks,
            "latency_ms": {"mean": float(avg.group("avg")), "p50": float(pct.group("p50")),
                           "p99": float(pct.group("p99")), "p999": float(pct.group("p999"))}}
