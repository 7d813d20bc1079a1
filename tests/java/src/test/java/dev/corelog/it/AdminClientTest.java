package dev.corelog.it;

import static org.junit.jupiter.api.Assertions.assertAll;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterClientQuotasOptions;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.AlterConfigsOptions;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.DescribeClusterOptions;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.DescribeConsumerGroupsOptions;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicCollection;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.GroupIdNotFoundException;
import org.apache.kafka.common.errors.GroupNotEmptyException;
import org.apache.kafka.common.errors.GroupSubscribedToTopicException;
import org.apache.kafka.common.errors.InvalidConfigurationException;
import org.apache.kafka.common.errors.InvalidPartitionsException;
import org.apache.kafka.common.errors.InvalidReplicationFactorException;
import org.apache.kafka.common.errors.InvalidRequestException;
import org.apache.kafka.common.errors.InvalidTopicException;
import org.apache.kafka.common.errors.OffsetOutOfRangeException;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.errors.UnknownMemberIdException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.quota.ClientQuotaFilterComponent;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Kafka's Admin client against corelog, one operation family per test, each expecting
 * what Apache Kafka (4.4, a single KRaft broker without an authorizer) answers.
 *
 * <p>The broker runs with node id 1 (not 0, so that a hard-wired id shows) and
 * {@code --num-partitions 4} (a static broker config).
 */
class AdminClientTest {

    private static final int NODE_ID = 1;
    private static final int NUM_PARTITIONS = 4;

    @RegisterExtension
    static final CorelogBroker broker = new CorelogBroker("AdminClientTest",
            "--node-id", String.valueOf(NODE_ID), "--num-partitions", String.valueOf(NUM_PARTITIONS),
            "--offsets-topic-partitions", "8");

    /** What Kafka answers for KIP-430 authorized operations without an authorizer: all supported. */
    private static final Set<AclOperation> TOPIC_OPS = Set.of(AclOperation.READ, AclOperation.WRITE,
            AclOperation.CREATE, AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.ALTER,
            AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS);
    /** Kafka 4's groups also have configs (KIP-848), so DESCRIBE_CONFIGS and ALTER_CONFIGS. */
    private static final Set<AclOperation> GROUP_OPS = Set.of(AclOperation.READ, AclOperation.DESCRIBE,
            AclOperation.DELETE, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS);
    private static final Set<AclOperation> CLUSTER_OPS = Set.of(AclOperation.CREATE, AclOperation.CLUSTER_ACTION,
            AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE,
            AclOperation.ALTER, AclOperation.DESCRIBE);

    private static Admin admin;

    @BeforeAll
    static void openAdmin() {
        admin = broker.admin();
    }

    @AfterAll
    static void closeAdmin() {
        if (admin != null) {
            admin.close(Duration.ofSeconds(10));
        }
    }

    private static Node self() {
        return new Node(NODE_ID, "127.0.0.1", broker.port());
    }

    // ---------------------------------------------------------------------------------
    // Topics
    // ---------------------------------------------------------------------------------

    @Test
    void createDescribeListAndDeleteTopics() throws Exception {
        String topic = "adm-topics";
        CreateTopicsResult created = admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1)
                .configs(Map.of("retention.ms", "3600000", "cleanup.policy", "compact"))));
        get(created.all());
        assertEquals(3, get(created.numPartitions(topic)));
        assertEquals(1, get(created.replicationFactor(topic)));
        Uuid id = get(created.topicId(topic));
        assertNotNull(id);
        assertNotEquals(Uuid.ZERO_UUID, id, "CreateTopics returns the topic id");
        Config createdConfig = get(created.config(topic));
        assertEquals("3600000", createdConfig.get("retention.ms").value());
        assertEquals("compact", createdConfig.get("cleanup.policy").value());
        Await.partitionsReady(admin, topic, 3);

        assertFails(TopicExistsException.class, admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1))).all());
        assertFails(InvalidReplicationFactorException.class,
                admin.createTopics(List.of(new NewTopic("adm-rf2", 1, (short) 2))).all());
        assertFails(InvalidTopicException.class,
                admin.createTopics(List.of(new NewTopic("adm/bad name", 1, (short) 1))).all());
        assertFails(InvalidConfigurationException.class, admin.createTopics(List.of(
                new NewTopic("adm-bad-config", 1, (short) 1).configs(Map.of("retention.ms", "forever")))).all());

        // validateOnly: checked and answered, not created.
        CreateTopicsResult validated = admin.createTopics(List.of(new NewTopic("adm-validate-only", 2, (short) 1)),
                new CreateTopicsOptions().validateOnly(true));
        get(validated.all());
        assertEquals(2, get(validated.numPartitions("adm-validate-only")));

        // Partitions and replication factor left to the broker: num.partitions, one replica.
        CreateTopicsResult defaults = admin.createTopics(List.of(new NewTopic("adm-defaults", Optional.empty(), Optional.empty())));
        get(defaults.all());
        Await.partitionsReady(admin, "adm-defaults", NUM_PARTITIONS);
        assertEquals(NUM_PARTITIONS, get(defaults.numPartitions("adm-defaults")), "num.partitions of the broker");
        assertEquals(1, get(defaults.replicationFactor("adm-defaults")));

        Set<String> names = get(admin.listTopics().names());
        assertTrue(names.contains(topic), "listTopics: " + names);
        assertTrue(names.contains("adm-defaults"), "listTopics: " + names);
        assertFalse(names.contains("adm-validate-only"), "validateOnly created the topic: " + names);
        assertFalse(names.contains("adm-bad-config"), "a topic with a bad config was created: " + names);
        assertFalse(names.contains("__consumer_offsets"), "listTopics lists internal topics only when asked: " + names);

        TopicDescription d = get(admin.describeTopics(List.of(topic),
                new DescribeTopicsOptions().includeAuthorizedOperations(true)).allTopicNames()).get(topic);
        assertEquals(topic, d.name());
        assertFalse(d.isInternal());
        assertEquals(id, d.topicId());
        assertEquals(3, d.partitions().size());
        for (int p = 0; p < 3; p++) {
            TopicPartitionInfo info = d.partitions().get(p);
            assertEquals(p, info.partition());
            assertEquals(self(), info.leader(), "leader of partition " + p);
            assertEquals(List.of(self()), info.replicas(), "replicas of partition " + p);
            assertEquals(List.of(self()), info.isr(), "isr of partition " + p);
        }
        assertEquals(TOPIC_OPS, d.authorizedOperations(), "topic authorized operations (KIP-430)");

        Soft soft = new Soft();
        soft.check("describeTopics by id (Metadata v12 with a topic id and an empty name)", () -> {
            TopicDescription byId = get(admin.describeTopics(TopicCollection.ofTopicIds(List.of(id))).allTopicIds()).get(id);
            assertEquals(topic, byId.name());
            assertEquals(3, byId.partitions().size());
        });

        get(admin.deleteTopics(List.of(topic)).all());
        awaitTrue(() -> !get(admin.listTopics().names()).contains(topic), "deleted topic leaves listTopics");
        assertFails(UnknownTopicOrPartitionException.class, admin.describeTopics(List.of(topic)).allTopicNames());
        assertFails(UnknownTopicOrPartitionException.class, admin.deleteTopics(List.of(topic)).all());
        soft.assertAll("topics");
    }

    @Test
    void createPartitionsGrowsATopicAndNeverShrinksIt() throws Exception {
        String topic = "adm-partitions";
        Await.createTopic(admin, new NewTopic(topic, 2, (short) 1));
        get(admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(5))).all());
        awaitTrue(() -> describe(topic).partitions().size() == 5, "5 partitions after createPartitions");
        List<Integer> ids = describe(topic).partitions().stream().map(TopicPartitionInfo::partition).toList();
        assertEquals(List.of(0, 1, 2, 3, 4), ids);
        Await.partitionsReady(admin, topic, 5);

        assertFails(InvalidPartitionsException.class, admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(3))).all());
        assertFails(InvalidPartitionsException.class, admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(5))).all());
        assertFails(UnknownTopicOrPartitionException.class,
                admin.createPartitions(Map.of("adm-no-such-topic", NewPartitions.increaseTo(5))).all());

        // The new partitions take writes.
        try (KafkaProducer<byte[], byte[]> p = broker.producer(Map.of())) {
            RecordMetadata md = p.send(new ProducerRecord<>(topic, 4, null, bytes("on-4"))).get(30, TimeUnit.SECONDS);
            assertEquals(4, md.partition());
            assertEquals(0, md.offset());
        }
        TopicPartition tp4 = new TopicPartition(topic, 4);
        assertEquals(1, get(admin.listOffsets(Map.of(tp4, OffsetSpec.latest())).partitionResult(tp4)).offset());
    }

    // ---------------------------------------------------------------------------------
    // Configs
    // ---------------------------------------------------------------------------------

    @Test
    void topicConfigsDescribeAndIncrementalAlter() throws Exception {
        String topic = "adm-configs";
        Await.createTopic(admin, new NewTopic(topic, 1, (short) 1).configs(Map.of("retention.ms", "86400000")));
        ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);

        Config c = describeConfig(res);
        assertEntry(c, "retention.ms", "86400000", ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG);
        assertEntry(c, "cleanup.policy", "delete", ConfigEntry.ConfigSource.DEFAULT_CONFIG);
        assertEntry(c, "segment.bytes", "1073741824", ConfigEntry.ConfigSource.DEFAULT_CONFIG);
        assertEntry(c, "max.message.bytes", "1048588", ConfigEntry.ConfigSource.DEFAULT_CONFIG);
        assertFalse(c.get("retention.ms").isDefault());
        assertTrue(c.get("cleanup.policy").isDefault());
        assertFalse(c.get("retention.ms").isReadOnly());

        get(admin.incrementalAlterConfigs(Map.of(res, List.of(
                new AlterConfigOp(new ConfigEntry("segment.bytes", "1048576"), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("retention.ms", null), AlterConfigOp.OpType.DELETE),
                new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"), AlterConfigOp.OpType.APPEND)))).all());
        Soft soft = new Soft();
        soft.check("SET", () -> Await.assertEventually(() -> assertEntry(describeConfig(res),
                "segment.bytes", "1048576", ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG)));
        soft.check("DELETE", () -> Await.assertEventually(() -> assertEntry(describeConfig(res),
                "retention.ms", "604800000", ConfigEntry.ConfigSource.DEFAULT_CONFIG)));
        // APPEND starts from the effective value (the default "delete") and appends, in order.
        soft.check("APPEND", () -> Await.assertEventually(() -> assertEntry(describeConfig(res),
                "cleanup.policy", "delete,compact", ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG)));

        get(admin.incrementalAlterConfigs(Map.of(res, List.of(
                new AlterConfigOp(new ConfigEntry("cleanup.policy", "delete"), AlterConfigOp.OpType.SUBTRACT)))).all());
        eventuallyEntry(res, "cleanup.policy", "compact", ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG);

        // validateOnly changes nothing.
        get(admin.incrementalAlterConfigs(Map.of(res, List.of(
                new AlterConfigOp(new ConfigEntry("segment.bytes", "2097152"), AlterConfigOp.OpType.SET))),
                new AlterConfigsOptions().validateOnly(true)).all());
        assertEntry(describeConfig(res), "segment.bytes", "1048576", ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG);

        // Bad values and unknown keys: INVALID_CONFIG, nothing changes.
        assertFails(InvalidConfigurationException.class, admin.incrementalAlterConfigs(Map.of(res, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", "forever"), AlterConfigOp.OpType.SET)))).all());
        assertFails(InvalidConfigurationException.class, admin.incrementalAlterConfigs(Map.of(res, List.of(
                new AlterConfigOp(new ConfigEntry("no.such.config", "1"), AlterConfigOp.OpType.SET)))).all());
        assertFails(InvalidConfigurationException.class, admin.incrementalAlterConfigs(Map.of(res, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", "1"), AlterConfigOp.OpType.APPEND)))).all());
        assertEntry(describeConfig(res), "retention.ms", "604800000", ConfigEntry.ConfigSource.DEFAULT_CONFIG);

        ConfigResource missing = new ConfigResource(ConfigResource.Type.TOPIC, "adm-no-such-topic");
        assertFails(UnknownTopicOrPartitionException.class, admin.describeConfigs(List.of(missing)).all());
        soft.assertAll("topic configs");
    }

    @Test
    void brokerConfigsDescribe() throws Exception {
        ConfigResource res = new ConfigResource(ConfigResource.Type.BROKER, String.valueOf(NODE_ID));
        Config c = describeConfig(res);
        assertAll("broker configs of node " + NODE_ID,
                () -> assertEntry(c, "node.id", String.valueOf(NODE_ID), ConfigEntry.ConfigSource.STATIC_BROKER_CONFIG),
                () -> assertTrue(c.get("node.id").isReadOnly(), "node.id is read-only"),
                () -> assertEntry(c, "num.partitions", String.valueOf(NUM_PARTITIONS), ConfigEntry.ConfigSource.STATIC_BROKER_CONFIG),
                () -> assertEntry(c, "offsets.topic.num.partitions", "8", ConfigEntry.ConfigSource.STATIC_BROKER_CONFIG),
                () -> assertEntry(c, "message.max.bytes", "1048588", ConfigEntry.ConfigSource.DEFAULT_CONFIG),
                // Not given at start-up: Kafka's default, not a static config.
                () -> assertEntry(c, "auto.create.topics.enable", "true", ConfigEntry.ConfigSource.DEFAULT_CONFIG),
                () -> assertEntry(c, "socket.request.max.bytes", "104857600", ConfigEntry.ConfigSource.DEFAULT_CONFIG),
                () -> assertEquals(ConfigEntry.ConfigSource.DEFAULT_CONFIG, c.get("log.retention.ms").source(), "log.retention.ms source"),
                // KIP-226: log.* topic defaults are dynamic broker configs.
                () -> assertFalse(c.get("log.retention.ms").isReadOnly(), "log.retention.ms is a dynamic broker config"),
                () -> assertFalse(c.get("message.max.bytes").isReadOnly(), "message.max.bytes is a dynamic broker config"));

    }

    /** Dynamic broker configs (KIP-226): per broker and cluster-wide defaults, visible to topics. */
    @Test
    void brokerConfigsIncrementalAlter() throws Exception {
        ConfigResource node = new ConfigResource(ConfigResource.Type.BROKER, String.valueOf(NODE_ID));
        ConfigResource clusterDefault = new ConfigResource(ConfigResource.Type.BROKER, "");
        get(admin.incrementalAlterConfigs(Map.of(node, List.of(
                new AlterConfigOp(new ConfigEntry("log.retention.ms", "7200000"), AlterConfigOp.OpType.SET)))).all());
        get(admin.incrementalAlterConfigs(Map.of(clusterDefault, List.of(
                new AlterConfigOp(new ConfigEntry("log.retention.bytes", "1073741824"), AlterConfigOp.OpType.SET)))).all());
        try {
            eventuallyEntry(node, "log.retention.ms", "7200000", ConfigEntry.ConfigSource.DYNAMIC_BROKER_CONFIG);
            eventuallyEntry(node, "log.retention.bytes", "1073741824", ConfigEntry.ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG);

            // A topic without overrides follows the broker's dynamic defaults.
            String topic = "adm-broker-defaults";
            Await.createTopic(admin, new NewTopic(topic, 1, (short) 1));
            ConfigResource t = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            eventuallyEntry(t, "retention.ms", "7200000", ConfigEntry.ConfigSource.DYNAMIC_BROKER_CONFIG);
            eventuallyEntry(t, "retention.bytes", "1073741824", ConfigEntry.ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG);
        } finally {
            get(admin.incrementalAlterConfigs(Map.of(node, List.of(
                    new AlterConfigOp(new ConfigEntry("log.retention.ms", null), AlterConfigOp.OpType.DELETE)))).all());
            get(admin.incrementalAlterConfigs(Map.of(clusterDefault, List.of(
                    new AlterConfigOp(new ConfigEntry("log.retention.bytes", null), AlterConfigOp.OpType.DELETE)))).all());
        }
        eventually(() -> assertEquals(ConfigEntry.ConfigSource.DEFAULT_CONFIG,
                describeConfig(node).get("log.retention.ms").source(), "after DELETE"));
        eventuallyEntry(node, "log.retention.bytes", "-1", ConfigEntry.ConfigSource.DEFAULT_CONFIG);
    }

    // ---------------------------------------------------------------------------------
    // Offsets and records
    // ---------------------------------------------------------------------------------

    /** Three records, one batch each, at base+1000, base+5000, base+3000. */
    private static TopicPartition threeTimestampedRecords(String topic, long base) throws Exception {
        Await.createTopic(admin, new NewTopic(topic, 1, (short) 1));
        try (KafkaProducer<byte[], byte[]> p = broker.producer(Map.of())) {
            for (long ts : new long[] {base + 1000, base + 5000, base + 3000}) {
                p.send(new ProducerRecord<>(topic, 0, ts, null, bytes("at-" + ts))).get(30, TimeUnit.SECONDS);
            }
        }
        return new TopicPartition(topic, 0);
    }

    @Test
    void listOffsetsEarliestLatestAndForTimestamp() throws Exception {
        long base = System.currentTimeMillis() - Duration.ofHours(1).toMillis();
        TopicPartition tp = threeTimestampedRecords("adm-list-offsets", base);
        assertEquals(0, listOffset(tp, OffsetSpec.earliest()).offset(), "earliest");
        assertEquals(3, listOffset(tp, OffsetSpec.latest()).offset(), "latest");
        ListOffsetsResultInfo at = listOffset(tp, OffsetSpec.forTimestamp(base + 2000));
        assertEquals(1, at.offset(), "first offset with a timestamp >= base+2000");
        assertEquals(base + 5000, at.timestamp());
        ListOffsetsResultInfo exact = listOffset(tp, OffsetSpec.forTimestamp(base + 3000));
        assertEquals(1, exact.offset(), "offset 1 (base+5000) comes before offset 2 (base+3000)");
        ListOffsetsResultInfo none = listOffset(tp, OffsetSpec.forTimestamp(base + 6000));
        assertEquals(-1, none.offset(), "no record at or after base+6000");
        ListOffsetsResultInfo committed = get(admin.listOffsets(Map.of(tp, OffsetSpec.latest()),
                new ListOffsetsOptions(IsolationLevel.READ_COMMITTED)).partitionResult(tp));
        assertEquals(3, committed.offset(), "latest at read_committed (no transactions: the high watermark)");
        // (A partition the topic does not have is not asked of the broker: Admin retries its
        // metadata lookup until the API timeout, as with Kafka.)
    }

    /** KIP-734: ListOffsets v7, timestamp -3. */
    @Test
    void listOffsetsMaxTimestamp() throws Exception {
        long base = System.currentTimeMillis() - Duration.ofHours(1).toMillis();
        TopicPartition tp = threeTimestampedRecords("adm-max-timestamp", base);
        ListOffsetsResultInfo max = listOffset(tp, OffsetSpec.maxTimestamp());
        assertEquals(1, max.offset(), "offset of the largest timestamp");
        assertEquals(base + 5000, max.timestamp());
    }

    /** KIP-1005: ListOffsets v8, timestamp -4; without tiered storage the log start offset. */
    @Test
    void listOffsetsEarliestLocal() throws Exception {
        long base = System.currentTimeMillis() - Duration.ofHours(1).toMillis();
        TopicPartition tp = threeTimestampedRecords("adm-earliest-local", base);
        assertEquals(0, listOffset(tp, OffsetSpec.earliestLocal()).offset());
        get(admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(2))).all());
        assertEquals(2, listOffset(tp, OffsetSpec.earliestLocal()).offset());
    }

    @Test
    void deleteRecordsMovesTheLogStartOffset() throws Exception {
        String topic = "adm-delete-records";
        Await.createTopic(admin, new NewTopic(topic, 2, (short) 1));
        TopicPartition p0 = new TopicPartition(topic, 0);
        TopicPartition p1 = new TopicPartition(topic, 1);
        try (KafkaProducer<byte[], byte[]> p = broker.producer(Map.of())) {
            for (int i = 0; i < 10; i++) {
                p.send(new ProducerRecord<>(topic, 0, null, bytes("p0-" + i)));
                p.send(new ProducerRecord<>(topic, 1, null, bytes("p1-" + i)));
            }
            p.flush();
        }
        var deleted = admin.deleteRecords(Map.of(p0, RecordsToDelete.beforeOffset(4),
                p1, RecordsToDelete.beforeOffset(-1))); // -1: up to the high watermark
        assertEquals(4, get(deleted.lowWatermarks().get(p0)).lowWatermark());
        assertEquals(10, get(deleted.lowWatermarks().get(p1)).lowWatermark());
        assertEquals(4, listOffset(p0, OffsetSpec.earliest()).offset());
        assertEquals(10, listOffset(p0, OffsetSpec.latest()).offset());
        assertEquals(10, listOffset(p1, OffsetSpec.earliest()).offset());

        // Below the log start: nothing to do, the current low watermark comes back.
        assertEquals(4, get(admin.deleteRecords(Map.of(p0, RecordsToDelete.beforeOffset(2)))
                .lowWatermarks().get(p0)).lowWatermark());
        assertFails(OffsetOutOfRangeException.class,
                admin.deleteRecords(Map.of(p0, RecordsToDelete.beforeOffset(11))).all());

        try (KafkaConsumer<byte[], byte[]> c = broker.consumer(Map.of())) {
            c.assign(List.of(p0));
            c.seekToBeginning(List.of(p0));
            ConsumerRecord<byte[], byte[]> first = null;
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (first == null && System.nanoTime() < deadline) {
                var rs = c.poll(Duration.ofMillis(200));
                if (!rs.isEmpty()) {
                    first = rs.iterator().next();
                }
            }
            assertNotNull(first, "no record after deleteRecords");
            assertEquals(4, first.offset(), "first readable offset");
            assertEquals("p0-4", new String(first.value(), StandardCharsets.UTF_8));
        }
    }

    // ---------------------------------------------------------------------------------
    // Consumer groups
    // ---------------------------------------------------------------------------------

    /** A group member that has consumed and committed everything in {@code topic}. */
    private static KafkaConsumer<byte[], byte[]> activeMember(String group, String topic, int partitions, int perPartition)
            throws Exception {
        Await.createTopic(admin, new NewTopic(topic, partitions, (short) 1));
        try (KafkaProducer<byte[], byte[]> p = broker.producer(Map.of())) {
            for (int part = 0; part < partitions; part++) {
                for (int i = 0; i < perPartition; i++) {
                    p.send(new ProducerRecord<>(topic, part, null, bytes(part + "-" + i)));
                }
            }
            p.flush();
        }
        KafkaConsumer<byte[], byte[]> c = broker.consumer(Map.of(
                ConsumerConfig.GROUP_ID_CONFIG, group,
                ConsumerConfig.CLIENT_ID_CONFIG, group + "-client",
                ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, List.of(CooperativeStickyAssignor.class.getName())));
        c.subscribe(List.of(topic));
        int consumed = 0;
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(45);
        while (consumed < partitions * perPartition) {
            if (System.nanoTime() > deadline) {
                c.close(Duration.ZERO);
                fail("group member consumed " + consumed + " of " + partitions * perPartition);
            }
            consumed += c.poll(Duration.ofMillis(200)).count();
        }
        c.commitSync();
        return c;
    }

    @Test
    void listGroupsShowsStableAndEmptyClassicConsumerGroups() throws Exception {
        String group = "adm-list-group";
        GroupListing listing;
        try (KafkaConsumer<byte[], byte[]> member = activeMember(group, "adm-list-groups", 2, 5)) {
            listing = findGroup(get(admin.listGroups().all()), group);
            assertEquals(new GroupListing(group, Optional.of(GroupType.CLASSIC), "consumer", Optional.of(GroupState.STABLE)),
                    listing, "listGroups()");
            assertEquals(listing, findGroup(get(admin.listGroups(ListGroupsOptions.forConsumerGroups()).all()), group),
                    "listGroups(forConsumerGroups())");
            assertEquals(listing, findGroup(get(admin.listGroups(new ListGroupsOptions()
                    .inGroupStates(Set.of(GroupState.STABLE))).all()), group), "listGroups(STABLE)");
            assertNull(findGroupOrNull(get(admin.listGroups(new ListGroupsOptions()
                    .inGroupStates(Set.of(GroupState.EMPTY))).all()), group), "listGroups(EMPTY) while stable");
        }
        awaitTrue(() -> findGroupOrNull(get(admin.listGroups(new ListGroupsOptions()
                .inGroupStates(Set.of(GroupState.EMPTY))).all()), group) != null, "the group is EMPTY after its member left");
        assertEquals(new GroupListing(group, Optional.of(GroupType.CLASSIC), "consumer", Optional.of(GroupState.EMPTY)),
                findGroup(get(admin.listGroups().all()), group));
    }

    @Test
    void describeConsumerGroups() throws Exception {
        String group = "adm-describe-group";
        String topic = "adm-describe-groups";
        try (KafkaConsumer<byte[], byte[]> member = activeMember(group, topic, 3, 4)) {
            ConsumerGroupDescription d = get(admin.describeConsumerGroups(List.of(group),
                    new DescribeConsumerGroupsOptions().includeAuthorizedOperations(true)).describedGroups().get(group));
            assertEquals(group, d.groupId());
            assertFalse(d.isSimpleConsumerGroup());
            assertEquals(GroupType.CLASSIC, d.type());
            assertEquals(GroupState.STABLE, d.groupState());
            assertEquals("cooperative-sticky", d.partitionAssignor());
            assertEquals(self(), d.coordinator());
            assertEquals(GROUP_OPS, d.authorizedOperations(), "group authorized operations (KIP-430)");
            assertEquals(1, d.members().size(), "members: " + d.members());
            MemberDescription m = d.members().iterator().next();
            assertEquals(group + "-client", m.clientId());
            assertEquals(Optional.empty(), m.groupInstanceId());
            assertFalse(m.consumerId().isEmpty(), "member id");
            assertEquals("/127.0.0.1", m.host(), "client host as Kafka reports it");
            assertEquals(IntStream.range(0, 3).mapToObj(p -> new TopicPartition(topic, p)).collect(Collectors.toSet()),
                    m.assignment().topicPartitions());
            assertEquals(member.groupMetadata().memberId(), m.consumerId());
        }
        awaitTrue(() -> get(admin.describeConsumerGroups(List.of(group)).describedGroups().get(group)).groupState()
                == GroupState.EMPTY, "EMPTY after the member left");
        ConsumerGroupDescription empty = get(admin.describeConsumerGroups(List.of(group)).describedGroups().get(group));
        assertEquals(List.of(), new ArrayList<>(empty.members()));
        assertEquals("", empty.partitionAssignor());
    }

    @Test
    void consumerGroupOffsetsListAlterDelete() throws Exception {
        String group = "adm-offsets-group";
        String topic = "adm-group-offsets";
        TopicPartition p0 = new TopicPartition(topic, 0);
        TopicPartition p1 = new TopicPartition(topic, 1);
        TopicPartition p2 = new TopicPartition(topic, 2);
        try (KafkaConsumer<byte[], byte[]> member = activeMember(group, topic, 3, 10)) {
            Map<TopicPartition, OffsetAndMetadata> offsets = get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata());
            assertEquals(Set.of(p0, p1, p2), offsets.keySet());
            for (TopicPartition tp : List.of(p0, p1, p2)) {
                assertEquals(10, offsets.get(tp).offset(), "committed " + tp);
            }
            // A group with members: the admin (no member id) may not commit: UNKNOWN_MEMBER_ID.
            assertFails(UnknownMemberIdException.class,
                    admin.alterConsumerGroupOffsets(group, Map.of(p0, new OffsetAndMetadata(3))).all());
            // ... nor delete offsets of a topic the group subscribes to.
            assertFails(GroupSubscribedToTopicException.class,
                    admin.deleteConsumerGroupOffsets(group, Set.of(p2)).partitionResult(p2));
        }
        awaitTrue(() -> get(admin.describeConsumerGroups(List.of(group)).describedGroups().get(group)).groupState()
                == GroupState.EMPTY, "EMPTY after the member left");

        get(admin.alterConsumerGroupOffsets(group, Map.of(p0, new OffsetAndMetadata(3),
                p1, new OffsetAndMetadata(5, "set-by-admin"))).all());
        Map<TopicPartition, OffsetAndMetadata> offsets = get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata());
        assertEquals(3, offsets.get(p0).offset());
        assertEquals(new OffsetAndMetadata(5, "set-by-admin"), offsets.get(p1));
        assertEquals(10, offsets.get(p2).offset());

        get(admin.deleteConsumerGroupOffsets(group, Set.of(p2)).all());
        offsets = get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata());
        assertEquals(Set.of(p0, p1), offsets.keySet(), "after deleting p2's offset");

        // A new member resumes from what the admin set.
        try (KafkaConsumer<byte[], byte[]> c = broker.consumer(Map.of(ConsumerConfig.GROUP_ID_CONFIG, group))) {
            c.subscribe(List.of(topic));
            Map<Integer, Long> first = new HashMap<>();
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (first.size() < 3 && System.nanoTime() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
                    first.putIfAbsent(r.partition(), r.offset());
                }
            }
            assertEquals(Map.of(0, 3L, 1, 5L, 2, 0L), first, "first offsets (p2: auto.offset.reset=earliest)");
        }
    }

    @Test
    void deleteConsumerGroups() throws Exception {
        String group = "adm-delete-group";
        try (KafkaConsumer<byte[], byte[]> member = activeMember(group, "adm-delete-groups", 1, 3)) {
            assertFails(GroupNotEmptyException.class, admin.deleteConsumerGroups(List.of(group)).all());
        }
        awaitTrue(() -> get(admin.describeConsumerGroups(List.of(group)).describedGroups().get(group)).groupState()
                == GroupState.EMPTY, "EMPTY after the member left");
        get(admin.deleteConsumerGroups(List.of(group)).all());
        assertNull(findGroupOrNull(get(admin.listGroups().all()), group), "a deleted group is not listed");
        assertEquals(Map.of(), get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata()),
                "a deleted group has no offsets");
        assertFails(GroupIdNotFoundException.class, admin.deleteConsumerGroups(List.of(group)).all());
        assertFails(GroupIdNotFoundException.class, admin.deleteConsumerGroups(List.of("adm-never-existed")).all());
    }

    // ---------------------------------------------------------------------------------
    // Quotas, cluster, producers, log dirs
    // ---------------------------------------------------------------------------------

    @Test
    void clientQuotasAlterAndDescribe() throws Exception {
        ClientQuotaEntity greedy = new ClientQuotaEntity(Map.of(ClientQuotaEntity.CLIENT_ID, "greedy"));
        Map<String, String> defaultClientMap = new HashMap<>();
        defaultClientMap.put(ClientQuotaEntity.CLIENT_ID, null);
        ClientQuotaEntity defaultClient = new ClientQuotaEntity(defaultClientMap);
        ClientQuotaEntity alice = new ClientQuotaEntity(Map.of(ClientQuotaEntity.USER, "alice"));
        try {
            get(admin.alterClientQuotas(List.of(
                    new ClientQuotaAlteration(greedy, List.of(
                            new ClientQuotaAlteration.Op("producer_byte_rate", 1048576.0),
                            new ClientQuotaAlteration.Op("consumer_byte_rate", 2097152.0))),
                    new ClientQuotaAlteration(defaultClient, List.of(
                            new ClientQuotaAlteration.Op("producer_byte_rate", 5242880.0))),
                    new ClientQuotaAlteration(alice, List.of(
                            new ClientQuotaAlteration.Op("request_percentage", 50.0))))).all());

            eventually(() -> assertEquals(Map.of(greedy, Map.of("producer_byte_rate", 1048576.0, "consumer_byte_rate", 2097152.0)),
                    get(admin.describeClientQuotas(ClientQuotaFilter.containsOnly(List.of(
                            ClientQuotaFilterComponent.ofEntity(ClientQuotaEntity.CLIENT_ID, "greedy")))).entities())));
            eventually(() -> assertEquals(Map.of(defaultClient, Map.of("producer_byte_rate", 5242880.0)),
                    get(admin.describeClientQuotas(ClientQuotaFilter.containsOnly(List.of(
                            ClientQuotaFilterComponent.ofDefaultEntity(ClientQuotaEntity.CLIENT_ID)))).entities())));
            eventually(() -> assertEquals(Map.of(greedy, Map.of("producer_byte_rate", 1048576.0, "consumer_byte_rate", 2097152.0),
                            defaultClient, Map.of("producer_byte_rate", 5242880.0)),
                    get(admin.describeClientQuotas(ClientQuotaFilter.containsOnly(List.of(
                            ClientQuotaFilterComponent.ofEntityType(ClientQuotaEntity.CLIENT_ID)))).entities())));
            eventually(() -> {
                Map<ClientQuotaEntity, Map<String, Double>> everything = get(admin.describeClientQuotas(ClientQuotaFilter.all()).entities());
                assertEquals(Map.of("request_percentage", 50.0), everything.get(alice), "all: " + everything);
                assertEquals(3, everything.size(), "all: " + everything);
            });

            // validateOnly changes nothing.
            get(admin.alterClientQuotas(List.of(new ClientQuotaAlteration(greedy, List.of(
                    new ClientQuotaAlteration.Op("producer_byte_rate", 1.0)))),
                    new AlterClientQuotasOptions().validateOnly(true)).all());
            assertEquals(1048576.0, get(admin.describeClientQuotas(ClientQuotaFilter.containsOnly(List.of(
                    ClientQuotaFilterComponent.ofEntity(ClientQuotaEntity.CLIENT_ID, "greedy")))).entities())
                    .get(greedy).get("producer_byte_rate"));

            assertFails(InvalidRequestException.class, admin.alterClientQuotas(List.of(new ClientQuotaAlteration(greedy,
                    List.of(new ClientQuotaAlteration.Op("no_such_quota", 1.0))))).all());

            // Removing one key keeps the other; removing the last removes the entity.
            get(admin.alterClientQuotas(List.of(new ClientQuotaAlteration(greedy, List.of(
                    new ClientQuotaAlteration.Op("producer_byte_rate", null))))).all());
            eventually(() -> assertEquals(Map.of(greedy, Map.of("consumer_byte_rate", 2097152.0)),
                    get(admin.describeClientQuotas(ClientQuotaFilter.containsOnly(List.of(
                            ClientQuotaFilterComponent.ofEntity(ClientQuotaEntity.CLIENT_ID, "greedy")))).entities())));
        } finally {
            get(admin.alterClientQuotas(List.of(
                    new ClientQuotaAlteration(greedy, List.of(new ClientQuotaAlteration.Op("producer_byte_rate", null),
                            new ClientQuotaAlteration.Op("consumer_byte_rate", null))),
                    new ClientQuotaAlteration(defaultClient, List.of(new ClientQuotaAlteration.Op("producer_byte_rate", null))),
                    new ClientQuotaAlteration(alice, List.of(new ClientQuotaAlteration.Op("request_percentage", null))))).all());
        }
        eventually(() -> assertEquals(Map.of(), get(admin.describeClientQuotas(ClientQuotaFilter.all()).entities()),
                "all quotas removed"));
    }

    @Test
    void describeCluster() throws Exception {
        DescribeClusterResult r = admin.describeCluster(new DescribeClusterOptions().includeAuthorizedOperations(true));
        assertEquals(List.of(self()), new ArrayList<>(get(r.nodes())));
        assertEquals(self(), get(r.controller()), "a single KRaft broker names itself");
        String clusterId = get(r.clusterId());
        assertNotNull(clusterId);
        assertFalse(clusterId.isEmpty());
        assertEquals(CLUSTER_OPS, get(r.authorizedOperations()), "cluster authorized operations (KIP-430)");
        // Without the option: no operations (null), as Kafka leaves the field at its default.
        assertNull(get(admin.describeCluster().authorizedOperations()));
        assertEquals(clusterId, get(admin.describeCluster().clusterId()), "the cluster id is stable");
    }

    @Test
    void describeProducers() throws Exception {
        String topic = "adm-producers";
        Await.createTopic(admin, new NewTopic(topic, 1, (short) 1));
        TopicPartition tp = new TopicPartition(topic, 0);
        long base = System.currentTimeMillis() - Duration.ofMinutes(5).toMillis();
        try (KafkaProducer<byte[], byte[]> p = broker.producer(Map.of())) { // idempotent by default
            for (int i = 0; i < 7; i++) {
                p.send(new ProducerRecord<>(topic, 0, base + i, null, bytes("idem-" + i))).get(30, TimeUnit.SECONDS);
            }
        }
        try (KafkaProducer<byte[], byte[]> p = broker.producer(Map.of(
                ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, false, ProducerConfig.ACKS_CONFIG, "1"))) {
            p.send(new ProducerRecord<>(topic, 0, base + 100, null, bytes("plain"))).get(30, TimeUnit.SECONDS);
        }
        List<ProducerState> active = get(admin.describeProducers(List.of(tp)).partitionResult(tp)).activeProducers();
        assertEquals(1, active.size(), "only the idempotent producer: " + active);
        ProducerState s = active.get(0);
        assertAll("producer state " + s,
                () -> assertTrue(s.producerId() >= 0, "producer id " + s.producerId()),
                () -> assertEquals(0, s.producerEpoch()),
                () -> assertEquals(6, s.lastSequence(), "7 records: sequences 0..6"),
                () -> assertEquals(base + 6, s.lastTimestamp(), "the last batch's max timestamp"),
                () -> assertEquals(java.util.OptionalInt.empty(), s.coordinatorEpoch(), "no transaction"),
                () -> assertEquals(java.util.OptionalLong.empty(), s.currentTransactionStartOffset(), "no transaction"));
    }

    @Test
    void describeLogDirs() throws Exception {
        String topic = "adm-log-dirs";
        Await.createTopic(admin, new NewTopic(topic, 2, (short) 1));
        TopicPartition p0 = new TopicPartition(topic, 0);
        TopicPartition p1 = new TopicPartition(topic, 1);
        try (KafkaProducer<byte[], byte[]> p = broker.producer(Map.of())) {
            for (int i = 0; i < 20; i++) {
                p.send(new ProducerRecord<>(topic, 0, null, bytes("log-dir-record-" + i)));
            }
            p.flush();
        }
        Map<Integer, Map<String, LogDirDescription>> all = get(admin.describeLogDirs(List.of(NODE_ID)).allDescriptions());
        assertEquals(Set.of(NODE_ID), all.keySet());
        Map<String, LogDirDescription> dirs = all.get(NODE_ID);
        assertEquals(Set.of(broker.dataDir().toString()), dirs.keySet(), "the one log dir is the data dir");
        LogDirDescription d = dirs.get(broker.dataDir().toString());
        assertNull(d.error());
        assertTrue(d.totalBytes().isPresent() && d.usableBytes().isPresent(), "total/usable bytes (v4+): " + d);
        assertTrue(d.totalBytes().getAsLong() >= d.usableBytes().getAsLong() && d.usableBytes().getAsLong() > 0, d.toString());
        ReplicaInfo r0 = d.replicaInfos().get(p0);
        ReplicaInfo r1 = d.replicaInfos().get(p1);
        assertNotNull(r0, "partition 0 in the log dir: " + d.replicaInfos().keySet());
        assertNotNull(r1, "partition 1 in the log dir: " + d.replicaInfos().keySet());
        assertTrue(r0.size() > 20 * "log-dir-record-0".length(), "size of partition 0: " + r0);
        assertEquals(0, r1.size(), "an empty partition has size 0");
        assertEquals(0, r0.offsetLag());
        assertFalse(r0.isFuture());
        assertFalse(d.isCordoned());
    }

    // ---------------------------------------------------------------------------------

    private interface ThrowingSupplier<T> {
        T get() throws Exception;
    }

    private static <T> T get(KafkaFuture<T> f) throws Exception {
        return f.get(30, TimeUnit.SECONDS);
    }

    /** The future fails with {@code type}; returns the cause. */
    private static <E extends Throwable> E assertFails(Class<E> type, KafkaFuture<?> f) throws Exception {
        try {
            Object v = f.get(30, TimeUnit.SECONDS);
            fail("expected " + type.getSimpleName() + ", got success: " + v);
            return null;
        } catch (ExecutionException e) {
            return assertInstanceOf(type, e.getCause(), "expected " + type.getSimpleName() + ", got " + e.getCause());
        }
    }

    private static void awaitTrue(ThrowingSupplier<Boolean> condition, String what) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (!condition.get()) {
            if (System.nanoTime() > deadline) {
                fail("timed out waiting: " + what);
            }
            Thread.sleep(100);
        }
    }

    private static TopicDescription describe(String topic) throws Exception {
        return get(admin.describeTopics(List.of(topic)).allTopicNames()).get(topic);
    }

    private static Config describeConfig(ConfigResource res) throws Exception {
        return get(admin.describeConfigs(List.of(res)).all()).get(res);
    }

    private static void eventually(org.junit.jupiter.api.function.Executable check) throws Exception {
        try {
            Await.assertEventually(check);
        } catch (Exception | Error e) {
            throw e;
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
    }

    /** A config entry as expected, once the write before it has reached the broker. */
    private static void eventuallyEntry(ConfigResource res, String name, String value, ConfigEntry.ConfigSource source)
            throws Exception {
        eventually(() -> assertEntry(describeConfig(res), name, value, source));
    }

    private static void assertEntry(Config c, String name, String value, ConfigEntry.ConfigSource source) {
        ConfigEntry e = c.get(name);
        assertNotNull(e, name + " missing from " + c.entries().stream().map(ConfigEntry::name).sorted().toList());
        assertEquals(value, e.value(), name + " value");
        assertEquals(source, e.source(), name + " source");
    }

    private static ListOffsetsResultInfo listOffset(TopicPartition tp, OffsetSpec spec) throws Exception {
        return get(admin.listOffsets(Map.of(tp, spec)).partitionResult(tp));
    }

    private static GroupListing findGroupOrNull(Collection<GroupListing> listings, String group) {
        return listings.stream().filter(l -> l.groupId().equals(group)).findFirst().orElse(null);
    }

    private static GroupListing findGroup(Collection<GroupListing> listings, String group) {
        GroupListing l = findGroupOrNull(listings, group);
        assertNotNull(l, group + " not listed: " + listings);
        return l;
    }

    private static byte[] bytes(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }
}
