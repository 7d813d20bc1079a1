package dev.corelog.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;
import static dev.corelog.it.GroupWorkload.assertConsumedExactlyOnce;
import static dev.corelog.it.GroupWorkload.await;
import static dev.corelog.it.GroupWorkload.awaitOwnership;
import static dev.corelog.it.GroupWorkload.awaitProgress;
import static dev.corelog.it.GroupWorkload.seqValue;

import dev.corelog.it.GroupMember.Commit;
import dev.corelog.it.GroupMember.Exit;
import dev.corelog.it.GroupMember.Ledger;
import dev.corelog.it.GroupWorkload.BackgroundProducer;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BooleanSupplier;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Consumer groups with the Java consumer (classic protocol, cooperative-sticky assignor):
 * joins, a member leaving, a member killed, static membership, commits, seek,
 * offsetsForTimes, pause/resume.
 */
class ConsumerGroupTest {

    @RegisterExtension
    static final CorelogBroker broker = new CorelogBroker("ConsumerGroupTest", "--offsets-topic-partitions", "8");

    private static final int PARTITIONS = 6;
    /** Kafka's group.min.session.timeout.ms is 6 s; room above it to tell a leave from a timeout. */
    private static final int SESSION_TIMEOUT_MS = 8_000;
    private static final int HEARTBEAT_INTERVAL_MS = 1_000;

    /**
     * Three members, a producer writing all along: joins (cooperative: a member gives up
     * only what moves), a dynamic member leaving (prompt rebalance), a static member killed
     * (its partitions move only after the session timeout). Every (partition, offset) written
     * is consumed exactly once across all members, and the final commits are the end offsets.
     */
    @Test
    void cooperativeStickyGroupConsumesEveryRecordOnceThroughJoinsLeavesAndKills() throws Exception {
        String topic = "churn";
        String group = "churn-group";
        createTopic(topic, PARTITIONS);
        Set<TopicPartition> all = IntStream.range(0, PARTITIONS).mapToObj(p -> new TopicPartition(topic, p))
                .collect(Collectors.toSet());
        Ledger ledger = new Ledger();
        List<GroupMember> members = new ArrayList<>();
        BackgroundProducer producer = new BackgroundProducer(broker, topic, ledger).start();
        try {
            // --- joins -------------------------------------------------------------------
            GroupMember a = member(members, "a", group, topic, null, Commit.SYNC, ledger);
            awaitOwnership(List.of(a), all, "a alone");
            GroupMember b = member(members, "b", group, topic, null, Commit.ASYNC, ledger);
            awaitOwnership(List.of(a, b), all, "a and b");
            GroupMember c = member(members, "c", group, topic, "static-c", Commit.SYNC, ledger);
            awaitOwnership(List.of(a, b, c), all, "a, b and c");
            for (GroupMember m : List.of(a, b, c)) {
                assertEquals(2, m.assignment().size(), "sticky balance: " + m);
            }
            // Cooperative: a member revokes only partitions that move away, never one it keeps.
            for (GroupMember m : List.of(a, b)) {
                Set<TopicPartition> kept = new HashSet<>(m.assignment());
                kept.retainAll(m.everRevoked);
                assertEquals(Set.of(), kept, "cooperative rebalancing revoked partitions " + m.name + " kept: " + m);
            }
            awaitProgress(ledger, List.of(a, b, c));

            // --- dynamic member leaves: LeaveGroup, a prompt rebalance -----------------------
            long leftAt = System.nanoTime();
            b.stop(Exit.LEAVE);
            members.remove(b);
            awaitOwnership(List.of(a, c), all, "a and c after b left");
            long rebalanceMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - leftAt);
            assertTrue(rebalanceMs < SESSION_TIMEOUT_MS,
                    "b's LeaveGroup must move its partitions at once, not after the session timeout: took "
                            + rebalanceMs + " ms");
            assertEquals(3, a.assignment().size(), "a after b left: " + a);
            assertEquals(3, c.assignment().size(), "c after b left: " + c);
            awaitProgress(ledger, List.of(a, c));

            // --- static member killed: only its session timeout frees its partitions ----------
            long killedAt = System.nanoTime();
            c.stop(Exit.KILL);
            members.remove(c);
            awaitOwnership(List.of(a), all, "a after c was killed");
            long takeoverMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - killedAt);
            // Its last heartbeat was at most one interval before the kill.
            assertTrue(takeoverMs >= SESSION_TIMEOUT_MS - HEARTBEAT_INTERVAL_MS - 500,
                    "a killed member's partitions move when its session times out (" + SESSION_TIMEOUT_MS
                            + " ms), not after " + takeoverMs + " ms");

            // --- drain ------------------------------------------------------------------------
            Map<TopicPartition, Long> end = producer.stop();
            await(() -> all.stream().allMatch(tp -> ledger.consumedCount(tp) >= end.get(tp)),
                    Duration.ofSeconds(60), () -> "a consumes to the end " + end + ": " + a);
            a.stop(Exit.LEAVE);
            members.remove(a);

            // --- exactly once -------------------------------------------------------------------
            assertConsumedExactlyOnce(broker, group, ledger, all, end);
        } finally {
            producer.stopQuietly();
            for (GroupMember m : members) {
                try {
                    m.stop(Exit.LEAVE);
                } catch (Exception e) {
                    System.err.println("stopping " + m.name + ": " + e);
                }
            }
        }
    }

    /**
     * KIP-345: a static member (group.instance.id) that restarts within its session timeout
     * gets its partitions back at once, with no rebalance: the other member sees no new
     * generation and no callback, and nothing is consumed twice.
     */
    @Test
    void staticMemberRestartedWithinItsSessionTimeoutKeepsItsPartitionsWithoutARebalance() throws Exception {
        String topic = "static";
        String group = "static-group";
        createTopic(topic, 4);
        Set<TopicPartition> all = IntStream.range(0, 4).mapToObj(p -> new TopicPartition(topic, p))
                .collect(Collectors.toSet());
        Ledger ledger = new Ledger();
        List<GroupMember> members = new ArrayList<>();
        BackgroundProducer producer = new BackgroundProducer(broker, topic, ledger).start();
        try {
            GroupMember a = member(members, "a", group, topic, null, Commit.SYNC, ledger);
            GroupMember s = member(members, "s", group, topic, "static-s", Commit.ASYNC, ledger);
            awaitOwnership(List.of(a, s), all, "a and s");
            awaitProgress(ledger, List.of(a, s));
            int generation = a.generation();
            int eventsA = a.events.size();
            Set<TopicPartition> ofS = s.assignment();

            s.stop(Exit.LEAVE); // a static member's close() sends no LeaveGroup
            members.remove(s);
            GroupMember s2 = member(members, "s2", group, topic, "static-s", Commit.ASYNC, ledger);
            await(() -> s2.assignment().equals(ofS), Duration.ofMillis(SESSION_TIMEOUT_MS),
                    () -> "the restarted static member gets its partitions back within the session timeout: " + s2);
            awaitProgress(ledger, List.of(a, s2));
            Thread.sleep(2 * HEARTBEAT_INTERVAL_MS); // a rebalance would show by now
            Soft soft = new Soft();
            soft.check("s2's generation", () -> assertEquals(generation, s2.generation(),
                    "a static member's return is no new generation: " + s2));
            soft.check("a's generation", () -> assertEquals(generation, a.generation(),
                    "no rebalance for the static member's return: " + a));
            soft.check("a's callbacks", () -> assertEquals(eventsA, a.events.size(),
                    "no callbacks on a for the static member's return: " + a));
            soft.check("a's partitions", () -> assertEquals(all.size() - ofS.size(), a.assignment().size(), a.toString()));

            Map<TopicPartition, Long> end = producer.stop();
            await(() -> all.stream().allMatch(tp -> ledger.consumedCount(tp) >= end.get(tp)),
                    Duration.ofSeconds(60), () -> "a and s2 consume to the end " + end + ": " + a + " / " + s2);
            a.stop(Exit.LEAVE);
            s2.stop(Exit.LEAVE);
            members.clear();
            soft.check("exactly once", () -> assertEquals(List.of(), new ArrayList<>(ledger.duplicates),
                    "records consumed twice"));
            for (TopicPartition tp : all) {
                soft.check(tp + " complete", () -> assertEquals(end.get(tp), ledger.consumedCount(tp), "records consumed"));
            }
            soft.assertAll("static membership");
        } finally {
            producer.stopQuietly();
            for (GroupMember m : members) {
                try {
                    m.stop(Exit.LEAVE);
                } catch (Exception e) {
                    System.err.println("stopping " + m.name + ": " + e);
                }
            }
        }
    }

    /**
     * One member on its own: offsetsForTimes, seek, pause/resume, commitSync with metadata,
     * commitAsync, committed(), an out-of-range position reset by auto.offset.reset, and a new
     * member of the group resuming from the committed offsets.
     */
    @Test
    void seekOffsetsForTimesPauseResumeAndCommits() throws Exception {
        String topic = "seek";
        String group = "seek-group";
        int perPartition = 100;
        createTopic(topic, 2);
        TopicPartition p0 = new TopicPartition(topic, 0);
        TopicPartition p1 = new TopicPartition(topic, 1);
        long t0 = System.currentTimeMillis() - Duration.ofHours(1).toMillis();
        // p0: offset i at t0 + 1000 i; p1: offset i at t0 + 1000 i + 500.
        try (KafkaProducer<byte[], byte[]> producer = broker.producer(Map.of())) {
            for (int i = 0; i < perPartition; i++) {
                producer.send(new ProducerRecord<>(topic, 0, t0 + 1000L * i, null, seqValue(i)));
                producer.send(new ProducerRecord<>(topic, 1, t0 + 1000L * i + 500, null, seqValue(1000 + i)));
            }
            producer.flush();
        }

        try (KafkaConsumer<byte[], byte[]> consumer = broker.consumer(Map.of(
                ConsumerConfig.GROUP_ID_CONFIG, group,
                ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, List.of(CooperativeStickyAssignor.class.getName())))) {
            AtomicReference<Set<TopicPartition>> assigned = new AtomicReference<>(Set.of());
            consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(java.util.Collection<TopicPartition> partitions) { }

                @Override
                public void onPartitionsAssigned(java.util.Collection<TopicPartition> partitions) {
                    Set<TopicPartition> s = new HashSet<>(assigned.get());
                    s.addAll(partitions);
                    assigned.set(s);
                }
            });
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (!assigned.get().equals(Set.of(p0, p1))) {
                assertTrue(System.nanoTime() < deadline, "not assigned both partitions: " + assigned.get());
                consumer.poll(Duration.ofMillis(100));
            }

            // offsetsForTimes: the first offset whose timestamp is >= the target, with the
            // leader epoch of its batch (0: the partition's first leader).
            Map<TopicPartition, OffsetAndTimestamp> at = consumer.offsetsForTimes(Map.of(p0, t0 + 50_000L, p1, t0 + 50_000L));
            assertEquals(new OffsetAndTimestamp(50, t0 + 50_000L, Optional.of(0)), at.get(p0), "p0 at its own timestamp");
            assertEquals(new OffsetAndTimestamp(50, t0 + 50_500L, Optional.of(0)), at.get(p1), "p1: first timestamp after the target");
            Map<TopicPartition, OffsetAndTimestamp> early = consumer.offsetsForTimes(Map.of(p0, t0 - 5_000L, p1, t0 + 49_999L));
            assertEquals(new OffsetAndTimestamp(0, t0, Optional.of(0)), early.get(p0), "before the first record");
            assertEquals(new OffsetAndTimestamp(50, t0 + 50_500L, Optional.of(0)), early.get(p1), "between two records");
            Map<TopicPartition, OffsetAndTimestamp> late = consumer.offsetsForTimes(Map.of(p0, t0 + 1_000_000L));
            assertTrue(late.containsKey(p0), "a partition asked for is in the result");
            assertNull(late.get(p0), "no record at or after the target: null");

            // seek to the offsets found, pause p1: only p0 comes.
            consumer.seek(p0, at.get(p0).offset());
            consumer.seek(p1, at.get(p1).offset());
            consumer.pause(List.of(p1));
            assertEquals(Set.of(p1), consumer.paused());
            List<Long> fromP0 = new ArrayList<>();
            deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (fromP0.size() < 50) {
                assertTrue(System.nanoTime() < deadline, "p0 records after seek: " + fromP0);
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    assertEquals(0, r.partition(), "a record from paused p1 at offset " + r.offset());
                    assertEquals(r.offset(), (long) ByteBuffer.wrap(r.value()).getInt(), "p0 record content");
                    assertEquals(t0 + 1000L * r.offset(), r.timestamp(), "p0 record timestamp");
                    fromP0.add(r.offset());
                }
            }
            assertEquals(LongRange.of(50, 100), fromP0, "p0 from the seek to the end, in order");
            for (int i = 0; i < 3; i++) {
                assertEquals(0, consumer.poll(Duration.ofMillis(200)).count(), "p1 is paused, p0 at its end");
            }
            assertEquals(50L, consumer.position(p1), "pausing does not move the position");

            // commitSync with metadata, then read it back.
            consumer.commitSync(Map.of(p0, new OffsetAndMetadata(100, "p0-done")));
            assertEquals(new OffsetAndMetadata(100, "p0-done"), consumer.committed(Set.of(p0)).get(p0));

            // resume p1: it continues from its position.
            consumer.resume(List.of(p1));
            assertEquals(Set.of(), consumer.paused());
            List<Long> fromP1 = new ArrayList<>();
            deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (fromP1.size() < 50) {
                assertTrue(System.nanoTime() < deadline, "p1 records after resume: " + fromP1);
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    assertEquals(1, r.partition(), "p0 is at its end; got offset " + r.offset());
                    assertEquals(1000 + r.offset(), (long) ByteBuffer.wrap(r.value()).getInt(), "p1 record content");
                    fromP1.add(r.offset());
                }
            }
            assertEquals(LongRange.of(50, 100), fromP1, "p1 from its position to the end, in order");

            // commitAsync: the callback reports the offsets committed.
            CompletableFuture<Map<TopicPartition, OffsetAndMetadata>> done = new CompletableFuture<>();
            consumer.commitAsync(Map.of(p1, new OffsetAndMetadata(75, "p1-async")), (offsets, e) -> {
                if (e != null) {
                    done.completeExceptionally(e);
                } else {
                    done.complete(offsets);
                }
            });
            deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (!done.isDone()) {
                assertTrue(System.nanoTime() < deadline, "commitAsync callback never ran");
                consumer.poll(Duration.ofMillis(100)); // callbacks run inside poll
            }
            assertEquals(Map.of(p1, new OffsetAndMetadata(75, "p1-async")), done.get());
            assertEquals(new OffsetAndMetadata(75, "p1-async"), consumer.committed(Set.of(p1)).get(p1));

            // seekToBeginning / seekToEnd.
            consumer.seekToBeginning(List.of(p0));
            consumer.seekToEnd(List.of(p1));
            assertEquals(0L, consumer.position(p0));
            assertEquals((long) perPartition, consumer.position(p1));

            // A position beyond the log end: OFFSET_OUT_OF_RANGE, reset to earliest.
            consumer.pause(List.of(p1));
            consumer.seek(p0, 10_000);
            long first = -1;
            deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (first < 0) {
                assertTrue(System.nanoTime() < deadline, "no record after the out-of-range reset");
                ConsumerRecords<byte[], byte[]> rs = consumer.poll(Duration.ofMillis(200));
                if (!rs.isEmpty()) {
                    first = rs.iterator().next().offset();
                }
            }
            assertEquals(0L, first, "auto.offset.reset=earliest after an out-of-range seek");
        }

        // A new member of the group starts from the committed offsets: p0 at 100 (nothing), p1 at 75.
        try (KafkaConsumer<byte[], byte[]> consumer = broker.consumer(Map.of(ConsumerConfig.GROUP_ID_CONFIG, group))) {
            consumer.subscribe(List.of(topic));
            Map<Integer, List<Long>> got = new TreeMap<>();
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (got.getOrDefault(1, List.of()).size() < 25) {
                assertTrue(System.nanoTime() < deadline, "records after rejoining: " + got);
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    got.computeIfAbsent(r.partition(), k -> new ArrayList<>()).add(r.offset());
                }
            }
            for (int i = 0; i < 3; i++) {
                consumer.poll(Duration.ofMillis(200)).forEach(r ->
                        got.computeIfAbsent(r.partition(), k -> new ArrayList<>()).add(r.offset()));
            }
            assertEquals(Map.of(1, LongRange.of(75, 100)), got, "resumed from the committed offsets");
        }
    }

    // ---------------------------------------------------------------------------------

    private static GroupMember member(List<GroupMember> members, String name, String group, String topic,
                                      String instanceId, Commit commit, Ledger ledger) {
        GroupMember m = new GroupMember(name, broker, group, topic, instanceId, commit, ledger, SESSION_TIMEOUT_MS);
        members.add(m);
        return m.start();
    }

    private static void createTopic(String topic, int partitions) throws Exception {
        try (Admin admin = broker.admin()) {
            Await.createTopic(admin, new NewTopic(topic, partitions, (short) 1));
        }
    }

    /** [from, to) as a list, for comparing consumed offsets. */
    private static final class LongRange {
        static List<Long> of(long from, long to) {
            List<Long> l = new ArrayList<>();
            for (long i = from; i < to; i++) {
                l.add(i);
            }
            return l;
        }
    }

}
