"""Kafka's listener settings in corelog's config file: `listeners`,
`advertised.listeners`, `listener.security.protocol.map` and
`inter.broker.listener.name` set the addresses the broker binds and the ones Metadata
gives clients, as they do in a Kafka `server.properties`: several listeners at once,
each client given the addresses of the listener it connected on."""

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from launcher import Broker, free_port


class KafkaKeysBroker(Broker):
    """A broker whose addresses come from Kafka's listener keys in its config file
    instead of --listen / --advertise."""

    def argv(self) -> list[str]:
        argv = super().argv()
        for flag in ("--listen", "--advertise"):
            i = argv.index(flag)
            del argv[i:i + 2]
        config = self.workdir / "server.toml"
        config.write_text(
            f'listeners = "CLIENTS://127.0.0.1:{self.port}"\n'
            f'"advertised.listeners" = "clients://localhost:{self.port}"\n'
            '"listener.security.protocol.map" = "CLIENTS:PLAINTEXT"\n'
            '"inter.broker.listener.name" = "CLIENTS"\n')
        return [*argv, "--config", str(config)]


def test_a_named_plaintext_listener_binds_and_advertises_as_configured(tmp_path):
    broker = KafkaKeysBroker(tmp_path).start()
    try:
        md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
        assert [(b.host, b.port) for b in md.brokers.values()] == [("localhost", broker.port)]
        # Clients follow the advertised name and produce and read through it.
        p = Producer({"bootstrap.servers": broker.bootstrap})
        p.produce("listeners", b"through the advertised listener")
        assert p.flush(15) == 0
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g",
                      "auto.offset.reset": "earliest"})
        c.subscribe(["listeners"])
        got = None
        for _ in range(30):
            m = c.poll(1)
            if m is not None and not m.error():
                got = m.value()
                break
        c.close()
        assert got == b"through the advertised listener"
    finally:
        broker.stop()


def consume_one(bootstrap: str, tp: TopicPartition) -> bytes | None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "listeners-check",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.assign([tp])
        for _ in range(30):
            m = c.poll(1)
            if m is not None and not m.error():
                return m.value()
        return None
    finally:
        c.close()


def test_each_client_is_given_the_addresses_of_the_listener_it_connected_on(broker_factory):
    """Three brokers with an INTERNAL listener (inter-broker) and, on two of them, an
    EXTERNAL one advertised under another name. A client on EXTERNAL sees only those
    two, at their EXTERNAL addresses; a partition led by the broker without EXTERNAL
    answers LISTENER_NOT_FOUND there, as Kafka does; replication runs on INTERNAL."""
    brokers = broker_factory.cluster(voters=3, held_back=3)
    external = {}
    for b in brokers:
        names = "INTERNAL://127.0.0.1:%d" % b.port
        advertised = names
        if b.node_id != 3:
            external[b.node_id] = free_port()
            names += ",EXTERNAL://127.0.0.1:%d" % external[b.node_id]
            advertised += ",EXTERNAL://localhost:%d" % external[b.node_id]
        b.extra_args += ["--listeners", names, "--advertised-listeners", advertised,
                         "--listener-security-protocol-map",
                         "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
                         "--inter-broker-listener-name", "INTERNAL"]
    for b in brokers:
        b.launch()
    for b in brokers:
        b.wait_healthy()

    inside = AdminClient({"bootstrap.servers": brokers[0].bootstrap})
    md = inside.list_topics(timeout=10)
    assert {i: (b.host, b.port) for i, b in md.brokers.items()} == {
        b.node_id: ("127.0.0.1", b.port) for b in brokers}

    ext_bootstrap = "127.0.0.1:%d" % external[1]
    outside = AdminClient({"bootstrap.servers": ext_bootstrap})
    md = outside.list_topics(timeout=10)
    assert {i: (b.host, b.port) for i, b in md.brokers.items()} == {
        i: ("localhost", port) for i, port in external.items()}

    # Partition 0 led by broker 1 (both listeners), partition 1 by broker 3 (INTERNAL only).
    topic = NewTopic("two-listeners", num_partitions=2, replica_assignment=[[1, 2, 3], [3, 1, 2]])
    inside.create_topics([topic])["two-listeners"].result(30)

    def partitions():
        return outside.list_topics("two-listeners", timeout=10).topics["two-listeners"].partitions

    for _ in range(50):
        p = partitions()
        if len(p) == 2 and p[0].leader == 1 and p[1].error is not None:
            break
    p = partitions()
    assert p[0].leader == 1 and p[0].error is None
    assert p[1].leader == -1
    assert p[1].error.code() == KafkaError.LISTENER_NOT_FOUND, p[1].error

    # Through EXTERNAL the client follows the advertised name; the records replicate on
    # INTERNAL, so the broker without EXTERNAL holds them too.
    prod = Producer({"bootstrap.servers": ext_bootstrap, "acks": "all"})
    prod.produce("two-listeners", b"from outside", partition=0)
    assert prod.flush(15) == 0
    assert consume_one(ext_bootstrap, TopicPartition("two-listeners", 0, 0)) == b"from outside"
    assert consume_one(brokers[2].bootstrap,
                       TopicPartition("two-listeners", 0, 0)) == b"from outside"
