"""SASL listeners (Kafka's SASL_PLAINTEXT and SASL_SSL) with real clients: SCRAM users
created and described with the AdminClient (AlterUserScramCredentials, KIP-554) and
kept in the metadata log, PLAIN users from the listener's JAAS config, librdkafka and
kafka-python authenticating with SCRAM-SHA-256/512 and PLAIN, and refusals: a wrong
password, a mechanism the listener does not enable, a request before authenticating —
each answered or closed for that connection only, logged and counted; sessions limited
by connections.max.reauth.ms and renewed on the connection (KIP-368)."""

from __future__ import annotations

import socket
import struct
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AdminClient, NewTopic, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialDeletion, UserScramCredentialUpsertion)

import kwire
from certs import CertificateAuthority
from launcher import Broker, free_port
from test_kafka_python import round_trip

TIMEOUT = 30
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="admin" password="admin-secret" user_admin="admin-secret" '
        'user_carol="carol-secret";')


class SaslBroker(Broker):
    def __init__(self, workdir: Path, ca: CertificateAuthority):
        super().__init__(workdir)
        self.sasl_port, self.sasl_ssl_port = free_port(), free_port()
        server = ca.issue("broker", "localhost", server=True)
        self.extra_args += [
            "--listeners", f"PLAINTEXT://127.0.0.1:{self.port},"
                           f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_port},"
                           f"SASL_SSL://127.0.0.1:{self.sasl_ssl_port}",
            "--security", f"ssl.keystore.location={server.chain}",
            "--security", "listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512",
            "--security", "connection.failed.authentication.delay.ms=300",
        ]
        # Passwords go in the config file, not on a command line the log echoes.
        config = workdir / "server.toml"
        config.write_text(
            '[listener.name.sasl_plaintext]\n'
            '"sasl.enabled.mechanisms" = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"\n'
            f"'plain.sasl.jaas.config' = '{JAAS}'\n")
        self.extra_args += ["--config", str(config)]


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return CertificateAuthority(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def broker(ca, tmp_path_factory):
    b = SaslBroker(tmp_path_factory.mktemp("sasl-broker"), ca).start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    futures = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                     b"alice-secret"),
        UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                     b"alice-secret-256"),
    ])
    for f in futures.values():
        f.result(TIMEOUT)
    yield b
    b.stop()


def scram_ssl(broker, ca, user="alice", password="alice-secret", mechanism="SCRAM-SHA-512"):
    return {"bootstrap.servers": f"localhost:{broker.sasl_ssl_port}",
            "security.protocol": "SASL_SSL", "ssl.ca.location": str(ca.cert),
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


def failed_authentications(broker) -> float:
    return broker.metric("corelog_failed_authentications")


def test_scram_users_are_described_and_deleted_through_the_admin_client(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    described = admin.describe_user_scram_credentials(["alice"])["alice"].result(TIMEOUT)
    infos = {(i.mechanism, i.iterations) for i in described.scram_credential_infos}
    assert infos == {(ScramMechanism.SCRAM_SHA_512, 8192), (ScramMechanism.SCRAM_SHA_256, 4096)}
    with pytest.raises(KafkaException) as missing:
        admin.describe_user_scram_credentials(["nobody"])["nobody"].result(TIMEOUT)
    assert missing.value.args[0].code() == -1 or "does not exist" in str(missing.value)
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"d")])["dave"].result(TIMEOUT)
    admin.alter_user_scram_credentials([UserScramCredentialDeletion(
        "dave", ScramMechanism.SCRAM_SHA_256)])["dave"].result(TIMEOUT)
    everyone = admin.describe_user_scram_credentials().result(TIMEOUT)
    assert set(everyone) == {"alice"}
    with pytest.raises(KafkaException, match="iterations"):
        admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "erin", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 100), b"e")])["erin"].result(TIMEOUT)


def test_librdkafka_scram_sha_512_over_sasl_ssl_produces_and_consumes_in_a_group(broker, ca):
    conf = scram_ssl(broker, ca)
    admin = AdminClient(conf)  # held: a client dropped leaves its futures unanswered
    admin.create_topics([NewTopic("sasl-topic", 1)])["sasl-topic"].result(TIMEOUT)
    p = Producer(conf)
    for i in range(200):
        p.produce("sasl-topic", b"m%d" % i)
    assert p.flush(TIMEOUT) == 0
    c = Consumer({**conf, "group.id": "sasl-group", "auto.offset.reset": "earliest"})
    got = []
    try:
        c.subscribe(["sasl-topic"])
        deadline = time.monotonic() + TIMEOUT
        while len(got) < 200 and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and not m.error():
                got.append(m.value())
    finally:
        c.close()
    assert got == [b"m%d" % i for i in range(200)]


def test_plain_and_scram_sha_256_over_sasl_plaintext(broker):
    base = {"bootstrap.servers": f"127.0.0.1:{broker.sasl_port}",
            "security.protocol": "SASL_PLAINTEXT"}
    for mech, user, password in [("PLAIN", "carol", "carol-secret"),
                                 ("SCRAM-SHA-256", "alice", "alice-secret-256"),
                                 ("SCRAM-SHA-512", "alice", "alice-secret")]:
        md = AdminClient({**base, "sasl.mechanism": mech, "sasl.username": user,
                          "sasl.password": password}).list_topics(timeout=10)
        assert [b.port for b in md.brokers.values()] == [broker.sasl_port], mech


def test_kafka_python_scram_over_sasl_ssl(broker, ca):
    got = round_trip("sasl-kafka-python", 20, bootstrap_servers=f"localhost:{broker.sasl_ssl_port}",
                     security_protocol="SASL_SSL", ssl_cafile=str(ca.cert),
                     sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice",
                     sasl_plain_password="alice-secret")
    assert got == [b"kp-%d" % i for i in range(20)]


@pytest.mark.parametrize("conf_change", [
    {"sasl.password": "wrong"},
    {"sasl.username": "mallory"},  # logged as principal=User:mallory
    {"sasl.mechanism": "SCRAM-SHA-256", "sasl.password": "alice-secret-256"},  # not enabled here
])
def test_a_refused_login_fails_the_client_and_is_logged_and_counted(broker, ca, conf_change):
    before = failed_authentications(broker)
    conf = {**scram_ssl(broker, ca), **conf_change}
    errors = []
    p = Producer({**conf, "error_cb": errors.append, "message.timeout.ms": 5000})
    p.produce("sasl-topic", b"never")
    p.flush(8)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    # As Kafka's: the answer does not tell an unknown user from a wrong password.
    assert not any("user credentials" in e.str() or "client proof" in e.str() for e in errors)
    assert failed_authentications(broker) > before
    log = broker.log_path.read_bytes()
    assert b"authentication failed" in log
    assert b"alice-secret" not in log and b"wrong" not in log.split(b"authentication failed")[-1]
    # Honest clients are unaffected.
    assert AdminClient(scram_ssl(broker, ca)).list_topics(timeout=10).brokers


def frame(api_key: int, version: int, body: bytes = b"") -> bytes:
    header = struct.pack(">hhih", api_key, version, 7, 4) + b"test"
    return struct.pack(">i", len(header) + len(body)) + header + body


def test_a_request_before_authentication_closes_the_connection(broker):
    with socket.create_connection(("127.0.0.1", broker.sasl_port), timeout=10) as s:
        s.sendall(frame(3, 1, struct.pack(">i", -1)))  # Metadata v1, all topics
        s.settimeout(10)
        assert s.recv(4096) == b"", "no answer before authentication"
    # The plaintext listener of the same broker serves it.
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:
        s.sendall(frame(3, 1, struct.pack(">i", -1)))
        s.settimeout(10)
        assert len(s.recv(4096)) > 8


@pytest.mark.parametrize("after_handshake", [False, True])
def test_a_large_request_before_authentication_is_closed_unread(broker, after_handshake):
    """Kafka's sasl.server.max.receive.size (512 KiB): a connection that has not
    authenticated cannot make the broker hold a large request. Declaring 100 MiB closes
    it at once, before the body is read; it is counted and logged."""
    before = broker.metric("corelog_unauthenticated_oversize_requests")
    with socket.create_connection(("127.0.0.1", broker.sasl_port), timeout=10) as s:
        if after_handshake:
            s.sendall(frame(17, 1, kafka_string(b"PLAIN")))
            size, = struct.unpack(">i", recv_exact(s, 4))
            assert struct.unpack_from(">ih", recv_exact(s, size)) == (7, 0)
        s.sendall(struct.pack(">i", 100 << 20) + b"\0" * 65536)
        s.settimeout(5)
        started = time.monotonic()
        try:
            assert s.recv(4096) == b"", "closed, not answered"
        except ConnectionResetError:
            pass
        assert time.monotonic() - started < 4, "closed at once, not after a body timeout"
    assert broker.metric("corelog_unauthenticated_oversize_requests") == before + 1
    assert "sasl.server.max.receive.size" in broker.log_path.read_text(errors="replace")
    # Honest clients of the same listener are unaffected.
    plain = AdminClient({"bootstrap.servers": f"127.0.0.1:{broker.sasl_port}",
                         "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                         "sasl.username": "carol", "sasl.password": "carol-secret"})
    assert plain.list_topics(timeout=10).brokers


def kafka_string(s: bytes) -> bytes:
    return struct.pack(">h", len(s)) + s


def recv_exact(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


@pytest.mark.parametrize("password, accepted", [(b"carol-secret", True), (b"wrong", False)])
def test_sasl_handshake_v0_then_bare_tokens_as_old_clients_send_them(broker, password, accepted):
    """Before KIP-152 (SaslHandshake v0, still sent by kafka-python 2.0 and old Sarama)
    the tokens follow without a Kafka header: a size and the token each way."""
    with socket.create_connection(("127.0.0.1", broker.sasl_port), timeout=10) as s:
        s.sendall(frame(17, 0, kafka_string(b"PLAIN")))
        size, = struct.unpack(">i", recv_exact(s, 4))
        answer = recv_exact(s, size)
        assert struct.unpack_from(">ih", answer) == (7, 0), "handshake accepted"
        token = b"\0carol\0" + password
        s.sendall(struct.pack(">i", len(token)) + token)
        if not accepted:
            assert s.recv(16) == b"", "a refused bare token closes the connection"
            return
        assert recv_exact(s, 4) == struct.pack(">i", 0), "PLAIN's empty answer, framed"
        s.sendall(frame(3, 1, struct.pack(">i", -1)))
        size, = struct.unpack(">i", recv_exact(s, 4))
        assert struct.unpack(">i", recv_exact(s, size)[:4]) == (7,), "then Kafka requests"


def test_kcat_scram_over_sasl_ssl(broker, ca):
    import shutil
    import subprocess
    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed")
    out = subprocess.run(
        ["kcat", "-b", f"localhost:{broker.sasl_ssl_port}", "-X", "security.protocol=SASL_SSL",
         "-X", f"ssl.ca.location={ca.cert}", "-X", "sasl.mechanism=SCRAM-SHA-512",
         "-X", "sasl.username=alice", "-X", "sasl.password=alice-secret", "-L", "-m", "10"],
        capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert f"localhost:{broker.sasl_ssl_port}" in out.stdout or \
        f"127.0.0.1:{broker.sasl_ssl_port}" in out.stdout


class ReauthBroker(Broker):
    """A SASL_PLAINTEXT listener with PLAIN users and a 1.5 s session lifetime."""

    def __init__(self, workdir: Path):
        super().__init__(workdir)
        self.sasl_port = free_port()
        config = workdir / "server.toml"
        config.write_text(
            '[listener.name.sasl_plaintext]\n'
            '"sasl.enabled.mechanisms" = "PLAIN"\n'
            '"connections.max.reauth.ms" = "1500"\n'
            f"'plain.sasl.jaas.config' = '{JAAS}'\n")
        self.extra_args += ["--listeners", f"PLAINTEXT://127.0.0.1:{self.port},"
                                           f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}",
                            "--config", str(config)]


def _plain_login(sock, cid: int, user: str, password: str) -> tuple[int, str | None, int]:
    """SaslHandshake v1 + SaslAuthenticate v2 with PLAIN on `sock`:
    (error code, error message, session_lifetime_ms)."""
    sock.sendall(kwire.request(17, 1, cid, kwire.string("PLAIN")))
    _, body = kwire.recv_response(sock)
    assert struct.unpack(">h", body[:2])[0] == 0, "handshake refused"
    token = b"\0" + user.encode() + b"\0" + password.encode()
    sock.sendall(kwire.request(36, 2, cid + 1, kwire.uvarint(len(token) + 1) + token + kwire.tags(),
                               header_v2=True))
    _, body = kwire.recv_response(sock)
    r = kwire.Flex(body)
    r.skip_tags()  # response header v1
    code, message = r.i16(), r.c_string()
    r.take(r.c_len())  # auth bytes
    return code, message, r.i64()


def _metadata_ok(sock, cid: int) -> None:
    sock.sendall(kwire.metadata_v1(cid, []))
    got, _ = kwire.recv_response(sock)
    assert got == cid


def test_sessions_last_connections_max_reauth_ms_and_are_renewed_on_the_connection(tmp_path):
    """KIP-368 on the wire: SaslAuthenticate tells the session's lifetime; the client
    authenticates again on the same connection as the same principal and goes on; as
    another principal it is refused and closed; a session let expire is closed at its
    next request. librdkafka's and Java's re-authentication run over this exchange."""
    b = ReauthBroker(tmp_path / "reauth").start()
    try:
        bootstrap = f"127.0.0.1:{b.sasl_port}"
        with kwire.connect(bootstrap) as s:
            code, _, lifetime = _plain_login(s, 1, "carol", "carol-secret")
            assert (code, lifetime) == (0, 1500)
            _metadata_ok(s, 3)
            time.sleep(1.0)
            assert _plain_login(s, 4, "carol", "carol-secret")[0] == 0
            time.sleep(1.0)  # past the first session's end, within the renewed one
            _metadata_ok(s, 6)
            code, message, _ = _plain_login(s, 7, "admin", "admin-secret")
            assert code == 58 and "Cannot change principals" in message, (code, message)
            assert kwire.wait_closed(s) in ("eof", "reset"), "closed after another principal"
        with kwire.connect(bootstrap) as s:
            assert _plain_login(s, 1, "carol", "carol-secret")[0] == 0
            time.sleep(2.0)
            s.sendall(kwire.metadata_v1(3, []))
            with pytest.raises((kwire.Closed, TimeoutError)):
                kwire.recv_response(s, timeout=5)
        # librdkafka re-authenticates on its own and keeps producing across sessions.
        conf = {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN", "sasl.username": "carol",
                "sasl.password": "carol-secret"}
        accepted = b.metric("corelog_connections_accepted")
        p = Producer(conf)
        delivered = []
        for i in range(8):
            p.produce("reauth", value=b"v%d" % i, on_delivery=lambda e, m: delivered.append(e))
            p.flush(10)
            time.sleep(0.5)
        assert delivered == [None] * 8, delivered
        # Across about three session lifetimes its connections stayed (bootstrap and
        # broker connection): it renewed the sessions instead of being closed.
        assert b.metric("corelog_connections_accepted") - accepted <= 2
    finally:
        b.stop()


def test_a_flood_of_failed_logins_does_not_starve_honest_clients(broker):
    """32 clients guessing passwords as fast as the broker answers them (each refusal
    held back connection.failed.authentication.delay.ms, on that connection only) while
    an honest client logs in and makes requests: its logins and round trips stay fast,
    and every refusal is counted."""
    before = failed_authentications(broker)
    stop = threading.Event()
    refused = []

    def guess() -> None:
        while not stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", broker.sasl_port), timeout=10) as s:
                    code, _, _ = _plain_login(s, 1, "admin", "guess")
                    refused.append(code)
            except (OSError, AssertionError):
                pass

    attackers = [threading.Thread(target=guess, daemon=True) for _ in range(32)]
    for t in attackers:
        t.start()
    try:
        time.sleep(1)
        started = time.monotonic()
        with kwire.connect(f"127.0.0.1:{broker.sasl_port}") as s:
            code, _, _ = _plain_login(s, 1, "carol", "carol-secret")
            login_s = time.monotonic() - started
            assert code == 0
            worst = 0.0
            for i in range(50):
                t0 = time.monotonic()
                _metadata_ok(s, 10 + i)
                worst = max(worst, time.monotonic() - t0)
    finally:
        stop.set()
        for t in attackers:
            t.join(15)
    assert refused and all(c == 58 for c in refused), set(refused)  # SASL_AUTHENTICATION_FAILED
    assert login_s < 1.0 and worst < 1.0, (login_s, worst)
    assert failed_authentications(broker) >= before + 50
