package dev.corelog.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeFalse;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.LogTruncationException;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Leader epochs as the Java client uses them (KIP-320). Each start of the broker leads its
 * partitions in a new epoch and stamps it on the batches it writes; a consumer learns the
 * new epoch from Metadata, is fenced by Fetch until it does, and validates its position
 * with OffsetForLeaderEpoch. A log that lost its tail under the consumer (a power loss
 * with {@code --durability interval}, simulated by cutting the segment file while the
 * broker is down) is then detected as truncation instead of being silently skipped or
 * read twice.
 */
class LeaderEpochTest {

    @RegisterExtension
    static final CorelogBroker broker = new CorelogBroker("LeaderEpochTest", "--durability", "interval");

    private static final Duration POLL = Duration.ofMillis(200);

    @BeforeEach
    void ownBroker() {
        assumeFalse(broker.isExternal(), "restarts the broker, so it runs only against one it started");
    }

    @Test
    void consumerFollowsNewEpochsAcrossRestartsAndRecordsCarryThem() throws Throwable {
        String topic = "epochs-java";
        TopicPartition tp = new TopicPartition(topic, 0);
        createTopic(topic);
        List<ConsumerRecord<byte[], byte[]>> seen = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> consumer = broker.consumer(Map.of(
                ConsumerConfig.METADATA_MAX_AGE_CONFIG, 500))) {
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            for (int round = 0; round < 3; round++) {
                produce(topic, "r" + round, 4);
                drain(consumer, seen, 4 * (round + 1));
                if (round < 2) {
                    broker.restart();
                }
            }
        }
        List<String> values = seen.stream().map(r -> new String(r.value(), StandardCharsets.UTF_8)).toList();
        List<String> expected = new ArrayList<>();
        for (int round = 0; round < 3; round++) {
            for (int i = 0; i < 4; i++) {
                expected.add("r" + round + "-" + i);
            }
        }
        assertEquals(expected, values, "every record once, in order, across two restarts");
        // Each restart is a new registration: the partition goes offline (one epoch) and
        // comes back led by the new incarnation (another), as in Kafka. So the epochs of
        // the rounds grow, and every record of a round carries its round's epoch.
        Map<Integer, Integer> epochOfRound = new java.util.TreeMap<>();
        for (ConsumerRecord<byte[], byte[]> r : seen) {
            int round = new String(r.value(), StandardCharsets.UTF_8).charAt(1) - '0';
            int epoch = r.leaderEpoch().orElseThrow();
            assertEquals(epoch, (int) epochOfRound.computeIfAbsent(round, k -> epoch),
                    "record " + r.offset() + " carries its round's epoch");
        }
        List<Integer> epochs = new ArrayList<>(epochOfRound.values());
        assertEquals(3, epochs.size());
        assertEquals(0, (int) epochs.get(0), "a new topic starts in epoch 0");
        assertTrue(epochs.get(0) < epochs.get(1) && epochs.get(1) < epochs.get(2),
                "every restart leads in a newer epoch: " + epochs);
    }

    @Test
    void aLogTruncatedUnderTheConsumerIsDetected() throws Throwable {
        String topic = "truncated-java";
        TopicPartition tp = new TopicPartition(topic, 0);
        createTopic(topic);
        produce(topic, "before", 8);
        try (KafkaConsumer<byte[], byte[]> consumer = broker.consumer(Map.of(
                ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none",
                ConsumerConfig.METADATA_MAX_AGE_CONFIG, 500))) {
            consumer.assign(List.of(tp));
            consumer.seek(tp, 0);
            List<ConsumerRecord<byte[], byte[]>> seen = new ArrayList<>();
            drain(consumer, seen, 8);
            assertEquals(8, consumer.position(tp));

            // The last three records were never synced and a power loss took them.
            broker.stop();
            cutLogAfter(broker.dataDir().resolve(topic + "-0"), 5);
            broker.restart();
            produce(topic, "after", 2);

            long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
            LogTruncationException truncation = null;
            while (truncation == null && System.nanoTime() < deadline) {
                try {
                    var records = consumer.poll(POLL);
                    assertTrue(records.isEmpty(), "nothing is read past a truncation: " + records.count());
                } catch (LogTruncationException e) {
                    truncation = e;
                }
            }
            assertTrue(truncation != null, "the consumer detected the truncation");
            assertEquals(5L, truncation.divergentOffsets().get(tp).offset(),
                    "the first offset the logs no longer share");
            consumer.seek(tp, truncation.divergentOffsets().get(tp).offset());
            List<ConsumerRecord<byte[], byte[]>> after = new ArrayList<>();
            drain(consumer, after, 2);
            assertEquals(List.of("after-0", "after-1"),
                    after.stream().map(r -> new String(r.value(), StandardCharsets.UTF_8)).toList());
            assertEquals(5L, after.get(0).offset());
        }
    }

    private static void createTopic(String topic) throws Exception {
        try (Admin admin = broker.admin()) {
            Await.createTopic(admin, new NewTopic(topic, 1, (short) 1));
        }
    }

    /** {@code count} records, one batch each (sent one at a time), acknowledged. */
    private static void produce(String topic, String prefix, int count) throws Exception {
        try (KafkaProducer<byte[], byte[]> producer = broker.producer(Map.of(ProducerConfig.LINGER_MS_CONFIG, 0))) {
            for (int i = 0; i < count; i++) {
                producer.send(new ProducerRecord<>(topic, 0, null, (prefix + "-" + i).getBytes(StandardCharsets.UTF_8)))
                        .get();
            }
        }
    }

    private static void drain(KafkaConsumer<byte[], byte[]> consumer, List<ConsumerRecord<byte[], byte[]>> into,
            int total) {
        long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
        while (into.size() < total && System.nanoTime() < deadline) {
            consumer.poll(POLL).forEach(into::add);
        }
        assertEquals(total, into.size(), "records read");
    }

    /**
     * Cuts the partition's only segment after the batch that ends at offset {@code keep - 1}
     * (every batch here holds one record), as a power loss drops what was never synced.
     */
    private static void cutLogAfter(Path partitionDir, long keep) throws IOException {
        Path log = partitionDir.resolve("00000000000000000000.log");
        try (FileChannel ch = FileChannel.open(log, StandardOpenOption.READ, StandardOpenOption.WRITE)) {
            ByteBuffer header = ByteBuffer.allocate(12);
            long pos = 0;
            while (true) {
                header.clear();
                if (ch.read(header, pos) < header.capacity()) {
                    throw new IllegalStateException("no batch at offset " + keep + " in " + log);
                }
                header.flip();
                long base = header.getLong();
                int length = header.getInt();
                if (base >= keep) {
                    break;
                }
                pos += 12 + length;
            }
            ch.truncate(pos);
        }
        // What was written after the cut is gone with it: nothing on disk may claim more.
        Files.deleteIfExists(partitionDir.resolve("00000000000000000000.index"));
        Files.deleteIfExists(partitionDir.resolve("00000000000000000000.timeindex"));
    }
}
