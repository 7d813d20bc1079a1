package dev.corelog.it;

import static dev.corelog.it.Support.deleteRecursively;
import static dev.corelog.it.Support.expectFailure;
import static dev.corelog.it.Support.get;
import static dev.corelog.it.Support.tempDir;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;
import static org.junit.jupiter.api.Assumptions.assumeFalse;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.config.SaslConfigs;
import org.apache.kafka.common.errors.ClusterAuthorizationException;
import org.apache.kafka.common.errors.TopicAuthorizationException;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * ACLs (Kafka's StandardAuthorizer) with Apache Kafka's {@code kafka-acls} and Java client:
 * one broker with ACLs on ({@code authorizer.class.name}, {@code super.users = User:admin},
 * {@code allow.everyone.if.no.acl.found = false}, in a config file) and a SASL_PLAINTEXT
 * listener whose PLAIN users are admin, alice and bob. {@code kafka-acls} runs as admin
 * with a {@code --command-config}: it adds, lists and removes ACLs; the Java client then
 * finds them enforced: a consumer without READ is refused with
 * TopicAuthorizationException while the one granted READ consumes, DENY beats ALLOW, a
 * PREFIXED ACL covers a topic created after it, and the super user needs no ACL at all.
 * Every test uses topics and groups of its own.
 */
class AclTest {

    private static final Path DIR = tempDir("corelog-it-acl-");

    private static final Map<String, String> PASSWORDS =
            Map.of("admin", "admin-secret", "alice", "alice-secret", "bob", "bob-secret");

    @RegisterExtension
    static final CorelogBroker broker = new CorelogBroker("AclTest", "--offsets-topic-partitions", "4")
            .withListener("SASL_PLAINTEXT", "SASL_PLAINTEXT")
            .withConfig("\"authorizer.class.name\" = \"org.apache.kafka.metadata.authorizer.StandardAuthorizer\"\n"
                    + "\"super.users\" = \"User:admin\"\n"
                    + "\"allow.everyone.if.no.acl.found\" = false\n"
                    + "[listener.name.sasl_plaintext]\n"
                    + "\"sasl.enabled.mechanisms\" = \"PLAIN\"\n"
                    + "'plain.sasl.jaas.config' = 'org.apache.kafka.common.security.plain.PlainLoginModule required"
                    + " username=\"admin\" password=\"admin-secret\""
                    + " user_admin=\"admin-secret\" user_alice=\"alice-secret\" user_bob=\"bob-secret\";'\n");

    private static final Duration TIMEOUT = Duration.ofSeconds(30);
    /** How long a client refused by the ACLs may take to say so. */
    private static final Duration REFUSAL_TIMEOUT = Duration.ofSeconds(20);

    /** kafka-acls's --command-config: admin (the super user) over SASL_PLAINTEXT with PLAIN. */
    private static Path adminProps;

    @BeforeAll
    static void writeAdminProps() throws Exception {
        assumeFalse(broker.isExternal(), "the SASL listener, its users and the authorizer are this class's own");
        adminProps = DIR.resolve("client-admin.properties");
        Files.writeString(adminProps, "security.protocol=SASL_PLAINTEXT\n"
                + "sasl.mechanism=PLAIN\n"
                + "sasl.jaas.config=" + jaas("admin") + "\n");
    }

    @AfterAll
    static void deleteDir() {
        deleteRecursively(DIR);
    }

    // ---------------------------------------------------------------------------------
    // kafka-acls: --add, --list, --remove
    // ---------------------------------------------------------------------------------

    /**
     * kafka-acls --add (two operations for alice on a topic) reports both ACLs; --list
     * --topic prints them under the topic's LITERAL pattern; --remove --force of one
     * operation leaves the other, and --list then shows only it.
     */
    @Test
    void kafkaAclsAddsListsAndRemovesTopicAcls() throws Exception {
        String topic = "acl-cli-topic";
        String pattern = pattern("TOPIC", topic, "LITERAL");

        KafkaCli.Result r = acls("--add", "--allow-principal", "User:alice",
                "--operation", "Read", "--operation", "Write", "--topic", topic);
        assertEquals(Map.of(pattern, Set.of("User:alice ALLOW READ", "User:alice ALLOW WRITE")), parse(r),
                "the ACLs kafka-acls --add reports adding" + r.why());

        r = acls("--list", "--topic", topic);
        assertEquals(Map.of(pattern, Set.of("User:alice ALLOW READ", "User:alice ALLOW WRITE")), parse(r),
                "kafka-acls --list --topic after adding READ and WRITE" + r.why());

        r = acls("--remove", "--force", "--allow-principal", "User:alice", "--operation", "Write", "--topic", topic);
        assertTrue(!r.out().contains("Error"), "kafka-acls --remove" + r.why());

        r = acls("--list", "--topic", topic);
        assertEquals(Map.of(pattern, Set.of("User:alice ALLOW READ")), parse(r),
                "kafka-acls --list --topic after removing WRITE: only READ is left" + r.why());
    }

    // ---------------------------------------------------------------------------------
    // The ACLs enforced on the Java client
    // ---------------------------------------------------------------------------------

    /**
     * READ on the topic and the group (granted to bob with kafka-acls) lets a consumer read
     * what admin produced; alice, with DESCRIBE on the topic and READ on her group but not
     * READ on the topic, gets TopicAuthorizationException from poll (her Fetch is refused),
     * and so she does on a topic no ACL names at all.
     */
    @Test
    void consumerWithoutReadIsRefusedAndTheGrantedOneConsumes() throws Exception {
        String topic = "acl-read-topic";
        String hidden = "acl-read-hidden";
        String bobGroup = "acl-read-bob";
        String aliceGroup = "acl-read-alice";
        try (Admin admin = broker.admin(sasl("admin"))) {
            Await.createTopic(admin, new NewTopic(topic, 1, (short) 1));
            Await.createTopic(admin, new NewTopic(hidden, 1, (short) 1));
            // alice: DESCRIBE on the topic, READ on her group, with the Java client's CreateAcls.
            get(admin.createAcls(List.of(
                    binding(ResourceType.TOPIC, topic, PatternType.LITERAL, "User:alice",
                            AclOperation.DESCRIBE, AclPermissionType.ALLOW),
                    binding(ResourceType.GROUP, aliceGroup, PatternType.LITERAL, "User:alice",
                            AclOperation.READ, AclPermissionType.ALLOW))).all());
        }
        Map<Integer, List<String>> sent = Support.produce(broker, sasl("admin"), topic, topic, 20);

        KafkaCli.Result r = acls("--add", "--allow-principal", "User:bob", "--operation", "Read",
                "--topic", topic, "--group", bobGroup);
        assertEquals(Map.of(pattern("TOPIC", topic, "LITERAL"), Set.of("User:bob ALLOW READ"),
                        pattern("GROUP", bobGroup, "LITERAL"), Set.of("User:bob ALLOW READ")), parse(r),
                "kafka-acls --add READ on a topic and a group" + r.why());

        broker.tolerateWarnings("operation denied");
        Soft soft = new Soft();
        soft.check("bob (READ on the topic and the group) consumes what admin produced", () -> {
            Map<String, Object> c = sasl("bob");
            c.put(ConsumerConfig.GROUP_ID_CONFIG, bobGroup);
            assertEquals(sent, Support.consume(broker, c, topic, 20), "records bob consumed, per partition");
        });
        soft.check("alice (DESCRIBE, no READ on the topic; READ on her group) is refused from poll", () -> {
            Map<String, Object> c = sasl("alice");
            c.put(ConsumerConfig.GROUP_ID_CONFIG, aliceGroup);
            TopicAuthorizationException e = pollRefused(c, consumer -> consumer.subscribe(List.of(topic)));
            assertEquals(Set.of(topic), e.unauthorizedTopics(), e.toString());
        });
        soft.check("alice is refused on a topic no ACL names (assigned, no group)", () -> {
            TopicAuthorizationException e = pollRefused(sasl("alice"),
                    consumer -> consumer.assign(List.of(new TopicPartition(hidden, 0))));
            assertEquals(Set.of(hidden), e.unauthorizedTopics(), e.toString());
        });
        soft.assertAll("READ on a topic");
    }

    /**
     * DENY beats ALLOW: bob may do ALL on every topic (the LITERAL {@code *}) but is denied
     * WRITE on a PREFIXED pattern; his producer is refused on a topic under the prefix and
     * served on another.
     */
    @Test
    void denyBeatsAllow() throws Exception {
        String prefix = "acl-deny-";
        String denied = prefix + "x";
        String open = "acl-open-x";
        try (Admin admin = broker.admin(sasl("admin"))) {
            Await.createTopic(admin, new NewTopic(denied, 1, (short) 1));
            Await.createTopic(admin, new NewTopic(open, 1, (short) 1));
        }
        try {
            KafkaCli.Result r = acls("--add", "--allow-principal", "User:bob", "--operation", "All", "--topic", "*");
            assertEquals(Map.of(pattern("TOPIC", "*", "LITERAL"), Set.of("User:bob ALLOW ALL")), parse(r),
                    "kafka-acls --add ALL on topic *" + r.why());
            r = acls("--add", "--deny-principal", "User:bob", "--operation", "Write", "--topic", prefix,
                    "--resource-pattern-type", "prefixed");
            assertEquals(Map.of(pattern("TOPIC", prefix, "PREFIXED"), Set.of("User:bob DENY WRITE")), parse(r),
                    "kafka-acls --add a PREFIXED DENY" + r.why());

            broker.tolerateWarnings("operation denied");
            Soft soft = new Soft();
            soft.check("bob's produce to " + denied + " (ALLOW ALL on *, DENY WRITE on " + prefix + "*)", () -> {
                ExecutionException e = assertSendFails(sasl("bob"), denied);
                assertInstanceOf(TopicAuthorizationException.class, e.getCause(), e.toString());
                assertEquals(Set.of(denied), ((TopicAuthorizationException) e.getCause()).unauthorizedTopics(),
                        e.toString());
            });
            soft.check("bob's produce to " + open + " (ALLOW ALL on *, no DENY)", () -> {
                RecordMetadata md = send(sasl("bob"), open);
                assertEquals(0L, md.offset(), "the first record's offset in " + open);
            });
            soft.assertAll("DENY beats ALLOW");
        } finally {
            // bob's wildcard ALLOW would grant him every other test's topics.
            try (Admin admin = broker.admin(sasl("admin"))) {
                get(admin.deleteAcls(List.of(
                        new AclBindingFilter(new ResourcePatternFilter(ResourceType.TOPIC, "*", PatternType.LITERAL),
                                new AccessControlEntryFilter("User:bob", null, AclOperation.ANY,
                                        AclPermissionType.ANY)),
                        new AclBindingFilter(new ResourcePatternFilter(ResourceType.TOPIC, prefix, PatternType.PREFIXED),
                                new AccessControlEntryFilter("User:bob", null, AclOperation.ANY,
                                        AclPermissionType.ANY)))).all());
            }
        }
    }

    /**
     * A PREFIXED ACL made before any topic under it exists covers the topic admin creates
     * afterwards: alice's producer (WRITE on the prefix only) is served there; kafka-acls
     * --list with the MATCH pattern type names the prefix for that topic; a topic whose
     * name only nearly starts with the prefix stays refused.
     */
    @Test
    void prefixedAclCoversATopicCreatedLater() throws Exception {
        String prefix = "acl-later-";
        String topic = prefix + "orders";
        String nearMiss = "acl-late-orders";
        KafkaCli.Result r = acls("--add", "--allow-principal", "User:alice", "--operation", "Write",
                "--topic", prefix, "--resource-pattern-type", "prefixed");
        assertEquals(Map.of(pattern("TOPIC", prefix, "PREFIXED"), Set.of("User:alice ALLOW WRITE")), parse(r),
                "kafka-acls --add a PREFIXED ALLOW" + r.why());

        try (Admin admin = broker.admin(sasl("admin"))) {
            assertTrue(!get(admin.listTopics().names()).contains(topic), topic + " exists before admin creates it");
            Await.createTopic(admin, new NewTopic(topic, 2, (short) 1));
            Await.createTopic(admin, new NewTopic(nearMiss, 1, (short) 1));
        }

        broker.tolerateWarnings("operation denied");
        Soft soft = new Soft();
        soft.check("alice produces to " + topic, () -> {
            Map<Integer, List<String>> sent = Support.produce(broker, sasl("alice"), topic, topic, 10);
            assertEquals(10, sent.values().stream().mapToInt(List::size).sum(), "records acknowledged: " + sent);
        });
        soft.check("kafka-acls --list --resource-pattern-type match names the prefix for " + topic, () -> {
            KafkaCli.Result l = acls("--list", "--topic", topic, "--resource-pattern-type", "match");
            Map<String, Set<String>> got = parse(l);
            assertEquals(Set.of("User:alice ALLOW WRITE"), got.get(pattern("TOPIC", prefix, "PREFIXED")),
                    "the PREFIXED ACL among the matching ones" + l.why());
        });
        soft.check("alice is refused on " + nearMiss + ", outside the prefix", () -> {
            ExecutionException e = assertSendFails(sasl("alice"), nearMiss);
            assertInstanceOf(TopicAuthorizationException.class, e.getCause(), e.toString());
        });
        soft.assertAll("a PREFIXED ACL");
    }

    /**
     * super.users pass every check with no ACL naming them: admin creates a topic, produces,
     * consumes in a group and commits; alice, who is not one, may not create ACLs
     * (CLUSTER_AUTHORIZATION_FAILED).
     */
    @Test
    void superUserNeedsNoAcl() throws Exception {
        String topic = "acl-super-topic";
        String group = "acl-super-group";
        try (Admin admin = broker.admin(sasl("admin"))) {
            Collection<AclBinding> naming = get(admin.describeAcls(new AclBindingFilter(ResourcePatternFilter.ANY,
                    new AccessControlEntryFilter("User:admin", null, AclOperation.ANY, AclPermissionType.ANY)))
                    .values());
            assertEquals(List.of(), List.copyOf(naming), "ACLs naming User:admin");

            Await.createTopic(admin, new NewTopic(topic, 2, (short) 1));
            Map<Integer, List<String>> sent = Support.produce(broker, sasl("admin"), topic, topic, 30);
            Map<String, Object> c = sasl("admin");
            c.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            assertEquals(sent, Support.consume(broker, c, topic, 30), "records the super user consumed, per partition");

            Map<TopicPartition, OffsetAndMetadata> committed =
                    get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata());
            Map<TopicPartition, Long> want = sent.entrySet().stream().collect(Collectors.toMap(
                    e -> new TopicPartition(topic, e.getKey()), e -> (long) e.getValue().size()));
            assertEquals(want, committed.entrySet().stream()
                    .collect(Collectors.toMap(Map.Entry::getKey, e -> e.getValue().offset())),
                    "the super user's committed offsets");
        }

        broker.tolerateWarnings("operation denied");
        try (Admin alice = broker.admin(sasl("alice"))) {
            ExecutionException e = expectFailure(alice.createAcls(List.of(binding(ResourceType.TOPIC, topic,
                    PatternType.LITERAL, "User:alice", AclOperation.ALL, AclPermissionType.ALLOW))).all());
            assertInstanceOf(ClusterAuthorizationException.class, e.getCause(),
                    "alice (no ALTER on the cluster) creating an ACL: " + e);
        }
    }

    // ---------------------------------------------------------------------------------
    // Helpers
    // ---------------------------------------------------------------------------------

    /** kafka-acls as admin over the SASL_PLAINTEXT listener; it must exit 0. */
    private static KafkaCli.Result acls(String... args) throws Exception {
        List<String> argv = new ArrayList<>(List.of("kafka-acls", "--bootstrap-server",
                broker.bootstrap("SASL_PLAINTEXT"), "--command-config", adminProps.toString()));
        argv.addAll(List.of(args));
        return KafkaCli.run(DIR, null, argv.toArray(String[]::new));
    }

    private static final Pattern ENTRY = Pattern.compile(
            "\\(principal=([^,]+), host=([^,]+), operation=(\\w+), permissionType=(\\w+)\\)");

    /**
     * kafka-acls's output ("Adding ACLs for resource `PATTERN`:" or "Current ACLs for
     * resource `PATTERN`:", then one "(principal=..., host=..., operation=...,
     * permissionType=...)" a line) as each resource pattern's entries, each
     * "PRINCIPAL PERMISSION OPERATION" (with "@HOST" after the principal when not *).
     */
    private static Map<String, Set<String>> parse(KafkaCli.Result r) {
        Map<String, Set<String>> acls = new LinkedHashMap<>();
        Set<String> current = null;
        for (String line : r.lines()) {
            int open = line.indexOf("`ResourcePattern(");
            if (open >= 0) {
                String p = line.substring(open + 1, line.indexOf('`', open + 1));
                current = acls.computeIfAbsent(p, k -> new LinkedHashSet<>());
                continue;
            }
            Matcher m = ENTRY.matcher(line);
            if (m.find()) {
                if (current == null) {
                    fail("an ACL before any resource in kafka-acls's output" + r.why());
                }
                String host = m.group(2).equals("*") ? "" : "@" + m.group(2);
                current.add(m.group(1) + host + " " + m.group(4) + " " + m.group(3));
            }
        }
        return acls;
    }

    /** A resource pattern as kafka-acls prints it (Kafka's ResourcePattern.toString). */
    private static String pattern(String type, String name, String patternType) {
        return "ResourcePattern(resourceType=" + type + ", name=" + name + ", patternType=" + patternType + ")";
    }

    private static AclBinding binding(ResourceType type, String name, PatternType patternType, String principal,
            AclOperation op, AclPermissionType permission) {
        return new AclBinding(new ResourcePattern(type, name, patternType),
                new AccessControlEntry(principal, "*", op, permission));
    }

    private static String jaas(String user) {
        return "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"" + user
                + "\" password=\"" + PASSWORDS.get(user) + "\";";
    }

    /** Client settings for {@code user} (PLAIN) on the SASL_PLAINTEXT listener. */
    private static Map<String, Object> sasl(String user) {
        Map<String, Object> c = new HashMap<>();
        c.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrap("SASL_PLAINTEXT"));
        c.put(CommonClientConfigs.SECURITY_PROTOCOL_CONFIG, "SASL_PLAINTEXT");
        c.put(SaslConfigs.SASL_MECHANISM, "PLAIN");
        c.put(SaslConfigs.SASL_JAAS_CONFIG, jaas(user));
        return c;
    }

    /** A producer (the client's defaults: idempotent, acks=all) with timeouts short enough for a refusal. */
    private static KafkaProducer<byte[], byte[]> producer(Map<String, Object> conf) {
        Map<String, Object> c = new HashMap<>(conf);
        c.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, (int) REFUSAL_TIMEOUT.toMillis());
        c.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, 10_000);
        c.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, (int) REFUSAL_TIMEOUT.toMillis());
        return broker.producer(c);
    }

    /** Sends one record to {@code topic} and returns its acknowledgement. */
    private static RecordMetadata send(Map<String, Object> conf, String topic) throws Exception {
        try (KafkaProducer<byte[], byte[]> p = producer(conf)) {
            return p.send(new ProducerRecord<>(topic, "v".getBytes(StandardCharsets.UTF_8)))
                    .get(TIMEOUT.toSeconds(), TimeUnit.SECONDS);
        }
    }

    /** Sends one record to {@code topic}, which must fail; returns how. */
    private static ExecutionException assertSendFails(Map<String, Object> conf, String topic) throws Exception {
        try (KafkaProducer<byte[], byte[]> p = producer(conf)) {
            RecordMetadata md = p.send(new ProducerRecord<>(topic, "v".getBytes(StandardCharsets.UTF_8)))
                    .get(TIMEOUT.toSeconds(), TimeUnit.SECONDS);
            throw new AssertionError("the record to " + topic + " was acknowledged at offset " + md.offset());
        } catch (ExecutionException e) {
            return e;
        }
    }

    /**
     * A consumer with {@code conf}, set up by {@code setup} (subscribe or assign), polls
     * until it throws; that must be TopicAuthorizationException, within REFUSAL_TIMEOUT,
     * with no record consumed.
     */
    private static TopicAuthorizationException pollRefused(Map<String, Object> conf,
            Consumer<KafkaConsumer<byte[], byte[]>> setup) {
        try (KafkaConsumer<byte[], byte[]> consumer = broker.consumer(conf)) {
            setup.accept(consumer);
            long deadline = System.nanoTime() + REFUSAL_TIMEOUT.toNanos();
            int consumed = 0;
            while (System.nanoTime() < deadline) {
                try {
                    consumed += consumer.poll(Duration.ofMillis(200)).count();
                } catch (TopicAuthorizationException e) {
                    assertEquals(0, consumed, "records consumed before the refusal");
                    return e;
                } catch (RuntimeException e) {
                    throw new AssertionError("poll threw " + e + ", not TopicAuthorizationException", e);
                }
            }
            throw new AssertionError("poll was not refused within " + REFUSAL_TIMEOUT.toSeconds()
                    + " s (" + consumed + " records consumed)");
        }
    }
}
