package dev.corelog.it;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import java.util.stream.IntStream;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.utils.Utils;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The Java producer with its defaults (acks=all, enable.idempotence=true, the built-in
 * partitioner) against corelog: every record written once, where the partitioner put it,
 * and read back with every field intact.
 */
class IdempotentProducerTest {

    @RegisterExtension
    static final CorelogBroker broker = new CorelogBroker("IdempotentProducerTest");

    private static final int PARTITIONS = 6;

    @Test
    void hundredThousandKeyedRecordsWithHeadersAreReadBackExactlyOnceIntact() throws Exception {
        String topic = "keyed-100k";
        int n = 100_000;
        int distinctKeys = 5_000; // 20 records per key: per-key order is checked too
        createTopic(topic, PARTITIONS);

        long baseTs = System.currentTimeMillis() - Duration.ofMinutes(30).toMillis();
        int[] partitionOf = new int[n];
        long[] offsetOf = new long[n];
        Arrays.fill(partitionOf, -1);
        ConcurrentLinkedQueue<String> errors = new ConcurrentLinkedQueue<>();

        // Nothing but serializers: acks=all, idempotence, batching and the partitioner are
        // the Java client's defaults.
        try (KafkaProducer<byte[], byte[]> producer = broker.producer(Map.of(
                ProducerConfig.CLIENT_ID_CONFIG, "keyed-100k-producer"))) {
            for (int i = 0; i < n; i++) {
                final int seq = i;
                ProducerRecord<byte[], byte[]> r = new ProducerRecord<>(topic, null, baseTs + i,
                        key(i, distinctKeys), value(i), headers(i));
                producer.send(r, (md, e) -> {
                    if (e != null) {
                        errors.add("record " + seq + ": " + e);
                        return;
                    }
                    partitionOf[seq] = md.partition();
                    offsetOf[seq] = md.offset();
                    if (md.timestamp() != baseTs + seq) {
                        errors.add("record " + seq + ": acknowledged timestamp " + md.timestamp());
                    }
                });
            }
            producer.flush();
        }
        assertEquals(List.of(), new ArrayList<>(errors).subList(0, Math.min(errors.size(), 20)),
                errors.size() + " sends failed");

        // Where the built-in partitioner put each key, and contiguous offsets per partition.
        long[] perPartition = new long[PARTITIONS];
        Map<String, Long> lastOffsetOfKey = new HashMap<>();
        for (int i = 0; i < n; i++) {
            byte[] k = key(i, distinctKeys);
            int expected = BuiltInPartitioner.partitionForKey(k, PARTITIONS);
            assertEquals(Utils.toPositive(Utils.murmur2(k)) % PARTITIONS, expected);
            assertEquals(expected, partitionOf[i], "partition acknowledged for record " + i);
            perPartition[expected]++;
            String ks = new String(k, StandardCharsets.UTF_8);
            Long prev = lastOffsetOfKey.put(ks, offsetOf[i]);
            if (prev != null && prev >= offsetOf[i]) {
                fail("key " + ks + ": record " + i + " at offset " + offsetOf[i] + " after offset " + prev);
            }
        }
        for (int p = 0; p < PARTITIONS; p++) {
            final int pp = p;
            long[] offsets = IntStream.range(0, n).filter(i -> partitionOf[i] == pp)
                    .mapToLong(i -> offsetOf[i]).sorted().toArray();
            for (int j = 0; j < offsets.length; j++) {
                if (offsets[j] != j) {
                    fail("partition " + p + ": acknowledged offsets are not 0.." + (offsets.length - 1)
                            + " (position " + j + " holds " + offsets[j] + ")");
                }
            }
        }

        // Read everything back.
        List<TopicPartition> tps = IntStream.range(0, PARTITIONS)
                .mapToObj(p -> new TopicPartition(topic, p)).toList();
        boolean[] seen = new boolean[n];
        int consumed = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = broker.consumer(Map.of())) {
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            Map<TopicPartition, Long> end = consumer.endOffsets(tps);
            Map<TopicPartition, Long> begin = consumer.beginningOffsets(tps);
            for (int p = 0; p < PARTITIONS; p++) {
                assertEquals(0L, begin.get(tps.get(p)), "beginning offset of partition " + p);
                assertEquals(perPartition[p], end.get(tps.get(p)), "end offset of partition " + p);
            }
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(90);
            while (consumed < n) {
                if (System.nanoTime() > deadline) {
                    fail("consumed only " + consumed + " of " + n + " records in 90 s");
                }
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500))) {
                    int seq = seqOf(r);
                    if (seq < 0 || seq >= n) {
                        fail("record with unknown seq " + seq + " at " + r.partition() + "/" + r.offset());
                    }
                    if (seen[seq]) {
                        fail("record " + seq + " read twice (again at " + r.partition() + "/" + r.offset() + ")");
                    }
                    seen[seq] = true;
                    consumed++;
                    assertRecordIntact(r, seq, baseTs, distinctKeys, partitionOf[seq], offsetOf[seq]);
                }
            }
            // Nothing beyond the last acknowledged record.
            assertEquals(0, consumer.poll(Duration.ofMillis(500)).count(), "records beyond the acknowledged ones");
            for (TopicPartition tp : tps) {
                assertEquals(end.get(tp), consumer.position(tp), "position after reading " + tp);
            }
        }
        assertEquals(n, consumed);
    }

    /** The producer's codecs: a batch compressed by the client comes back as it was sent. */
    @ParameterizedTest
    @ValueSource(strings = {"gzip", "snappy", "lz4", "zstd"})
    void compressedBatchesAreReadBackIntact(String codec) throws Exception {
        String topic = "codec-" + codec;
        int n = 5_000;
        int distinctKeys = 500;
        createTopic(topic, 3);
        long baseTs = System.currentTimeMillis() - Duration.ofMinutes(10).toMillis();
        int[] partitionOf = new int[n];
        long[] offsetOf = new long[n];
        try (KafkaProducer<byte[], byte[]> producer = broker.producer(Map.of(
                ProducerConfig.COMPRESSION_TYPE_CONFIG, codec,
                ProducerConfig.LINGER_MS_CONFIG, 20))) {
            List<java.util.concurrent.Future<org.apache.kafka.clients.producer.RecordMetadata>> acks = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                acks.add(producer.send(new ProducerRecord<>(topic, null, baseTs + i,
                        key(i, distinctKeys), value(i), headers(i))));
            }
            for (int i = 0; i < n; i++) {
                var md = acks.get(i).get(30, TimeUnit.SECONDS);
                partitionOf[i] = md.partition();
                offsetOf[i] = md.offset();
                assertEquals(BuiltInPartitioner.partitionForKey(key(i, distinctKeys), 3), md.partition());
            }
        }
        List<TopicPartition> tps = IntStream.range(0, 3).mapToObj(p -> new TopicPartition(topic, p)).toList();
        boolean[] seen = new boolean[n];
        int consumed = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = broker.consumer(Map.of())) {
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (consumed < n && System.nanoTime() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500))) {
                    int seq = seqOf(r);
                    assertTrue(seq >= 0 && seq < n && !seen[seq], "unexpected or repeated record " + seq);
                    seen[seq] = true;
                    consumed++;
                    assertRecordIntact(r, seq, baseTs, distinctKeys, partitionOf[seq], offsetOf[seq]);
                }
            }
        }
        assertEquals(n, consumed, "records read back");
    }

    // ---------------------------------------------------------------------------------

    private static void createTopic(String topic, int partitions) throws Exception {
        try (Admin admin = broker.admin()) {
            Await.createTopic(admin, new NewTopic(topic, partitions, (short) 1));
        }
    }

    private static void assertRecordIntact(ConsumerRecord<byte[], byte[]> r, int seq, long baseTs, int distinctKeys,
                                           int partition, long offset) {
        String where = "record " + seq + " at " + r.partition() + "/" + r.offset();
        assertEquals(partition, r.partition(), where + ": partition (acknowledged " + partition + ")");
        assertEquals(offset, r.offset(), where + ": offset (acknowledged " + offset + ")");
        assertArrayEquals(key(seq, distinctKeys), r.key(), where + ": key");
        assertArrayEquals(value(seq), r.value(), where + ": value");
        assertEquals(baseTs + seq, r.timestamp(), where + ": timestamp");
        assertEquals(TimestampType.CREATE_TIME, r.timestampType(), where + ": timestamp type");
        Header[] expected = headers(seq).toArray(new Header[0]);
        Header[] actual = r.headers().toArray();
        assertEquals(expected.length, actual.length, where + ": header count");
        for (int h = 0; h < expected.length; h++) {
            assertEquals(expected[h].key(), actual[h].key(), where + ": header " + h + " key");
            assertArrayEquals(expected[h].value(), actual[h].value(), where + ": header " + h + " value");
        }
    }

    static byte[] key(int seq, int distinctKeys) {
        return ("key-" + (seq % distinctKeys)).getBytes(StandardCharsets.UTF_8);
    }

    /** 8 to 200 bytes: the seq, then a pattern that depends on it. */
    static byte[] value(int seq) {
        int len = 8 + (seq * 31) % 193;
        ByteBuffer b = ByteBuffer.allocate(len);
        b.putInt(seq).putInt(~seq);
        for (int i = 8; i < len; i++) {
            b.put((byte) (seq + i * 7));
        }
        return b.array();
    }

    /** A seq header, a text header, a repeated key (order kept) and now and then a null value. */
    static List<Header> headers(int seq) {
        List<Header> h = new ArrayList<>();
        h.add(new RecordHeader("seq", ByteBuffer.allocate(4).putInt(seq).array()));
        h.add(new RecordHeader("trace", ("t-" + seq + "-\u00e9\u4e2d").getBytes(StandardCharsets.UTF_8)));
        h.add(new RecordHeader("dup", "first".getBytes(StandardCharsets.UTF_8)));
        h.add(new RecordHeader("dup", "second".getBytes(StandardCharsets.UTF_8)));
        if (seq % 7 == 0) {
            h.add(new RecordHeader("nullable", null));
        }
        if (seq % 11 == 0) {
            h.add(new RecordHeader("empty", new byte[0]));
        }
        return h;
    }

    private static int seqOf(ConsumerRecord<byte[], byte[]> r) {
        Header h = r.headers().lastHeader("seq");
        assertNotNull(h, "record at " + r.partition() + "/" + r.offset() + " has no seq header");
        return ByteBuffer.wrap(h.value()).getInt();
    }
}
