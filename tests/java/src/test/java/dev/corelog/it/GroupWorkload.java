package dev.corelog.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.corelog.it.GroupMember.Ledger;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BooleanSupplier;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;

/**
 * What the group tests share, for either group protocol: a producer writing numbered
 * records all along, and waits on the members (ownership, progress).
 */
final class GroupWorkload {

    private GroupWorkload() {}

    /**
     * Every acknowledged record (offsets 0..end-1 of each partition) was consumed exactly
     * once and was the record written there; commits never went back; the group's
     * committed offsets are the end offsets.
     */
    static void assertConsumedExactlyOnce(CorelogBroker broker, String group, Ledger ledger,
                                          Set<TopicPartition> all, Map<TopicPartition, Long> end)
            throws Exception {
        assertEquals(List.of(), new ArrayList<>(ledger.duplicates), "records consumed twice");
        for (TopicPartition tp : all) {
            Map<Long, Integer> written = ledger.produced.get(tp);
            Map<Long, String> read = ledger.consumed.getOrDefault(tp, Map.of());
            assertNotNull(written, "nothing written to " + tp);
            assertEquals((long) written.size(), end.get(tp), tp + ": acknowledged offsets are 0..end-1");
            List<Long> lost = new ArrayList<>();
            for (long o = 0; o < end.get(tp); o++) {
                String by = read.get(o);
                if (by == null) {
                    lost.add(o);
                } else {
                    int seq = Integer.parseInt(by.substring(by.indexOf(':') + 1));
                    assertEquals(written.get(o), seq, tp + "@" + o + ": record read (by " + by + ")");
                }
            }
            assertEquals(List.of(), lost.subList(0, Math.min(lost.size(), 20)),
                    tp + ": " + lost.size() + " records never consumed");
            assertEquals(end.get(tp), (long) read.size(), tp + ": records consumed beyond the end");
        }
        assertEquals(List.of(), new ArrayList<>(ledger.regressions), "commits that went backwards");
        try (Admin admin = broker.admin()) {
            Map<TopicPartition, OffsetAndMetadata> committed = admin.listConsumerGroupOffsets(group)
                    .partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS);
            for (TopicPartition tp : all) {
                assertNotNull(committed.get(tp), "no committed offset for " + tp + ": " + committed);
                assertEquals(end.get(tp), committed.get(tp).offset(), "committed offset of " + tp);
            }
        }
    }

    /** Waits until the members own all partitions between them, each exactly once, evenly. */
    static void awaitOwnership(List<GroupMember> ms, Set<TopicPartition> all, String what) throws Exception {
        await(() -> {
            Set<TopicPartition> union = new HashSet<>();
            int total = 0;
            for (GroupMember m : ms) {
                union.addAll(m.assignment());
                total += m.assignment().size();
            }
            int fair = all.size() / ms.size();
            boolean balanced = ms.stream().allMatch(m -> m.assignment().size() >= fair
                    && m.assignment().size() <= fair + (all.size() % ms.size() == 0 ? 0 : 1));
            return union.equals(all) && total == all.size() && balanced;
        }, Duration.ofSeconds(45), () -> what + " own all partitions once, balanced: " + ms);
        for (GroupMember m : ms) {
            assertNull(m.failure(), m.name + " failed: " + m);
        }
    }

    /** Every member consumes something more (the group is not just assigned but working). */
    static void awaitProgress(Ledger ledger, List<GroupMember> ms) throws Exception {
        Map<TopicPartition, Long> before = new HashMap<>();
        ms.forEach(m -> m.assignment().forEach(tp -> before.put(tp, ledger.consumedCount(tp))));
        await(() -> ms.stream().allMatch(m -> m.assignment().stream()
                        .anyMatch(tp -> ledger.consumedCount(tp) > before.getOrDefault(tp, 0L))),
                Duration.ofSeconds(30), () -> "every member consumes: " + ms);
    }

    static void await(BooleanSupplier condition, Duration timeout, java.util.function.Supplier<String> what)
            throws InterruptedException {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                fail("timed out after " + timeout.toSeconds() + " s waiting for: " + what.get());
            }
            Thread.sleep(50);
        }
    }

    static byte[] seqValue(int seq) {
        return ByteBuffer.allocate(4).putInt(seq).array();
    }

    /** Keyed records at about 1,000 a second, each value its sequence number, until stopped. */
    static final class BackgroundProducer {
        private final CorelogBroker broker;
        private final String topic;
        private final Ledger ledger;
        private final AtomicBoolean running = new AtomicBoolean(true);
        private final AtomicReference<Throwable> failure = new AtomicReference<>();
        private final Thread thread;

        BackgroundProducer(CorelogBroker broker, String topic, Ledger ledger) {
            this.broker = broker;
            this.topic = topic;
            this.ledger = ledger;
            this.thread = new Thread(this::run, "background-producer");
            this.thread.setDaemon(true);
        }

        BackgroundProducer start() {
            thread.start();
            return this;
        }

        private void run() {
            try (KafkaProducer<byte[], byte[]> p = broker.producer(Map.of(ProducerConfig.CLIENT_ID_CONFIG, "churn-producer"))) {
                for (int seq = 0; running.get(); seq++) {
                    final int s = seq;
                    byte[] key = ("k-" + (seq % 600)).getBytes(StandardCharsets.UTF_8);
                    p.send(new ProducerRecord<>(topic, key, seqValue(seq)), (md, e) -> {
                        if (e != null) {
                            failure.compareAndSet(null, e);
                        } else {
                            ledger.produced(new TopicPartition(md.topic(), md.partition()), md.offset(), s);
                        }
                    });
                    if (seq % 20 == 19) {
                        Thread.sleep(20);
                    }
                }
                p.flush();
            } catch (Throwable t) {
                failure.compareAndSet(null, t);
            }
        }

        /** Stops, waits for every acknowledgement, and returns the end offset of each partition. */
        Map<TopicPartition, Long> stop() throws InterruptedException {
            running.set(false);
            thread.join(60_000);
            assertTrue(!thread.isAlive(), "producer did not stop");
            if (failure.get() != null) {
                throw new AssertionError("background producer failed", failure.get());
            }
            Map<TopicPartition, Long> end = new HashMap<>();
            ledger.produced.forEach((tp, m) -> end.put(tp, m.keySet().stream().mapToLong(Long::longValue).max().orElse(-1) + 1));
            return end;
        }

        void stopQuietly() {
            running.set(false);
            try {
                thread.join(30_000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }
}
