package dev.corelog.it;

import static dev.corelog.it.Support.address;
import static dev.corelog.it.Support.addresses;
import static dev.corelog.it.Support.deleteRecursively;
import static dev.corelog.it.Support.expectFailure;
import static dev.corelog.it.Support.get;
import static dev.corelog.it.Support.tempDir;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeFalse;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.SslConfigs;
import org.apache.kafka.common.errors.SslAuthenticationException;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * TLS listeners (Kafka's SSL security protocol) with certificates the test makes itself
 * ({@link Pki}, the openssl command line): one broker with a PLAINTEXT listener, an SSL
 * listener, and a second SSL listener named MTLS that requires client certificates, all
 * configured with Kafka's keys ({@code --listeners}, {@code --listener-security-protocol-map},
 * {@code --security ssl.*}, {@code listener.name.mtls.ssl.client.auth=required}). Kafka's
 * Java client (with its default hostname verification) and Kafka's CLI tools
 * ({@code --command-config} with {@code security.protocol=SSL}) administer, produce and
 * consume over TLS; the MTLS listener serves clients with a certificate from the CA and
 * refuses those without one or with one from another CA.
 */
class TlsTest {

    private static final Path PKI_DIR = tempDir("corelog-it-pki-");
    private static final Pki CA = Pki.create(PKI_DIR, "corelog-test-ca");
    private static final Pki.Issued SERVER = CA.issue("broker", "localhost", true);
    private static final Pki.Issued ALICE = CA.issue("client", "alice", false);

    @RegisterExtension
    static final CorelogBroker broker = new CorelogBroker("TlsTest",
            "--security", "ssl.keystore.type=PEM",
            "--security", "ssl.keystore.location=" + SERVER.chain(),
            "--security", "ssl.truststore.type=PEM",
            "--security", "ssl.truststore.location=" + CA.cert,
            "--security", "listener.name.mtls.ssl.client.auth=required",
            "--offsets-topic-partitions", "4")
            .withListener("SSL", "SSL")
            .withListener("MTLS", "SSL");

    private static final Duration TIMEOUT = Duration.ofSeconds(30);

    @BeforeAll
    static void notExternal() {
        assumeFalse(broker.isExternal(), "the TLS listeners and certificates are this class's own");
    }

    @AfterAll
    static void deletePki() {
        deleteRecursively(PKI_DIR);
    }

    // ---------------------------------------------------------------------------------
    // Java client
    // ---------------------------------------------------------------------------------

    @Test
    void adminOverTlsCreatesTopicsAndIsToldTheSslListenersAddress() throws Exception {
        int sslPort = broker.port("SSL");
        try (Admin admin = broker.admin(ssl("SSL"))) {
            Await.createTopic(admin, new NewTopic("tls-admin", 3, (short) 1));
            DescribeClusterResult cluster = admin.describeCluster();
            Collection<Node> nodes = get(cluster.nodes());
            assertEquals(List.of("127.0.0.1:" + sslPort), addresses(nodes), "DescribeCluster over SSL");
            assertEquals("127.0.0.1:" + sslPort, address(get(cluster.controller())), "controller over SSL");
            TopicDescription topic = get(admin.describeTopics(List.of("tls-admin")).allTopicNames()).get("tls-admin");
            assertEquals(3, topic.partitions().size());
            for (TopicPartitionInfo p : topic.partitions()) {
                assertEquals("127.0.0.1:" + sslPort, address(p.leader()), "leader of partition " + p.partition());
            }
            assertTrue(get(admin.listTopics().names()).contains("tls-admin"));
        }
        // The same broker over its PLAINTEXT listener names the PLAINTEXT address.
        try (Admin plain = broker.admin()) {
            assertEquals(List.of(broker.bootstrap()), addresses(get(plain.describeCluster().nodes())),
                    "DescribeCluster over PLAINTEXT");
        }
    }

    /**
     * A producer (acks=all, idempotent) and a consumer group over TLS, with values from a
     * few bytes to well over one TLS record (16 KiB): every record comes back once, in
     * order per partition, and the group's commits are the end offsets.
     */
    @Test
    void producerAndConsumerGroupRoundTripOverTls() throws Exception {
        String topic = "tls-roundtrip";
        String group = "tls-group";
        int partitions = 3;
        int n = 600;
        try (Admin admin = broker.admin(ssl("SSL"))) {
            Await.createTopic(admin, new NewTopic(topic, partitions, (short) 1));
            Map<Integer, List<String>> sent = Support.produce(broker, ssl("SSL"), topic, "ssl", n);
            assertEquals(n, sent.values().stream().mapToInt(List::size).sum());

            Map<String, Object> c = ssl("SSL");
            c.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            Map<Integer, List<String>> got = new HashMap<>();
            try (KafkaConsumer<byte[], byte[]> consumer = broker.consumer(c)) {
                consumer.subscribe(List.of(topic));
                long deadline = System.nanoTime() + TIMEOUT.toNanos();
                int count = 0;
                while (count < n && System.nanoTime() < deadline) {
                    for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500))) {
                        got.computeIfAbsent(r.partition(), p -> new ArrayList<>()).add(value(r.value()));
                        count++;
                    }
                }
                consumer.commitSync(Duration.ofSeconds(15));
            }
            assertEquals(sent, got, "records consumed over TLS, per partition");

            Map<TopicPartition, Long> end = endOffsets(admin, topic, partitions);
            Map<TopicPartition, OffsetAndMetadata> committed =
                    get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata());
            assertEquals(end, committed.entrySet().stream()
                    .collect(Collectors.toMap(Map.Entry::getKey, e -> e.getValue().offset())), "committed offsets");
            ConsumerGroupDescription described = get(admin.describeConsumerGroups(List.of(group)).all()).get(group);
            assertEquals("127.0.0.1:" + broker.port("SSL"), address(described.coordinator()),
                    "the group coordinator's address over SSL");
        }
    }

    /** The MTLS listener serves a client with a certificate from the CA: PEM given inline, or a PKCS#12 file. */
    @Test
    void mutualTlsServesAClientWithACertificate() throws Exception {
        String topic = "tls-mutual";
        Map<String, Object> pem = ssl("MTLS");
        pem.put(SslConfigs.SSL_KEYSTORE_TYPE_CONFIG, "PEM");
        pem.put(SslConfigs.SSL_KEYSTORE_CERTIFICATE_CHAIN_CONFIG, ALICE.certPem());
        pem.put(SslConfigs.SSL_KEYSTORE_KEY_CONFIG, ALICE.keyPem());
        Map<String, Object> pkcs12 = ssl("MTLS");
        pkcs12.put(SslConfigs.SSL_KEYSTORE_TYPE_CONFIG, "PKCS12");
        pkcs12.put(SslConfigs.SSL_KEYSTORE_LOCATION_CONFIG, CA.pkcs12(ALICE, "changeit").toString());
        pkcs12.put(SslConfigs.SSL_KEYSTORE_PASSWORD_CONFIG, "changeit");

        try (Admin admin = broker.admin(pem)) {
            Await.createTopic(admin, new NewTopic(topic, 1, (short) 1));
            assertEquals(List.of(broker.bootstrap("MTLS")), addresses(get(admin.describeCluster().nodes())),
                    "DescribeCluster over MTLS");
        }
        Map<Integer, List<String>> sent = Support.produce(broker, pkcs12, topic, "mtls", 50);
        Map<String, Object> c = new HashMap<>(pem);
        c.put(ConsumerConfig.GROUP_ID_CONFIG, "tls-mutual-group");
        List<String> got = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> consumer = broker.consumer(c)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.nanoTime() + TIMEOUT.toNanos();
            while (got.size() < 50 && System.nanoTime() < deadline) {
                consumer.poll(Duration.ofMillis(500)).forEach(r -> got.add(value(r.value())));
            }
        }
        assertEquals(sent.get(0), got);
    }

    /**
     * The MTLS listener refuses, in the TLS handshake, a client without a certificate and
     * one whose certificate another CA signed; the Java client reports an authentication
     * failure (which it does not retry), as against Kafka. The other CA is an impostor with
     * the test CA's name: the Java client offers a certificate only to a server that names
     * its issuer among the CAs it accepts (a stranger's certificate it would keep to itself,
     * and be refused for sending none), so this one is sent and must fail verification.
     */
    @Test
    void mutualTlsRefusesAClientWithoutACertificateOrFromAnotherCa() throws Exception {
        broker.tolerateWarnings("TLS handshake failed");
        Pki.Issued mallory = Pki.create(PKI_DIR.resolve("impostor-ca"), "corelog-test-ca")
                .issue("mallory", "mallory", false);
        Map<String, Object> impostor = ssl("MTLS");
        impostor.put(SslConfigs.SSL_KEYSTORE_TYPE_CONFIG, "PEM");
        impostor.put(SslConfigs.SSL_KEYSTORE_CERTIFICATE_CHAIN_CONFIG, mallory.certPem());
        impostor.put(SslConfigs.SSL_KEYSTORE_KEY_CONFIG, mallory.keyPem());
        Soft soft = new Soft();
        for (Map.Entry<String, Map<String, Object>> e : List.of(
                Map.entry("no client certificate", ssl("MTLS")),
                Map.entry("a certificate another CA signed", impostor))) {
            Map<String, Object> conf = new HashMap<>(e.getValue());
            conf.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 10_000);
            conf.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 5_000);
            if (e.getValue() == impostor) {
                // corelog logs refusals at most once a second per shard (and counts every
                // one): a second after the first, this one gets a line of its own.
                Thread.sleep(1_100);
            }
            int before = broker.logLinesContaining("TLS handshake failed").size();
            double counted = broker.metric("corelog_failed_authentications_total");
            soft.check(e.getKey(), () -> {
                try (Admin admin = broker.admin(conf)) {
                    long t0 = System.nanoTime();
                    ExecutionException ex = expectFailure(admin.describeCluster().nodes());
                    long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
                    assertInstanceOf(SslAuthenticationException.class, ex.getCause(),
                            "after " + ms + " ms: " + ex.getCause());
                }
            });
            soft.check(e.getKey() + ": the broker counts the refused handshake", () -> Await.assertEventually(() ->
                    assertTrue(broker.metric("corelog_failed_authentications_total") > counted,
                            "corelog_failed_authentications_total stayed at " + counted)));
            soft.check(e.getKey() + ": the broker logs the refused handshake", () -> Await.assertEventually(() -> {
                List<String> lines = broker.logLinesContaining("TLS handshake failed");
                assertTrue(lines.size() > before, "no new 'TLS handshake failed' line: " + lines);
                if (e.getValue() == impostor) {
                    List<String> mine = lines.subList(before, lines.size());
                    assertTrue(mine.stream().noneMatch(l -> l.contains("no certificate")),
                            "the impostor's certificate was not even sent: " + mine);
                }
            }));
        }
        soft.assertAll("mutual TLS refusals");
    }

    // ---------------------------------------------------------------------------------
    // Kafka's CLI tools (tools/kafka-cli/kafka-cli.sh, as tests/integration/test_kafka_cli.py)
    // ---------------------------------------------------------------------------------

    /**
     * kafka-topics --create/--list and the console producer and consumer (a group member)
     * with {@code --command-config} naming a client.properties with
     * {@code security.protocol=SSL} and the CA as a PEM truststore; kafka-topics --list
     * over the MTLS listener with a PKCS#12 client keystore in its properties.
     */
    @Test
    void kafkaCliToolsOverTls() throws Exception {
        String topic = "tls-cli";
        String ssl = broker.bootstrap("SSL");
        Path props = PKI_DIR.resolve("client-ssl.properties");
        Files.writeString(props, "security.protocol=SSL\n"
                + "ssl.truststore.type=PEM\n"
                + "ssl.truststore.location=" + CA.cert + "\n");
        Path mtlsProps = PKI_DIR.resolve("client-mtls.properties");
        Files.writeString(mtlsProps, Files.readString(props)
                + "ssl.keystore.type=PKCS12\n"
                + "ssl.keystore.location=" + CA.pkcs12(ALICE, "changeit") + "\n"
                + "ssl.keystore.password=changeit\n");

        KafkaCli.roundTrip(PKI_DIR, ssl, props, topic, "tls-cli-group",
                List.of("one", "two over TLS", "x".repeat(40_000)));

        KafkaCli.Result r = cli(null, "kafka-topics", "--bootstrap-server", broker.bootstrap("MTLS"),
                "--command-config", mtlsProps.toString(), "--list");
        assertTrue(r.lines().contains(topic), r.why());
    }

    /** Runs one of Kafka's tools with tools/kafka-cli/kafka-cli.sh, feeding it {@code stdin}; it must exit 0. */
    private static KafkaCli.Result cli(String stdin, String... argv) throws IOException, InterruptedException {
        return KafkaCli.run(PKI_DIR, stdin, argv);
    }

    // ---------------------------------------------------------------------------------
    // Helpers
    // ---------------------------------------------------------------------------------

    /** Client settings for TLS to listener {@code listener}, trusting the test CA (PEM). */
    private static Map<String, Object> ssl(String listener) {
        Map<String, Object> c = new HashMap<>();
        c.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrap(listener));
        c.put(CommonClientConfigs.SECURITY_PROTOCOL_CONFIG, "SSL");
        c.put(SslConfigs.SSL_TRUSTSTORE_TYPE_CONFIG, "PEM");
        c.put(SslConfigs.SSL_TRUSTSTORE_LOCATION_CONFIG, CA.cert.toString());
        return c;
    }

    private static Map<TopicPartition, Long> endOffsets(Admin admin, String topic, int partitions) throws Exception {
        Map<TopicPartition, OffsetSpec> latest = IntStream.range(0, partitions)
                .mapToObj(p -> new TopicPartition(topic, p))
                .collect(Collectors.toMap(Function.identity(), tp -> OffsetSpec.latest()));
        return get(admin.listOffsets(latest).all()).entrySet().stream()
                .collect(Collectors.toMap(Map.Entry::getKey, e -> e.getValue().offset()));
    }

    private static String value(byte[] b) {
        return new String(b, StandardCharsets.UTF_8);
    }
}
