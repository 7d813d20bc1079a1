#!/usr/bin/env python3
"""Seed corpora for the fuzz targets, from what real clients send and what the broker
writes: one corelog broker on loopback behind a proxy that saves every request frame
clients send it (librdkafka through confluent-kafka, with every codec, producers,
consumer groups and admin calls; kafka-python likewise), then the files the broker wrote
(record batches from its segments, producer snapshots, leader-epoch checkpoints, offset
and time indexes).

    python3 fuzz/capture_seeds.py          # after cargo build --release

Writes fuzz/corpus/<target>/<sha1 of the content>; an existing file is kept, so a rerun
only adds. Frames over 64 KiB are left out (libFuzzer's inputs stay small)."""
from __future__ import annotations

import hashlib
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "target" / "release" / "corelog"
CORPUS = ROOT / "fuzz" / "corpus"
FRAME_MAX = 64 << 10
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def save(target: str, data: bytes) -> bool:
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    path = d / hashlib.sha1(data).hexdigest()
    if path.exists():
        return False
    path.write_bytes(data)
    return True


class Proxy:
    """Forwards 127.0.0.1:port to the broker, saving each request frame (without its
    size prefix) clients send."""

    def __init__(self, upstream: int):
        self.upstream = upstream
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
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

    @staticmethod
    def read_exact(s: socket.socket, n: int) -> bytes | None:
        out = b""
        while len(out) < n:
            chunk = s.recv(n - len(out))
            if not chunk:
                return None
            out += chunk
        return out

    def requests(self, client: socket.socket, server: socket.socket) -> None:
        try:
            while True:
                size = self.read_exact(client, 4)
                if size is None:
                    break
                (n,) = struct.unpack(">i", size)
                frame = self.read_exact(client, n)
                if frame is None:
                    break
                if n <= FRAME_MAX and save("request", frame):
                    with self.lock:
                        self.frames += 1
                server.sendall(size + frame)
        except OSError:
            pass
        finally:
            server.close()
            client.close()

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
    while at + 12 <= len(log):
        (length,) = struct.unpack(">i", log[at + 8:at + 12])
        if length <= 0 or at + 12 + length > len(log):
            break
        out.append(log[at:at + 12 + length])
        at += 12 + length
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


def main() -> int:
    if not BIN.exists():
        print(f"build first: {BIN} is missing", file=sys.stderr)
        return 1
    work = Path(tempfile.mkdtemp(prefix="corelog-seeds-"))
    port, http, controller = free_port(), free_port(), free_port()
    broker = None
    try:
        proxy = Proxy(port)
        broker = subprocess.Popen(
            [str(BIN), "serve", "--listen", f"127.0.0.1:{port}",
             "--advertise", f"127.0.0.1:{proxy.port}", "--data-dir", str(work / "data"),
             "--http", f"127.0.0.1:{http}", "--controller-listen", f"127.0.0.1:{controller}",
             "--shards", "1", "--group-initial-rebalance-delay-ms", "0",
             "--log-level", "warn"],
            stdout=open(work / "broker.log", "w"), stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.time() > deadline or broker.poll() is not None:
                    print((work / "broker.log").read_text(), file=sys.stderr)
                    return 1
                time.sleep(0.2)
        bootstrap = f"127.0.0.1:{proxy.port}"
        confluent_clients(bootstrap)
        kafka_python_clients(bootstrap)
        broker.send_signal(signal.SIGTERM)
        broker.wait(60)
        added = broker_files(work / "data")
        print(f"request: {proxy.frames} new frames")
        for target, n in added.items():
            print(f"{target}: {n} new files")
        return 0
    finally:
        if broker is not None and broker.poll() is None:
            broker.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
