package dev.corelog.it;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.Node;

/** Small static helpers the TLS and SASL tests share: admin futures awaited with the
 * suite's timeout, broker addresses as clients see them, a produce whose acknowledged
 * offsets are checked, a group consume that commits, temporary directories. */
final class Support {
    static final Duration TIMEOUT = Duration.ofSeconds(30);

    private Support() {}

    static String address(Node n) {
        return n.host() + ":" + n.port();
    }

    static List<String> addresses(Collection<Node> nodes) {
        return nodes.stream().map(Support::address).sorted().toList();
    }

    static <T> T get(KafkaFuture<T> f) throws Exception {
        return f.get(TIMEOUT.toSeconds(), TimeUnit.SECONDS);
    }

    /** The failure `f` ends with; an AssertionError if it succeeds. */
    static ExecutionException expectFailure(KafkaFuture<?> f) throws Exception {
        try {
            Object v = f.get(TIMEOUT.toSeconds(), TimeUnit.SECONDS);
            throw new AssertionError("expected a failure, got " + v);
        } catch (ExecutionException e) {
            return e;
        }
    }

    static Path tempDir(String prefix) {
        try {
            return Files.createTempDirectory(prefix);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    static void deleteRecursively(Path root) {
        try (Stream<Path> walk = Files.walk(root)) {
            walk.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException e) {
            System.err.println("warning: could not delete " + root + ": " + e);
        }
    }

    /**
     * Produces {@code n} records to {@code topic} (values start with {@code tag}; mostly
     * small, every 50th over two TLS records' worth) and returns the values each partition
     * acknowledged, in offset order.
     */
    static Map<Integer, List<String>> produce(CorelogBroker broker, Map<String, Object> conf, String topic,
            String tag, int n) throws Exception {
        List<Future<RecordMetadata>> acks = new ArrayList<>();
        List<String> values = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer = broker.producer(conf)) {
            for (int i = 0; i < n; i++) {
                String v = tag + "-" + i + "|" + (i % 50 == 7 ? "y".repeat(40_000) : "v".repeat(i % 100));
                values.add(v);
                acks.add(producer.send(new ProducerRecord<>(topic, ("k" + i).getBytes(StandardCharsets.UTF_8),
                        v.getBytes(StandardCharsets.UTF_8))));
            }
            producer.flush();
        }
        Map<Integer, Map<Long, String>> byOffset = new HashMap<>();
        for (int i = 0; i < n; i++) {
            RecordMetadata md = acks.get(i).get(TIMEOUT.toSeconds(), TimeUnit.SECONDS);
            byOffset.computeIfAbsent(md.partition(), p -> new TreeMap<>()).put(md.offset(), values.get(i));
        }
        return byOffset.entrySet().stream()
                .collect(Collectors.toMap(Map.Entry::getKey, e -> new ArrayList<>(e.getValue().values())));
    }

    /** Consumes {@code n} records of {@code topic} in {@code conf}'s group, commits, and returns them per partition. */
    static Map<Integer, List<String>> consume(CorelogBroker broker, Map<String, Object> conf, String topic, int n) {
        Map<Integer, List<String>> got = new HashMap<>();
        try (KafkaConsumer<byte[], byte[]> consumer = broker.consumer(conf)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.nanoTime() + TIMEOUT.toNanos();
            int count = 0;
            while (count < n && System.nanoTime() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500))) {
                    got.computeIfAbsent(r.partition(), p -> new ArrayList<>())
                            .add(new String(r.value(), StandardCharsets.UTF_8));
                    count++;
                }
            }
            consumer.commitSync(Duration.ofSeconds(15));
        }
        return got;
    }
}
