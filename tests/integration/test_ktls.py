"""Kernel TLS: a session rustls negotiated is handed to the kernel where the kernel
takes its version and cipher, so responses — records spliced from segment files
included — are sealed without a copy to user space; where it does not (no tls module),
the session stays in user space. Either way the broker logs which path each session
took, counts them in /metrics, and the clients read exactly what was written.

The host's kernel may lack kTLS (this one does): `test_in_a_kernel_that_has_ktls` then
runs this module again inside a qemu guest booted with Debian's kernel
(`tools/kernel-vm/run.sh`), with CORELOG_EXPECT_KTLS=1, where every session must go to
the kernel. Certificates are made by the test (EC P-256)."""

from __future__ import annotations

import os
import re
import socket
import ssl
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import kwire
from certs import CertificateAuthority
from test_tls import TlsBroker, consume_all, ssl_conf

TIMEOUT = 30
REPO = Path(__file__).resolve().parents[2]
IN_GUEST = os.environ.get("CORELOG_EXPECT_KTLS") == "1"

# What Python's ssl offers for TLS 1.2 with an EC key, one per AEAD the kernel has.
TLS12_SUITES = ["ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES256-GCM-SHA384",
                "ECDHE-ECDSA-CHACHA20-POLY1305"]


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return CertificateAuthority(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def broker(pki, tmp_path_factory):
    b = TlsBroker(tmp_path_factory.mktemp("ktls-broker"), pki).start()
    yield b
    b.stop()


def probe_line(broker) -> str:
    """What the broker's probe found, as it logged it."""
    text = broker.log_path.read_text(errors="replace")
    m = re.search(r'kernel TLS offload support="?([^"\n]*)', text)
    assert m, "the broker logs what the kernel takes"
    return m.group(1)


def kernel_takes_tls(broker) -> bool:
    return not probe_line(broker).startswith("unavailable")


def kernel_takes(broker, session_line: str) -> bool:
    """Whether the probe found the kernel taking the version and AEAD a session line
    names ("TLS 1.2: AES-128-GCM, AES-256-GCM; TLS 1.3: ...")."""
    version = "TLS 1.3" if "TLSv1_3" in session_line else "TLS 1.2"
    aead = next(name for mark, name in [("AES_128_GCM", "AES-128-GCM"),
                                        ("AES_256_GCM", "AES-256-GCM"),
                                        ("CHACHA20", "ChaCha20-Poly1305")]
                if mark in session_line)
    for part in probe_line(broker).split(";"):
        if part.strip().startswith(version + ":"):
            return aead in part
    return False


def sessions(broker, path: str) -> float:
    """corelog_tls_sessions for one path, over the shards."""
    return broker.metric("corelog_tls_sessions", path=path)


def on_kernel(line: str) -> bool:
    """A "TLS session established" line of a session the kernel took."""
    return re.search(r'path="?kernel', line) is not None


def session_lines(broker) -> list[str]:
    return [line for line in broker.log_path.read_text(errors="replace").splitlines()
            if "TLS session established" in line]


def test_sessions_take_the_path_the_kernel_allows_and_read_back_exactly(broker, pki):
    kernel = kernel_takes_tls(broker)
    if IN_GUEST:
        assert kernel, "the guest's kernel has the tls module loaded"
    conf = ssl_conf(broker, pki)
    admin = AdminClient(conf)
    admin.create_topics([NewTopic("ktls", num_partitions=1)])["ktls"].result(TIMEOUT)
    spliced_before = broker.metric("corelog_fetch_bytes_spliced")
    # 8 MiB against a 1 MiB tail cache: most records are read from segment files.
    values = [b"%06d" % i + bytes([i % 251]) * 4000 for i in range(2000)]
    p = Producer({**conf, "linger.ms": 5, "compression.type": "none"})
    for v in values:
        p.produce("ktls", v)
    assert p.flush(TIMEOUT) == 0
    assert consume_all(conf, TopicPartition("ktls", 0, 0), len(values)) == values
    spliced = broker.metric("corelog_fetch_bytes_spliced") - spliced_before
    lines = session_lines(broker)
    assert lines, "each TLS session is logged with its path"
    if kernel:
        # librdkafka negotiates TLS 1.3 with AES-256-GCM, which every kTLS kernel takes.
        assert sessions(broker, "kernel") > 0 and sessions(broker, "user") == 0
        assert all(on_kernel(line) for line in lines), lines[:3]
        # Segment-file records went from the file to the socket, sealed by the kernel.
        assert spliced > 4 << 20, spliced
    else:
        assert sessions(broker, "user") > 0 and sessions(broker, "kernel") == 0
        assert not any(on_kernel(line) for line in lines), lines[:3]
        # In user space every byte is sealed by rustls: nothing is spliced to the socket.
        assert spliced == 0, spliced


def raw_session(broker, ca: Path, version: ssl.TLSVersion, suite: str | None):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(cafile=str(ca))
    ctx.minimum_version = ctx.maximum_version = version
    if suite:
        ctx.set_ciphers(suite)
    raw = socket.create_connection(("127.0.0.1", broker.ssl_port), timeout=10)
    return ctx.wrap_socket(raw, server_hostname="localhost")


@pytest.mark.parametrize("version,suite", [(ssl.TLSVersion.TLSv1_2, s) for s in TLS12_SUITES]
                         + [(ssl.TLSVersion.TLSv1_3, None)])
def test_every_version_and_cipher_reads_and_writes_whole_records(broker, pki, version, suite):
    """Requests larger than one TLS record (a Metadata request naming many topics) and
    several in one write, answered in order; then the client's close_notify, which the
    kernel hands up as a control record, ends only this connection."""
    s = raw_session(broker, pki.cert, version, suite)
    port = s.getsockname()[1]
    names = [f"no-such-topic-{i:05d}-" + "n" * 40 for i in range(600)]  # ~36 KiB
    frames = b"".join([kwire.api_versions_v0(1), kwire.metadata_v1(2, names),
                       kwire.api_versions_v0(3)])
    s.sendall(frames)
    for expect in (1, 2, 3):
        assert kwire.recv_response(s)[0] == expect
    s.unwrap()
    s.close()
    time.sleep(0.5)
    mine = [line for line in session_lines(broker) if f"peer=127.0.0.1:{port} " in line]
    assert len(mine) == 1, mine
    assert on_kernel(mine[0]) == kernel_takes(broker, mine[0]), (mine[0], probe_line(broker))
    # The broker still serves everyone else.
    s = raw_session(broker, pki.cert, version, suite)
    s.sendall(kwire.api_versions_v0(9))
    assert kwire.recv_response(s)[0] == 9
    s.close()


def test_offload_turned_off_keeps_every_session_in_user_space(pki, tmp_path):
    b = TlsBroker(tmp_path, pki)
    b.extra_args += ["--tls-kernel-offload", "false"]
    b.start()
    try:
        s = raw_session(b, pki.cert, ssl.TLSVersion.TLSv1_3, None)
        s.sendall(kwire.api_versions_v0(1))
        assert kwire.recv_response(s)[0] == 1
        s.close()
        assert sessions(b, "user") == 1 and sessions(b, "kernel") == 0
        assert "kernel offload turned off" in session_lines(b)[0]
    finally:
        b.stop()


def test_in_a_kernel_that_has_ktls(broker):
    """Where this kernel lacks kTLS, this module runs again in a guest whose kernel has
    it (about a minute under qemu's emulation); where it has it, the tests above have
    already taken the kernel path."""
    if kernel_takes_tls(broker):
        return
    binary = os.environ.get("CORELOG_BIN", str(REPO / "target/release/corelog"))
    here = Path(__file__).resolve().parent
    command = (f"cd {here} && TMPDIR=$KERNEL_VM_SCRATCH CORELOG_EXPECT_KTLS=1 "
               f"CORELOG_BIN={binary} python3 -m pytest -q -p no:cacheprovider "
               f"test_ktls.py -k 'not in_a_kernel_that_has_ktls'")
    r = subprocess.run([str(REPO / "tools/kernel-vm/run.sh"), "--mem", "3072", "--",
                        "bash", "-c", command],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and "failed" not in r.stdout, r.stdout[-3000:]
