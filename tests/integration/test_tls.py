"""TLS listeners (Kafka's SSL protocol) with certificates the test makes: one broker
with a PLAINTEXT listener, an SSL listener and a second SSL listener that requires
client certificates (`listener.name.mtls.ssl.client.auth=required`), configured through
Kafka's keys in corelog's config file. Real clients — librdkafka (confluent-kafka and
kcat) and kafka-python — produce, consume and administer over TLS; records old enough
to be read from segment files go out through the same TLS session; bad input on a TLS
port closes only that connection; a keystore file renewed in place is served without a
restart."""

from __future__ import annotations

import socket
import ssl
import struct
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from certs import CertificateAuthority
from launcher import Broker, free_port
from test_kafka_python import round_trip

TIMEOUT = 30


class TlsBroker(Broker):
    """A broker whose listeners come from Kafka's keys in a config file."""

    def __init__(self, workdir: Path, ca: CertificateAuthority):
        super().__init__(workdir, extra_args=["--tail-cache-shard-bytes", "1048576"])
        self.ssl_port, self.mtls_port = free_port(), free_port()
        server = ca.issue("broker", "localhost", server=True)
        config = workdir / "server.toml"
        config.write_text(
            f'listeners = "PLAINTEXT://127.0.0.1:{self.port},SSL://127.0.0.1:{self.ssl_port},'
            f'MTLS://127.0.0.1:{self.mtls_port}"\n'
            '"listener.security.protocol.map" = "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL"\n'
            '"ssl.keystore.type" = "PEM"\n'
            f'"ssl.keystore.location" = "{server.chain}"\n'
            '"ssl.truststore.type" = "PEM"\n'
            f'"ssl.truststore.location" = "{ca.cert}"\n'
            '[listener.name.mtls]\n'
            '"ssl.client.auth" = "required"\n'
            # The inline PEM form, for this listener: the same certificate and key.
            f'"ssl.keystore.certificate.chain" = """{server.cert.read_text()}"""\n'
            f'"ssl.keystore.key" = """{server.key.read_text()}"""\n'
            '"ssl.keystore.location" = ""\n')
        self.extra_args += ["--config", str(config)]
        self.listeners_in_config = True


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    ca = CertificateAuthority(tmp_path_factory.mktemp("pki"))
    return ca, ca.issue("client", "alice"), ca.issue("client-other", "bob")


@pytest.fixture(scope="module")
def broker(pki, tmp_path_factory):
    b = TlsBroker(tmp_path_factory.mktemp("tls-broker"), pki[0]).start()
    yield b
    b.stop()


def ssl_conf(broker, ca, port=None, client=None) -> dict:
    conf = {"bootstrap.servers": f"localhost:{port or broker.ssl_port}",
            "security.protocol": "SSL", "ssl.ca.location": str(ca.cert)}
    if client is not None:
        conf.update({"ssl.certificate.location": str(client.cert),
                     "ssl.key.location": str(client.key)})
    return conf


def consume_all(conf: dict, tp: TopicPartition, n: int) -> list[bytes]:
    c = Consumer({**conf, "group.id": f"tls-{tp.topic}-{time.monotonic_ns()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "fetch.max.bytes": 4 << 20})
    got: list[bytes] = []
    try:
        c.assign([tp])
        deadline = time.monotonic() + TIMEOUT
        while len(got) < n and time.monotonic() < deadline:
            for m in c.consume(1000, 1.0):
                if not m.error():
                    got.append(m.value())
        return got
    finally:
        c.close()


def test_librdkafka_over_tls_administers_produces_and_consumes(broker, pki):
    ca, _, _ = pki
    conf = ssl_conf(broker, ca)
    admin = AdminClient(conf)
    admin.create_topics([NewTopic("tls-topic", num_partitions=1)])["tls-topic"].result(TIMEOUT)
    md = admin.list_topics(timeout=10)
    # Metadata over the SSL listener names the SSL listener's address.
    assert [(b.host, b.port) for b in md.brokers.values()] == [("127.0.0.1", broker.ssl_port)]
    # Over 1 MiB of tail cache, so the first records are read from segment files (sent
    # through the TLS session from the pipe) and the last from memory.
    values = [b"%06d" % i + b"x" * 2000 for i in range(4000)]
    p = Producer({**conf, "linger.ms": 5, "compression.type": "none"})
    for v in values:
        p.produce("tls-topic", v)
    assert p.flush(TIMEOUT) == 0
    got = consume_all(conf, TopicPartition("tls-topic", 0, 0), len(values))
    assert got == values


def test_mutual_tls_required_refuses_a_client_without_a_certificate(broker, pki):
    ca, alice, _ = pki
    anonymous = AdminClient({**ssl_conf(broker, ca, broker.mtls_port),
                             "socket.timeout.ms": 3000})
    with pytest.raises(KafkaException):
        anonymous.list_topics(timeout=5)
    md = AdminClient(ssl_conf(broker, ca, broker.mtls_port, alice)).list_topics(timeout=10)
    assert [b.port for b in md.brokers.values()] == [broker.mtls_port]


def test_a_client_certificate_from_another_ca_is_refused(broker, pki, tmp_path):
    ca, _, _ = pki
    stranger = CertificateAuthority(tmp_path / "other-ca", "stranger-ca").issue("mallory", "mallory")
    client = AdminClient({**ssl_conf(broker, ca, broker.mtls_port, stranger),
                          "socket.timeout.ms": 3000})
    with pytest.raises(KafkaException):
        client.list_topics(timeout=5)


def test_kafka_python_over_tls(broker, pki):
    ca, _, _ = pki
    got = round_trip("tls-kafka-python", 50, bootstrap_servers=f"localhost:{broker.ssl_port}",
                     security_protocol="SSL", ssl_cafile=str(ca.cert))
    assert got == [b"kp-%d" % i for i in range(50)]


def test_kcat_lists_over_tls(broker, pki):
    ca, _, _ = pki
    out = subprocess.run(["kcat", "-b", f"localhost:{broker.ssl_port}", "-X",
                          "security.protocol=SSL", "-X", f"ssl.ca.location={ca.cert}",
                          "-L", "-m", "10"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert f"127.0.0.1:{broker.ssl_port}" in out.stdout


def api_versions_frame() -> bytes:
    body = struct.pack(">hhih", 18, 0, 1, 4) + b"test"
    return struct.pack(">i", len(body)) + body


def closed_by_broker(port: int, payload: bytes) -> bool:
    """Sends ``payload`` and says whether the broker closed the connection (rather than
    answering or leaving it open)."""
    with socket.create_connection(("127.0.0.1", port), timeout=15) as s:
        s.sendall(payload)
        s.settimeout(15)
        try:
            while True:
                data = s.recv(65536)
                if not data:
                    return True
                if not data.startswith(b"\x15"):  # anything but a TLS alert is an answer
                    return False
        except ConnectionResetError:
            return True


def test_bad_input_on_a_tls_port_closes_only_that_connection(broker, pki):
    ca, _, _ = pki
    assert closed_by_broker(broker.ssl_port, b"\x00garbage instead of a ClientHello" * 10)
    assert closed_by_broker(broker.ssl_port, api_versions_frame()), \
        "a plaintext Kafka client on a TLS port is not answered"
    # A client that never finishes its handshake holds nothing for long.
    with socket.create_connection(("127.0.0.1", broker.ssl_port), timeout=30) as s:
        start = time.monotonic()
        s.settimeout(30)
        assert s.recv(1) == b""
        assert time.monotonic() - start < 20
    # TLS to the plaintext port: the ClientHello is not a valid Kafka frame.
    ctx = ssl.create_default_context(cafile=str(ca.cert))
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as raw:
        with pytest.raises((ssl.SSLError, OSError)):
            ctx.wrap_socket(raw, server_hostname="localhost")
    # Honest clients are unaffected.
    md = AdminClient(ssl_conf(broker, ca)).list_topics(timeout=10)
    assert md.brokers
    assert b"TLS handshake failed" in broker.log_path.read_bytes()  # rate-limited, at least one


DECODE_ERROR_ALERT = b"\x15\x03\x03\x00\x02\x02\x32"  # fatal decode_error (50)


def _tls_error(port: int, ca: CertificateAuthority, client) -> str:
    """What a TLS client presenting ``client`` hears when it sends a request: the
    alert's name as OpenSSL reports it."""
    ctx = ssl.create_default_context(cafile=str(ca.cert))
    ctx.load_cert_chain(str(client.cert), str(client.key))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        try:
            with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                s.sendall(api_versions_frame())
                s.recv(100)
        except ssl.SSLError as e:
            return str(e)
    return "no error"


def test_a_failed_handshake_is_told_at_once_with_kafkas_alerts(broker, pki, tmp_path):
    """A plaintext client on a TLS port gets a decode_error alert at once (it waited
    10 s for nothing); a client certificate from an unknown CA gets unknown_ca, and a
    version 1 certificate certificate_unknown (rustls accepts X.509 version 3 only, where
    Kafka's JDK accepts version 1 too: the log and docs/security.md say how to reissue one). Each refusal is logged saying what to change."""
    ca, _, _ = pki
    # The refusals' log lines are rate-limited to one a second: one refusal a second.
    time.sleep(1.1)
    with socket.create_connection(("127.0.0.1", broker.ssl_port), timeout=10) as s:
        started = time.monotonic()
        s.sendall(api_versions_frame())
        s.settimeout(5)
        assert s.recv(64) == DECODE_ERROR_ALERT
        assert time.monotonic() - started < 2
    time.sleep(1.1)
    stranger = CertificateAuthority(tmp_path / "stranger-ca", "stranger-ca").issue("eve", "eve")
    assert "UNKNOWN_CA" in _tls_error(broker.mtls_port, ca, stranger).upper()
    time.sleep(1.1)
    v1 = ca.issue_v1("client-v1", "old-tool")
    assert "CERTIFICATE_UNKNOWN" in _tls_error(broker.mtls_port, ca, v1).upper()
    # librdkafka reports the broker's alert, not a bare transport failure.
    import logging
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    log = logging.getLogger("rdkafka-tls-alerts")
    log.addHandler(Keep())
    client = AdminClient({**ssl_conf(broker, ca, broker.mtls_port, stranger),
                          "socket.timeout.ms": 3000, "logger": log})
    time.sleep(1.1)
    with pytest.raises(KafkaException):
        client.list_topics(timeout=5)
    client.poll(1)  # serves the client's log lines to the logger
    assert any("alert" in m for m in seen), seen[-5:]
    text = broker.log_path.read_text(errors="replace")
    for why in ("a plaintext client on a TLS listener", "not signed by a CA the listener trusts", "X.509 version 1",
                "sent no certificate"):
        deadline = time.monotonic() + 10
        while why not in text and time.monotonic() < deadline:
            time.sleep(0.2)
            text = broker.log_path.read_text(errors="replace")
        assert why in text, why


def _served_certificate(port: int, ca: CertificateAuthority) -> bytes:
    ctx = ssl.create_default_context(cafile=str(ca.cert))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
            return tls.getpeercert(binary_form=True)


def test_a_renewed_keystore_file_is_served_without_a_restart(tmp_path):
    """The keystore file is replaced in place (as a certificate renewal does): new
    connections get the new certificate within a few seconds, the broker never stops;
    a broken file in its place is logged and the last good certificate stays served."""
    ca = CertificateAuthority(tmp_path / "pki")  # its own files: the module's broker keeps its own
    b = TlsBroker(tmp_path / "renewing", ca).start()
    try:
        keystore = Path(next(l.split('"')[3] for l in (tmp_path / "renewing" / "server.toml")
                             .read_text().splitlines() if l.startswith('"ssl.keystore.location"')))
        before = _served_certificate(b.ssl_port, ca)
        renewed = ca.issue("broker-renewed", "localhost", server=True)
        keystore.write_text(renewed.chain.read_text())
        deadline = time.time() + 10
        while _served_certificate(b.ssl_port, ca) == before:
            assert time.time() < deadline, "the renewed certificate was not served within 10 s"
            time.sleep(0.2)
        assert "TLS keystore reloaded" in b.log_path.read_text()
        served = _served_certificate(b.ssl_port, ca)
        keystore.write_text("not a keystore\n")
        time.sleep(2.5)
        assert _served_certificate(b.ssl_port, ca) == served
        assert "unusable; the previous certificate stays in use" in b.log_path.read_text()
        b.assert_alive()
    finally:
        b.stop()
