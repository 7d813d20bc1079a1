package dev.corelog.it;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.attribute.PosixFilePermissions;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.junit.jupiter.api.extension.AfterAllCallback;
import org.junit.jupiter.api.extension.AfterEachCallback;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.BeforeEachCallback;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.TestExecutionExceptionHandler;

/**
 * One real corelog broker process on loopback, for one test class.
 *
 * <p>Register it as a static {@code @RegisterExtension} field: it starts before the class's
 * first test and stops after its last; a failing test gets the tail of the broker's log
 * attached to its exception (as a suppressed {@link BrokerLog}), so the surefire report
 * shows what the broker said. A test during which the broker logs a warning or an error
 * fails with those lines: corelog warns when it closes a connection on a request it cannot
 * serve (an unsupported version, a body it cannot decode), which a client may otherwise
 * paper over by retrying or falling back. It can also be used on its own with
 * try-with-resources.
 *
 * <ul>
 *   <li>Binary: system property {@code corelog.bin}, else env {@code CORELOG_BIN}, else
 *       {@code target/release/corelog} of the repository that holds the working directory.
 *   <li>Ports: the Kafka listener and the HTTP endpoint get free loopback ports chosen by the
 *       kernel; a start that loses the race for one (or finds the binary being relinked)
 *       is retried with fresh ports.
 *   <li>Listeners: one, {@code --listen}, unless {@link #withListener} names more; then the
 *       broker gets Kafka's {@code listeners} and {@code listener.security.protocol.map}
 *       (PLAINTEXT on {@link #port()}, each named one on {@link #port(String)}).
 *   <li>Data: a fresh temporary directory, deleted by {@link #close()}.
 *   <li>Config file: none, unless {@link #withConfig} gives one ({@code --config}, written
 *       beside the data directory and deleted with it).
 *   <li>Log: {@code target/corelog-logs/<name>-<port>.log} (kept, it is build output).
 *   <li>A JVM that exits without closing the broker kills it (shutdown hook).
 * </ul>
 *
 * <p>To check the tests' expectations against Apache Kafka itself, set
 * {@code -Dcorelog.it.external=HOST:PORT} (and {@code -Dcorelog.it.external.logDir=DIR}, its
 * {@code log.dirs}): no broker is started and every class talks to that one, which must be
 * configured as the classes expect (node.id=1, num.partitions=4,
 * offsets.topic.num.partitions=8, group.initial.rebalance.delay.ms=0).
 */
public final class CorelogBroker
        implements AutoCloseable, BeforeAllCallback, AfterAllCallback, BeforeEachCallback, AfterEachCallback,
        TestExecutionExceptionHandler {

    private static final int START_ATTEMPTS_MAX = 6;
    private static final Duration READY_TIMEOUT = Duration.ofSeconds(30);
    private static final Duration STOP_TIMEOUT = Duration.ofSeconds(15);
    private static final int LOG_TAIL_LINES = 80;

    /** Brokers still running, killed by the shutdown hook if the JVM exits first. */
    private static final Set<Process> LIVE = ConcurrentHashMap.newKeySet();

    static {
        Runtime.getRuntime().addShutdownHook(new Thread(() -> LIVE.forEach(Process::destroyForcibly),
                "corelog-broker-reaper"));
    }

    private final String name;
    private final List<String> extraArgs;
    /** Listeners besides PLAINTEXT: name to security protocol (Kafka's listener.security.protocol.map). */
    private final Map<String, String> listenerProtocols = new LinkedHashMap<>();
    private final Map<String, Integer> listenerPorts = new HashMap<>();
    /** The TOML config file's text ({@link #withConfig}), or null for none. */
    private String configToml;
    /** Broker warnings the running test provokes on purpose (see {@link #tolerateWarnings}). */
    private Pattern toleratedWarnings;
    private Process process;
    private Path dataDir;
    private Path logFile;
    private int kafkaPort;
    private int httpPort;
    private int controllerPort;
    /** Log lines before the running test began. */
    private int logMark;
    /** Talking to a broker this class did not start (see the class comment). */
    private boolean external;

    /**
     * @param name      used in the log file's name (the test class, typically)
     * @param extraArgs flags added to {@code corelog serve} after the standard ones
     */
    public CorelogBroker(String name, String... extraArgs) {
        this.name = name;
        this.extraArgs = List.of(extraArgs);
    }

    /**
     * Adds a listener named {@code name} (Kafka's listener name, e.g. {@code SSL}) speaking
     * {@code protocol} ({@code PLAINTEXT}, {@code SSL}, {@code SASL_PLAINTEXT} or
     * {@code SASL_SSL}) on a port of its own, besides the PLAINTEXT one. Its TLS and SASL
     * settings go in {@code extraArgs} as Kafka's keys
     * ({@code --security ssl.keystore.location=...},
     * {@code --security listener.name.<name>.ssl.client.auth=required},
     * {@code --security listener.name.<name>.sasl.enabled.mechanisms=SCRAM-SHA-512}) or in
     * {@link #withConfig}'s file. Call before start.
     */
    public CorelogBroker withListener(String name, String protocol) {
        if (name.equalsIgnoreCase("PLAINTEXT")) {
            throw new IllegalArgumentException("PLAINTEXT is the broker's first listener already");
        }
        listenerProtocols.put(name.toUpperCase(), protocol);
        return this;
    }

    /**
     * Gives the broker a TOML config file ({@code --config}) with {@code toml} in it: for
     * settings that should not be on a command line, such as the PLAIN users of a
     * listener's {@code plain.sasl.jaas.config}. Written (owner-only) beside the data
     * directory at start and deleted by {@link #close()}; flags win over it. Call before start.
     */
    public CorelogBroker withConfig(String toml) {
        this.configToml = toml;
        return this;
    }

    // ---------------------------------------------------------------------------------
    // Life cycle
    // ---------------------------------------------------------------------------------

    /** Starts the broker and waits until /health answers "ok". Idempotent. */
    public synchronized CorelogBroker start() throws IOException, InterruptedException {
        if (process != null || external) {
            return this;
        }
        String ext = System.getProperty("corelog.it.external");
        if (ext != null && !ext.isBlank()) {
            external = true;
            kafkaPort = Integer.parseInt(ext.substring(ext.lastIndexOf(':') + 1));
            String dir = System.getProperty("corelog.it.external.logDir");
            dataDir = dir == null ? null : Paths.get(dir);
            return this;
        }
        Path bin = binary();
        if (!Files.isExecutable(bin)) {
            throw new IllegalStateException("corelog binary not found or not executable: " + bin
                    + " (set -Dcorelog.bin=... or CORELOG_BIN)");
        }
        Path logDir = Paths.get("target", "corelog-logs").toAbsolutePath();
        Files.createDirectories(logDir);
        List<String> failures = new ArrayList<>();
        for (int attempt = 1; attempt <= START_ATTEMPTS_MAX; attempt++) {
            kafkaPort = freePort();
            httpPort = freePort();
            controllerPort = freePort();
            for (String listener : listenerProtocols.keySet()) {
                listenerPorts.put(listener, freePort());
            }
            dataDir = Files.createTempDirectory("corelog-it-" + name + "-");
            logFile = logDir.resolve(name + "-" + kafkaPort + ".log");
            Process p;
            try {
                p = launch();
            } catch (IOException e) {
                // "Text file busy" or a missing file while the binary is being relinked.
                failures.add("attempt " + attempt + ": exec failed: " + e.getMessage());
                deleteData();
                Thread.sleep(1000L * attempt);
                continue;
            }
            if (awaitReady(p)) {
                process = p;
                return this;
            }
            failures.add("attempt " + attempt + ": not ready (alive=" + p.isAlive() + "):\n" + logTail(20));
            kill(p);
            deleteData();
            Thread.sleep(500L * attempt);
        }
        throw new IllegalStateException("corelog did not start after " + START_ATTEMPTS_MAX
                + " attempts:\n" + String.join("\n", failures));
    }

    /** Runs {@code corelog serve} on this broker's ports and data directory, appending to its log. */
    private Process launch() throws IOException {
        List<String> cmd = new ArrayList<>(List.of(binary().toString(), "serve"));
        if (listenerProtocols.isEmpty()) {
            cmd.addAll(List.of("--listen", "127.0.0.1:" + kafkaPort, "--advertise", "127.0.0.1:" + kafkaPort));
        } else {
            Map<String, String> protocols = new LinkedHashMap<>(Map.of("PLAINTEXT", "PLAINTEXT"));
            protocols.putAll(listenerProtocols);
            cmd.addAll(List.of(
                    "--listeners", protocols.keySet().stream()
                            .map(l -> l + "://127.0.0.1:" + port(l)).collect(Collectors.joining(",")),
                    "--listener-security-protocol-map", protocols.entrySet().stream()
                            .map(e -> e.getKey() + ":" + e.getValue()).collect(Collectors.joining(","))));
        }
        cmd.addAll(List.of(
                "--data-dir", dataDir.toString(),
                "--shards", "2",
                "--http", "127.0.0.1:" + httpPort,
                "--controller-listen", "127.0.0.1:" + controllerPort,
                "--log-level", "info",
                "--group-initial-rebalance-delay-ms", "0"));
        if (configToml != null) {
            Path config = configFile();
            Files.deleteIfExists(config);
            Files.createFile(config, PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------")));
            Files.writeString(config, configToml, StandardCharsets.UTF_8);
            cmd.addAll(List.of("--config", config.toString()));
        }
        cmd.addAll(extraArgs);
        ProcessBuilder pb = new ProcessBuilder(cmd)
                .redirectErrorStream(true)
                .redirectOutput(ProcessBuilder.Redirect.appendTo(logFile.toFile()));
        pb.environment().put("NO_COLOR", "1");
        Process p = pb.start();
        LIVE.add(p);
        return p;
    }

    /** Where {@link #withConfig}'s file goes: beside the data directory. */
    private Path configFile() {
        return dataDir.resolveSibling(dataDir.getFileName() + ".toml");
    }

    /** Deletes the data directory and {@link #withConfig}'s file. */
    private void deleteData() {
        deleteRecursively(dataDir);
        if (configToml != null) {
            deleteRecursively(configFile());
        }
    }

    /** Stops the broker (SIGTERM, then SIGKILL) and keeps its data directory and ports. */
    public synchronized void stop() {
        requireOwn("stop");
        if (process != null) {
            kill(process);
            process = null;
        }
    }

    /** Stops the broker if it runs, then starts it again on the same ports and data. */
    public synchronized void restart() throws IOException, InterruptedException {
        stop();
        Process p = launch();
        if (!awaitReady(p)) {
            kill(p);
            throw new IllegalStateException("corelog did not restart (alive=" + p.isAlive() + "):\n"
                    + logTail(40));
        }
        process = p;
    }

    private void requireOwn(String what) {
        if (external) {
            throw new IllegalStateException("cannot " + what + " a broker this class did not start");
        }
    }

    private boolean awaitReady(Process p) throws InterruptedException {
        HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(1)).build();
        HttpRequest health = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + httpPort + "/health"))
                .timeout(Duration.ofSeconds(2)).GET().build();
        long deadline = System.nanoTime() + READY_TIMEOUT.toNanos();
        while (System.nanoTime() < deadline) {
            if (!p.isAlive()) {
                return false;
            }
            try {
                HttpResponse<String> r = http.send(health, HttpResponse.BodyHandlers.ofString());
                // Alive after the answer: the answer was ours, not a stray process's on a reused port.
                if (r.statusCode() == 200 && r.body().trim().equals("ok") && p.isAlive()) {
                    return true;
                }
            } catch (IOException e) {
                // not listening yet
            }
            Thread.sleep(100);
        }
        return false;
    }

    /** Stops the broker (SIGTERM, then SIGKILL) and deletes its data directory. */
    @Override
    public synchronized void close() {
        if (process != null) {
            kill(process);
            process = null;
        }
        if (dataDir != null && !external) {
            deleteData();
        }
    }

    private static void kill(Process p) {
        p.destroy();
        try {
            if (!p.waitFor(STOP_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS)) {
                p.destroyForcibly().waitFor(STOP_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
            }
        } catch (InterruptedException e) {
            p.destroyForcibly();
            Thread.currentThread().interrupt();
        }
        LIVE.remove(p);
    }

    // ---------------------------------------------------------------------------------
    // JUnit hooks
    // ---------------------------------------------------------------------------------

    @Override
    public void beforeAll(ExtensionContext context) throws Exception {
        start();
    }

    @Override
    public void afterAll(ExtensionContext context) {
        close();
    }

    @Override
    public void beforeEach(ExtensionContext context) {
        logMark = logLines().size();
        toleratedWarnings = null;
    }

    /**
     * For the running test only: broker warnings matching {@code regex} (found anywhere in
     * the line) do not fail it. For tests that provoke a warning on purpose (a client
     * refused in its TLS handshake, say); other warnings still fail the test.
     */
    public void tolerateWarnings(String regex) {
        toleratedWarnings = Pattern.compile(regex);
    }

    @Override
    public void afterEach(ExtensionContext context) {
        List<String> lines = logLines();
        List<String> bad = lines.subList(Math.min(logMark, lines.size()), lines.size()).stream()
                .filter(l -> l.matches("^\\S+\\s+(WARN|ERROR)\\s.*"))
                .filter(l -> toleratedWarnings == null || !toleratedWarnings.matcher(l).find())
                .toList();
        if (!bad.isEmpty()) {
            throw new AssertionError("the broker logged " + bad.size() + " warning(s)/error(s) during "
                    + context.getDisplayName() + " (" + logFile + "):\n" + String.join("\n", bad));
        }
    }

    @Override
    public void handleTestExecutionException(ExtensionContext context, Throwable t) throws Throwable {
        t.addSuppressed(new BrokerLog(logFile, alive(), logTail(LOG_TAIL_LINES)));
        throw t;
    }

    /** Carries the broker's log tail into a failing test's report. */
    public static final class BrokerLog extends Exception {
        BrokerLog(Path file, boolean alive, String tail) {
            super("corelog broker " + (alive ? "running" : "NOT RUNNING") + ", log " + file
                    + ", last lines:\n" + tail, null, false, false);
        }
    }

    // ---------------------------------------------------------------------------------
    // Accessors and clients
    // ---------------------------------------------------------------------------------

    public String bootstrap() {
        return "127.0.0.1:" + kafkaPort;
    }

    public int port() {
        return kafkaPort;
    }

    /** The port of listener {@code name}: PLAINTEXT's is {@link #port()}, the others' {@link #withListener}'s. */
    public int port(String name) {
        String n = name.toUpperCase();
        if (n.equals("PLAINTEXT")) {
            return kafkaPort;
        }
        if (external) {
            throw new IllegalStateException("the listeners of a broker this class did not start are not known");
        }
        Integer p = listenerPorts.get(n);
        if (p == null) {
            throw new IllegalArgumentException("no listener " + name + " (listeners: PLAINTEXT, "
                    + String.join(", ", listenerProtocols.keySet()) + ")");
        }
        return p;
    }

    /** {@code 127.0.0.1:<port>} of listener {@code name}. */
    public String bootstrap(String name) {
        return "127.0.0.1:" + port(name);
    }

    /** {@code http://127.0.0.1:<port>} of the broker's HTTP endpoint (/health, /metrics). */
    public String httpUrl() {
        requireOwn("know the HTTP endpoint of");
        return "http://127.0.0.1:" + httpPort;
    }

    /**
     * The value of metric {@code name} on the broker's /metrics (Prometheus text), summed
     * over its label sets (the shards); 0 if it is absent.
     */
    public double metric(String name) throws IOException, InterruptedException {
        HttpResponse<String> r = HttpClient.newHttpClient().send(
                HttpRequest.newBuilder(URI.create(httpUrl() + "/metrics")).timeout(Duration.ofSeconds(5)).GET().build(),
                HttpResponse.BodyHandlers.ofString());
        if (r.statusCode() != 200) {
            throw new IOException("GET /metrics: HTTP " + r.statusCode());
        }
        return r.body().lines()
                .filter(l -> l.startsWith(name + "{") || l.startsWith(name + " "))
                .mapToDouble(l -> Double.parseDouble(l.substring(l.lastIndexOf(' ') + 1)))
                .sum();
    }

    public Path dataDir() {
        return dataDir;
    }

    /** Whether this talks to a broker it did not start (which it cannot stop or restart). */
    public boolean isExternal() {
        return external;
    }

    public synchronized boolean alive() {
        return external || (process != null && process.isAlive());
    }

    /** The last {@code lines} lines of the broker's log, colour codes removed. */
    public String logTail(int lines) {
        List<String> all = logLines();
        return String.join("\n", all.subList(Math.max(0, all.size() - lines), all.size()));
    }

    /** Every log line containing {@code needle} (case-insensitive). */
    public List<String> logLinesContaining(String needle) {
        String n = needle.toLowerCase();
        return logLines().stream().filter(l -> l.toLowerCase().contains(n)).toList();
    }

    private List<String> logLines() {
        if (logFile == null || !Files.exists(logFile)) {
            return List.of();
        }
        try {
            String text = new String(Files.readAllBytes(logFile), StandardCharsets.UTF_8);
            return Arrays.asList(text.replaceAll("\u001B\\[[0-9;]*m", "").split("\n"));
        } catch (IOException e) {
            return List.of("(log unreadable: " + e + ")");
        }
    }

    public Admin admin() {
        return admin(Map.of());
    }

    /** An admin client with this class's defaults plus {@code overrides}. */
    public Admin admin(Map<String, Object> overrides) {
        Map<String, Object> c = new HashMap<>();
        c.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap());
        c.put(AdminClientConfig.CLIENT_ID_CONFIG, name + "-admin");
        c.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 30_000);
        c.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 15_000);
        c.putAll(overrides);
        return Admin.create(c);
    }

    /** A producer with the Java client's defaults (acks=all, idempotence on) plus {@code overrides}. */
    public KafkaProducer<byte[], byte[]> producer(Map<String, Object> overrides) {
        Map<String, Object> c = new HashMap<>();
        c.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap());
        c.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        c.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        c.putAll(overrides);
        return new KafkaProducer<>(c);
    }

    public KafkaConsumer<byte[], byte[]> consumer(Map<String, Object> overrides) {
        Map<String, Object> c = new HashMap<>();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap());
        c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        c.putAll(overrides);
        return new KafkaConsumer<>(c);
    }

    // ---------------------------------------------------------------------------------
    // Helpers
    // ---------------------------------------------------------------------------------

    static Path binary() {
        String prop = System.getProperty("corelog.bin");
        if (prop != null && !prop.isBlank() && !prop.startsWith("${")) {
            return Paths.get(prop).toAbsolutePath();
        }
        String env = System.getenv("CORELOG_BIN");
        if (env != null && !env.isBlank()) {
            return Paths.get(env).toAbsolutePath();
        }
        // The repository root: the nearest ancestor of the working directory (tests/java
        // under surefire) holding Cargo.toml.
        Path dir = Paths.get("").toAbsolutePath();
        for (Path d = dir; d != null; d = d.getParent()) {
            if (Files.exists(d.resolve("Cargo.toml"))) {
                return d.resolve("target/release/corelog");
            }
        }
        return dir.resolve("target/release/corelog");
    }

    /**
     * A loopback port free now, from below the kernel's ephemeral range (32768 and up by
     * default) and never handed out twice by this JVM: a port the kernel chose for a bind
     * to port 0 could be chosen again for the next broker before the first bound it, or
     * taken meanwhile as a client's source port, and the broker then failed to start.
     */
    private static int freePort() throws IOException {
        for (int tries = 0; tries < PORT_SPAN; tries++) {
            int port = PORT_FIRST + NEXT_PORT.getAndIncrement() % PORT_SPAN;
            try (ServerSocket s = new ServerSocket(port, 1, InetAddress.getLoopbackAddress())) {
                return port;
            } catch (IOException taken) {
                // in use: the next one
            }
        }
        throw new IOException(
                "no free loopback port in " + PORT_FIRST + ".." + (PORT_FIRST + PORT_SPAN - 1));
    }

    private static final int PORT_FIRST = 20_000;
    private static final int PORT_SPAN = 12_000;
    private static final AtomicInteger NEXT_PORT =
            new AtomicInteger((int) (ProcessHandle.current().pid() % 120) * 100);

    private static void deleteRecursively(Path root) {
        if (root == null || !Files.exists(root)) {
            return;
        }
        try (Stream<Path> walk = Files.walk(root)) {
            walk.sorted(Comparator.reverseOrder()).forEach(p -> {
                try {
                    Files.deleteIfExists(p);
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                }
            });
        } catch (IOException | UncheckedIOException e) {
            System.err.println("warning: could not delete " + root + ": " + e);
        }
    }
}
