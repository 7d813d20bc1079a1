"""SASL/OAUTHBEARER with KIP-768's JWT validation, against the real broker: the test is
its own identity provider (EC P-256 keys made here with `cryptography`, a JWK set file
the broker reads through a file: URL, ES256 tokens signed here). librdkafka (an
oauth_cb) and kafka-python (a token provider) produce and consume with a good token; a
token for another audience, an expired one, one signed by a key outside the set, and
an unsigned one (`alg: none`) are refused: the client reports an authentication
error, nothing is produced, the refusal is logged and counted, and no token appears in
the log. On the wire: Kafka's `{"status":"invalid_token"}` challenge, then
SASL_AUTHENTICATION_FAILED; the session lifetime bounded by the token's exp
(KIP-368); a key added to the JWK set is used without a restart; a listener without a
JWK set, or with an https one, stops the broker at start-up."""

from __future__ import annotations

import base64
import json
import struct
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

import kwire
from launcher import Broker, BrokerStartError, free_port
from test_kafka_python import round_trip

TIMEOUT = 30
ISSUER = "https://idp.corelog.test"
AUDIENCE = "corelog"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class SigningKey:
    """An EC P-256 key of the test's identity provider, signing ES256 JWTs."""

    def __init__(self, kid: str):
        self.kid = kid
        self.key = ec.generate_private_key(ec.SECP256R1())

    def jwk(self) -> dict:
        n = self.key.public_key().public_numbers()
        return {"kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": self.kid,
                "x": b64url(n.x.to_bytes(32, "big")), "y": b64url(n.y.to_bytes(32, "big"))}

    def token(self, kid: str | None = None, **overrides) -> str:
        now = int(time.time())
        claims = {"sub": "alice", "iss": ISSUER, "aud": AUDIENCE, "scope": "kafka",
                  "iat": now, "exp": now + 3600, **overrides}
        header = {"alg": "ES256", "typ": "JWT", "kid": kid or self.kid}
        signing_input = (b64url(json.dumps(header).encode()) + "."
                         + b64url(json.dumps(claims).encode()))
        r, s = decode_dss_signature(self.key.sign(signing_input.encode(),
                                                  ec.ECDSA(hashes.SHA256())))
        return signing_input + "." + b64url(r.to_bytes(32, "big") + s.to_bytes(32, "big"))


def unsigned_token(**claims) -> str:
    now = int(time.time())
    body = {"sub": "alice", "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 3600,
            **claims}
    return (b64url(json.dumps({"alg": "none", "kid": "idp-1"}).encode()) + "."
            + b64url(json.dumps(body).encode()) + ".")


def write_jwks(path: Path, *keys: SigningKey) -> None:
    # Written aside and renamed, as a job refreshing the file would.
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"keys": [k.jwk() for k in keys]}))
    tmp.rename(path)


class OAuthBroker(Broker):
    """A SASL_PLAINTEXT listener with OAUTHBEARER beside a PLAINTEXT one."""

    def __init__(self, workdir: Path, jwks: Path | None, url: str | None = None):
        super().__init__(workdir)
        self.sasl_port = free_port()
        lines = ['[listener.name.sasl_plaintext]', '"sasl.enabled.mechanisms" = "OAUTHBEARER"']
        if jwks is not None or url is not None:
            lines.append(f'"sasl.oauthbearer.jwks.endpoint.url" = "{url or "file://" + str(jwks)}"')
        # The KIP-768 keys broker-wide; the JWK set per listener.
        config = workdir / "server.toml"
        config.write_text(
            f'"sasl.oauthbearer.expected.audience" = "other-service, {AUDIENCE}"\n'
            f'"sasl.oauthbearer.expected.issuer" = "{ISSUER}"\n'
            '"connection.failed.authentication.delay.ms" = "200"\n'
            + "\n".join(lines) + "\n")
        self.extra_args += ["--listeners", f"PLAINTEXT://127.0.0.1:{self.port},"
                                           f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}",
                            "--config", str(config)]

    def metric(self, name: str) -> float:
        text = urllib.request.urlopen(f"http://{self.http}/metrics", timeout=5).read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(name))


@pytest.fixture(scope="module")
def idp(tmp_path_factory):
    """(the trusted key, a key outside the set, the JWK set file)."""
    d = tmp_path_factory.mktemp("idp")
    trusted, stranger = SigningKey("idp-1"), SigningKey("idp-x")
    jwks = d / "jwks.json"
    write_jwks(jwks, trusted)
    return trusted, stranger, jwks


@pytest.fixture(scope="module")
def broker(idp, tmp_path_factory):
    b = OAuthBroker(tmp_path_factory.mktemp("oauth-broker"), idp[2]).start()
    yield b
    b.stop()


def oauth_conf(broker, token: str, errors: list | None = None) -> dict:
    def oauth_cb(_config):
        # The lifetime librdkafka is told is an hour whatever the token says: the
        # broker, not the client, must refuse an expired token.
        return token, time.time() + 3600, "alice"
    conf = {"bootstrap.servers": f"127.0.0.1:{broker.sasl_port}",
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "OAUTHBEARER",
            "oauth_cb": oauth_cb}
    if errors is not None:
        conf["error_cb"] = errors.append
    return conf


def test_librdkafka_produces_and_consumes_with_a_signed_token(broker, idp):
    trusted = idp[0]
    token = trusted.token()
    conf = oauth_conf(broker, token)
    p = Producer(conf)
    for i in range(100):
        p.produce("oauth-topic", b"m%d" % i)
    assert p.flush(TIMEOUT) == 0
    c = Consumer({**conf, "group.id": "oauth-group", "auto.offset.reset": "earliest"})
    got = []
    try:
        c.subscribe(["oauth-topic"])
        deadline = time.monotonic() + TIMEOUT
        while len(got) < 100 and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and not m.error():
                got.append(m.value())
    finally:
        c.close()
    assert got == [b"m%d" % i for i in range(100)]
    assert token.encode() not in broker.log_path.read_bytes()


def test_kafka_python_with_a_token_provider(broker, idp):
    try:
        from kafka.net.sasl.oauth import AbstractTokenProvider
    except ImportError:  # kafka-python 2.x
        from kafka.sasl.oauth import AbstractTokenProvider

    class Provider(AbstractTokenProvider):
        def token(self):
            return idp[0].token()

    got = round_trip("oauth-kafka-python", 20, bootstrap_servers=f"127.0.0.1:{broker.sasl_port}",
                     security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER",
                     sasl_oauth_token_provider=Provider())
    assert got == [b"kp-%d" % i for i in range(20)]


REFUSED = {
    "wrong-audience": (lambda k, s: k.token(aud="someone-else"), b"audience"),
    "expired": (lambda k, s: k.token(exp=int(time.time()) - 600), b"expired"),
    "forged": (lambda k, s: s.token(kid=k.kid), b"signature does not verify"),
    "unknown-kid": (lambda k, s: s.token(), b"no key"),
    "alg-none": (lambda k, s: unsigned_token(), b"algorithm"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_refused_token_fails_the_client_and_nothing_is_produced(broker, idp, case):
    make, why = REFUSED[case]
    token = make(idp[0], idp[1])
    topic = f"oauth-refused-{case}"
    before = broker.metric("corelog_failed_authentications")
    errors: list = []
    p = Producer({**oauth_conf(broker, token, errors), "message.timeout.ms": 5000})
    delivered = []
    p.produce(topic, b"never", on_delivery=lambda e, m: delivered.append(e))
    p.flush(8)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    assert delivered and delivered[0] is not None, "the message must not be delivered"
    assert broker.metric("corelog_failed_authentications") > before
    # Nothing reached the broker: the topic was never even created.
    topics = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10).topics
    assert topic not in topics
    # Logged with why (at most a line a second per shard: a refusal of the case before
    # may hold this one back a little).
    deadline = time.monotonic() + 5
    while True:
        log = broker.log_path.read_bytes()
        refusals = [line for line in log.splitlines() if b"authentication failed" in line]
        if any(why in line for line in refusals) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert any(why in line for line in refusals), refusals[-3:]
    assert token.encode() not in log
    assert token.rsplit(".", 1)[0].encode() not in log, "not even the unsigned part"


def _oauth_login(sock, cid: int, message: bytes) -> tuple[int, str | None, bytes, int]:
    """SaslAuthenticate v2 with `message`: (error code, error message, auth bytes,
    session_lifetime_ms)."""
    sock.sendall(kwire.request(36, 2, cid, kwire.uvarint(len(message) + 1) + message
                               + kwire.tags(), header_v2=True))
    _, body = kwire.recv_response(sock)
    r = kwire.Flex(body)
    r.skip_tags()  # response header v1
    code, error = r.i16(), r.c_string()
    auth = r.take(r.c_len())
    return code, error, auth, r.i64()


def _handshake(sock, cid: int) -> None:
    sock.sendall(kwire.request(17, 1, cid, kwire.string("OAUTHBEARER")))
    _, body = kwire.recv_response(sock)
    assert struct.unpack(">h", body[:2])[0] == 0, "handshake refused"


def first_message(token: str) -> bytes:
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode()


def test_on_the_wire_kafkas_error_challenge_and_the_session_bounded_by_exp(broker, idp):
    bootstrap = f"127.0.0.1:{broker.sasl_port}"
    with kwire.connect(bootstrap) as s:
        _handshake(s, 1)
        code, _, auth, lifetime = _oauth_login(s, 2, first_message(idp[0].token(exp=int(time.time()) + 120)))
        assert code == 0 and auth == b""
        # No connections.max.reauth.ms here: the session ends with the token.
        assert 110_000 < lifetime <= 120_000, lifetime
        s.sendall(kwire.metadata_v1(3, []))
        assert kwire.recv_response(s)[0] == 3
    with kwire.connect(bootstrap) as s:
        _handshake(s, 1)
        code, _, auth, _ = _oauth_login(s, 2, first_message(idp[0].token(iss="https://evil")))
        assert (code, auth) == (0, b'{"status":"invalid_token"}')
        code, error, _, _ = _oauth_login(s, 3, b"\x01")
        assert (code, error) == (58, '{"status":"invalid_token"}')
        assert kwire.wait_closed(s) in ("eof", "reset")
    with kwire.connect(bootstrap) as s:
        _handshake(s, 1)
        code, error, _, _ = _oauth_login(s, 2, b"n,,auth=Bearer x")
        assert code == 58 and "OAUTHBEARER" in error, (code, error)


def test_a_key_added_to_the_jwk_set_is_used_without_a_restart(broker, idp, tmp_path):
    trusted, _, jwks = idp
    rotated = SigningKey("idp-2")
    bootstrap = f"127.0.0.1:{broker.sasl_port}"
    write_jwks(jwks, trusted, rotated)
    try:
        with kwire.connect(bootstrap) as s:
            _handshake(s, 1)
            code, _, auth, _ = _oauth_login(s, 2, first_message(rotated.token()))
            assert (code, auth) == (0, b""), auth
    finally:
        write_jwks(jwks, trusted)


@pytest.mark.parametrize("url, why", [
    (None, b"unsecured validator"),
    ("https://idp.corelog.test/keys", b"only a file: URL is served"),
])
def test_a_listener_without_a_usable_jwk_set_stops_the_broker(tmp_path, url, why):
    b = OAuthBroker(tmp_path, None, url)
    with pytest.raises(BrokerStartError):
        b.start()
    assert why in b.log_path.read_bytes()


class UnsecuredOAuthBroker(Broker):
    """OAUTHBEARER with Kafka's unsecured validator, named explicitly on the listener:
    the opt-in for development setups and clients' own tests."""

    def __init__(self, workdir: Path, required_scope: str | None = None):
        super().__init__(workdir)
        self.sasl_port = free_port()
        options = f' unsecuredValidatorRequiredScope="{required_scope}"' if required_scope else ""
        config = workdir / "server.toml"
        config.write_text(
            '[listener.name.sasl_plaintext]\n'
            '"sasl.enabled.mechanisms" = "OAUTHBEARER"\n'
            '"oauthbearer.sasl.server.callback.handler.class" = '
            '"org.apache.kafka.common.security.oauthbearer.internals.unsecured.'
            'OAuthBearerUnsecuredValidatorCallbackHandler"\n'
            "'oauthbearer.sasl.jaas.config' = 'org.apache.kafka.common.security.oauthbearer."
            f"OAuthBearerLoginModule required{options};'\n")
        self.extra_args += ["--listeners", f"PLAINTEXT://127.0.0.1:{self.port},"
                                           f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}",
                            "--config", str(config)]


def unsecured_conf(port: int, principal: str, extra: str = "") -> dict:
    # librdkafka's own unsecured tokens (alg none), as clients' tests make them.
    return {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": True,
            "sasl.oauthbearer.config": f"principal={principal}{extra}"}


def test_unsigned_tokens_only_where_the_operator_names_the_unsecured_validator(tmp_path):
    b = UnsecuredOAuthBroker(tmp_path / "dev").start()
    try:
        log = b.log_path.read_text(errors="replace")
        assert "UNSIGNED tokens" in log and "WARN" in log, "said loudly at start"
        conf = unsecured_conf(b.sasl_port, "alice")
        p = Producer(conf)
        for i in range(20):
            p.produce("unsecured-topic", b"u%d" % i)
        assert p.flush(TIMEOUT) == 0
        c = Consumer({**conf, "group.id": "unsecured-group", "auto.offset.reset": "earliest"})
        got = []
        try:
            c.subscribe(["unsecured-topic"])
            deadline = time.monotonic() + TIMEOUT
            while len(got) < 20 and time.monotonic() < deadline:
                m = c.poll(1.0)
                if m is not None and not m.error():
                    got.append(m.value())
        finally:
            c.close()
        assert got == [b"u%d" % i for i in range(20)]
        # Kafka's checks still hold: an expired or a signed token is refused.
        assert _accepted(b.sasl_port, unsecured_token())
        assert not _accepted(b.sasl_port, unsecured_token(exp=time.time() - 60,
                                                          iat=time.time() - 120))
        assert not _accepted(b.sasl_port, unsecured_token() + "c2lnbmF0dXJl")
    finally:
        b.stop()

    # A required scope (unsecuredValidatorRequiredScope) refuses a token without it.
    scoped = UnsecuredOAuthBroker(tmp_path / "scoped", required_scope="kafka").start()
    try:
        assert not _accepted(scoped.sasl_port, unsecured_token())
        assert _accepted(scoped.sasl_port, unsecured_token(scope="kafka"))
    finally:
        scoped.stop()


def _accepted(port: int, token: str) -> bool:
    with kwire.connect(f"127.0.0.1:{port}") as s:
        _handshake(s, 1)
        code, _, auth, _ = _oauth_login(s, 2, first_message(token))
        return code == 0 and auth == b""


def unsecured_token(**claims) -> str:
    """A token as Kafka's unsecured login handler makes it: seconds with milliseconds
    (`time.milliseconds() / 1000.0`), no kid."""
    now = int(time.time() * 1000) / 1000
    body = {"sub": "alice", "iat": now, "exp": now + 3600, **claims}
    return (b64url(json.dumps({"alg": "none"}).encode()) + "."
            + b64url(json.dumps(body).encode()) + ".")
