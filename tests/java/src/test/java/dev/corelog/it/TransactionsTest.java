package dev.corelog.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.FinalizedVersionRange;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.consumer.CommitFailedException;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The Java client's transactions against corelog: commits and aborts as read_committed
 * and read_uncommitted consumers see them, offsets sent to a transaction committed and
 * aborted with it, zombie fencing, and the admin client's view of transactions.
 */
class TransactionsTest {

    @RegisterExtension
    static final CorelogBroker broker = new CorelogBroker("TransactionsTest");

    private static KafkaProducer<byte[], byte[]> transactional(String id) {
        KafkaProducer<byte[], byte[]> p = broker.producer(Map.of(
                ProducerConfig.TRANSACTIONAL_ID_CONFIG, id,
                ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, 60_000));
        p.initTransactions();
        return p;
    }

    private static ProducerRecord<byte[], byte[]> record(String topic, int partition, String value) {
        return new ProducerRecord<>(topic, partition, null, value.getBytes(StandardCharsets.UTF_8));
    }

    /** Every value of {@code topic}'s partitions a consumer of {@code isolation} reads to the end. */
    private static List<String> readAll(String topic, int partitions, String isolation) {
        List<String> out = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> c = broker.consumer(Map.of(
                ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation))) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int p = 0; p < partitions; p++) {
                tps.add(new TopicPartition(topic, p));
            }
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> end = c.endOffsets(tps);
            long deadline = System.currentTimeMillis() + 20_000;
            while (tps.stream().anyMatch(tp -> c.position(tp) < end.get(tp))) {
                assertTrue(System.currentTimeMillis() < deadline, "reading " + topic + " to " + end);
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
                    out.add(new String(r.value(), StandardCharsets.UTF_8));
                }
            }
        }
        out.sort(null);
        return out;
    }

    private static void createTopic(String topic, int partitions) throws Exception {
        try (Admin admin = broker.admin()) {
            Await.createTopic(admin, new NewTopic(topic, partitions, (short) 1));
        }
    }

    @Test
    void readCommittedConsumersNeverSeeAbortedRecords() throws Exception {
        String topic = "java-txn";
        createTopic(topic, 3);
        try (KafkaProducer<byte[], byte[]> p = transactional("java-txn-1")) {
            for (int round = 0; round < 10; round++) {
                p.beginTransaction();
                for (int i = 0; i < 30; i++) {
                    p.send(record(topic, i % 3, "r" + round + "-" + i));
                }
                if (round % 2 == 0) {
                    p.commitTransaction();
                } else {
                    p.flush();
                    p.abortTransaction();
                }
            }
        }
        List<String> committed = readAll(topic, 3, "read_committed");
        assertEquals(150, committed.size());
        assertTrue(committed.stream().allMatch(v -> Integer.parseInt(v.substring(1, v.indexOf('-'))) % 2 == 0),
                "only even (committed) rounds");
        assertEquals(300, readAll(topic, 3, "read_uncommitted").size());
    }

    @Test
    void offsetsSentToATransactionCommitAndAbortWithIt() throws Exception {
        String topic = "java-txn-offsets";
        String group = "java-txn-group-" + UUID.randomUUID();
        createTopic(topic, 1);
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaProducer<byte[], byte[]> p = transactional("java-txn-offsets-1");
             KafkaConsumer<byte[], byte[]> c = broker.consumer(Map.of(ConsumerConfig.GROUP_ID_CONFIG, group))) {
            p.beginTransaction();
            p.send(record(topic, 0, "x"));
            p.sendOffsetsToTransaction(Map.of(tp, new OffsetAndMetadata(42)), c.groupMetadata());
            p.commitTransaction();
            assertEquals(42, c.committed(Set.of(tp)).get(tp).offset());

            p.beginTransaction();
            p.sendOffsetsToTransaction(Map.of(tp, new OffsetAndMetadata(99)), c.groupMetadata());
            p.abortTransaction();
            assertEquals(42, c.committed(Set.of(tp)).get(tp).offset(), "the aborted offset is gone");
        }
    }

    /**
     * {@code sendOffsetsToTransaction} with a KIP-848 consumer's group metadata: the
     * TxnOffsetCommit names a consumer-protocol member and its epoch, which must be taken
     * (it was UNKNOWN_MEMBER_ID for every one); a wrong epoch is ILLEGAL_GENERATION, the
     * producer's CommitFailedException, and the transaction is aborted.
     */
    @Test
    void offsetsOfAConsumerProtocolMemberCommitWithTheTransaction() throws Exception {
        String topic = "java-txn-848";
        String group = "java-txn-848-group-" + UUID.randomUUID();
        createTopic(topic, 1);
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaProducer<byte[], byte[]> p = transactional("java-txn-848-1");
             KafkaConsumer<byte[], byte[]> c = broker.consumer(Map.of(
                     ConsumerConfig.GROUP_ID_CONFIG, group,
                     ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer"))) {
            c.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 30_000;
            while (c.assignment().isEmpty() || c.groupMetadata().generationId() < 1) {
                assertTrue(System.currentTimeMillis() < deadline, "the member is assigned " + tp);
                c.poll(Duration.ofMillis(100));
            }
            ConsumerGroupMetadata member = c.groupMetadata();
            p.beginTransaction();
            p.send(record(topic, 0, "x"));
            p.sendOffsetsToTransaction(Map.of(tp, new OffsetAndMetadata(7)), member);
            p.commitTransaction();
            assertEquals(7, c.committed(Set.of(tp)).get(tp).offset());

            ConsumerGroupMetadata stale = new ConsumerGroupMetadata(group,
                    member.generationId() + 5, member.memberId(), member.groupInstanceId());
            p.beginTransaction();
            assertThrows(CommitFailedException.class,
                    () -> p.sendOffsetsToTransaction(Map.of(tp, new OffsetAndMetadata(9)), stale));
            p.abortTransaction();
            assertEquals(7, c.committed(Set.of(tp)).get(tp).offset(), "nothing of the refused commit");
        }
    }

    @Test
    void aSecondInstanceFencesTheFirst() throws Exception {
        String topic = "java-txn-zombie";
        createTopic(topic, 1);
        KafkaProducer<byte[], byte[]> zombie = transactional("java-txn-zombie-1");
        try {
            zombie.beginTransaction();
            zombie.send(record(topic, 0, "zombie")).get();
            try (KafkaProducer<byte[], byte[]> fresh = transactional("java-txn-zombie-1")) {
                // The zombie's next write is refused by the partition (its epoch is older
                // than the abort marker's), and its commit by the coordinator.
                Exception e = assertThrows(Exception.class, () -> {
                    zombie.send(record(topic, 0, "late")).get();
                    zombie.commitTransaction();
                });
                boolean fenced = false;
                for (Throwable t = e; t != null; t = t.getCause()) {
                    fenced |= t instanceof ProducerFencedException
                            || t instanceof org.apache.kafka.common.errors.InvalidProducerEpochException;
                }
                assertTrue(fenced, "fenced: " + e);
                fresh.beginTransaction();
                fresh.send(record(topic, 0, "fresh"));
                fresh.commitTransaction();
            }
        } finally {
            zombie.close(Duration.ZERO);
        }
        assertEquals(List.of("fresh"), readAll(topic, 1, "read_committed"));
    }

    @Test
    void transactionVersion2EndsEachTransactionUnderANewEpoch() throws Exception {
        String topic = "java-txn-v2";
        createTopic(topic, 1);
        TopicPartition tp = new TopicPartition(topic, 0);
        try (Admin admin = broker.admin()) {
            // The feature the client reads its transaction protocol from.
            FinalizedVersionRange tv = admin.describeFeatures().featureMetadata().get()
                    .finalizedFeatures().get("transaction.version");
            assertEquals(2, tv == null ? 0 : tv.maxVersionLevel(), "finalized transaction.version");
            try (KafkaProducer<byte[], byte[]> p = transactional("java-txn-v2-1")) {
                for (int round = 0; round < 3; round++) {
                    p.beginTransaction();
                    p.send(record(topic, 0, "v2-" + round));
                    p.commitTransaction();
                }
                // Version 2: each end's markers carry the next epoch, which the partition
                // takes as the producer's (version 1 would still be at its first epoch).
                ProducerState state = admin.describeProducers(List.of(tp)).partitionResult(tp).get()
                        .activeProducers().get(0);
                assertTrue(state.producerEpoch() >= 3, "epoch after three ends: " + state);
                // Aborting a transaction that wrote nothing is allowed under version 2.
                p.beginTransaction();
                p.abortTransaction();
                p.beginTransaction();
                p.send(record(topic, 0, "v2-last"));
                p.commitTransaction();
            }
        }
        assertEquals(List.of("v2-0", "v2-1", "v2-2", "v2-last"), readAll(topic, 1, "read_committed"));
    }

    @Test
    void theAdminClientListsAndDescribesTransactions() throws Exception {
        String topic = "java-txn-admin";
        createTopic(topic, 2);
        try (KafkaProducer<byte[], byte[]> p = transactional("java-txn-admin-1");
             Admin admin = broker.admin()) {
            p.beginTransaction();
            p.send(record(topic, 1, "open")).get();
            Collection<TransactionListing> listed = admin.listTransactions().all().get();
            assertTrue(listed.stream().anyMatch(l -> l.transactionalId().equals("java-txn-admin-1")
                    && l.state().toString().equals("Ongoing")), "listed: " + listed);
            TransactionDescription d = admin.describeTransactions(List.of("java-txn-admin-1"))
                    .description("java-txn-admin-1").get();
            assertEquals("Ongoing", d.state().toString());
            assertEquals(Set.of(new TopicPartition(topic, 1)), d.topicPartitions());
            p.abortTransaction();
            TransactionDescription after = admin.describeTransactions(List.of("java-txn-admin-1"))
                    .description("java-txn-admin-1").get();
            assertTrue(Set.of("PrepareAbort", "CompleteAbort").contains(after.state().toString()), after.toString());
        }
    }
}
