import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.FeatureMetadata;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The Java-client side of benches/transactions.py: transactional produce against an
 * idempotent baseline, and read_committed against read_uncommitted consumption, with
 * kafka-clients from Kafka's own release. Run as a single source file:
 * {@code java -cp '.cache/kafka/libs/*' benches/java/TxnBench.java COMMAND key=value ...}
 * (benches/transactions.py compiles it once with javac and runs the class).
 *
 * <p>Commands (each prints one line {@code RESULT <json>} per case):
 *
 * <ul>
 *   <li>{@code features bootstrap=HOST:PORT}: the broker's finalized and supported feature
 *       levels (Admin describeFeatures), e.g. transaction.version.
 *   <li>{@code produce bootstrap= topic= partitions= mode=txn|idem records= seconds= warmup=
 *       value= [abort_every=K] [total=M] [txn_id=]}: a closed loop of "transactions" of
 *       {@code records} records of {@code value} bytes, record i of a transaction to
 *       partition i mod {@code partitions} (a transaction of 1 record: the next partition
 *       each time). mode=txn: beginTransaction, send x records, commitTransaction (every
 *       K-th aborted instead when abort_every=K, after a flush() so that its records are on
 *       the log, unless abort_flush=false). mode=idem: an idempotent,
 *       non-transactional producer; send x records, flush. Transactions started in the
 *       first {@code warmup} seconds are not counted; new ones start until {@code seconds}
 *       more have passed (or, with total=M, until M records have been sent: a fill, no
 *       warm-up). Reports the counted transactions, records, bytes, the window, and the
 *       latency of commitTransaction (or flush) and of the whole transaction.
 *   <li>{@code create bootstrap= topics=A,B partitions=N}: creates the topics, replication
 *       factor 1, and waits until every partition answers ListOffsets.
 *   <li>{@code consume bootstrap= topic= isolation=read_committed|read_uncommitted}: one
 *       consumer, no group, every partition assigned from its beginning, polled until its
 *       position reaches the end offset it had at the start (the last stable offset for
 *       read_committed); reports records and value bytes delivered and the time taken.
 * </ul>
 *
 * <p>A case that throws (a commit that does not complete within max.block.ms, say) is
 * reported with its {@code error} and the next case runs.
 *
 * <p>Several cases can be given in one run, separated by a lone {@code ;}, so one JVM
 * (and one JIT warm-up) serves a whole series. With TXNBENCH_STEP=1 in the environment
 * it prints {@code READY} before each case and waits for a line on its standard input
 * (the caller reads the broker's metrics between cases). Each result has the epoch
 * milliseconds of its measured window, so the caller can match it with the broker's CPU
 * samples.
 */
public final class TxnBench {
    public static void main(String[] args) throws Exception {
        List<List<String>> cases = new ArrayList<>();
        List<String> cur = new ArrayList<>();
        for (String a : args) {
            if (a.equals(";")) {
                cases.add(cur);
                cur = new ArrayList<>();
            } else {
                cur.add(a);
            }
        }
        if (!cur.isEmpty()) {
            cases.add(cur);
        }
        boolean step = "1".equals(System.getenv("TXNBENCH_STEP"));
        java.io.BufferedReader stdin = new java.io.BufferedReader(
                new java.io.InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (List<String> c : cases) {
            if (step) {
                // The caller reads the broker's metrics between cases: wait for its go.
                System.out.println("READY");
                System.out.flush();
                if (stdin.readLine() == null) {
                    return;
                }
            }
            String cmd = c.get(0);
            Map<String, String> kv = new HashMap<>();
            for (String a : c.subList(1, c.size())) {
                int eq = a.indexOf('=');
                kv.put(a.substring(0, eq), a.substring(eq + 1));
            }
            Map<String, Object> r;
            try {
                r = run(cmd, kv);
            } catch (Exception e) {
                // A case that fails (a commit that times out, say) is reported as such and
                // the series goes on with the next one.
                r = new LinkedHashMap<>();
                r.put("command", cmd);
                r.put("error", e.toString());
                kv.forEach(r::putIfAbsent);
            }
            r.put("case", String.join(" ", c));
            System.out.println("RESULT " + json(r));
            System.out.flush();
        }
    }

    static Map<String, Object> run(String cmd, Map<String, String> kv) throws Exception {
        switch (cmd) {
            case "features":
                return features(kv);
            case "create":
                return create(kv);
            case "produce":
                return produce(kv);
            case "consume":
                return consume(kv);
            default:
                throw new IllegalArgumentException("unknown command " + cmd);
        }
    }

    // ------------------------------------------------------------------ features

    static Map<String, Object> features(Map<String, String> kv) throws Exception {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, kv.get("bootstrap"));
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("command", "features");
        try (Admin admin = Admin.create(p)) {
            FeatureMetadata fm = admin.describeFeatures().featureMetadata().get(30, TimeUnit.SECONDS);
            Map<String, Object> fin = new LinkedHashMap<>();
            fm.finalizedFeatures().forEach((k, v) -> fin.put(k, (long) v.maxVersionLevel()));
            Map<String, Object> sup = new LinkedHashMap<>();
            fm.supportedFeatures().forEach((k, v) -> sup.put(k, (long) v.maxVersion()));
            out.put("finalized", fin);
            out.put("supported_max", sup);
        }
        return out;
    }

    // ------------------------------------------------------------------ create

    /** create bootstrap= topics=a,b partitions=N: creates the topics (replication factor 1)
     * and returns once every partition answers ListOffsets. */
    static Map<String, Object> create(Map<String, String> kv) throws Exception {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, kv.get("bootstrap"));
        int partitions = Integer.parseInt(kv.get("partitions"));
        List<String> topics = Arrays.asList(kv.get("topics").split(","));
        long t0 = System.nanoTime();
        try (Admin admin = Admin.create(p)) {
            List<org.apache.kafka.clients.admin.NewTopic> nts = new ArrayList<>();
            for (String t : topics) {
                nts.add(new org.apache.kafka.clients.admin.NewTopic(t, partitions, (short) 1));
            }
            admin.createTopics(nts).all().get(60, TimeUnit.SECONDS);
            Map<TopicPartition, org.apache.kafka.clients.admin.OffsetSpec> want = new HashMap<>();
            for (String t : topics) {
                for (int i = 0; i < partitions; i++) {
                    want.put(new TopicPartition(t, i), org.apache.kafka.clients.admin.OffsetSpec.latest());
                }
            }
            long deadline = System.nanoTime() + 120_000_000_000L;
            while (true) {
                try {
                    admin.listOffsets(want).all().get(30, TimeUnit.SECONDS);
                    break;
                } catch (ExecutionException e) {
                    if (System.nanoTime() > deadline) {
                        throw e;
                    }
                    Thread.sleep(200);
                }
            }
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("command", "create");
        out.put("seconds", (System.nanoTime() - t0) / 1e9);
        return out;
    }

    // ------------------------------------------------------------------ produce

    static Map<String, Object> produce(Map<String, String> kv) throws Exception {
        String bootstrap = kv.get("bootstrap");
        String topic = kv.get("topic");
        int partitions = Integer.parseInt(kv.get("partitions"));
        boolean txn = kv.get("mode").equals("txn");
        int n = Integer.parseInt(kv.get("records"));
        double seconds = Double.parseDouble(kv.getOrDefault("seconds", "5"));
        double warmup = Double.parseDouble(kv.getOrDefault("warmup", "1"));
        int valueBytes = Integer.parseInt(kv.getOrDefault("value", "100"));
        int abortEvery = Integer.parseInt(kv.getOrDefault("abort_every", "0"));
        long total = Long.parseLong(kv.getOrDefault("total", "0"));
        boolean abortFlush = !"false".equals(kv.get("abort_flush"));
        if (total > 0) {
            warmup = 0;
        }
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "txnbench-" + kv.get("mode") + "-" + n);
        // How long commitTransaction / flush may block before the case fails (the client's
        // default is 60 s), and the fill's retry backoff (the client's default is 100 ms).
        if (kv.containsKey("max_block_ms")) {
            p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, kv.get("max_block_ms"));
        }
        if (kv.containsKey("backoff_ms")) {
            p.put(ProducerConfig.RETRY_BACKOFF_MS_CONFIG, kv.get("backoff_ms"));
        }
        if (txn) {
            p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG,
                    kv.getOrDefault("txn_id", "txnbench-" + topic + "-" + System.nanoTime()));
        }
        byte[] value = new byte[valueBytes];
        Arrays.fill(value, (byte) 'x');
        List<Long> commitNs = new ArrayList<>();
        List<Long> txnNs = new ArrayList<>();
        long counted = 0, aborted = 0, sent = 0;
        long windowStartNs, windowEndNs;
        long startMs, startNs;
        long initNs;
        int part = 0;
        KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p);
        try {
            long t = System.nanoTime();
            if (txn) {
                producer.initTransactions();
            } else {
                producer.partitionsFor(topic);
            }
            initNs = System.nanoTime() - t;
            long start = System.nanoTime();
            startMs = System.currentTimeMillis();
            startNs = start;
            long measureFrom = start + (long) (warmup * 1e9);
            long stopAt = measureFrom + (long) (seconds * 1e9);
            windowStartNs = -1;
            long txns = 0;
            while (true) {
                long t0 = System.nanoTime();
                if (total > 0 ? sent >= total : t0 >= stopAt) {
                    break;
                }
                boolean count = t0 >= measureFrom;
                if (count && windowStartNs < 0) {
                    // the window opens with the first counted transaction
                    windowStartNs = t0;
                }
                if (txn) {
                    producer.beginTransaction();
                }
                for (int i = 0; i < n; i++) {
                    producer.send(new ProducerRecord<>(topic, part, null, value));
                    part = (part + 1) % partitions;
                }
                sent += n;
                txns++;
                boolean abort = txn && abortEvery > 0 && txns % abortEvery == 0;
                long c0 = System.nanoTime();
                if (!txn) {
                    producer.flush();
                } else if (abort) {
                    // Sent first: the client drops what it has not sent of a transaction it
                    // aborts, and the point of an aborted transaction here is its records
                    // on the log, for read_committed to skip.
                    if (abortFlush) {
                        producer.flush();
                    }
                    producer.abortTransaction();
                } else {
                    producer.commitTransaction();
                }
                long c1 = System.nanoTime();
                if (abort) {
                    aborted++;
                }
                if (count || total > 0) {
                    if (!abort) {
                        commitNs.add(c1 - c0);
                        txnNs.add(c1 - t0);
                    }
                    counted++;
                }
            }
            windowEndNs = System.nanoTime();
        } finally {
            producer.close(Duration.ofSeconds(10));
        }
        if (windowStartNs < 0) {
            windowStartNs = windowEndNs;
        }
        double window = (windowEndNs - windowStartNs) / 1e9;
        long windowStartMs = startMs + (windowStartNs - startNs) / 1_000_000;
        long records = counted * n;
        long bytes = records * valueBytes;
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("command", "produce");
        out.put("mode", kv.get("mode"));
        out.put("records_per_txn", (long) n);
        out.put("value_bytes", (long) valueBytes);
        out.put("transactions", counted);
        out.put("aborted", aborted);
        out.put("records", records);
        out.put("bytes", bytes);
        out.put("window_s", window);
        out.put("window_start_ms", windowStartMs);
        out.put("window_end_ms", windowStartMs + (long) (window * 1e3));
        out.put("init_ms", initNs / 1e6);
        out.put("records_per_s", records / window);
        out.put("mb_per_s", bytes / window / 1e6);
        out.put("txns_per_s", counted / window);
        out.put("commit_latency_ms", percentiles(commitNs));
        out.put("txn_latency_ms", percentiles(txnNs));
        return out;
    }

    static Map<String, Object> percentiles(List<Long> ns) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("count", (long) ns.size());
        if (ns.isEmpty()) {
            return out;
        }
        long[] a = ns.stream().mapToLong(Long::longValue).sorted().toArray();
        double sum = 0;
        for (long v : a) {
            sum += v;
        }
        out.put("mean", sum / a.length / 1e6);
        for (double q : new double[] {50, 90, 99, 99.9}) {
            int i = (int) Math.ceil(q / 100.0 * a.length) - 1;
            i = Math.max(0, Math.min(a.length - 1, i));
            String key = q == 99.9 ? "p999" : "p" + (int) q;
            out.put(key, a[i] / 1e6);
        }
        out.put("max", a[a.length - 1] / 1e6);
        return out;
    }

    // ------------------------------------------------------------------ consume

    static Map<String, Object> consume(Map<String, String> kv) {
        String topic = kv.get("topic");
        String isolation = kv.get("isolation");
        double timeout = Double.parseDouble(kv.getOrDefault("timeout", "180"));
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, kv.get("bootstrap"));
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, "txnbench-" + isolation);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("command", "consume");
        out.put("isolation", isolation);
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo pi : c.partitionsFor(topic, Duration.ofSeconds(30))) {
                tps.add(new TopicPartition(topic, pi.partition()));
            }
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> end = c.endOffsets(tps, Duration.ofSeconds(30));
            Map<TopicPartition, Long> begin = c.beginningOffsets(tps, Duration.ofSeconds(30));
            long offsets = 0;
            for (TopicPartition tp : tps) {
                offsets += end.get(tp) - begin.get(tp);
            }
            long records = 0, bytes = 0;
            long t0 = System.nanoTime();
            long startMs = System.currentTimeMillis();
            long deadline = t0 + (long) (timeout * 1e9);
            List<TopicPartition> pending = new ArrayList<>(tps);
            while (!pending.isEmpty()) {
                if (System.nanoTime() > deadline) {
                    out.put("timed_out", true);
                    break;
                }
                ConsumerRecords<byte[], byte[]> rs = c.poll(Duration.ofMillis(100));
                for (ConsumerRecord<byte[], byte[]> r : rs) {
                    records++;
                    bytes += r.value() == null ? 0 : r.value().length;
                }
                pending.removeIf(tp -> c.position(tp) >= end.get(tp));
            }
            double s = (System.nanoTime() - t0) / 1e9;
            out.put("records", records);
            out.put("bytes", bytes);
            out.put("log_offsets", offsets);
            out.put("seconds", s);
            out.put("window_start_ms", startMs);
            out.put("window_end_ms", startMs + (long) (s * 1e3));
            out.put("records_per_s", records / s);
            out.put("mb_per_s", bytes / s / 1e6);
            out.put("offsets_per_s", offsets / s);
        }
        return out;
    }

    // ------------------------------------------------------------------ JSON

    @SuppressWarnings("unchecked")
    static String json(Object o) {
        if (o == null) {
            return "null";
        } else if (o instanceof String) {
            String s = (String) o;
            StringBuilder b = new StringBuilder("\"");
            for (char ch : s.toCharArray()) {
                if (ch == '"' || ch == '\\') {
                    b.append('\\').append(ch);
                } else if (ch < 0x20) {
                    b.append(String.format("\\u%04x", (int) ch));
                } else {
                    b.append(ch);
                }
            }
            return b.append('"').toString();
        } else if (o instanceof Double) {
            double d = (Double) o;
            return Double.isFinite(d) ? String.format(Locale.ROOT, "%.4f", d) : "null";
        } else if (o instanceof Number || o instanceof Boolean) {
            return o.toString();
        } else if (o instanceof Map) {
            StringBuilder b = new StringBuilder("{");
            boolean first = true;
            for (Map.Entry<String, Object> e : ((Map<String, Object>) o).entrySet()) {
                if (!first) {
                    b.append(',');
                }
                first = false;
                b.append(json(e.getKey())).append(':').append(json(e.getValue()));
            }
            return b.append('}').toString();
        }
        return json(o.toString());
    }
}
