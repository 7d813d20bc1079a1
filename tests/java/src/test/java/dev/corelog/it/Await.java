package dev.corelog.it;

import java.time.Duration;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.function.Executable;

/**
 * Waiting the way a Kafka client must: Kafka's admin writes go through the controller and
 * reach the broker's metadata a moment later (a new topic's partitions, configs, quotas), so
 * a read right after a write may see the old state. corelog answers at once; these waits
 * cost it nothing and keep the tests true to Kafka (they also pass against Apache Kafka,
 * see {@link CorelogBroker}).
 */
final class Await {
    static final Duration DEFAULT = Duration.ofSeconds(15);

    private Await() { }

    /** Retries {@code check} until it passes; after {@code timeout}, its last failure is thrown. */
    static void assertEventually(Duration timeout, Executable check) throws Throwable {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (true) {
            try {
                check.execute();
                return;
            } catch (AssertionError | ExecutionException e) {
                if (System.nanoTime() > deadline) {
                    throw e;
                }
            }
            Thread.sleep(100);
        }
    }

    static void assertEventually(Executable check) throws Throwable {
        assertEventually(DEFAULT, check);
    }

    /** Creates a topic and waits until every partition's leader answers ListOffsets. */
    static void createTopic(Admin admin, NewTopic topic) throws Exception {
        admin.createTopics(java.util.List.of(topic)).all().get(30, TimeUnit.SECONDS);
        int partitions = topic.numPartitions() > 0 ? topic.numPartitions()
                : admin.describeTopics(java.util.List.of(topic.name())).allTopicNames().get(30, TimeUnit.SECONDS)
                        .get(topic.name()).partitions().size();
        partitionsReady(admin, topic.name(), partitions);
    }

    static void partitionsReady(Admin admin, String topic, int partitions) throws Exception {
        Map<TopicPartition, OffsetSpec> all = IntStream.range(0, partitions)
                .mapToObj(p -> new TopicPartition(topic, p))
                .collect(Collectors.toMap(Function.identity(), tp -> OffsetSpec.latest()));
        long deadline = System.nanoTime() + DEFAULT.toNanos();
        while (true) {
            try {
                admin.listOffsets(all).all().get(30, TimeUnit.SECONDS);
                return;
            } catch (ExecutionException e) {
                if (System.nanoTime() > deadline) {
                    throw e;
                }
            }
            Thread.sleep(100);
        }
    }
}
