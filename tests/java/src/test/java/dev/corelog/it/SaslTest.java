package dev.corelog.it;

import static dev.corelog.it.Support.address;
import static dev.corelog.it.Support.addresses;
import static dev.corelog.it.Support.deleteRecursively;
import static dev.corelog.it.Support.expectFailure;
import static dev.corelog.it.Support.get;
import static dev.corelog.it.Support.tempDir;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeFalse;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialAlteration;
import org.apache.kafka.clients.admin.UserScramCredentialDeletion;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.SaslConfigs;
import org.apache.kafka.common.config.SslConfigs;
import org.apache.kafka.common.errors.AuthenticationException;
import org.apache.kafka.common.errors.DuplicateResourceException;
import org.apache.kafka.common.errors.ResourceNotFoundException;
import org.apache.kafka.common.errors.SaslAuthenticationException;
import org.apache.kafka.common.errors.UnacceptableCredentialException;
import org.apache.kafka.common.errors.UnsupportedSaslMechanismException;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * SASL listeners (Kafka's SASL_PLAINTEXT and SASL_SSL) with Kafka's Java client and CLI
 * tools: one broker with a PLAINTEXT listener, a SASL_PLAINTEXT listener enabling PLAIN,
 * SCRAM-SHA-256 and SCRAM-SHA-512 (PLAIN users from its {@code plain.sasl.jaas.config}, in
 * a config file) and a SASL_SSL listener enabling SCRAM-SHA-512 only, all configured with
 * Kafka's keys. SCRAM users are made and described with the AdminClient
 * (AlterUserScramCredentials / DescribeUserScramCredentials, KIP-554) and with
 * {@code kafka-configs}; clients then authenticate with them, produce and consume in a
 * group; a wrong password, an unknown user or a mechanism the listener does not enable
 * fails the client at once with an authentication error, which it does not retry.
 */
class SaslTest {

    private static final Path DIR = tempDir("corelog-it-sasl-");
    private static final Pki CA = Pki.create(DIR, "corelog-test-ca");
    private static final Pki.Issued SERVER = CA.issue("broker", "localhost", true);

    private static final String ALICE_512 = "alice-secret";
    private static final String ALICE_256 = "alice-secret-256";
    private static final String CAROL_PLAIN = "carol-secret";

    @RegisterExtension
    static final CorelogBroker broker = new CorelogBroker("SaslTest",
            "--security", "ssl.keystore.location=" + SERVER.chain(),
            "--security", "listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512",
            "--security", "listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "--security", "connection.failed.authentication.delay.ms=100",
            "--offsets-topic-partitions", "4")
            .withListener("SASL_PLAINTEXT", "SASL_PLAINTEXT")
            .withListener("SASL_SSL", "SASL_SSL")
            // The PLAIN users' passwords in a file, not on the command line.
            .withConfig("[listener.name.sasl_plaintext]\n"
                    + "'plain.sasl.jaas.config' = 'org.apache.kafka.common.security.plain.PlainLoginModule required"
                    + " user_carol=\"" + CAROL_PLAIN + "\";'\n");

    private static final Duration TIMEOUT = Duration.ofSeconds(30);

    @BeforeAll
    static void createAlice() throws Exception {
        assumeFalse(broker.isExternal(), "the SASL listeners and users are this class's own");
        try (Admin admin = broker.admin()) {
            get(admin.alterUserScramCredentials(List.of(
                    new UserScramCredentialUpsertion("alice",
                            new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), ALICE_512),
                    new UserScramCredentialUpsertion("alice",
                            new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), ALICE_256))).all());
        }
    }

    @AfterAll
    static void deleteDir() {
        deleteRecursively(DIR);
    }

    // ---------------------------------------------------------------------------------
    // SCRAM users with the AdminClient (KIP-554)
    // ---------------------------------------------------------------------------------

    /**
     * alterUserScramCredentials makes a user with two mechanisms; describeUserScramCredentials
     * names each mechanism with its iterations (one user, or all); the user authenticates at
     * once over SASL_SSL; deleting its SCRAM-SHA-512 credential refuses its next login; an
     * unknown user is ResourceNotFound and too few iterations UnacceptableCredential.
     */
    @Test
    void adminClientCreatesDescribesAndDeletesScramUsers() throws Exception {
        try (Admin admin = broker.admin()) {
            get(admin.alterUserScramCredentials(List.of(
                    new UserScramCredentialUpsertion("dave",
                            new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), "dave-secret"),
                    new UserScramCredentialUpsertion("dave",
                            new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), "dave-secret"))).all());

            UserScramCredentialsDescription dave =
                    get(admin.describeUserScramCredentials(List.of("dave")).description("dave"));
            assertEquals("dave", dave.name());
            assertEquals(Map.of(ScramMechanism.SCRAM_SHA_512, 8192, ScramMechanism.SCRAM_SHA_256, 4096),
                    infos(dave), "dave's credentials");

            Map<String, UserScramCredentialsDescription> all = get(admin.describeUserScramCredentials().all());
            assertTrue(all.keySet().containsAll(Set.of("alice", "dave")), "every SCRAM user: " + all.keySet());
            assertEquals(Map.of(ScramMechanism.SCRAM_SHA_512, 8192, ScramMechanism.SCRAM_SHA_256, 4096),
                    infos(all.get("alice")), "alice's credentials");

            // Usable at once, as the KRaft broker (single node) applies it.
            try (Admin asDave = broker.admin(scramSsl("dave", "dave-secret"))) {
                assertEquals(List.of(broker.bootstrap("SASL_SSL")), addresses(get(asDave.describeCluster().nodes())));
            }

            get(admin.alterUserScramCredentials(List.of(
                    new UserScramCredentialDeletion("dave", ScramMechanism.SCRAM_SHA_512))).all());
            assertEquals(Map.of(ScramMechanism.SCRAM_SHA_256, 4096),
                    infos(get(admin.describeUserScramCredentials(List.of("dave")).description("dave"))),
                    "dave after deleting SCRAM-SHA-512");
            broker.tolerateWarnings("authentication failed");
            assertRefused(scramSsl("dave", "dave-secret"), SaslAuthenticationException.class,
                    "dave's deleted SCRAM-SHA-512 credential");

            ExecutionException missing = expectFailure(
                    admin.describeUserScramCredentials(List.of("nobody")).description("nobody"));
            assertInstanceOf(ResourceNotFoundException.class, missing.getCause(), missing.toString());

            // Refusals, each with Kafka's error for the user it concerns.
            Soft soft = new Soft();
            for (Refusal c : List.of(
                    new Refusal("too few iterations (Kafka's minimum is 4096)", new UserScramCredentialUpsertion("erin",
                            new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 100), "e"),
                            UnacceptableCredentialException.class),
                    new Refusal("too many iterations (Kafka's maximum is 16384)", new UserScramCredentialUpsertion("erin",
                            new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 16_385), "e"),
                            UnacceptableCredentialException.class),
                    new Refusal("an empty user name", new UserScramCredentialUpsertion("",
                            new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), "e"),
                            UnacceptableCredentialException.class),
                    new Refusal("deleting a credential that does not exist",
                            new UserScramCredentialDeletion("nobody", ScramMechanism.SCRAM_SHA_256),
                            ResourceNotFoundException.class))) {
                soft.check(c.what(), () -> {
                    ExecutionException e = expectFailure(admin.alterUserScramCredentials(List.of(c.alteration())).all());
                    assertInstanceOf(c.expected(), e.getCause(), e.toString());
                });
            }
            soft.check("an upsertion and a deletion of one user in one request", () -> {
                ExecutionException e = expectFailure(admin.alterUserScramCredentials(List.of(
                        new UserScramCredentialUpsertion("frank",
                                new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), "f"),
                        new UserScramCredentialDeletion("frank", ScramMechanism.SCRAM_SHA_256))).all());
                assertInstanceOf(DuplicateResourceException.class, e.getCause(), e.toString());
            });
            soft.check("none of the refused users exists", () -> assertTrue(
                    get(admin.describeUserScramCredentials().users()).stream()
                            .noneMatch(u -> Set.of("erin", "", "nobody", "frank").contains(u)),
                    get(admin.describeUserScramCredentials().users()).toString()));
            soft.assertAll("refused alterations");

            get(admin.alterUserScramCredentials(List.of(
                    new UserScramCredentialDeletion("dave", ScramMechanism.SCRAM_SHA_256))).all());
            assertTrue(!get(admin.describeUserScramCredentials().users()).contains("dave"),
                    "dave is gone with his last credential");
        }
    }

    /** An alteration the broker must refuse, and the error it must answer. */
    private record Refusal(String what, UserScramCredentialAlteration alteration, Class<? extends Throwable> expected) {}

    // ---------------------------------------------------------------------------------
    // Java client over the SASL listeners
    // ---------------------------------------------------------------------------------

    /**
     * SCRAM-SHA-512 over SASL_SSL: the admin client creates a topic and is told the SASL_SSL
     * listener's address; an idempotent producer (acks=all) and a consumer group round-trip
     * records from a few bytes to over a TLS record, and the group's commits are the end
     * offsets.
     */
    @Test
    void scramSha512OverSaslSslCreatesProducesAndConsumesInAGroup() throws Exception {
        String topic = "sasl-ssl-roundtrip";
        String group = "sasl-ssl-group";
        int partitions = 3;
        int n = 300;
        Map<String, Object> conf = scramSsl("alice", ALICE_512);
        try (Admin admin = broker.admin(conf)) {
            Await.createTopic(admin, new NewTopic(topic, partitions, (short) 1));
            assertEquals(List.of(broker.bootstrap("SASL_SSL")), addresses(get(admin.describeCluster().nodes())),
                    "DescribeCluster over SASL_SSL");
            Map<Integer, List<String>> sent = Support.produce(broker, conf, topic, topic, n);

            Map<String, Object> c = new HashMap<>(conf);
            c.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            Map<Integer, List<String>> got = Support.consume(broker, c, topic, n);
            assertEquals(sent, got, "records consumed over SASL_SSL, per partition");

            Map<TopicPartition, OffsetAndMetadata> committed =
                    get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata());
            Map<TopicPartition, Long> want = sent.entrySet().stream().collect(Collectors.toMap(
                    e -> new TopicPartition(topic, e.getKey()), e -> (long) e.getValue().size()));
            assertEquals(want, committed.entrySet().stream()
                    .collect(Collectors.toMap(Map.Entry::getKey, e -> e.getValue().offset())), "committed offsets");
            Node coordinator = get(admin.describeConsumerGroups(List.of(group)).all()).get(group).coordinator();
            assertEquals(broker.bootstrap("SASL_SSL"), address(coordinator), "the coordinator over SASL_SSL");
        }
    }

    /**
     * SASL_PLAINTEXT: PLAIN (a user of the listener's JAAS config) produces and consumes;
     * SCRAM-SHA-256 and SCRAM-SHA-512 (alice's two credentials) are served there too; each
     * is told the SASL_PLAINTEXT listener's address.
     */
    @Test
    void plainAndScramOverSaslPlaintext() throws Exception {
        String topic = "sasl-plain-topic";
        Map<String, Object> plain = sasl("SASL_PLAINTEXT", "PLAIN", plainJaas("carol", CAROL_PLAIN));
        try (Admin admin = broker.admin(plain)) {
            Await.createTopic(admin, new NewTopic(topic, 1, (short) 1));
            assertEquals(List.of(broker.bootstrap("SASL_PLAINTEXT")), addresses(get(admin.describeCluster().nodes())),
                    "DescribeCluster over SASL_PLAINTEXT with PLAIN");
        }
        Map<Integer, List<String>> sent = Support.produce(broker, plain, topic, topic, 50);
        Map<String, Object> c = new HashMap<>(plain);
        c.put(ConsumerConfig.GROUP_ID_CONFIG, "sasl-plain-group");
        assertEquals(sent, Support.consume(broker, c, topic, 50), "records consumed with PLAIN");

        for (Map.Entry<String, String> m : Map.of("SCRAM-SHA-256", ALICE_256, "SCRAM-SHA-512", ALICE_512).entrySet()) {
            try (Admin admin = broker.admin(sasl("SASL_PLAINTEXT", m.getKey(), scramJaas("alice", m.getValue())))) {
                assertEquals(List.of(broker.bootstrap("SASL_PLAINTEXT")),
                        addresses(get(admin.describeCluster().nodes())), m.getKey() + " over SASL_PLAINTEXT");
                assertTrue(get(admin.listTopics().names()).contains(topic), m.getKey());
            }
        }
    }

    /**
     * Refused logins fail the client at once with an authentication error (not retried, no
     * timeout), are counted in corelog_failed_authentications_total and logged (at most a
     * line a second per shard, so not necessarily each one), and leave the
     * listener serving honest clients: a wrong SCRAM password, an unknown user, a wrong PLAIN
     * password, alice's SHA-256 password for SHA-512, and SCRAM-SHA-256 where the listener
     * enables SCRAM-SHA-512 only.
     */
    @Test
    void refusedLoginsFailFastWithAnAuthenticationError() throws Exception {
        broker.tolerateWarnings("authentication failed");
        double before = failedAuthentications();
        Soft soft = new Soft();
        soft.check("SCRAM-SHA-512, wrong password", () -> assertRefused(
                scramSsl("alice", "not-" + ALICE_512), SaslAuthenticationException.class, "wrong password"));
        soft.check("SCRAM-SHA-512, unknown user", () -> assertRefused(
                scramSsl("mallory", ALICE_512), SaslAuthenticationException.class, "unknown user"));
        soft.check("SCRAM-SHA-512 with the SHA-256 password", () -> assertRefused(
                scramSsl("alice", ALICE_256), SaslAuthenticationException.class, "the other mechanism's password"));
        soft.check("PLAIN, wrong password", () -> assertRefused(
                sasl("SASL_PLAINTEXT", "PLAIN", plainJaas("carol", "nope")), SaslAuthenticationException.class,
                "wrong PLAIN password"));
        soft.check("SCRAM-SHA-256 on the SHA-512-only listener", () -> assertRefused(
                sasl("SASL_SSL", "SCRAM-SHA-256", scramJaas("alice", ALICE_256)),
                UnsupportedSaslMechanismException.class, "a mechanism not enabled"));
        soft.check("a consumer with a wrong password throws from poll", () -> {
            Map<String, Object> c = scramSsl("alice", "wrong");
            c.put(ConsumerConfig.GROUP_ID_CONFIG, "never");
            try (KafkaConsumer<byte[], byte[]> consumer = broker.consumer(c)) {
                consumer.subscribe(List.of("sasl-ssl-roundtrip"));
                long t0 = System.nanoTime();
                assertThrows(SaslAuthenticationException.class, () -> {
                    while (System.nanoTime() - t0 < TIMEOUT.toNanos()) {
                        consumer.poll(Duration.ofMillis(200));
                    }
                });
                long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
                assertTrue(ms < 5_000, "the consumer's poll failed only after " + ms + " ms");
            }
        });
        soft.check("counted, every one", () -> Await.assertEventually(() -> assertTrue(
                failedAuthentications() >= before + 6,
                "corelog_failed_authentications_total went from " + before + " to " + failedAuthentications())));
        soft.check("logged", () -> Await.assertEventually(() -> assertTrue(!broker.logLinesContaining("authentication failed").isEmpty(),
                "no 'authentication failed' line in the broker's log")));
        soft.check("logs no password", () -> assertTrue(
                broker.logLinesContaining("secret").stream().noneMatch(l -> l.contains(ALICE_512)
                        || l.contains(CAROL_PLAIN) || l.contains("not-" + ALICE_512)),
                "a password in the broker's log: " + broker.logLinesContaining("secret")));
        soft.check("honest clients still served", () -> {
            try (Admin admin = broker.admin(scramSsl("alice", ALICE_512))) {
                assertEquals(1, get(admin.describeCluster().nodes()).size());
            }
        });
        soft.assertAll("refused logins");
    }

    /** SCRAM users are kept in the metadata log: alice still logs in after a restart. */
    @Test
    void scramUsersSurviveARestart() throws Exception {
        broker.restart();
        try (Admin admin = broker.admin(scramSsl("alice", ALICE_512))) {
            assertEquals(List.of(broker.bootstrap("SASL_SSL")), addresses(get(admin.describeCluster().nodes())));
        }
        try (Admin admin = broker.admin()) {
            assertEquals(Map.of(ScramMechanism.SCRAM_SHA_512, 8192, ScramMechanism.SCRAM_SHA_256, 4096),
                    infos(get(admin.describeUserScramCredentials(List.of("alice")).description("alice"))),
                    "alice's credentials after the restart");
        }
    }

    // ---------------------------------------------------------------------------------
    // Kafka's CLI tools (tools/kafka-cli/kafka-cli.sh)
    // ---------------------------------------------------------------------------------

    /**
     * kafka-configs --alter --add-config 'SCRAM-SHA-256=[password=...]' makes user bob and
     * --describe shows his mechanism and iterations; bob then lists topics over
     * SASL_PLAINTEXT with SCRAM-SHA-256 from a --command-config; --delete-config removes
     * the credential again.
     */
    @Test
    void kafkaConfigsManagesScramUsers() throws Exception {
        KafkaCli.Result r = cli(null, "kafka-configs", "--bootstrap-server", broker.bootstrap(), "--alter",
                "--add-config", "SCRAM-SHA-256=[password=bob-secret]", "--entity-type", "users", "--entity-name", "bob");
        assertEquals(List.of("Completed updating config for user bob."), r.lines(), r.why());

        r = cli(null, "kafka-configs", "--bootstrap-server", broker.bootstrap(), "--describe",
                "--entity-type", "users", "--entity-name", "bob");
        assertEquals(List.of("SCRAM credential configs for user-principal 'bob' are SCRAM-SHA-256=iterations=4096"),
                r.lines(), r.why());

        Path bobProps = DIR.resolve("client-bob.properties");
        Files.writeString(bobProps, "security.protocol=SASL_PLAINTEXT\n"
                + "sasl.mechanism=SCRAM-SHA-256\n"
                + "sasl.jaas.config=" + scramJaas("bob", "bob-secret") + "\n");
        r = cli(null, "kafka-topics", "--bootstrap-server", broker.bootstrap("SASL_PLAINTEXT"),
                "--command-config", bobProps.toString(), "--list");
        assertEquals(0, r.rc(), r.why());

        r = cli(null, "kafka-configs", "--bootstrap-server", broker.bootstrap(), "--alter",
                "--delete-config", "SCRAM-SHA-256", "--entity-type", "users", "--entity-name", "bob");
        assertEquals(List.of("Completed updating config for user bob."), r.lines(), r.why());
        try (Admin admin = broker.admin()) {
            assertTrue(!get(admin.describeUserScramCredentials().users()).contains("bob"), "bob deleted");
        }
    }

    /**
     * kafka-topics --create/--list and the console producer and consumer (a group member)
     * over SASL_SSL with --command-config naming security.protocol=SASL_SSL,
     * sasl.mechanism=SCRAM-SHA-512, the JAAS line and the CA as a PEM truststore.
     */
    @Test
    void kafkaCliToolsOverSaslSsl() throws Exception {
        String topic = "sasl-cli";
        String bootstrap = broker.bootstrap("SASL_SSL");
        Path props = DIR.resolve("client-sasl-ssl.properties");
        Files.writeString(props, "security.protocol=SASL_SSL\n"
                + "sasl.mechanism=SCRAM-SHA-512\n"
                + "sasl.jaas.config=" + scramJaas("alice", ALICE_512) + "\n"
                + "ssl.truststore.type=PEM\n"
                + "ssl.truststore.location=" + CA.cert + "\n");

        KafkaCli.roundTrip(DIR, bootstrap, props, topic, "sasl-cli-group",
                List.of("one", "two over SASL_SSL", "x".repeat(40_000)));
    }

    private static KafkaCli.Result cli(String stdin, String... argv) throws IOException, InterruptedException {
        return KafkaCli.run(DIR, stdin, argv);
    }

    // ---------------------------------------------------------------------------------
    // Helpers
    // ---------------------------------------------------------------------------------

    private static String scramJaas(String user, String password) {
        return "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"" + user
                + "\" password=\"" + password + "\";";
    }

    private static String plainJaas(String user, String password) {
        return "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"" + user
                + "\" password=\"" + password + "\";";
    }

    /** Client settings for {@code listener} with {@code mechanism}, trusting the test CA where it is SASL_SSL. */
    private static Map<String, Object> sasl(String listener, String mechanism, String jaas) {
        Map<String, Object> c = new HashMap<>();
        c.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrap(listener));
        c.put(CommonClientConfigs.SECURITY_PROTOCOL_CONFIG, listener);
        c.put(SaslConfigs.SASL_MECHANISM, mechanism);
        c.put(SaslConfigs.SASL_JAAS_CONFIG, jaas);
        if (listener.equals("SASL_SSL")) {
            c.put(SslConfigs.SSL_TRUSTSTORE_TYPE_CONFIG, "PEM");
            c.put(SslConfigs.SSL_TRUSTSTORE_LOCATION_CONFIG, CA.cert.toString());
        }
        return c;
    }

    /** SCRAM-SHA-512 over SASL_SSL as {@code user}. */
    private static Map<String, Object> scramSsl(String user, String password) {
        return sasl("SASL_SSL", "SCRAM-SHA-512", scramJaas(user, password));
    }

    /**
     * An admin client with {@code conf} fails its first call with {@code expected} (an
     * authentication error) well before its timeouts, so the client did not retry.
     */
    private static void assertRefused(Map<String, Object> conf, Class<? extends AuthenticationException> expected,
            String what) throws Exception {
        Map<String, Object> c = new HashMap<>(conf);
        c.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 20_000);
        c.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 10_000);
        try (Admin admin = broker.admin(c)) {
            long t0 = System.nanoTime();
            ExecutionException e = expectFailure(admin.describeCluster().nodes());
            long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
            assertInstanceOf(expected, e.getCause(), what + ", after " + ms + " ms: " + e.getCause());
            assertTrue(ms < 5_000, what + ": refused only after " + ms + " ms");
        }
    }

    private static Map<ScramMechanism, Integer> infos(UserScramCredentialsDescription d) {
        return d.credentialInfos().stream()
                .collect(Collectors.toMap(ScramCredentialInfo::mechanism, ScramCredentialInfo::iterations));
    }

    /** Refused logins and TLS handshakes so far (every one counted; the log line is rate-limited). */
    private static double failedAuthentications() throws Exception {
        return broker.metric("corelog_failed_authentications_total");
    }
}
