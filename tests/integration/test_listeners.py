"""Kafka's listener settings in corelog's config file: `listeners`,
`advertised.listeners`, `listener.security.protocol.map` and
`inter.broker.listener.name` set the address the broker binds and the one Metadata
gives clients, as they do in a Kafka `server.properties`."""

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from launcher import Broker


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
