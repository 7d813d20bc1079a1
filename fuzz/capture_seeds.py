#!/usr/bin/env python3
"""Seed corpora for the fuzz targets, from what real clients send and what the broker
writes: one corelog broker on loopback behind a proxy that saves every request frame
clients send it (librdkafka through confluent-kafka, with every codec, producers,
consumer groups and admin calls; kafka-python likewise), then the files the broker wrote
(record batches from its segments, producer snapshots, leader-epoch checkpoints, offset
and time indexes). Then a cluster of three voters and an observer, each voter's
controller port behind a proxy that saves the controller-port frames both ways (requests
as `Envelope<Request>`, responses), driven by admin calls, idempotent producers and a
voter killed and restarted and the observer started behind the snapshots, and the metadata log and snapshot files
its nodes wrote.

    python3 fuzz/capture_seeds.py              # after cargo build --release
    python3 fuzz/capture_seeds.py --cluster    # the cluster's seeds only

Writes fuzz/corpus/<target>/<sha1 of the content>; an existing file is kept, so a rerun
only adds. Frames over 64 KiB are left out (libFuzzer's inputs stay small)."""
from __future__ import annotations

import hashlib
import shutil
import socket
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The broker launcher and the RecordBatch layout the integration tests use
# (tests/integration/launcher.py, kwire.py).
sys.path.insert(0, str(ROOT / "tests" / "integration"))
import kwire  # noqa: E402
import launcher  # noqa: E402

BIN = launcher.corelog_bin()
CORPUS = ROOT / "fuzz" / "corpus"
FRAME_MAX = 64 << 10
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def save(target: str, data: bytes) -> bool:
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    path = d / hashlib.sha1(data).hexdigest()
    if path.exists():
        return False
    path.write_bytes(data)
    return True


def listen_loopback() -> socket.socket:
    """A listening socket for a recording proxy, on a loopback port from
    launcher.free_port() (not one the kernel picks for port 0: see its comment)."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", launcher.free_port()))
    listener.listen(64)
    return listener


def read_exact(s: socket.socket, n: int) -> bytes | None:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            return None
        out += chunk
    return out


def relay_frames(src: socket.socket, dst: socket.socket, size_format: str, on_frame) -> None:
    """Forwards size-prefixed frames from ``src`` to ``dst`` (the size packed as
    ``size_format``), handing each frame, without its size, to ``on_frame`` first; closes
    both sockets when either side ends."""
    try:
        while True:
            size = read_exact(src, 4)
            if size is None:
                break
            (n,) = struct.unpack(size_format, size)
            frame = read_exact(src, n)
            if frame is None:
                break
            on_frame(frame)
            dst.sendall(size + frame)
    except OSError:
        pass
    finally:
        src.close()
        dst.close()


class Proxy:
    """Forwards 127.0.0.1:port to the broker, saving each request frame (without its
    size prefix) clients send."""

    def __init__(self, upstream: int):
        self.upstream = upstream
        self.listener = listen_loopback()
        self.port = self.listener.getsockname()[1]
        self.frames = 0
        self.lock = threading.Lock()
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream))
            threading.Thread(target=self.requests, args=(client, server), daemon=True).start()
            threading.Thread(target=self.pump, args=(server, client), daemon=True).start()

    def requests(self, client: socket.socket, server: socket.socket) -> None:
        relay_frames(client, server, ">i", self.save_request)

    def save_request(self, frame: bytes) -> None:
        if len(frame) <= FRAME_MAX and save("request", frame):
            with self.lock:
                self.frames += 1

    @staticmethod
    def pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                chunk = src.recv(1 << 16)
                if not chunk:
                    break
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            dst.close()


def confluent_clients(bootstrap: str) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,
                                       ConfigResource, NewPartitions, NewTopic, ResourceType)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic(f"seed-{c}", num_partitions=2, replication_factor=1) for c in CODECS]
    topics.append(NewTopic("seed-compact", 1, 1, config={"cleanup.policy": "compact"}))
    for f in admin.create_topics(topics).values():
        f.result(30)
    for codec in CODECS:
        p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec,
                      "enable.idempotence": True, "linger.ms": 5})
        for i in range(300):
            p.produce(f"seed-{codec}", key=f"k{i % 17}".encode(),
                      value=(b"v" * (i % 200)) if i % 23 else None,
                      headers=[("h", b"x")] if i % 5 == 0 else None)
        p.flush(30)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "1"})
    for i in range(200):
        p.produce("seed-compact", key=f"k{i % 7}".encode(), value=f"{i}".encode())
    p.flush(30)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "seed-group",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe(["seed-lz4", "seed-zstd"])
    got, deadline = 0, time.time() + 20
    while got < 600 and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got += 1
    c.commit(asynchronous=False)
    c.close()
    res = ConfigResource(ResourceType.TOPIC, "seed-none")
    admin.describe_configs([res])[res].result(30)
    res = ConfigResource(ResourceType.TOPIC, "seed-none", incremental_configs=[
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(30)
    admin.create_partitions([NewPartitions("seed-gzip", 3)])["seed-gzip"].result(30)
    admin.list_topics(timeout=30)
    admin.describe_cluster().result(30)
    admin.list_consumer_groups().result(30)
    admin.describe_consumer_groups(["seed-group"])["seed-group"].result(30)
    admin.delete_records([TopicPartition("seed-none", 0, 10)])
    time.sleep(1)


def kafka_python_clients(bootstrap: str) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", compression_type="gzip")
    for i in range(100):
        p.send("seed-kp", key=f"k{i}".encode(), value=b"kafka-python" * (i % 9))
    p.flush(30)
    p.close()
    c = KafkaConsumer("seed-kp", bootstrap_servers=bootstrap, group_id="seed-kp-group",
                      auto_offset_reset="earliest", consumer_timeout_ms=5000)
    for _ in c:
        pass
    c.commit()
    c.close()
    a = KafkaAdminClient(bootstrap_servers=bootstrap)
    for call in (lambda: a.list_groups(), lambda: a.describe_groups(["seed-kp-group"]),
                 lambda: a.describe_cluster(), lambda: a.describe_log_dirs(),
                 lambda: a.describe_metadata_quorum(), lambda: a.list_partition_reassignments(),
                 lambda: a.describe_producers(), lambda: a.describe_topic_partitions(["seed-kp"]),
                 lambda: a.list_group_offsets("seed-kp-group")):
        try:
            call()
        except Exception as e:  # what was sent is what counts; some calls need arguments
            print(f"kafka-python admin call: {type(e).__name__}: {e}", file=sys.stderr)
    a.close()


def split_batches(log: bytes) -> list[bytes]:
    """The record batches of a segment file, each whole (baseOffset, batchLength, ...)."""
    out, at = [], 0
    while at + kwire.LOG_OVERHEAD <= len(log):
        (length,) = struct.unpack_from(">i", log, at + kwire.BATCH_LENGTH.start)
        if length <= 0 or at + kwire.LOG_OVERHEAD + length > len(log):
            break
        out.append(log[at:at + kwire.LOG_OVERHEAD + length])
        at += kwire.LOG_OVERHEAD + length
    return out


def broker_files(data: Path) -> dict[str, int]:
    added = {t: 0 for t in ("record_batch", "compaction_filter", "producer_snapshot",
                            "leader_epoch_checkpoint", "segment_indexes")}
    for part in sorted(p for p in data.iterdir() if p.is_dir() and "-" in p.name):
        for f in sorted(part.iterdir()):
            body = f.read_bytes()
            if f.suffix == ".log":
                for b in split_batches(body)[:40]:
                    if len(b) <= FRAME_MAX:
                        added["record_batch"] += save("record_batch", b)
                        added["compaction_filter"] += save("compaction_filter", b"\x55" + b)
            elif f.suffix == ".snapshot":
                added["producer_snapshot"] += save("producer_snapshot", body)
            elif f.name == "leader-epoch-checkpoint":
                added["leader_epoch_checkpoint"] += save("leader_epoch_checkpoint", body)
            elif f.suffix in (".index", ".timeindex") and body.strip(b"\0"):
                log = f.with_suffix(".log")
                log_len = log.stat().st_size if log.exists() else 1 << 20
                head = struct.pack(">qQ", int(f.stem), log_len)
                added["segment_indexes"] += save("segment_indexes", head + body.rstrip(b"\0"))
    return added


# -- the cluster: controller-port frames, metadata log and snapshot files ---------------

# Frames kept per message kind (a heartbeat or an empty AppendEntries repeats endlessly).
RPC_PER_KIND = 3
# Entries between two metadata snapshots: small, so a short run writes several and purges.
SNAPSHOT_ENTRIES = 20


class RpcProxy:
    """Forwards 127.0.0.1:port to a controller port, keeping up to RPC_PER_KIND frame
    bodies of each request and response kind (the variant name, the JSON's first key)."""

    def __init__(self, upstream: int, kept: dict[str, list[bytes]], lock: threading.Lock):
        self.upstream, self.kept, self.lock = upstream, kept, lock
        self.listener = listen_loopback()
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.upstream))
            except OSError:
                client.close()
                continue
            threading.Thread(target=self.frames, args=(client, server, "request"),
                             daemon=True).start()
            threading.Thread(target=self.frames, args=(server, client, "response"),
                             daemon=True).start()

    def keep(self, side: str, body: bytes) -> None:
        import json
        try:
            msg = json.loads(body)
        except ValueError:
            return
        if side == "request":
            msg = msg.get("body") if isinstance(msg, dict) else msg
        kind = side + ":" + (next(iter(msg)) if isinstance(msg, dict) and msg else str(msg))
        if isinstance(msg, dict) and kind.endswith(":AppendEntries") and side == "request":
            # Heartbeats apart from those that carry entries.
            kind += ":entries" if msg["AppendEntries"].get("entries") else ":empty"
        with self.lock:
            bodies = self.kept.setdefault(kind, [])
            if len(bodies) < RPC_PER_KIND and body not in bodies and len(body) <= FRAME_MAX:
                bodies.append(body)

    def frames(self, src: socket.socket, dst: socket.socket, side: str) -> None:
        relay_frames(src, dst, ">I", lambda body: self.keep(side, body))


def attempt(what: str, call) -> None:
    """Runs an admin call; what it proposed is what counts, so a refusal is only noted."""
    try:
        call()
    except Exception as e:
        print(f"{what}: {type(e).__name__}: {e}", file=sys.stderr)


def cluster_workload(bootstrap: str, restart) -> None:
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,
                                       ConfigResource as CResource, ResourceType)
    from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic
    a = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    c = AdminClient({"bootstrap.servers": bootstrap})
    a.create_topics([NewTopic("c-three", 3, 3), NewTopic("c-one", 1, 1),
                     NewTopic("c-compact", 2, 2, topic_configs={"cleanup.policy": "compact",
                                                                "retention.ms": "600000"})])
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    for i in range(200):
        p.send("c-three", key=f"k{i}".encode(), value=b"v" * (i % 50))
    p.flush(30)
    p.close()
    attempt("topic config", lambda: a.alter_configs([ConfigResource(
        ConfigResourceType.TOPIC, "c-one", configs={"retention.ms": "3600000"})]))

    def broker_config() -> None:
        res = CResource(ResourceType.BROKER, "2", incremental_configs=[ConfigEntry(
            "corelog.decommission", "false", incremental_operation=AlterConfigOpType.SET)])
        c.incremental_alter_configs([res])[res].result(30)
    attempt("broker config", broker_config)
    attempt("create partitions", lambda: a.create_partitions({"c-three": NewPartitions(5)}))
    attempt("reassignment", lambda: a.alter_partition_reassignments(
        {TopicPartition("c-one", 0): [2, 3]}))
    time.sleep(2)
    attempt("election", lambda: a.elect_leaders(0, {"c-three": [0, 1, 2]}, raise_errors=False))

    def quotas() -> None:
        from kafka.protocol.admin import AlterClientQuotasRequest as Req
        entry, entity, op = Req.EntryData, Req.EntryData.EntityData, Req.EntryData.OpData
        req = Req(validate_only=False, entries=[
            entry(entity=[entity(entity_type="user", entity_name="alice")],
                  ops=[op(key="producer_byte_rate", value=1048576.0, remove=False),
                       op(key="request_percentage", value=12.5, remove=False)]),
            entry(entity=[entity(entity_type="user", entity_name="alice"),
                          entity(entity_type="client-id", entity_name=None)],
                  ops=[op(key="consumer_byte_rate", value=2097152.0, remove=False),
                       op(key="controller_mutation_rate", value=0.3, remove=False)])])
        a._manager.run(a._send_request_to_controller, req, lambda r: iter(()))
        req = Req(validate_only=False, entries=[
            entry(entity=[entity(entity_type="user", entity_name="alice")],
                  ops=[op(key="request_percentage", value=0.0, remove=True)])])
        a._manager.run(a._send_request_to_controller, req, lambda r: iter(()))
    attempt("client quotas", quotas)
    # A voter down while the log moves past two snapshots: it catches up by a snapshot.
    # (It may be the active controller: a new admin client finds the next one.)
    def while_down() -> None:
        time.sleep(5)
        down = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
        for i in range(30):
            attempt("create", lambda i=i: down.create_topics([NewTopic(f"c-down-{i}", 2, 2)]))
        down.close()
    restart(while_down)
    a.close()
    a = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    attempt("delete topics", lambda: a.delete_topics([f"c-down-{i}" for i in range(0, 30, 3)]))
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    p.send("c-one", b"after").get(30)
    p.close()
    a.close()


def cluster_seeds() -> dict[str, int]:
    work = Path(tempfile.mkdtemp(prefix="corelog-cluster-seeds-"))
    kept: dict[str, list[bytes]] = {}
    lock = threading.Lock()
    nodes = [launcher.Broker(work / f"n{i}", shards=1, name=f"node{i}", log_level="warn")
             for i in (1, 2, 3, 4)]
    voters = nodes[:3]
    # The voters are reached through the proxies; node 4 is an observer.
    proxies = [RpcProxy(n.controller_port, kept, lock) for n in voters]
    cluster = launcher.Cluster(
        nodes,
        quorum=",".join(f"{i}@127.0.0.1:{px.port}" for i, px in enumerate(proxies, 1)),
        extra_args=["--metadata-snapshot-entries", str(SNAPSHOT_ENTRIES),
                    "--partition-balancer-enable", "false",
                    "--group-initial-rebalance-delay-ms", "0"])
    added = {"controller_rpc": 0, "metadata_log": 0, "metadata_snapshot": 0}

    def grab() -> None:
        """The metadata files each node has now (a log read while it is appended to may
        end in a torn frame, as after a crash)."""
        for n in nodes:
            meta = n.data_dir / "__cluster_metadata"
            log = meta / "log" / "raft.log"
            if log.exists():
                added["metadata_log"] += save("metadata_log", whole_frames(log.read_bytes()))
            for name in ("vote", "committed", "purged"):
                f = meta / "log" / name
                if f.exists():
                    added["metadata_log"] += save("metadata_log", f.read_bytes())
            snap = meta / "state" / "snapshot"
            if snap.exists() and snap.stat().st_size <= FRAME_MAX:
                added["metadata_snapshot"] += save("metadata_snapshot", snap.read_bytes())

    try:
        cluster.start(voters, timeout=60)
        grab()

        def restart(meanwhile) -> None:
            grab()
            down = nodes[2]
            down.kill()
            meanwhile()
            grab()
            down.launch()
            # Its metadata catches up at once; its partitions may take their time to
            # recover, and only the metadata counts here.
            attempt(f"{down.name} restarted", lambda: down.wait_healthy(30))
            # The observer joins now, behind the purged log: it starts from a snapshot.
            nodes[3].launch()
            nodes[3].wait_healthy(60)
            time.sleep(2)
            grab()

        cluster_workload(nodes[0].bootstrap, restart)
        time.sleep(3)
        cluster.teardown(timeout=60)  # controlled shutdowns, then the last ones stop as they can
        grab()
        for bodies in kept.values():
            for body in bodies:
                added["controller_rpc"] += save("controller_rpc", body)
        return added
    finally:
        for n in nodes:
            if n.is_running():
                n.kill()
        shutil.rmtree(work, ignore_errors=True)


def whole_frames(log: bytes) -> bytes:
    """The frames of a raft.log up to FRAME_MAX bytes in all (libFuzzer's inputs stay
    small), cut at a frame's end."""
    at = 0
    while at + 8 <= len(log):
        (n,) = struct.unpack(">I", log[at:at + 4])
        if at + 8 + n > min(len(log), FRAME_MAX):
            break
        at += 8 + n
    return log[:at]


def main() -> int:
    if not BIN.exists():
        print(f"build first: {BIN} is missing", file=sys.stderr)
        return 1
    if "--cluster" not in sys.argv[1:]:
        broker_seeds = single_broker_seeds()
        if broker_seeds:
            return broker_seeds
    for target, n in cluster_seeds().items():
        print(f"{target}: {n} new files")
    return 0


def single_broker_seeds() -> int:
    work = Path(tempfile.mkdtemp(prefix="corelog-seeds-"))
    broker = launcher.Broker(work, shards=1, log_level="warn",
                             extra_args=["--group-initial-rebalance-delay-ms", "0"])
    try:
        proxy = Proxy(broker.port)
        # Clients are told the proxy's address, so every connection goes through it.
        broker.advertise = f"127.0.0.1:{proxy.port}"
        try:
            broker.start()
        except launcher.BrokerStartError as e:
            print(e, file=sys.stderr)
            return 1
        bootstrap = f"127.0.0.1:{proxy.port}"
        confluent_clients(bootstrap)
        kafka_python_clients(bootstrap)
        broker.begin_teardown()
        broker.finish_teardown(timeout=60)
        added = broker_files(broker.data_dir)
        print(f"request: {proxy.frames} new frames")
        for target, n in added.items():
            print(f"{target}: {n} new files")
        return 0
    finally:
        if broker.is_running():
            broker.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
