"""A 3-broker cluster secured end to end: every Kafka listener is SASL_SSL, replication
runs on it (brokers log in to one another with PLAIN and present their certificates),
and the controller port — the quorum's votes and log, registrations, heartbeats — is
SASL_SSL with mutual TLS required. ACLs are on; the brokers' principal is a super user.

A SCRAM user granted a topic produces with acks=all through a broker's SIGKILL and
restart, and reads back every acknowledged record; the load generator does the same
over SASL_SSL with SCRAM. A process without the cluster's
credentials is refused on every port: a wrong password or a plaintext client on the
Kafka listener; no TLS, a certificate from another CA, or a wrong password on the
controller port; and a real broker started with a wrong controller password never
joins — each refusal logged and counted by the broker that refused it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import ssl
import struct
import tempfile
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType,
                                   ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)

from certs import CertificateAuthority
from launcher import Broker, BrokerStartError, Cluster, controller_voters, corelog_bin

TIMEOUT = 30
BROKER_PASSWORD = "broker-secret"
ADMIN_PASSWORD = "admin-secret"


def jaas(password: str = BROKER_PASSWORD) -> str:
    """The listeners' PLAIN users (brokers and the admin) and this broker's own login."""
    return ('org.apache.kafka.common.security.plain.PlainLoginModule required '
            f'username="broker" password="{password}" '
            f'user_broker="{BROKER_PASSWORD}" user_admin="{ADMIN_PASSWORD}";')


class SecuredBroker(Broker):
    """One member: INTERNAL (SASL_SSL, inter-broker, PLAIN and SCRAM-SHA-512) and the
    controller port (SASL_SSL, PLAIN, client certificates required). ``--node-id`` and
    ``--controller-voters`` come from the cluster (launcher.Cluster)."""

    def __init__(self, workdir: Path, node_id: int, ca: CertificateAuthority,
                 controller_password: str = BROKER_PASSWORD):
        super().__init__(workdir, shards=1, name=f"node{node_id}")
        self.node_id = node_id
        cert = ca.issue(f"broker{node_id}", f"broker{node_id}", server=True, client=True)
        config = workdir / "server.toml"
        # Passwords go in the config file, not on a command line the log echoes.
        config.write_text(
            '"authorizer.class.name" = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"\n'
            '"super.users" = "User:broker;User:admin"\n'
            '"allow.everyone.if.no.acl.found" = false\n'
            f'"ssl.keystore.location" = "{cert.chain}"\n'
            f'"ssl.truststore.location" = "{ca.cert}"\n'
            '"sasl.mechanism.inter.broker.protocol" = "PLAIN"\n'
            '"sasl.mechanism.controller.protocol" = "PLAIN"\n'
            '"connection.failed.authentication.delay.ms" = 100\n'
            '[listener.name.internal]\n'
            '"sasl.enabled.mechanisms" = "PLAIN,SCRAM-SHA-512"\n'
            f"'plain.sasl.jaas.config' = '{jaas()}'\n"
            '[listener.name.controller]\n'
            '"sasl.enabled.mechanisms" = "PLAIN"\n'
            '"ssl.client.auth" = "required"\n'
            f"'plain.sasl.jaas.config' = '{jaas(controller_password)}'\n")
        self.extra_args += [
            "--listeners", f"INTERNAL://127.0.0.1:{self.port}",
            "--listener-security-protocol-map", "INTERNAL:SASL_SSL,CONTROLLER:SASL_SSL",
            "--inter-broker-listener-name", "INTERNAL",
            "--controller-listener-names", "CONTROLLER",
            "--partition-balancer-enable", "false",
            "--config", str(config),
        ]


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return CertificateAuthority(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def cluster(ca, tmp_path_factory):
    secured = Cluster([SecuredBroker(tmp_path_factory.mktemp(f"secured-n{i}"), i, ca)
                       for i in (1, 2, 3)])
    try:
        secured.start()
        yield secured.brokers
    finally:
        secured.teardown()


def client(ca, brokers, user: str, password: str, mechanism: str = "SCRAM-SHA-512",
           **extra) -> dict:
    return {"bootstrap.servers": ",".join(f"localhost:{b.port}" for b in brokers if b.is_running()),
            "security.protocol": "SASL_SSL", "ssl.ca.location": str(ca.cert),
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
            **extra}


def admin_of(ca, brokers) -> AdminClient:
    return AdminClient(client(ca, brokers, "admin", ADMIN_PASSWORD, mechanism="PLAIN"))


GROUP = "secured-readers"


@pytest.fixture(scope="module")
def alice(cluster, ca):
    """A SCRAM-SHA-512 user (in the metadata log) who may write and read the topics
    prefixed `secured-` and read in one group; the admin creates the topics."""
    admin = admin_of(ca, cluster)
    for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
            b"alice-secret")]).values():
        f.result(TIMEOUT)
    grants = [AclBinding(ResourceType.TOPIC, "secured-", ResourcePatternType.PREFIXED,
                         "User:alice", "*", op, AclPermissionType.ALLOW)
              for op in (AclOperation.WRITE, AclOperation.READ)]
    grants.append(AclBinding(ResourceType.GROUP, GROUP, ResourcePatternType.LITERAL,
                             "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW))
    for f in admin.create_acls(grants).values():
        f.result(TIMEOUT)
    return admin


def create_topic(admin: AdminClient, topic: str) -> None:
    for f in admin.create_topics([NewTopic(topic, 3, 3, config={"min.insync.replicas": "2"})]
                                 ).values():
        f.result(TIMEOUT)


def test_a_scram_user_loses_nothing_acknowledged_across_a_broker_kill(cluster, ca, alice):
    admin = alice
    topic, group = "secured-orders", GROUP
    create_topic(admin, topic)

    acked, failed = [], []

    def produce(n: int, start: int) -> None:
        p = Producer(client(ca, cluster, "alice", "alice-secret", acks="all",
                            **{"enable.idempotence": True, "message.timeout.ms": 60000}))

        def done(err, msg):
            (failed if err else acked).append(err or msg.value().decode())
        for i in range(start, start + n):
            p.produce(topic, value=f"m{i}".encode(), on_delivery=done)
            if i % 50 == 0:
                p.poll(0)
        assert p.flush(90) == 0

    # acks=all with min.insync.replicas=2 completes only when followers have fetched
    # over SASL_SSL and authenticated as the cluster's principal.
    produce(300, 0)
    assert not failed and len(acked) == 300
    victim = cluster[1]
    victim.kill()
    produce(300, 300)
    victim.start()
    produce(300, 600)
    assert not failed, failed[:3]

    c = Consumer(client(ca, cluster, "alice", "alice-secret", **{
        "group.id": group, "auto.offset.reset": "earliest", "enable.partition.eof": True}))
    c.subscribe([topic])
    seen, eof, deadline = set(), set(), time.time() + 60
    try:
        while len(eof) < 3 and time.time() < deadline:
            m = c.poll(1)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
                    continue
                raise KafkaException(m.error())
            seen.add(m.value().decode())
    finally:
        c.close()
    assert set(acked) <= seen, f"{len(set(acked) - seen)} acknowledged records lost"

    # The restarted broker caught up over the secured listener: it is back in every ISR.
    deadline = time.time() + 60
    while True:
        md = admin.list_topics(topic, timeout=10).topics[topic]
        if all(victim.node_id in p.isrs for p in md.partitions.values()):
            break
        assert time.time() < deadline, {p.id: p.isrs for p in md.partitions.values()}
        time.sleep(0.5)


def test_the_load_generator_speaks_sasl_ssl_with_scram(cluster, ca, alice):
    """corelog-load (the client crate the replica fetchers use too): TLS with the
    broker's name verified, SCRAM-SHA-512, acks=all on a replicated topic."""
    create_topic(alice, "secured-load")
    load = corelog_bin().parent / "corelog-load"
    args = [str(load), "produce", "--bootstrap", f"localhost:{cluster[0].port}",
            "--topic", "secured-load", "--security-protocol", "SASL_SSL",
            "--ssl-ca-location", str(ca.cert), "--sasl-mechanism", "SCRAM-SHA-512",
            "--sasl-username", "alice", "--acks", "all", "--messages", "5000",
            "--message-size", "512"]

    def run(password: str, out: Path) -> subprocess.CompletedProcess:
        env = {**os.environ, "CORELOG_LOAD_SASL_PASSWORD": password}
        return subprocess.run([*args, "--json", str(out)], env=env, capture_output=True,
                              text=True, timeout=120)

    with tempfile.TemporaryDirectory() as d:
        ok = run("alice-secret", Path(d) / "ok.json")
        assert ok.returncode == 0, ok.stderr
        report = json.loads((Path(d) / "ok.json").read_text())
        assert report["messages"] == 5000, report
        refused = run("not-alices-password-7f3", Path(d) / "refused.json")
        assert refused.returncode != 0
        assert "SaslAuthenticate" in refused.stderr, refused.stderr
        assert "not-alices-password-7f3" not in refused.stderr


def test_wrong_credentials_and_plaintext_are_refused_on_the_kafka_listener(cluster, ca):
    b = cluster[0]
    failed_before = b.metric("corelog_failed_authentications")
    bad = AdminClient(client(ca, [b], "admin", "wrong", mechanism="PLAIN"))
    with pytest.raises(KafkaException):
        bad.list_topics(timeout=10)
    plain = AdminClient({"bootstrap.servers": b.bootstrap})
    with pytest.raises(KafkaException):
        plain.list_topics(timeout=5)
    assert b.metric("corelog_failed_authentications") > failed_before


def controller_frame(body: dict) -> bytes:
    # protocol: the controller protocol of this release (controller/src/rpc.rs PROTOCOL).
    data = json.dumps({"cluster_id": None, "body": body, "protocol": 1}).encode()
    return struct.pack(">I", len(data)) + data


def read_controller_frame(sock) -> dict | None:
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    (n,) = struct.unpack(">I", head)
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return json.loads(data)


def tls_to_controller(b: Broker, ca: CertificateAuthority, cert) -> ssl.SSLSocket:
    ctx = ssl.create_default_context(cafile=str(ca.cert))
    ctx.load_cert_chain(str(cert.cert), str(cert.key))
    raw = socket.create_connection(("127.0.0.1", b.controller_port), timeout=10)
    return ctx.wrap_socket(raw, server_hostname="localhost")


def login(password: str) -> bytes:
    return controller_frame({"Authenticate": {"mechanism": "PLAIN", "username": "broker",
                                              "password": password}})


def test_the_controller_port_refuses_every_process_without_the_clusters_credentials(
        cluster, ca, tmp_path):
    b = cluster[0]
    failed_before = b.metric("corelog_failed_authentications")

    # Plaintext on a TLS port: the handshake never completes, nothing is served.
    with socket.create_connection(("127.0.0.1", b.controller_port), timeout=10) as s:
        s.sendall(controller_frame("DescribeQuorum"))
        s.settimeout(15)
        try:
            assert read_controller_frame(s) is None
        except (ConnectionResetError, socket.timeout):
            pass

    # A certificate from another CA: the handshake fails.
    rogue_ca = CertificateAuthority(tmp_path / "rogue", name="rogue-ca")
    rogue = rogue_ca.issue("rogue", "broker9", server=True, client=True)
    with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError, OSError)):
        ctx = ssl.create_default_context(cafile=str(ca.cert))
        ctx.load_cert_chain(str(rogue.cert), str(rogue.key))
        raw = socket.create_connection(("127.0.0.1", b.controller_port), timeout=10)
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            s.sendall(login(BROKER_PASSWORD))
            assert read_controller_frame(s) is None
            raise ConnectionResetError("closed without an answer")

    # The cluster's certificate but a wrong password: refused, then closed.
    cert = ca.issue("intruder", "broker1", server=True, client=True)
    with tls_to_controller(b, ca, cert) as s:
        s.sendall(login("wrong"))
        assert read_controller_frame(s) == {"Authenticate": {"Err": "AuthenticationFailed"}}
        assert read_controller_frame(s) is None
    # ... and no request is served before the login.
    with tls_to_controller(b, ca, cert) as s:
        s.sendall(controller_frame("DescribeQuorum"))
        assert read_controller_frame(s) == {"Authenticate": {"Err": "AuthenticationFailed"}}

    # A login frame claiming 100 MiB is refused before anything is read into memory.
    with tls_to_controller(b, ca, cert) as s:
        s.sendall(struct.pack(">I", 100 << 20) + b"{")
        assert read_controller_frame(s) is None

    # With the right password the port answers.
    with tls_to_controller(b, ca, cert) as s:
        s.sendall(login(BROKER_PASSWORD))
        assert read_controller_frame(s) == {"Authenticate": {"Ok": None}}
        s.sendall(controller_frame("DescribeQuorum"))
        answer = read_controller_frame(s)
        assert "DescribeQuorum" in answer, answer

    assert b.metric("corelog_failed_authentications") >= failed_before + 4


def test_a_broker_with_a_wrong_password_never_joins(cluster, ca):
    workdir = Path(tempfile.mkdtemp(prefix="corelog-it-intruder-"))
    intruder = SecuredBroker(workdir, 4, ca, controller_password="guessed")
    intruder.extra_args += ["--node-id", "4", "--controller-voters", controller_voters(cluster)]
    intruder.launch()
    try:
        with pytest.raises(BrokerStartError):
            intruder.wait_healthy(timeout=15)
        admin = admin_of(ca, cluster)
        assert 4 not in admin.list_topics(timeout=10).brokers
    finally:
        intruder.begin_teardown()
        intruder.finish_teardown()
        log = intruder.log_path.read_text()
    assert "refused this node's credentials" in log, log[-2000:]
