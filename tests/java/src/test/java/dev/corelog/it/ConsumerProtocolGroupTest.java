package dev.corelog.it;

import static dev.corelog.it.GroupWorkload.assertConsumedExactlyOnce;
import static dev.corelog.it.GroupWorkload.await;
import static dev.corelog.it.GroupWorkload.awaitOwnership;
import static dev.corelog.it.GroupWorkload.awaitProgress;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.corelog.it.GroupMember.Commit;
import dev.corelog.it.GroupMember.Exit;
import dev.corelog.it.GroupMember.Ledger;
import dev.corelog.it.GroupWorkload.BackgroundProducer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The consumer group protocol of KIP-848 with the Java consumer ({@code group.protocol=consumer}):
 * the broker computes the assignment (uniform) and hands it over member by member through
 * ConsumerGroupHeartbeat, a partition moving only once its previous owner has revoked it.
 */
class ConsumerProtocolGroupTest {

    private static final int SESSION_TIMEOUT_MS = 8_000;
    private static final int HEARTBEAT_INTERVAL_MS = 500;

    @RegisterExtension
    static final CorelogBroker broker = new CorelogBroker("ConsumerProtocolGroupTest",
            "--offsets-topic-partitions", "8",
            "--group-consumer-session-timeout-ms", String.valueOf(SESSION_TIMEOUT_MS),
            "--group-consumer-heartbeat-interval-ms", String.valueOf(HEARTBEAT_INTERVAL_MS));

    /**
     * Three members grow to six and shrink back (two leave, a static one goes without
     * leaving, as a killed one does) while a producer
     * writes all along. At no sampled moment do two members own the same partition; the
     * killed member's partitions move only after its session times out; every record
     * written is consumed exactly once and the final commits are the end offsets.
     */
    @Test
    void aGroupOfThreeGrowsToSixAndShrinksBackConsumingEveryRecordOnce() throws Exception {
        String topic = "kip848-churn";
        String group = "kip848-churn-group";
        createTopic(topic, 12);
        Set<TopicPartition> all = partitions(topic, 12);
        Ledger ledger = new Ledger();
        List<GroupMember> members = new CopyOnWriteArrayList<>();
        BackgroundProducer producer = new BackgroundProducer(broker, topic, ledger).start();
        OverlapWatch overlaps = new OverlapWatch(members).start();
        try {
            for (String name : List.of("a", "b", "c")) {
                member(members, ledger, name, group, topic, null, null);
            }
            awaitOwnership(List.copyOf(members), all, "a, b and c");
            awaitProgress(ledger, List.copyOf(members));
            for (GroupMember m : members) {
                assertTrue(m.generation() > 0, "a consumer-protocol member has a member epoch: " + m);
            }

            for (String name : List.of("d", "e")) {
                member(members, ledger, name, group, topic, null, null);
            }
            // A static member: closing without leaving (epoch -2) keeps its partitions
            // until its session expires, as a killed process's do. (A dynamic member of
            // this protocol always leaves when it closes.)
            member(members, ledger, "f", group, topic, "kip848-churn-f", null);
            awaitOwnership(List.copyOf(members), all, "six members");
            awaitProgress(ledger, List.copyOf(members));

            for (String name : List.of("d", "e")) {
                GroupMember m = find(members, name);
                m.stop(Exit.LEAVE);
                members.remove(m);
            }
            awaitOwnership(List.copyOf(members), all, "four members after two left");

            GroupMember f = find(members, "f");
            long killedAt = System.nanoTime();
            f.stop(Exit.KILL);
            members.remove(f);
            awaitOwnership(List.copyOf(members), all, "a, b and c after f was killed");
            long takeoverMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - killedAt);
            assertTrue(takeoverMs >= SESSION_TIMEOUT_MS - HEARTBEAT_INTERVAL_MS - 500,
                    "a killed member's partitions move when its session times out (" + SESSION_TIMEOUT_MS
                            + " ms), not after " + takeoverMs + " ms");
            awaitProgress(ledger, List.copyOf(members));

            Map<TopicPartition, Long> end = producer.stop();
            await(() -> all.stream().allMatch(tp -> ledger.consumedCount(tp) >= end.get(tp)),
                    Duration.ofSeconds(60), () -> "the members consume to the end " + end + ": " + members);
            for (GroupMember m : List.copyOf(members)) {
                m.stop(Exit.LEAVE);
                members.remove(m);
            }
            overlaps.stop();
            assertEquals(List.of(), List.copyOf(overlaps.seen), "partitions owned by two members at once");
            assertConsumedExactlyOnce(broker, group, ledger, all, end);
        } finally {
            overlaps.stop();
            producer.stopQuietly();
            stopAll(members);
        }
    }

    /**
     * A static member (group.instance.id) that leaves for now (its close() sends epoch -2) and
     * restarts within its session gets its partitions back at once, and the other member sees
     * no revocation or assignment meanwhile.
     */
    @Test
    void aRestartedStaticMemberGetsItsPartitionsBackWithoutMovingTheOthers() throws Exception {
        String topic = "kip848-static";
        String group = "kip848-static-group";
        createTopic(topic, 4);
        Set<TopicPartition> all = partitions(topic, 4);
        Ledger ledger = new Ledger();
        List<GroupMember> members = new ArrayList<>();
        BackgroundProducer producer = new BackgroundProducer(broker, topic, ledger).start();
        try {
            GroupMember a = member(members, ledger, "a", group, topic, null, null);
            GroupMember s = member(members, ledger, "s", group, topic, "kip848-static-s", null);
            awaitOwnership(List.of(a, s), all, "a and s");
            awaitProgress(ledger, List.of(a, s));
            int eventsOfA = a.events.size();
            Set<TopicPartition> ofS = s.assignment();

            s.stop(Exit.LEAVE);
            members.remove(s);
            GroupMember s2 = member(members, ledger, "s2", group, topic, "kip848-static-s", null);
            await(() -> s2.assignment().equals(ofS), Duration.ofMillis(SESSION_TIMEOUT_MS),
                    () -> "the restarted static member gets its partitions back within its session: " + s2);
            awaitProgress(ledger, List.of(a, s2));
            Thread.sleep(4L * HEARTBEAT_INTERVAL_MS); // a move would show by now
            assertEquals(eventsOfA, a.events.size(), "the other member saw no revocation or assignment: " + a);

            Map<TopicPartition, Long> end = producer.stop();
            await(() -> all.stream().allMatch(tp -> ledger.consumedCount(tp) >= end.get(tp)),
                    Duration.ofSeconds(60), () -> "consumed to the end " + end + ": " + members);
            stopAll(members);
            assertConsumedExactlyOnce(broker, group, ledger, all, end);
        } finally {
            producer.stopQuietly();
            stopAll(members);
        }
    }

    /**
     * A subscription by pattern is matched by the broker (KIP-848's SubscribedTopicRegex): a
     * topic created later that matches is assigned without the client asking; one that does
     * not match never is.
     */
    @Test
    void aPatternSubscriptionPicksUpANewMatchingTopic() throws Exception {
        String group = "kip848-pattern-group";
        createTopic("kip848-rx-one", 2);
        createTopic("kip848-other", 2);
        Ledger ledger = new Ledger();
        List<GroupMember> members = new ArrayList<>();
        try {
            GroupMember m = member(members, ledger, "m", group, null, null, new SubscriptionPattern("kip848-rx-.*"));
            awaitOwnership(List.of(m), partitions("kip848-rx-one", 2), "the member owns the matching topic");
            createTopic("kip848-rx-two", 3);
            Set<TopicPartition> both = new HashSet<>(partitions("kip848-rx-one", 2));
            both.addAll(partitions("kip848-rx-two", 3));
            awaitOwnership(List.of(m), both, "the member owns the new matching topic too");
        } finally {
            stopAll(members);
        }
    }

    /**
     * Online migration (KIP-848, group.consumer.migration.policy=bidirectional): a classic
     * group of three cooperative consumers is rolled member by member to the consumer
     * protocol while a producer writes, then rolled back. The first consumer-protocol member
     * turns the group into a consumer group whose classic members go on through JoinGroup and
     * SyncGroup; when the last consumer-protocol member leaves, the group is classic again.
     * No sampled moment has a partition owned twice, and every record is consumed once.
     */
    @Test
    void aGroupMigratesToTheConsumerProtocolAndBackUnderLoad() throws Exception {
        String topic = "kip848-migrate";
        String group = "kip848-migrate-group";
        createTopic(topic, 6);
        Set<TopicPartition> all = partitions(topic, 6);
        Ledger ledger = new Ledger();
        List<GroupMember> members = new CopyOnWriteArrayList<>();
        List<GroupMember> everyone = new CopyOnWriteArrayList<>();
        BackgroundProducer producer = new BackgroundProducer(broker, topic, ledger).start();
        OverlapWatch overlaps = new OverlapWatch(members).start();
        try (Admin admin = broker.admin()) {
            for (String name : List.of("a", "b", "c")) {
                everyone.add(classic(members, ledger, name, group, topic));
            }
            awaitOwnership(List.copyOf(members), all, "three classic members");
            awaitProgress(ledger, List.copyOf(members));
            assertEquals(GroupType.CLASSIC, groupType(admin, group));

            int step = 0;
            for (String name : List.of("a", "b", "c")) {
                roll(members, name, () -> everyone.add(member(members, ledger, name + "'", group, topic, null, null)));
                awaitOwnership(List.copyOf(members), all, "after " + name + " moved to the consumer protocol");
                awaitProgress(ledger, List.copyOf(members));
                assertEquals(GroupType.CONSUMER, groupType(admin, group),
                        "a group with a consumer-protocol member is a consumer group (step " + step++ + ")");
            }
            for (String name : List.of("a", "b", "c")) {
                roll(members, name + "'", () -> everyone.add(classic(members, ledger, name + "''", group, topic)));
                awaitOwnership(List.copyOf(members), all, "after " + name + " moved back to the classic protocol");
                awaitProgress(ledger, List.copyOf(members));
            }
            assertEquals(GroupType.CLASSIC, groupType(admin, group),
                    "a group whose last consumer-protocol member left is classic again");

            Map<TopicPartition, Long> end = producer.stop();
            await(() -> all.stream().allMatch(tp -> ledger.consumedCount(tp) >= end.get(tp)),
                    Duration.ofSeconds(60), () -> "the members consume to the end " + end + ": " + members);
            stopAll(members);
            overlaps.stop();
            assertEquals(List.of(), List.copyOf(overlaps.seen), "partitions owned by two members at once");
            assertConsumedExactlyOnce(broker, group, ledger, all, end);
        } catch (AssertionError | Exception e) {
            everyone.forEach(m -> System.err.println("member " + m));
            throw e;
        } finally {
            overlaps.stop();
            producer.stopQuietly();
            stopAll(members);
        }
    }

    /** Stops member {@code name} (it leaves the group), then starts its replacement. */
    private static void roll(List<GroupMember> members, String name, Runnable replacement) throws Exception {
        GroupMember old = find(members, name);
        old.stop(Exit.LEAVE);
        members.remove(old);
        replacement.run();
    }

    private static GroupMember classic(List<GroupMember> members, Ledger ledger, String name, String group,
                                       String topic) {
        GroupMember m = new GroupMember(name, broker, group, topic, null, Commit.SYNC, ledger, 10_000);
        members.add(m);
        return m.start();
    }

    private static GroupType groupType(Admin admin, String group) throws Exception {
        return admin.describeConsumerGroups(List.of(group)).describedGroups().get(group)
                .get(30, TimeUnit.SECONDS).type();
    }

    private static GroupMember member(List<GroupMember> members, Ledger ledger, String name, String group,
                                      String topic, String instanceId, SubscriptionPattern pattern) {
        GroupMember m = GroupMember.consumerProtocol(name, broker, group, topic, pattern, instanceId, Commit.SYNC,
                ledger);
        members.add(m);
        return m.start();
    }

    private static GroupMember find(List<GroupMember> members, String name) {
        return members.stream().filter(m -> m.name.equals(name)).findFirst().orElseThrow();
    }

    private static void stopAll(List<GroupMember> members) {
        for (GroupMember m : List.copyOf(members)) {
            try {
                m.stop(Exit.LEAVE);
            } catch (Exception e) {
                System.err.println("stopping " + m.name + ": " + e);
            }
            members.remove(m);
        }
    }

    private static Set<TopicPartition> partitions(String topic, int n) {
        return IntStream.range(0, n).mapToObj(p -> new TopicPartition(topic, p)).collect(Collectors.toSet());
    }

    private static void createTopic(String topic, int partitions) throws Exception {
        try (Admin admin = broker.admin()) {
            Await.createTopic(admin, new NewTopic(topic, partitions, (short) 1));
        }
    }

    /** Samples the members' owned partitions every few milliseconds and records any overlap. */
    private static final class OverlapWatch {
        private final List<GroupMember> members;
        private final AtomicBoolean running = new AtomicBoolean(true);
        final ConcurrentLinkedQueue<String> seen = new ConcurrentLinkedQueue<>();
        private final Thread thread;

        OverlapWatch(List<GroupMember> members) {
            this.members = members;
            this.thread = new Thread(this::run, "overlap-watch");
            this.thread.setDaemon(true);
        }

        OverlapWatch start() {
            thread.start();
            return this;
        }

        private void run() {
            while (running.get()) {
                Map<TopicPartition, String> owner = new HashMap<>();
                for (GroupMember m : List.copyOf(members)) {
                    for (TopicPartition tp : m.assignment()) {
                        String other = owner.put(tp, m.name);
                        if (other != null && seen.size() < 20) {
                            seen.add(tp + " by " + other + " and " + m.name);
                        }
                    }
                }
                try {
                    Thread.sleep(5);
                } catch (InterruptedException e) {
                    return;
                }
            }
        }

        void stop() throws InterruptedException {
            running.set(false);
            thread.join(5_000);
        }
    }
}
