"""Metadata requests on a raw socket, for the benchmarks that time them or poll them at a
scale where a client library's own caching and retries would be measured instead.

Versions 1 and 4 only: v1 for corelog alone (the smallest answer), v4 where Kafka 4 is
asked too (the oldest it still answers). Their answers differ by the throttle time (v3+)
and the cluster id (v2+). One request per call, on a connection of its own.
"""
from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass

CLIENT_ID = b"corelog-bench"
CORRELATION_ID = 7
VERSIONS = (1, 4)


@dataclass
class Metadata:
    """What a Metadata answer says."""
    # The live brokers it lists (a fenced one is not).
    live: set[int]
    # Its controller id (in KRaft a live broker, not the active controller).
    controller: int
    # {(topic, partition): leader}.
    leaders: dict[tuple[str, int], int]


def recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed")
        buf += chunk
    return bytes(buf)


def call(port: int, version: int, all_topics: bool, timeout: float = 30.0) -> tuple[float, bytes]:
    """Asks the broker on `port` for every topic (or none) at `version`: the seconds from
    sending to the whole answer, and the answer after its correlation id."""
    assert version in VERSIONS, version
    topics = struct.pack(">i", -1 if all_topics else 0)
    # v4: allow_auto_topic_creation false.
    body = (struct.pack(">hhih", 3, version, CORRELATION_ID, len(CLIENT_ID)) + CLIENT_ID
            + topics + (b"\x00" if version >= 4 else b""))
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        started = time.perf_counter()
        s.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", recv_exact(s, 4))[0]
        resp = recv_exact(s, size)
        took = time.perf_counter() - started
    (correlation,) = struct.unpack_from(">i", resp, 0)
    if correlation != CORRELATION_ID:
        raise ConnectionError(f"answer to correlation id {correlation}")
    return took, resp[4:]


def parse(resp: bytes, version: int) -> Metadata:
    """The answer `call` returned for `version`."""
    at = 0

    def take(fmt: str):
        nonlocal at
        (v,) = struct.unpack_from(fmt, resp, at)
        at += struct.calcsize(fmt)
        return v

    def string() -> str:
        nonlocal at
        n = take(">h")
        v = resp[at:at + max(n, 0)].decode()
        at += max(n, 0)
        return v

    if version >= 3:
        take(">i")  # throttle_time_ms
    live = set()
    for _ in range(take(">i")):
        live.add(take(">i"))
        string(), take(">i"), string()  # host, port, rack
    if version >= 2:
        string()  # cluster_id
    controller = take(">i")
    leaders = {}
    for _ in range(take(">i")):
        take(">h")  # error
        name = string()
        at += 1  # is_internal
        for _ in range(take(">i")):
            take(">h")  # error
            p, leader = take(">i"), take(">i")
            for _array in ("replicas", "isr"):
                n = take(">i")  # read before `at` moves past the array
                at += 4 * n
            leaders[(name, p)] = leader
    return Metadata(live=live, controller=controller, leaders=leaders)
