package dev.corelog.it;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Collection;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.Node;

/** Small static helpers the TLS and SASL tests share: admin futures awaited with the
 * suite's timeout, broker addresses as clients see them, temporary directories. */
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
}
