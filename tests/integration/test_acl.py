"""ACLs (Kafka's StandardAuthorizer model) with real clients on a broker whose SASL
listener authenticates PLAIN users: ACLs created, described and deleted with the
AdminClient through the metadata quorum; a principal without READ gets
TOPIC_AUTHORIZATION_FAILED, DENY beats ALLOW, a PREFIXED ACL covers topics created
after it, super.users pass; Metadata leaves out what a principal may not describe;
every refusal is counted and logged with principal, address, resource and operation;
an unauthenticated client on the plaintext listener (User:ANONYMOUS) gets nothing it
was not granted; invalid ACLs and filters are INVALID_REQUEST; a broker without an
authorizer answers ACL requests SECURITY_DISABLED; on a mutual-TLS listener the client
certificate's subject, mapped by ssl.principal.mapping.rules, is the principal."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                   AdminClient, NewTopic, ResourcePatternType, ResourceType)

import kwire
from certs import CertificateAuthority
from launcher import Broker, free_port

TIMEOUT = 30
USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}


class AclBroker(Broker):
    """PLAINTEXT (unauthenticated: User:ANONYMOUS) beside SASL_PLAINTEXT with PLAIN users,
    ACLs on, User:admin a super user."""

    def __init__(self, workdir: Path):
        super().__init__(workdir)
        self.sasl_port = free_port()
        users = " ".join(f'user_{u}="{p}"' for u, p in USERS.items())
        jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
                f'username="admin" password="admin-secret" {users};')
        config = workdir / "server.toml"
        config.write_text(
            '"authorizer.class.name" = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"\n'
            '"super.users" = "User:admin"\n'
            '[listener.name.sasl_plaintext]\n'
            '"sasl.enabled.mechanisms" = "PLAIN"\n'
            f"'plain.sasl.jaas.config' = '{jaas}'\n")
        self.extra_args += [
            "--listeners", f"PLAINTEXT://127.0.0.1:{self.port},"
                           f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}",
            "--config", str(config),
        ]

    def client(self, user: str, **extra) -> dict:
        return {"bootstrap.servers": f"127.0.0.1:{self.sasl_port}",
                "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                "sasl.username": user, "sasl.password": USERS[user], **extra}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = AclBroker(tmp_path_factory.mktemp("acl-broker")).start()
    yield b
    b.stop()


def allow(resource: ResourceType, name: str, principal: str, op: AclOperation,
          pattern=ResourcePatternType.LITERAL, permission=AclPermissionType.ALLOW) -> AclBinding:
    return AclBinding(resource, name, pattern, principal, "*", op, permission)


def create(admin: AdminClient, bindings: list[AclBinding]) -> None:
    for f in admin.create_acls(bindings).values():
        f.result(TIMEOUT)


def produce(conf: dict, topic: str, n: int = 3) -> list:
    errors, delivered = [], []
    p = Producer({**conf, "message.timeout.ms": 10000, "allow.auto.create.topics": False})

    def done(err, msg):
        (errors if err else delivered).append(err or msg.offset())
    for i in range(n):
        p.produce(topic, value=f"v{i}".encode(), on_delivery=done)
    p.flush(TIMEOUT)
    return errors or delivered


def consume_error(conf: dict, topic: str, group: str) -> KafkaError | None:
    """The first error a consumer of `topic` in `group` gets within 15 s (None: it read)."""
    c = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest",
                  "allow.auto.create.topics": False})
    c.subscribe([topic])
    try:
        deadline = time.time() + 15
        while time.time() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                return m.error()
            return None
        raise AssertionError(f"no record and no error from {topic} in 15 s")
    finally:
        c.close()


def topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def test_acls_are_created_described_and_deleted_through_the_admin_client(broker):
    admin = AdminClient(broker.client("admin"))
    t = topic("described")
    bindings = [allow(ResourceType.TOPIC, t, "User:alice", AclOperation.READ),
                allow(ResourceType.TOPIC, "desc-", "User:bob", AclOperation.WRITE,
                      pattern=ResourcePatternType.PREFIXED),
                allow(ResourceType.GROUP, "desc-group", "User:alice", AclOperation.READ,
                      permission=AclPermissionType.DENY)]
    create(admin, bindings)
    create(admin, bindings[:1])  # the same ACL again: no error, still one
    every = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    described = admin.describe_acls(every).result(TIMEOUT)
    for b in bindings:
        assert described.count(b) == 1, (b, described)
    # MATCH selects the ACLs that apply to one resource: its literal ones and the
    # prefixed ones that begin its name.
    match = AclBindingFilter(ResourceType.TOPIC, "desc-x", ResourcePatternType.MATCH, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    assert admin.describe_acls(match).result(TIMEOUT) == [bindings[1]]
    alice_only = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:alice",
                                  None, AclOperation.ANY, AclPermissionType.ANY)
    deleted = admin.delete_acls([alice_only])[alice_only].result(TIMEOUT)
    assert sorted(map(str, deleted)) == sorted(map(str, [bindings[0], bindings[2]]))
    left = admin.describe_acls(every).result(TIMEOUT)
    assert bindings[1] in left and bindings[0] not in left and bindings[2] not in left
    admin.delete_acls([every])[every].result(TIMEOUT)


def test_read_write_deny_prefix_and_super_users_decide_as_kafkas_do(broker):
    admin = AdminClient(broker.client("admin"))
    orders, secret = topic("orders"), topic("secret")
    for f in admin.create_topics([NewTopic(orders, 1, 1), NewTopic(secret, 1, 1)]).values():
        f.result(TIMEOUT)
    group = topic("g")
    create(admin, [
        allow(ResourceType.TOPIC, orders, "User:alice", AclOperation.WRITE),
        allow(ResourceType.TOPIC, orders, "User:alice", AclOperation.READ),
        allow(ResourceType.GROUP, group, "User:alice", AclOperation.READ),
        # bob may do anything on every topic, except READ on the orders prefix: DENY wins.
        allow(ResourceType.TOPIC, "*", "User:bob", AclOperation.ALL),
        allow(ResourceType.TOPIC, "orders-", "User:bob", AclOperation.READ,
              pattern=ResourcePatternType.PREFIXED, permission=AclPermissionType.DENY),
        allow(ResourceType.GROUP, "*", "User:bob", AclOperation.READ),
        # A prefixed grant made before the topic exists.
        allow(ResourceType.TOPIC, "later-", "User:alice", AclOperation.WRITE,
              pattern=ResourcePatternType.PREFIXED),
    ])
    denied_before = broker.metric("corelog_denied_operations")

    alice = broker.client("alice")
    assert produce(alice, orders) == [0, 1, 2]
    assert consume_error(alice, orders, group) is None
    # No WRITE on the other topic, no READ on a group without an ACL.
    errors = produce(alice, secret, 1)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED], errors
    err = consume_error(alice, orders, topic("other-group"))
    assert err is not None and err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, err

    # Metadata leaves out what alice may not describe; WRITE implies DESCRIBE.
    listed = AdminClient(alice).list_topics(timeout=TIMEOUT).topics
    assert orders in listed and secret not in listed, sorted(listed)

    bob = broker.client("bob")
    assert produce(bob, orders, 1) == [3]
    err = consume_error(bob, orders, topic("bob-group"))
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    # Denying READ leaves DESCRIBE: bob still sees the topic.
    assert orders in AdminClient(bob).list_topics(timeout=TIMEOUT).topics

    # The prefixed ACL covers a topic created after it.
    later = topic("later")
    admin.create_topics([NewTopic(later, 1, 1)])[later].result(TIMEOUT)
    assert produce(alice, later, 2) == [0, 1]

    # The super user passes without any ACL naming it.
    assert produce(broker.client("admin"), secret, 1) == [0]
    assert consume_error(broker.client("admin"), secret, topic("admin-group")) is None

    # Refusals are counted and logged with who, from where, what and which operation.
    assert broker.metric("corelog_denied_operations") > denied_before
    log = broker.log_path.read_text()
    line = next(l for l in log.splitlines() if "operation denied" in l and secret in l)
    assert "User:alice" in line and "127.0.0.1" in line and "resource_type=Topic" in line, line
    assert "alice-secret" not in log


def test_an_unauthenticated_client_gets_only_what_anonymous_is_granted(broker):
    admin = AdminClient(broker.client("admin"))
    t = topic("anon")
    admin.create_topics([NewTopic(t, 1, 1)])[t].result(TIMEOUT)
    plain = {"bootstrap.servers": broker.bootstrap}
    assert t not in AdminClient(plain).list_topics(timeout=TIMEOUT).topics
    errors = produce(plain, t, 1)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED], errors
    anonymous = AdminClient(plain)
    futures = anonymous.create_topics([NewTopic(topic("anon-new"), 1, 1)])
    with pytest.raises(KafkaException) as e:
        next(iter(futures.values())).result(TIMEOUT)
    assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    create(admin, [allow(ResourceType.TOPIC, t, "User:ANONYMOUS", AclOperation.WRITE)])
    assert produce(plain, t, 1) == [0]
    # ACL requests need DESCRIBE (ALTER) on the cluster. On the wire: librdkafka turns
    # DescribeAcls' top-level error into an empty list.
    r = kwire.flex_roundtrip(broker.bootstrap, 29, 2, _describe_acls_v2(1, None, 1, None, None, 1, 1))
    r.i32()
    assert (r.i16(), r.c_string()) == (31, "Cluster authorization failed.")
    futures = anonymous.create_acls([allow(ResourceType.TOPIC, t, "User:ANONYMOUS",
                                           AclOperation.READ)])
    with pytest.raises(KafkaException) as e:
        next(iter(futures.values())).result(TIMEOUT)
    assert e.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED


def _create_acls_v2(creations: list[tuple]) -> bytes:
    body = kwire.c_array([
        kwire.i8(rt) + kwire.compact_string(name) + kwire.i8(pt) + kwire.compact_string(principal)
        + kwire.compact_string(host) + kwire.i8(op) + kwire.i8(perm) + kwire.tags()
        for rt, name, pt, principal, host, op, perm in creations])
    return body + kwire.tags()


def _describe_acls_v2(rt, name, pt, principal, host, op, perm) -> bytes:
    return (kwire.i8(rt) + kwire.compact_string(name) + kwire.i8(pt)
            + kwire.compact_string(principal) + kwire.compact_string(host) + kwire.i8(op)
            + kwire.i8(perm) + kwire.tags())


def test_invalid_acls_and_filters_are_invalid_request(broker):
    """Raw CreateAcls/DescribeAcls v2 on the plaintext listener, by User:ANONYMOUS once
    granted ALTER and DESCRIBE on the cluster: each invalid creation is INVALID_REQUEST
    on its own (the valid one beside it is created), an UNKNOWN filter field is
    INVALID_REQUEST, and the connection stays usable."""
    admin = AdminClient(broker.client("admin"))
    create(admin, [allow(ResourceType.BROKER, "kafka-cluster", "User:ANONYMOUS", AclOperation.ALTER),
                   allow(ResourceType.BROKER, "kafka-cluster", "User:ANONYMOUS",
                         AclOperation.DESCRIBE)])
    TOPIC, LITERAL, MATCH, READ, ALLOW, ANY = 2, 3, 2, 3, 3, 1
    creations = [
        (0, "t", LITERAL, "User:x", "*", READ, ALLOW),          # UNKNOWN resource type
        (TOPIC, "t", MATCH, "User:x", "*", READ, ALLOW),       # MATCH is for filters
        (TOPIC, "t", LITERAL, "nocolon", "*", READ, ALLOW),    # not Type:name
        (TOPIC, "", LITERAL, "User:x", "*", READ, ALLOW),      # empty name
        (4, "other", LITERAL, "User:x", "*", READ, ALLOW),     # CLUSTER must be kafka-cluster
        (TOPIC, "t", LITERAL, "User:x", "*", ANY, ALLOW),      # ANY operation
        (TOPIC, "raw-valid", LITERAL, "User:x", "*", READ, ALLOW),
    ]
    r = kwire.flex_roundtrip(broker.bootstrap, 30, 2, _create_acls_v2(creations))
    r.i32()  # throttle
    results = []
    for _ in range(r.c_len()):
        code, message = r.i16(), r.c_string()
        r.skip_tags()
        results.append((code, message))
    assert [c for c, _ in results] == [42] * 6 + [0], results
    assert "principal" in results[2][1] and "kafka-cluster" in results[4][1], results
    r = kwire.flex_roundtrip(broker.bootstrap, 29, 2,
                             _describe_acls_v2(TOPIC, "raw-valid", 99, None, None, ANY, ANY))
    r.i32()
    assert r.i16() == 42, "an UNKNOWN pattern type filter"
    described = admin.describe_acls(AclBindingFilter(
        ResourceType.TOPIC, "raw-valid", ResourcePatternType.LITERAL, None, None,
        AclOperation.ANY, AclPermissionType.ANY)).result(TIMEOUT)
    assert len(described) == 1 and described[0].principal == "User:x"


def test_without_an_authorizer_acl_requests_are_security_disabled(broker_factory):
    b = broker_factory.start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    futures = admin.create_acls([allow(ResourceType.TOPIC, "t", "User:x", AclOperation.READ)])
    with pytest.raises(KafkaException) as e:
        next(iter(futures.values())).result(TIMEOUT)
    assert e.value.args[0].code() == KafkaError.SECURITY_DISABLED
    r = kwire.flex_roundtrip(b.bootstrap, 29, 2, _describe_acls_v2(1, None, 1, None, None, 1, 1))
    r.i32()
    assert (r.i16(), r.c_string()) == (54, "No Authorizer is configured.")


class MtlsAclBroker(Broker):
    """An SSL listener that requires a client certificate, whose subject names the
    principal through ssl.principal.mapping.rules (`O=corelog,CN=alice` -> `alice`);
    ACLs on, User:admin a super user."""

    def __init__(self, workdir: Path, ca: CertificateAuthority):
        super().__init__(workdir)
        self.ssl_port = free_port()
        server = ca.issue("mtls-broker", "localhost", server=True)
        config = workdir / "server.toml"
        config.write_text(
            '"authorizer.class.name" = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"\n'
            '"super.users" = "User:admin"\n')
        self.extra_args += [
            "--listeners", f"PLAINTEXT://127.0.0.1:{self.port},SSL://127.0.0.1:{self.ssl_port}",
            "--security", f"ssl.keystore.location={server.chain}",
            "--security", f"ssl.truststore.location={ca.cert}",
            "--security", "ssl.client.auth=required",
            "--security", r"ssl.principal.mapping.rules=RULE:^O=corelog,CN=([^,]+)$/$1/L,DEFAULT",
            "--config", str(config),
        ]
        self.ca = ca

    def client(self, cn: str) -> dict:
        issued = self.ca.issue(f"client-{cn}", cn)
        return {"bootstrap.servers": f"127.0.0.1:{self.ssl_port}", "security.protocol": "SSL",
                "ssl.ca.location": str(self.ca.cert),
                "ssl.certificate.location": str(issued.cert),
                "ssl.key.location": str(issued.key)}


def test_a_client_certificate_names_the_principal_acls_decide_for(tmp_path):
    ca = CertificateAuthority(tmp_path / "pki")
    b = MtlsAclBroker(tmp_path / "mtls", ca).start()
    try:
        admin = AdminClient(b.client("Admin"))  # CN=Admin, lower-cased by the rule: a super user
        t = topic("mtls")
        admin.create_topics([NewTopic(t, 1, 1)])[t].result(TIMEOUT)
        create(admin, [allow(ResourceType.TOPIC, t, "User:alice", AclOperation.WRITE)])
        assert produce(b.client("alice"), t, 2) == [0, 1]
        errors = produce(b.client("carol"), t, 1)
        assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED], errors
        line = next(l for l in b.log_path.read_text().splitlines()
                    if "operation denied" in l and t in l)
        assert 'principal="User:carol"' in line, line
    finally:
        b.stop()


def test_a_pattern_subscription_is_given_only_topics_the_member_may_describe(broker):
    """KIP-848 patterns are matched by the broker, and the topics matched are filtered by
    the DESCRIBE right of the member's principal (Kafka's TopicRegexResolver): the
    pattern of an anonymous member matches two topics, it may describe one, and only its
    partitions are assigned. (By hand: librdkafka resolves patterns itself, from a
    Metadata answer that leaves out what the principal may not describe.)"""
    from test_consumer_protocol import join

    admin = AdminClient(broker.client("admin"))
    stem = topic("rx")
    open_topic, secret_topic = f"{stem}-open", f"{stem}-secret"
    for f in admin.create_topics([NewTopic(open_topic, 2, 1), NewTopic(secret_topic, 2, 1)]).values():
        f.result(TIMEOUT)
    group = f"{stem}-group"
    create(admin, [allow(ResourceType.GROUP, group, "User:ANONYMOUS", AclOperation.READ),
                   allow(ResourceType.TOPIC, open_topic, "User:ANONYMOUS", AclOperation.DESCRIBE)])
    a = join(broker.bootstrap, group, str(uuid.uuid4()), [], regex=f"{stem}-.*")
    assert a["error"] == 0, a
    # One topic of the two the pattern matches (each has partitions 0 and 1).
    assert list((a["assignment"] or {}).values()) == [[0, 1]], a


def _controller_call(port: int, body) -> list:
    """Sends one controller-port frame (JSON, as the brokers speak it) and returns the
    frames answered before the port closed or went quiet."""
    import json
    import socket
    import struct
    # protocol: the controller protocol of this release (controller/src/rpc.rs PROTOCOL).
    data = json.dumps({"cluster_id": None, "body": body, "protocol": 1}).encode()
    answers = []
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(struct.pack(">I", len(data)) + data)
        s.settimeout(5)
        buf = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
                while len(buf) >= 4 and len(buf) >= 4 + struct.unpack(">I", buf[:4])[0]:
                    n = struct.unpack(">I", buf[:4])[0]
                    answers.append(json.loads(buf[4:4 + n]))
                    buf = buf[4 + n:]
                if answers:
                    break
        except (socket.timeout, ConnectionResetError):
            pass
    return answers


def _grant_mallory_read(topic: str) -> dict:
    return {"Propose": {"id": str(uuid.uuid4()), "command": {"CreateAcls": {"bindings": [{
        "resource_type": "Topic", "resource_name": topic, "pattern_type": "Literal",
        "principal": "User:mallory", "host": "*", "operation": "Read",
        "permission": "Allow"}]}}}}


def test_the_controller_port_of_a_secured_broker_takes_no_other_process(broker, broker_factory):
    """The bypass: with ACLs on and no controller.listener.names, a local process without
    credentials proposed CreateAcls on the controller port and it was applied. Now the
    port of a secured single broker takes only that broker process (a secret drawn at
    start); an open broker keeps its zero-configuration controller port, and the same
    frame is applied there, so the frame is the real request and not a malformed one."""
    open_broker = broker_factory.start()
    answered = _controller_call(open_broker.controller_port, _grant_mallory_read("t"))
    assert answered and "Ok" in answered[0].get("Propose", {}), answered

    admin = AdminClient(broker.client("admin"))
    topic = f"protected-{uuid.uuid4().hex[:6]}"
    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        f.result(TIMEOUT)
    failed_before = broker.metric("corelog_failed_authentications", shard="controller")
    for body in (_grant_mallory_read(topic), "DescribeQuorum"):
        answered = _controller_call(broker.controller_port, body)
        assert answered in ([], [{"Authenticate": {"Err": "AuthenticationFailed"}}]), answered
    assert broker.metric("corelog_failed_authentications", shard="controller") >= failed_before + 2
    found = admin.describe_acls(AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, "User:mallory", None,
        AclOperation.ANY, AclPermissionType.ANY)).result(TIMEOUT)
    assert found == [], found
    # The broker's own use of its port goes on: an admin change still commits.
    create(admin, [allow(ResourceType.TOPIC, topic, "User:alice", AclOperation.READ)])


def test_a_secured_broker_in_a_quorum_with_others_must_name_its_controller_listener(tmp_path):
    b = AclBroker(tmp_path / "quorum")
    b.extra_args += ["--node-id", "1", "--controller-voters",
                     f"1@127.0.0.1:{b.controller_port},2@127.0.0.1:{free_port()}"]
    b.launch()
    assert b.proc.wait(30) != 0
    assert "controller.listener.names" in b.log_path.read_text(errors="replace")
