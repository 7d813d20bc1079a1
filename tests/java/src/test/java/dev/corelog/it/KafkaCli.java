package dev.corelog.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * Apache Kafka's command-line tools run with tools/kafka-cli/kafka-cli.sh (as
 * tests/integration/test_kafka_cli.py runs them): each tool a JVM of its own, fed
 * {@code stdin}, its output kept in files under a test's working directory.
 */
final class KafkaCli {

    private KafkaCli() {}

    /** One finished tool run. */
    record Result(List<String> argv, int rc, String out, String err) {
        /** stdout's non-blank lines. */
        List<String> lines() {
            return out.lines().filter(l -> !l.isBlank()).toList();
        }

        /** The command and the tails of its output, for an assertion's message. */
        String why() {
            return "\n$ kafka-cli.sh " + String.join(" ", argv) + "\nrc=" + rc + "\n--- stdout\n"
                    + tail(out) + "\n--- stderr\n" + tail(err);
        }

        private static String tail(String s) {
            return s.length() > 3000 ? "..." + s.substring(s.length() - 3000) : s;
        }
    }

    /** Runs a tool (e.g. {@code kafka-topics}), which must exit 0; its output files go in {@code dir}. */
    static Result run(Path dir, String stdin, String... argv) throws IOException, InterruptedException {
        Result r = runAnyway(dir, stdin, argv);
        if (r.rc() != 0) {
            fail("tool failed" + r.why());
        }
        return r;
    }

    /** Runs a tool and returns how it ended, whatever its exit status. */
    /**
     * Creates {@code topic} with kafka-topics, finds it listed, writes {@code values} with
     * the console producer and reads them back with the console consumer in
     * {@code group}: every tool with {@code --command-config props} (a secured listener).
     */
    static void roundTrip(Path dir, String bootstrap, Path props, String topic, String group, List<String> values)
            throws IOException, InterruptedException {
        String config = props.toString();
        Result r = run(dir, null, "kafka-topics", "--bootstrap-server", bootstrap, "--command-config", config,
                "--create", "--topic", topic, "--partitions", "1", "--replication-factor", "1");
        assertEquals(List.of("Created topic " + topic + "."), r.lines(), r.why());

        r = run(dir, null, "kafka-topics", "--bootstrap-server", bootstrap, "--command-config", config, "--list");
        assertTrue(r.lines().contains(topic), r.why());

        r = run(dir, String.join("\n", values) + "\n", "kafka-console-producer", "--bootstrap-server", bootstrap,
                "--command-config", config, "--topic", topic, "--command-property", "acks=all");
        assertEquals(List.of(), r.lines(), r.why());

        r = run(dir, null, "kafka-console-consumer", "--bootstrap-server", bootstrap, "--command-config", config,
                "--topic", topic, "--from-beginning", "--max-messages", String.valueOf(values.size()),
                "--group", group, "--timeout-ms", "20000");
        assertEquals(values, r.lines(), r.why());
        assertTrue(r.err().contains("Processed a total of " + values.size() + " messages"), r.why());
    }

    static Result runAnyway(Path dir, String stdin, String... argv) throws IOException, InterruptedException {
        Path kafkaCli = repoRoot().resolve("tools/kafka-cli/kafka-cli.sh");
        List<String> cmd = new ArrayList<>(List.of(kafkaCli.toString()));
        cmd.addAll(Arrays.asList(argv));
        Path out = Files.createTempFile(dir, "cli-", ".out");
        Path err = Files.createTempFile(dir, "cli-", ".err");
        ProcessBuilder pb = new ProcessBuilder(cmd)
                .redirectOutput(out.toFile())
                .redirectError(err.toFile());
        // As test_kafka_cli.py runs them: C1 only, cheaper for short runs, the same tools.
        String opts = System.getenv().getOrDefault("KAFKA_OPTS", "");
        pb.environment().put("KAFKA_OPTS", ("-XX:TieredStopAtLevel=1 " + opts).trim());
        if (stdin == null) {
            pb.redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null")));
        }
        Process p = pb.start();
        if (stdin != null) {
            try (var in = p.getOutputStream()) {
                in.write(stdin.getBytes(StandardCharsets.UTF_8));
            }
        }
        if (!p.waitFor(120, TimeUnit.SECONDS)) {
            p.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
        }
        return new Result(Arrays.asList(argv), p.isAlive() ? -1 : p.exitValue(),
                Files.readString(out, StandardCharsets.UTF_8), Files.readString(err, StandardCharsets.UTF_8));
    }

    private static Path repoRoot() {
        for (Path d = Paths.get("").toAbsolutePath(); d != null; d = d.getParent()) {
            if (Files.exists(d.resolve("tools/kafka-cli/kafka-cli.sh"))) {
                return d;
            }
        }
        throw new IllegalStateException("tools/kafka-cli/kafka-cli.sh not found above " + Paths.get("").toAbsolutePath());
    }
}
