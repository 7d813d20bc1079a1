package dev.corelog.it;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.stream.Collectors;
import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.CommitFailedException;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.RebalanceInProgressException;

/**
 * One member of a consumer group, polling on its own thread (a KafkaConsumer is
 * single-threaded): it records every record it is handed and every offset it commits in a
 * shared {@link Ledger}, commits after each poll (commitSync or commitAsync), and commits
 * synchronously what it consumed from partitions it gives up, so that a partition's next
 * owner starts exactly after the last record consumed.
 */
final class GroupMember {

    enum Commit { SYNC, ASYNC }

    /** How the member goes: LEAVE closes normally; KILL closes without leaving the group. */
    enum Exit { LEAVE, KILL }

    final String name;
    private final Ledger ledger;
    private final Commit commitMode;
    private final Map<String, Object> config;
    private final String topic;
    /** A broker-side pattern (KIP-848) to subscribe by instead of {@code topic}. */
    private final SubscriptionPattern pattern;
    private final Thread thread;

    private volatile Exit exit;
    private final AtomicReference<Set<TopicPartition>> assignment = new AtomicReference<>(Set.of());
    private final AtomicInteger generation = new AtomicInteger(-1);
    private final AtomicReference<Throwable> failure = new AtomicReference<>();
    /** "assigned"/"revoked"/"lost" callbacks, in order, with the partitions. */
    final List<String> events = new CopyOnWriteArrayList<>();
    /** Every partition this member ever gave up through onPartitionsRevoked. */
    final Set<TopicPartition> everRevoked = ConcurrentHashMap.newKeySet();
    final ConcurrentLinkedQueue<String> commitErrors = new ConcurrentLinkedQueue<>();

    // Consumer-thread state.
    private KafkaConsumer<byte[], byte[]> consumer;
    private final Map<TopicPartition, Long> nextOffset = new HashMap<>();
    private boolean dirty;

    /** A classic-protocol member (cooperative-sticky), subscribed to {@code topic}. */
    GroupMember(String name, CorelogBroker broker, String group, String topic, String groupInstanceId,
                Commit commitMode, Ledger ledger, int sessionTimeoutMs) {
        this(name, broker, topic, null, commitMode, ledger, classicConfig(sessionTimeoutMs));
        config.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        config.put(ConsumerConfig.CLIENT_ID_CONFIG, name);
        if (groupInstanceId != null) {
            config.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, groupInstanceId);
        }
    }

    /**
     * A consumer-protocol member (KIP-848, {@code group.protocol=consumer}): the broker
     * assigns, its session and heartbeat are the broker's. Subscribed to {@code topic}, or
     * to {@code pattern} (matched by the broker) when one is given.
     */
    static GroupMember consumerProtocol(String name, CorelogBroker broker, String group, String topic,
                                        SubscriptionPattern pattern, String groupInstanceId, Commit commitMode,
                                        Ledger ledger) {
        Map<String, Object> c = new HashMap<>();
        c.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        c.put(ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG, 30_000);
        c.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 200);
        GroupMember m = new GroupMember(name, broker, topic, pattern, commitMode, ledger, c);
        m.config.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        m.config.put(ConsumerConfig.CLIENT_ID_CONFIG, name);
        if (groupInstanceId != null) {
            m.config.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, groupInstanceId);
        }
        return m;
    }

    private static Map<String, Object> classicConfig(int sessionTimeoutMs) {
        Map<String, Object> c = new HashMap<>();
        c.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, List.of(CooperativeStickyAssignor.class.getName()));
        c.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, sessionTimeoutMs);
        c.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, 1000);
        // Also the rebalance timeout: a rebalance waits at most this long for a member.
        c.put(ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG, 30_000);
        c.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 200);
        return c;
    }

    private GroupMember(String name, CorelogBroker broker, String topic, SubscriptionPattern pattern,
                        Commit commitMode, Ledger ledger, Map<String, Object> config) {
        this.name = name;
        this.ledger = ledger;
        this.commitMode = commitMode;
        this.topic = topic;
        this.pattern = pattern;
        this.config = config;
        this.thread = new Thread(() -> run(broker), "member-" + name);
        this.thread.setDaemon(true);
    }

    GroupMember start() {
        thread.start();
        return this;
    }

    Set<TopicPartition> assignment() {
        return assignment.get();
    }

    int generation() {
        return generation.get();
    }

    /** The member's thread failed (an exception out of poll or a revocation commit). */
    Throwable failure() {
        return failure.get();
    }

    /** Commits what it consumed, closes (leaving or not) and waits for its thread. */
    void stop(Exit how) throws InterruptedException {
        exit = how;
        thread.join(60_000);
        if (thread.isAlive()) {
            throw new IllegalStateException("member " + name + " did not stop within 60 s");
        }
    }

    private void run(CorelogBroker broker) {
        try {
            consumer = broker.consumer(config);
            if (pattern != null) {
                consumer.subscribe(pattern, new Listener());
            } else {
                consumer.subscribe(List.of(topic), new Listener());
            }
            while (exit == null) {
                pollOnce();
                if (dirty) {
                    commit();
                }
            }
            // Whatever was consumed is committed before the member goes, both ways. While
            // the group completes a rebalance Kafka answers REBALANCE_IN_PROGRESS: poll, retry.
            for (int attempt = 1; ; attempt++) {
                try {
                    commitSync(owned(consumer.assignment()), "exit");
                    break;
                } catch (RebalanceInProgressException e) {
                    if (attempt == 50) {
                        throw e;
                    }
                    commitErrors.add("exit commitSync: " + e);
                    pollOnce();
                }
            }
            consumer.close(CloseOptions.groupMembershipOperation(exit == Exit.KILL
                    ? CloseOptions.GroupMembershipOperation.REMAIN_IN_GROUP
                    : CloseOptions.GroupMembershipOperation.DEFAULT));
            assignment.set(Set.of());
        } catch (Throwable t) {
            failure.set(t);
            if (consumer != null) {
                try {
                    consumer.close(CloseOptions.timeout(Duration.ZERO));
                } catch (Throwable ignored) {
                    // already failing
                }
            }
        }
    }

    private void pollOnce() {
        ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(100));
        for (ConsumerRecord<byte[], byte[]> r : records) {
            TopicPartition tp = new TopicPartition(r.topic(), r.partition());
            ledger.consumed(name, tp, r.offset(), ByteBuffer.wrap(r.value()).getInt());
            nextOffset.put(tp, r.offset() + 1);
            dirty = true;
        }
        generation.set(consumer.groupMetadata().generationId());
    }

    private void commit() {
        Map<TopicPartition, OffsetAndMetadata> offsets = owned(consumer.assignment());
        if (offsets.isEmpty()) {
            dirty = false;
            return;
        }
        if (commitMode == Commit.SYNC) {
            try {
                consumer.commitSync(offsets);
                ledger.committed(name, offsets);
                dirty = false;
            } catch (RebalanceInProgressException e) {
                // Kafka's answer while the group completes a rebalance: poll, then commit again.
                commitErrors.add("commitSync: " + e);
            } catch (CommitFailedException e) {
                // The group moved on under the commit (a consumer-protocol member's epoch
                // bumped by a heartbeat the commit crossed): what it still owns is
                // committed by the next round, as an application would.
                commitErrors.add("commitSync: " + e);
            }
        } else {
            dirty = false;
            consumer.commitAsync(offsets, (committed, e) -> {
                if (e == null) {
                    ledger.committed(name, committed);
                } else {
                    commitErrors.add("commitAsync: " + e);
                    dirty = true;
                }
            });
        }
    }

    /** Commits synchronously; a failure here would hand consumed records to the next owner. */
    private void commitSync(Map<TopicPartition, OffsetAndMetadata> offsets, String why) {
        if (offsets.isEmpty()) {
            return;
        }
        consumer.commitSync(offsets);
        ledger.committed(name, offsets);
        events.add(why + " committed " + render(offsets.keySet()));
    }

    private Map<TopicPartition, OffsetAndMetadata> owned(Collection<TopicPartition> partitions) {
        Map<TopicPartition, OffsetAndMetadata> m = new HashMap<>();
        for (TopicPartition tp : partitions) {
            Long next = nextOffset.get(tp);
            if (next != null) {
                m.put(tp, new OffsetAndMetadata(next, name));
            }
        }
        return m;
    }

    private final class Listener implements ConsumerRebalanceListener {
        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            if (partitions.isEmpty()) {
                return;
            }
            everRevoked.addAll(partitions);
            events.add("gen " + consumer.groupMetadata().generationId() + " revoked " + render(partitions));
            commitSync(owned(partitions), "revocation");
            Set<TopicPartition> s = new HashSet<>(assignment.get());
            s.removeAll(partitions);
            assignment.set(Set.copyOf(s));
            partitions.forEach(nextOffset::remove);
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
            generation.set(consumer.groupMetadata().generationId());
            if (partitions.isEmpty()) {
                return;
            }
            events.add("gen " + consumer.groupMetadata().generationId() + " assigned " + render(partitions));
            Set<TopicPartition> s = new HashSet<>(assignment.get());
            s.addAll(partitions);
            assignment.set(Set.copyOf(s));
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> partitions) {
            events.add("gen " + consumer.groupMetadata().generationId() + " LOST " + render(partitions));
            Set<TopicPartition> s = new HashSet<>(assignment.get());
            s.removeAll(partitions);
            assignment.set(Set.copyOf(s));
            partitions.forEach(nextOffset::remove);
        }
    }

    static String render(Collection<TopicPartition> tps) {
        return tps.stream().map(TopicPartition::partition).sorted().map(String::valueOf)
                .collect(Collectors.joining(",", "[", "]"));
    }

    @Override
    public String toString() {
        return name + " gen=" + generation() + " owns " + render(assignment()) + " events=" + events
                + (commitErrors.isEmpty() ? "" : " commitErrors=" + commitErrors.size() + " (distinct: "
                        + commitErrors.stream().map(m -> m.length() > 120 ? m.substring(0, 120) + "..." : m)
                                .distinct().limit(3).toList() + ")")
                + (failure() == null ? "" : " FAILED: " + failure());
    }

    /**
     * What the members consumed and committed, and what the producer wrote: the exactly-once
     * bookkeeping of a group test.
     */
    static final class Ledger {
        /** partition -> offset -> seq written there (from the producer's acknowledgements). */
        final Map<TopicPartition, Map<Long, Integer>> produced = new ConcurrentHashMap<>();
        /** partition -> offset -> "member:seq" of the first consumption. */
        final Map<TopicPartition, Map<Long, String>> consumed = new ConcurrentHashMap<>();
        final ConcurrentLinkedQueue<String> duplicates = new ConcurrentLinkedQueue<>();
        final Map<TopicPartition, Long> committed = new ConcurrentHashMap<>();
        final ConcurrentLinkedQueue<String> regressions = new ConcurrentLinkedQueue<>();

        void produced(TopicPartition tp, long offset, int seq) {
            produced.computeIfAbsent(tp, k -> new ConcurrentHashMap<>()).put(offset, seq);
        }

        void consumed(String member, TopicPartition tp, long offset, int seq) {
            String prev = consumed.computeIfAbsent(tp, k -> new ConcurrentHashMap<>())
                    .putIfAbsent(offset, member + ":" + seq);
            if (prev != null) {
                duplicates.add(tp + "@" + offset + " by " + prev + " and again by " + member + ":" + seq);
            }
        }

        void committed(String member, Map<TopicPartition, OffsetAndMetadata> offsets) {
            offsets.forEach((tp, om) -> {
                Long prev = committed.put(tp, om.offset());
                if (prev != null && prev > om.offset()) {
                    regressions.add(member + " committed " + tp + "@" + om.offset() + " after " + prev);
                }
            });
        }

        long consumedCount(TopicPartition tp) {
            Map<Long, String> m = consumed.get(tp);
            return m == null ? 0 : m.size();
        }
    }
}
