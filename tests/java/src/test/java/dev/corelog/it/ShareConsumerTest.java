package dev.corelog.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ShareGroupDescription;
import org.apache.kafka.clients.admin.SharePartitionOffsetInfo;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Share groups (KIP-932) with the Java client's {@link KafkaShareConsumer}: several consumers
 * read one partition at once, each record acquired by one of them and acknowledged one by one
 * — accepted, rejected (archived, never delivered again) or released (delivered again) — and
 * records whose consumer stops acknowledging come back once their lock runs out.
 */
class ShareConsumerTest {

    private static final int LOCK_MS = 2_000;

    @RegisterExtension
    static final CorelogBroker broker = new CorelogBroker("ShareConsumerTest",
            "--offsets-topic-partitions", "4",
            "--share-coordinator-state-topic-num-partitions", "4",
            "--group-share-record-lock-duration-ms", String.valueOf(LOCK_MS),
            "--group-share-session-timeout-ms", "10000",
            "--group-share-heartbeat-interval-ms", "500");

    /**
     * Three consumers on one partition: every tenth record is rejected, every tenth other one
     * released at its first delivery. Each record not rejected is accepted exactly once, the
     * released ones on their second delivery, and all three consumers take part.
     */
    @Test
    void threeConsumersShareOnePartitionAndEveryRecordIsSettledOnce() throws Exception {
        String topic = "share-java-one";
        String group = "share-java-one-group";
        createTopic(topic, 1);
        startAtEarliest(group);
        int n = 300;

        Map<String, Integer> accepted = new ConcurrentHashMap<>();
        Set<String> rejected = ConcurrentHashMap.newKeySet();
        Map<String, Integer> releasedThenAcceptedAt = new ConcurrentHashMap<>();
        List<AtomicInteger> perConsumer = new CopyOnWriteArrayList<>();
        AtomicBoolean stop = new AtomicBoolean();
        List<Thread> threads = new ArrayList<>();
        List<Throwable> failures = new CopyOnWriteArrayList<>();
        for (int c = 0; c < 3; c++) {
            AtomicInteger mine = new AtomicInteger();
            perConsumer.add(mine);
            String clientId = "share-java-" + c;
            threads.add(new Thread(() -> {
                try (KafkaShareConsumer<byte[], byte[]> consumer = shareConsumer(group, clientId, 20)) {
                    consumer.subscribe(List.of(topic));
                    while (!stop.get()) {
                        for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                            String v = new String(r.value(), StandardCharsets.UTF_8);
                            int i = Integer.parseInt(v.substring(2));
                            int delivery = r.deliveryCount().orElse((short) 0);
                            if (i % 10 == 3) {
                                consumer.acknowledge(r, AcknowledgeType.REJECT);
                                rejected.add(v);
                            } else if (i % 10 == 7 && delivery == 1) {
                                consumer.acknowledge(r, AcknowledgeType.RELEASE);
                            } else {
                                consumer.acknowledge(r, AcknowledgeType.ACCEPT);
                                accepted.merge(v, 1, Integer::sum);
                                if (i % 10 == 7) {
                                    releasedThenAcceptedAt.put(v, delivery);
                                }
                                mine.incrementAndGet();
                            }
                        }
                        consumer.commitSync();
                    }
                } catch (Throwable t) {
                    failures.add(t);
                }
            }, clientId));
        }
        threads.forEach(Thread::start);
        long[] stopped = {0};
        try {
            // All three in the group, each assigned the partition, before the records come:
            // records produced earlier could all go to the first two to join.
            try (Admin admin = broker.admin()) {
                GroupWorkload.await(() -> {
                    try {
                        ShareGroupDescription d = admin.describeShareGroups(List.of(group)).all()
                                .get(30, TimeUnit.SECONDS).get(group);
                        return d.members().size() == 3 && d.members().stream()
                                .allMatch(m -> !m.assignment().topicPartitions().isEmpty());
                    } catch (Exception e) {
                        return false;
                    }
                }, Duration.ofSeconds(60), () -> "three members assigned the partition");
            }
            produce(topic, n);
            GroupWorkload.await(() -> accepted.size() == n - n / 10 || !failures.isEmpty(), Duration.ofSeconds(90),
                    () -> "accepted " + accepted.size() + " of " + (n - n / 10) + ", failures " + failures);
            try (Admin admin = broker.admin()) {
                ShareGroupDescription d = admin.describeShareGroups(List.of(group)).all()
                        .get(30, TimeUnit.SECONDS).get(group);
                assertEquals(3, d.members().size(), "three members: " + d);
                d.members().forEach(m -> assertEquals(1, m.assignment().topicPartitions().size(),
                        "each member reads the one partition: " + m));
            }
        } finally {
            stopped[0] = System.nanoTime();
            stop.set(true);
            for (Thread t : threads) {
                t.join(60_000);
            }
        }
        // A consumer's close (its last acknowledgements, its leave) is answered at once;
        // one that waits out its 30 s close timeout met an answer it could not read.
        long closing = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - stopped[0]);
        assertTrue(closing < 15_000, "the consumers closed in " + closing + " ms");
        assertTrue(failures.isEmpty(), "consumers failed: " + failures);
        for (Map.Entry<String, Integer> e : accepted.entrySet()) {
            assertEquals(1, e.getValue(), "accepted once: " + e.getKey());
        }
        assertEquals(n - n / 10, accepted.size());
        assertEquals(n / 10, rejected.size());
        assertTrue(accepted.keySet().stream().noneMatch(rejected::contains), "a rejected record is never accepted");
        assertEquals(n / 10, releasedThenAcceptedAt.size());
        releasedThenAcceptedAt.forEach((v, d) -> assertEquals(2, d, "released once, then accepted: " + v));
        for (AtomicInteger c : perConsumer) {
            assertTrue(c.get() > 0, "every consumer took part: " + perConsumer);
        }
    }

    /**
     * A consumer that takes records and closes without acknowledging them gives them back:
     * another consumer of the group gets every one of them.
     */
    @Test
    void recordsAConsumerLeavesUnacknowledgedGoToAnother() throws Exception {
        String topic = "share-java-leave";
        String group = "share-java-leave-group";
        createTopic(topic, 1);
        startAtEarliest(group);
        produce(topic, 10);
        Set<String> held = new HashSet<>();
        try (KafkaShareConsumer<byte[], byte[]> first = shareConsumer(group, "first", 10)) {
            first.subscribe(List.of(topic));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (held.isEmpty() && System.nanoTime() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : first.poll(Duration.ofMillis(200))) {
                    held.add(new String(r.value(), StandardCharsets.UTF_8));
                }
            }
            assertTrue(!held.isEmpty(), "the first consumer got records");
        }
        Map<String, Integer> again = new HashMap<>();
        try (KafkaShareConsumer<byte[], byte[]> other = shareConsumer(group, "other", 10)) {
            other.subscribe(List.of(topic));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (!again.keySet().containsAll(held) && System.nanoTime() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : other.poll(Duration.ofMillis(200))) {
                    again.put(new String(r.value(), StandardCharsets.UTF_8), (int) r.deliveryCount().orElse((short) 0));
                    other.acknowledge(r, AcknowledgeType.ACCEPT);
                }
                other.commitSync();
            }
        }
        assertTrue(again.keySet().containsAll(held), "held " + held + ", delivered again " + again);
    }

    /**
     * share.isolation.level=read_committed: a consumer gets the records of committed
     * transactions and none of an aborted one; the transaction markers it is given it
     * acknowledges as gaps, so once all is settled the share-partition start offset is the
     * log's end.
     */
    @Test
    void aReadCommittedGroupGetsNoAbortedRecords() throws Exception {
        String topic = "share-java-txn";
        String group = "share-java-txn-group";
        createTopic(topic, 1);
        setGroupConfigs(group, Map.of("share.auto.offset.reset", "earliest",
                "share.isolation.level", "read_committed"));
        try (KafkaProducer<byte[], byte[]> p = broker.producer(Map.of("transactional.id", "share-java-txn"))) {
            p.initTransactions();
            for (String[] t : new String[][] {{"c", "commit"}, {"x", "abort"}, {"d", "commit"}}) {
                p.beginTransaction();
                for (int i = 0; i < 5; i++) {
                    p.send(new ProducerRecord<>(topic, 0, null, (t[0] + "-" + i).getBytes(StandardCharsets.UTF_8)));
                }
                p.flush();
                if (t[1].equals("commit")) {
                    p.commitTransaction();
                } else {
                    p.abortTransaction();
                }
            }
        }
        // c-0..4 at 0-4, marker 5, x-0..4 at 6-10, marker 11, d-0..4 at 12-16, marker 17.
        long logEnd = 18;
        Set<String> got = new HashSet<>();
        long start = -1;
        try (KafkaShareConsumer<byte[], byte[]> consumer = shareConsumer(group, "txn-reader", 50);
             Admin admin = broker.admin()) {
            consumer.subscribe(List.of(topic));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (System.nanoTime() < deadline && (got.size() < 10 || start != logEnd)) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    got.add(new String(r.value(), StandardCharsets.UTF_8));
                    consumer.acknowledge(r, AcknowledgeType.ACCEPT);
                }
                consumer.commitSync();
                SharePartitionOffsetInfo info = admin
                        .listShareGroupOffsets(Map.of(group, new ListShareGroupOffsetsSpec()))
                        .partitionsToOffsetInfo(group).get(30, TimeUnit.SECONDS)
                        .get(new TopicPartition(topic, 0));
                start = info == null ? -1 : info.startOffset();
            }
        }
        Set<String> committed = new HashSet<>();
        for (String prefix : List.of("c", "d")) {
            for (int i = 0; i < 5; i++) {
                committed.add(prefix + "-" + i);
            }
        }
        assertEquals(committed, got, "the committed records, and none of the aborted ones");
        assertEquals(logEnd, start, "every record and marker settled");
    }

    private static KafkaShareConsumer<byte[], byte[]> shareConsumer(String group, String clientId, int maxPoll) {
        Map<String, Object> c = new HashMap<>();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrap());
        c.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        c.put(ConsumerConfig.CLIENT_ID_CONFIG, clientId);
        c.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, maxPoll);
        c.put("share.acknowledgement.mode", "explicit");
        return new KafkaShareConsumer<>(c, new ByteArrayDeserializer(), new ByteArrayDeserializer());
    }

    /** The group's share.auto.offset.reset, as kafka-configs --entity-type groups sets it. */
    private static void startAtEarliest(String group) throws Exception {
        setGroupConfigs(group, Map.of("share.auto.offset.reset", "earliest"));
    }

    /** The group's own configs, as kafka-configs --entity-type groups sets them. */
    private static void setGroupConfigs(String group, Map<String, String> configs) throws Exception {
        try (Admin admin = broker.admin()) {
            ConfigResource r = new ConfigResource(ConfigResource.Type.GROUP, group);
            List<AlterConfigOp> set = new ArrayList<>();
            configs.forEach((k, v) -> set.add(new AlterConfigOp(new ConfigEntry(k, v), AlterConfigOp.OpType.SET)));
            Map<ConfigResource, Collection<AlterConfigOp>> ops = Map.of(r, set);
            admin.incrementalAlterConfigs(ops).all().get(30, TimeUnit.SECONDS);
        }
    }

    private static void produce(String topic, int n) throws Exception {
        try (KafkaProducer<byte[], byte[]> p = broker.producer(Map.of())) {
            for (int i = 0; i < n; i++) {
                p.send(new ProducerRecord<>(topic, ("v-" + i).getBytes(StandardCharsets.UTF_8)));
            }
            p.flush();
        }
    }

    private static void createTopic(String topic, int partitions) throws Exception {
        try (Admin admin = broker.admin()) {
            Await.createTopic(admin, new NewTopic(topic, partitions, (short) 1));
        }
    }
}
