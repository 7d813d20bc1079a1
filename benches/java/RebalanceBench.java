import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * How a large group takes in one more member (issue 33, item 10), driven by
 * benches/group_rebalance.py. One JVM: a producer writing every partition at a steady
 * rate, N members of one group (classic protocol with the cooperative-sticky assignor, or
 * the consumer protocol of KIP-848 with the broker's assignor), then one more member.
 *
 * <pre>
 * java RebalanceBench bootstrap=H:P protocol=classic|consumer members=100 partitions=200 \
 *     rate=2000 topic=T group=G heartbeat_ms=1000 settle_timeout_s=180
 * </pre>
 *
 * Each member polls every 50 ms and publishes what it owns after each poll; a sampler
 * reads the owners every 5 ms. Measured: the settle time (from the new member's start
 * to the first moment every partition has exactly one owner, the new member owns at
 * least its share, and nothing changes for 2 s more), which partitions moved, how many
 * old members saw their partitions change, and how long consumption of the partitions
 * that did not move paused: each partition's longest gap between two records consumed
 * while the group settled, against its longest gap in a quiet window of the same length
 * just before. Prints one line "RESULT {json}".
 */
public class RebalanceBench {

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = new HashMap<>();
        for (String s : argv) {
            int i = s.indexOf('=');
            a.put(s.substring(0, i), s.substring(i + 1));
        }
        String bootstrap = a.get("bootstrap");
        String protocol = a.getOrDefault("protocol", "consumer");
        int members = Integer.parseInt(a.getOrDefault("members", "100"));
        int partitions = Integer.parseInt(a.getOrDefault("partitions", "200"));
        int rate = Integer.parseInt(a.getOrDefault("rate", "2000"));
        String topic = a.getOrDefault("topic", "rebalance-bench");
        String group = a.getOrDefault("group", "rebalance-bench-group");
        int heartbeatMs = Integer.parseInt(a.getOrDefault("heartbeat_ms", "1000"));
        long settleTimeoutMs = Long.parseLong(a.getOrDefault("settle_timeout_s", "180")) * 1000;

        Map<String, Object> result = new TreeMap<>();
        result.put("protocol", protocol);
        result.put("members", members);
        result.put("partitions", partitions);
        result.put("rate", rate);
        try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get(60, TimeUnit.SECONDS);
            long deadline = System.currentTimeMillis() + 60_000;
            while (admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().size() < partitions) {
                if (System.currentTimeMillis() > deadline) throw new IllegalStateException("topic not ready");
                Thread.sleep(100);
            }
        }

        AtomicBoolean running = new AtomicBoolean(true);
        Thread producer = new Thread(() -> produce(bootstrap, topic, partitions, rate, running), "producer");
        producer.start();
        Arrival arrivals = new Arrival(partitions);
        List<Member> group0 = new ArrayList<>();
        long t = now();
        for (int i = 0; i < members; i++) {
            Member m = new Member(i, bootstrap, group, topic, protocol, heartbeatMs, arrivals);
            group0.add(m);
            m.start();
        }
        Owners settledAt = awaitSettled(group0, partitions, settleTimeoutMs, null, 0);
        result.put("initial_settle_ms", settledAt == null ? null : settledAt.at - t);
        if (settledAt == null) {
            result.put("error", "the first " + members + " members did not settle in " + settleTimeoutMs + " ms");
            finish(result, running, producer, group0);
            return;
        }
        Thread.sleep(3_000);
        Map<Integer, Integer> before = owners(group0).owner;

        long t0 = now();
        Member joining = new Member(members, bootstrap, group, topic, protocol, heartbeatMs, arrivals);
        List<Member> all = new ArrayList<>(group0);
        all.add(joining);
        joining.start();
        Set<Integer> changedMembers = ConcurrentHashMap.newKeySet();
        Owners settled = awaitSettled(all, partitions, settleTimeoutMs, changedMembers, members);
        if (settled == null) {
            result.put("error", "the group did not settle after the new member joined in " + settleTimeoutMs + " ms");
            finish(result, running, producer, all);
            return;
        }
        long t1 = settled.at;
        Thread.sleep(2_000);
        long window = Math.max(t1 - t0, 1_000) + 2_000;
        Map<Integer, Integer> after = settled.owner;
        List<Integer> moved = new ArrayList<>();
        for (int p = 0; p < partitions; p++) {
            if (!before.get(p).equals(after.get(p))) moved.add(p);
        }
        changedMembers.remove(members);
        long[] quiet = arrivals.maxGaps(t0 - window - 1_000, t0 - 1_000);
        long[] during = arrivals.maxGaps(t0, t0 + window);
        List<Long> excessUnaffected = new ArrayList<>();
        List<Long> duringUnaffected = new ArrayList<>();
        List<Long> quietUnaffected = new ArrayList<>();
        for (int p = 0; p < partitions; p++) {
            if (moved.contains(p)) continue;
            duringUnaffected.add(during[p]);
            quietUnaffected.add(quiet[p]);
            excessUnaffected.add(Math.max(0, during[p] - quiet[p]));
        }
        result.put("settle_ms", t1 - t0);
        result.put("moved_partitions", moved.size());
        result.put("new_member_owns", after.values().stream().filter(o -> o == members).count());
        result.put("old_members_changed", changedMembers.size());
        result.put("window_ms", window);
        result.put("unaffected_max_gap_ms", stats(duringUnaffected));
        result.put("unaffected_quiet_max_gap_ms", stats(quietUnaffected));
        result.put("unaffected_excess_pause_ms", stats(excessUnaffected));
        result.put("expected_gap_ms", 1000.0 * partitions / rate);
        finish(result, running, producer, all);
    }

    static long now() {
        return System.nanoTime() / 1_000_000;
    }

    static Map<String, Object> stats(List<Long> xs) {
        Map<String, Object> m = new TreeMap<>();
        if (xs.isEmpty()) return m;
        long[] v = xs.stream().mapToLong(Long::longValue).sorted().toArray();
        m.put("p50", v[v.length / 2]);
        m.put("p99", v[Math.min(v.length - 1, (int) Math.ceil(v.length * 0.99) - 1)]);
        m.put("max", v[v.length - 1]);
        return m;
    }

    static void finish(Map<String, Object> result, AtomicBoolean running, Thread producer, List<Member> ms)
            throws InterruptedException {
        running.set(false);
        producer.join(10_000);
        for (Member m : ms) {
            m.stop.set(true);
        }
        for (Member m : ms) {
            m.thread.join(30_000);
            if (m.failure.get() != null) {
                result.putIfAbsent("member_failure", m.failure.get().toString());
            }
        }
        System.out.println("RESULT " + json(result));
        System.out.flush();
        System.exit(0);
    }

    /** Owners of every partition, as the members last published them. */
    static final class Owners {
        final long at;
        final Map<Integer, Integer> owner = new HashMap<>();
        boolean exactlyOnce = true;

        Owners(long at) {
            this.at = at;
        }
    }

    static Owners owners(List<Member> ms) {
        Owners o = new Owners(now());
        for (Member m : ms) {
            for (int p : m.owned.get()) {
                if (o.owner.put(p, m.id) != null) o.exactlyOnce = false;
            }
        }
        return o;
    }

    /**
     * The first moment the owners are complete and exclusive, the member `newcomer` (if
     * counted) owns its share, and they stay so for 2 s; null past the timeout. Members whose
     * owned partitions change along the way go to `changed`.
     */
    static Owners awaitSettled(List<Member> ms, int partitions, long timeoutMs, Set<Integer> changed, int newcomer)
            throws InterruptedException {
        long deadline = now() + timeoutMs;
        Owners candidate = null;
        Map<Integer, Set<Integer>> last = new HashMap<>();
        for (Member m : ms) last.put(m.id, m.owned.get());
        while (now() < deadline) {
            Owners o = owners(ms);
            if (changed != null) {
                for (Member m : ms) {
                    Set<Integer> s = m.owned.get();
                    if (!s.equals(last.get(m.id))) {
                        changed.add(m.id);
                        last.put(m.id, s);
                    }
                }
            }
            long share = partitions / ms.size();
            boolean ok = o.exactlyOnce && o.owner.size() == partitions
                    && (changed == null || o.owner.values().stream().filter(x -> x == newcomer).count() >= share);
            if (!ok) {
                candidate = null;
            } else if (candidate == null || !candidate.owner.equals(o.owner)) {
                candidate = o;
            } else if (o.at - candidate.at >= 2_000) {
                return candidate;
            }
            Thread.sleep(5);
        }
        return null;
    }

    static void produce(String bootstrap, String topic, int partitions, int rate, AtomicBoolean running) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.LINGER_MS_CONFIG, 0);
        p.put(ProducerConfig.ACKS_CONFIG, "1");
        byte[] value = new byte[8];
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            long start = System.nanoTime();
            long sent = 0;
            while (running.get()) {
                long due = (System.nanoTime() - start) * rate / 1_000_000_000L;
                while (sent < due) {
                    producer.send(new ProducerRecord<>(topic, (int) (sent % partitions), null, value));
                    sent++;
                }
                Thread.sleep(2);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** When each partition's records were consumed (ms), by whichever member. */
    static final class Arrival {
        final List<List<Long>> times = new ArrayList<>();

        Arrival(int partitions) {
            for (int i = 0; i < partitions; i++) times.add(new CopyOnWriteArrayList<>());
        }

        void consumed(int partition, long at) {
            times.get(partition).add(at);
        }

        /** Each partition's longest gap between consumed records within [from, to]. */
        long[] maxGaps(long from, long to) {
            long[] out = new long[times.size()];
            for (int p = 0; p < times.size(); p++) {
                long prev = from;
                long max = 0;
                for (long t : times.get(p)) {
                    if (t < from) continue;
                    if (t > to) break;
                    max = Math.max(max, t - prev);
                    prev = t;
                }
                out[p] = Math.max(max, to - prev);
            }
            return out;
        }
    }

    static final class Member {
        final int id;
        final Thread thread;
        final AtomicBoolean stop = new AtomicBoolean();
        final AtomicReference<Set<Integer>> owned = new AtomicReference<>(Set.of());
        final AtomicReference<Throwable> failure = new AtomicReference<>();

        Member(int id, String bootstrap, String group, String topic, String protocol, int heartbeatMs,
               Arrival arrivals) {
            this.id = id;
            Properties c = new Properties();
            c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            c.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            c.put(ConsumerConfig.CLIENT_ID_CONFIG, "member-" + id);
            c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
            c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
            c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "latest");
            c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
            c.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, 100);
            if (protocol.equals("consumer")) {
                c.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
            } else {
                c.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, CooperativeStickyAssignor.class.getName());
                c.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, heartbeatMs);
                c.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, 45_000);
            }
            this.thread = new Thread(() -> run(c, topic, arrivals), "member-" + id);
            this.thread.setDaemon(true);
        }

        void start() {
            thread.start();
        }

        private void run(Properties c, String topic, Arrival arrivals) {
            try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(c)) {
                consumer.subscribe(List.of(topic));
                while (!stop.get()) {
                    ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(50));
                    long at = now();
                    for (ConsumerRecord<byte[], byte[]> r : records) {
                        arrivals.consumed(r.partition(), at);
                    }
                    Set<Integer> s = new HashSet<>();
                    for (TopicPartition tp : consumer.assignment()) s.add(tp.partition());
                    owned.set(s);
                }
            } catch (Throwable e) {
                failure.set(e);
            }
        }
    }

    static String json(Object o) {
        if (o == null) return "null";
        if (o instanceof Number || o instanceof Boolean) return o.toString();
        if (o instanceof Map<?, ?> m) {
            StringBuilder b = new StringBuilder("{");
            for (Map.Entry<?, ?> e : m.entrySet()) {
                if (b.length() > 1) b.append(',');
                b.append(json(e.getKey().toString())).append(':').append(json(e.getValue()));
            }
            return b.append('}').toString();
        }
        String s = o.toString().replace("\\", "\\\\").replace("\"", "\\\"");
        return "\"" + s + "\"";
    }
}
