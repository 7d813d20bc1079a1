"""Limits and back-pressure (docs/quotas-and-limits.md, "Limits").

- A connection flood beyond --max-connections: the broker serves exactly the allowed
  connections; the others wait (connected in the listen backlog, unanswered) and are
  served as slots free; the process stays up.
- --max-connections-per-ip (with an override for 127.0.0.2): an IP over its limit has
  new connections closed at once, other IPs are unaffected, the refusals are counted
  and logged at a bounded rate.
- --queued-max-request-bytes: many connections declaring huge frames and sending part
  of them do not grow the broker's memory beyond the budget; once they go, normal
  clients are served. A body slower than --request-body-timeout-ms is closed, and the
  readers waiting for its memory go on.
- A frame above --socket-request-max-bytes closes that connection only; a batch above
  --message-max-bytes is refused with MESSAGE_TOO_LARGE.
"""

from __future__ import annotations

import re
import select
import socket
import struct
import time
import urllib.request

import pytest
from confluent_kafka import Producer

import kwire as W

ERR_NONE = 0
ERR_MESSAGE_TOO_LARGE = 10

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# -- helpers ----------------------------------------------------------------

def metric_sum(broker, name: str) -> int:
    """Sum over shards of counter `name` (without `_total`) from /metrics."""
    with _NO_PROXY.open(f"http://{broker.http}/metrics", timeout=10) as r:
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        m = re.match(rf"^{name}(?:_total)?(?:\{{[^}}]*\}})? ([0-9.e+]+)$", line)
        if m:
            total += float(m.group(1))
    return int(total)


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def open_socket(bootstrap: str, source_ip: str | None = None, timeout: float = 5.0) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if source_ip is not None:
        s.bind((source_ip, 0))
    s.settimeout(timeout)
    s.connect((host, int(port)))
    return s


def api_versions_ok(sock: socket.socket, cid: int, timeout: float = 10.0) -> None:
    sock.sendall(W.api_versions_v0(cid))
    got, body = W.recv_response(sock, timeout)
    assert got == cid
    err, apis = W.parse_api_versions_v0(body)
    assert err == ERR_NONE and W.API_PRODUCE in apis


class Pending:
    """Sockets that sent one ApiVersions v0 request and wait for the answer."""

    def __init__(self, socks: list[socket.socket]):
        self.bufs = {s: bytearray() for s in socks}
        self.answered: set[socket.socket] = set()
        self.closed: set[socket.socket] = set()

    def poll(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while True:
            waiting = [s for s in self.bufs if s not in self.answered and s not in self.closed]
            left = deadline - time.monotonic()
            if not waiting or left <= 0:
                return
            ready, _, _ = select.select(waiting, [], [], min(left, 0.2))
            for s in ready:
                try:
                    chunk = s.recv(65536)
                except (ConnectionResetError, ConnectionAbortedError):
                    chunk = b""
                if not chunk:
                    self.closed.add(s)
                    continue
                buf = self.bufs[s]
                buf += chunk
                if len(buf) >= 4 and len(buf) >= 4 + struct.unpack(">i", buf[:4])[0]:
                    self.answered.add(s)

    def poll_until(self, answered: int, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while len(self.answered) < answered and time.monotonic() < deadline:
            self.poll(0.2)


def produce_roundtrip(sock: socket.socket, topic: str, cid: int) -> None:
    """Metadata (auto-creates the topic) until it has a leader, then one Produce."""
    deadline = time.monotonic() + 30
    while True:
        sock.sendall(W.metadata_v1(cid, [topic]))
        got, body = W.recv_response(sock, 10)
        assert got == cid
        md = W.parse_metadata_v1(body)
        t = md["topics"].get(topic)
        if t and t["error_code"] == ERR_NONE and t["partitions"].get(0, (1, -1))[1] >= 0:
            break
        assert time.monotonic() < deadline, f"{topic} never got a leader: {md}"
        time.sleep(0.2)
    now = int(time.time() * 1000)
    batch = W.record_batch([(b"k", b"v", [], now)], now)
    sock.sendall(W.produce_v3(cid + 1, topic, {0: batch}))
    got, body = W.recv_response(sock, 10)
    assert got == cid + 1
    res = W.parse_produce_v3(body)
    assert res[(topic, 0)]["error_code"] == ERR_NONE, res


def confluent_produce(bootstrap: str, topic: str, n: int = 20) -> None:
    delivered, errors = [], []

    def dr(err, msg):
        (errors if err is not None else delivered).append(err or msg.offset())

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                  "message.timeout.ms": 30_000})
    for i in range(n):
        p.produce(topic, key=b"k%d" % i, value=b"v%d" % i, on_delivery=dr)
    assert p.flush(60) == 0, "messages left undelivered"
    assert not errors, errors
    assert len(delivered) == n


def close_all(socks) -> None:
    for s in socks:
        try:
            s.close()
        except OSError:
            pass


# -- (a) connection flood ---------------------------------------------------

MAX_CONNECTIONS = 50
FLOOD = 200


def test_connection_flood_serves_the_allowed_and_queues_the_rest(broker_factory):
    b = broker_factory(extra_args=["--max-connections", str(MAX_CONNECTIONS)])
    socks: list[socket.socket] = []
    try:
        for _ in range(FLOOD):
            socks.append(open_socket(b.bootstrap))  # completes in the listen backlog
        for i, s in enumerate(socks):
            s.sendall(W.api_versions_v0(i))
        pending = Pending(socks)
        pending.poll_until(MAX_CONNECTIONS, 20)
        pending.poll(1.0)  # any more answers would break the limit
        assert len(pending.answered) == MAX_CONNECTIONS, (
            f"{len(pending.answered)} connections answered with --max-connections {MAX_CONNECTIONS}")
        assert not pending.closed, "waiting connections must wait, not be closed"
        b.assert_alive()

        # An allowed connection keeps working: ApiVersions and Produce round trips.
        allowed = sorted(pending.answered, key=socks.index)
        keeper = allowed[0]
        api_versions_ok(keeper, 10_000)
        produce_roundtrip(keeper, "flood", 10_001)
        assert metric_sum(b, "corelog_connection_limit_waits") >= 1

        # Closing allowed connections lets exactly as many waiting ones in.
        freed = allowed[1:11]
        for s in freed:
            s.close()
            del pending.bufs[s]
            pending.answered.discard(s)
        before = len(pending.answered)
        pending.poll_until(before + len(freed), 20)
        pending.poll(1.0)
        assert len(pending.answered) == before + len(freed), (
            f"after closing {len(freed)}: {len(pending.answered) - before} waiting ones served")
        api_versions_ok(keeper, 10_100)
        b.assert_alive()
    finally:
        close_all(socks)
    # Everything released: a normal client works.
    confluent_produce(b.bootstrap, "flood-after")
    b.assert_alive()


# -- (b) per-IP limit -------------------------------------------------------

def test_per_ip_limit_closes_the_excess_and_spares_other_ips(broker_factory):
    b = broker_factory(extra_args=[
        "--max-connections-per-ip", "5",
        "--max-connections-per-ip-overrides", "127.0.0.2:8",
    ])
    held: list[socket.socket] = []
    try:
        for i in range(5):
            s = open_socket(b.bootstrap, "127.0.0.1")
            api_versions_ok(s, i)
            held.append(s)
        sixth = open_socket(b.bootstrap, "127.0.0.1")
        try:
            sixth.sendall(W.api_versions_v0(99))
        except (BrokenPipeError, ConnectionResetError):
            pass
        W.wait_closed(sixth, 5)
        sixth.close()

        # 127.0.0.2 has its own count and limit (the override).
        for i in range(8):
            s = open_socket(b.bootstrap, "127.0.0.2")
            api_versions_ok(s, 100 + i)
            held.append(s)
        ninth = open_socket(b.bootstrap, "127.0.0.2")
        W.wait_closed(ninth, 5)
        ninth.close()
        api_versions_ok(held[0], 200)  # the allowed ones still work
        api_versions_ok(held[-1], 201)

        # A flood of refused connections is counted, and logged at a bounded rate.
        for _ in range(40):
            s = open_socket(b.bootstrap, "127.0.0.1")
            W.wait_closed(s, 5)
            s.close()
        assert metric_sum(b, "corelog_connections_refused_per_ip") == 42
        refusals = b.log_path.read_text(errors="replace").count("closing new connection")
        assert 1 <= refusals <= 2 * b.shards, f"{refusals} log lines for 42 refusals"
        b.assert_alive()
    finally:
        close_all(held)
    # Once the sockets are released, a normal client from 127.0.0.1 works.
    deadline = time.monotonic() + 10
    while True:  # the broker sees the closes asynchronously
        s = open_socket(b.bootstrap, "127.0.0.1")
        try:
            api_versions_ok(s, 300, timeout=5)
            break
        except W.Closed:
            assert time.monotonic() < deadline, "127.0.0.1 still refused after closing its sockets"
            time.sleep(0.1)
        finally:
            s.close()
    confluent_produce(b.bootstrap, "per-ip")
    b.assert_alive()


# -- (c) request memory -----------------------------------------------------

QUEUED_BYTES = 4 << 20
HOGS = 50
HOG_FRAME = 50 << 20
HOG_SENT = 4 << 20


def test_request_memory_stays_bounded_under_huge_partial_frames(broker_factory):
    b = broker_factory(extra_args=["--queued-max-request-bytes", str(QUEUED_BYTES)])
    pid = b.proc.pid
    with W.connect(b.bootstrap) as warm:
        api_versions_ok(warm, 1)
    baseline = rss_bytes(pid)
    hogs = [open_socket(b.bootstrap) for _ in range(HOGS)]
    try:
        # Each declares a 50 MiB frame (within socket.request.max.bytes) and sends 4 MiB
        # of it, without blocking on connections the broker does not read.
        chunk = b"\0" * (256 << 10)
        sent = {s: 0 for s in hogs}
        for s in hogs:
            s.sendall(struct.pack(">i", HOG_FRAME))
            s.setblocking(False)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            progress = False
            for s in hogs:
                if sent[s] >= HOG_SENT:
                    continue
                try:
                    n = s.send(chunk[: HOG_SENT - sent[s]])
                except BlockingIOError:
                    continue
                sent[s] += n
                progress = progress or n > 0
            if all(v >= HOG_SENT for v in sent.values()):
                break
            if not progress:
                time.sleep(0.05)
        time.sleep(1.0)  # let the broker read whatever it will read
        peak = rss_bytes(pid)
        pushed = sum(sent.values())
        growth = peak - baseline
        # Without the budget the broker would buffer every byte it received (each reader
        # grows its frame buffer as bytes arrive); with it, one reader per shard reads.
        assert growth < 64 << 20, (
            f"RSS grew {growth >> 20} MiB (baseline {baseline >> 20} MiB) while clients pushed "
            f"{pushed >> 20} MiB of partial frames; budget {QUEUED_BYTES >> 20} MiB per shard")
        assert metric_sum(b, "corelog_request_memory_waits") >= 1
        b.assert_alive()
    finally:
        close_all(hogs)
    # The hogs are gone: their permits come back and normal clients are served.
    deadline = time.monotonic() + 15
    while True:
        try:
            with W.connect(b.bootstrap) as s:
                api_versions_ok(s, 2, timeout=3)
            break
        except (TimeoutError, W.Closed):
            assert time.monotonic() < deadline, "not served after the hogs closed"
    confluent_produce(b.bootstrap, "after-hogs")
    b.assert_alive()


def test_slow_body_is_closed_and_frees_memory_for_waiting_readers(broker_factory):
    # One shard, so the hog and the waiting client share the request memory.
    b = broker_factory(shards=1, extra_args=["--queued-max-request-bytes", str(QUEUED_BYTES),
                                             "--request-body-timeout-ms", "1500"])
    with W.connect(b.bootstrap) as hog, W.connect(b.bootstrap) as client:
        hog.sendall(struct.pack(">i", HOG_FRAME) + b"\0" * 1024)  # takes the whole budget
        time.sleep(0.3)
        started = time.monotonic()
        client.sendall(W.api_versions_v0(7))
        with pytest.raises(TimeoutError):
            W.recv_response(client, 0.5)  # waits behind the hog's memory
        W.wait_closed(hog, 5)  # the body timeout closes the hog...
        got, body = W.recv_response(client, 5)  # ...and the waiting reader goes on
        assert got == 7 and W.parse_api_versions_v0(body)[0] == ERR_NONE
        assert time.monotonic() - started < 5
    assert metric_sum(b, "corelog_request_memory_waits") >= 1
    b.assert_alive()


# -- (d) request and message size -------------------------------------------

def test_oversized_frame_closes_only_that_connection_and_big_batch_is_too_large(broker_factory):
    b = broker_factory(extra_args=["--socket-request-max-bytes", str(1 << 20),
                                   "--message-max-bytes", str(64 << 10)])
    good = W.connect(b.bootstrap)
    try:
        api_versions_ok(good, 1)
        # A frame declared 1 byte over socket.request.max.bytes: closed before its body.
        with W.connect(b.bootstrap) as bad:
            bad.sendall(struct.pack(">i", (1 << 20) + 1) + b"\0" * 64)
            W.wait_closed(bad, 5)
        api_versions_ok(good, 2)
        # A batch above message.max.bytes in a frame within the limit: an error code.
        produce_roundtrip(good, "limits-size", 3)
        now = int(time.time() * 1000)
        big = W.record_batch([(b"k", b"x" * (100 << 10), [], now)], now)
        assert (64 << 10) < len(big) < (1 << 20)
        good.sendall(W.produce_v3(10, "limits-size", {0: big}))
        got, body = W.recv_response(good, 10)
        assert got == 10
        res = W.parse_produce_v3(body)
        assert res[("limits-size", 0)]["error_code"] == ERR_MESSAGE_TOO_LARGE, res
        api_versions_ok(good, 11)
        b.assert_alive()
    finally:
        good.close()
