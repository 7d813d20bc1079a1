import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Records delivered and acknowledged through one share partition (KIP-932), for
 * benches/share_groups.py: {@code ShareBench bootstrap=B topic=T group=G consumers=N records=M size=S
 * isolation=I}.
 *
 * <p>Creates T (one partition) and fills it with M records of S bytes, sets the group's
 * share.auto.offset.reset to earliest and its share.isolation.level to I (read_uncommitted
 * by default), then starts N {@link KafkaShareConsumer}s (implicit
 * acknowledgement: each poll accepts the previous one's records, max.poll.records 500) and
 * times from their start until they have received all M records, then until their closes are
 * done; the rate is M over that time. Records received twice are counted apart
 * ({@code duplicates}): the records of a consumer's last poll are not acknowledged by its
 * close, and go to another consumer (on Kafka as on corelog). Prints {@code RESULT {json}}.
 */
public final class ShareBench {
    public static void main(String[] argv) throws Exception {
        Map<String, String> a = new HashMap<>();
        for (String s : argv) {
            int i = s.indexOf('=');
            a.put(s.substring(0, i), s.substring(i + 1));
        }
        String bootstrap = a.get("bootstrap"), topic = a.get("topic"), group = a.get("group");
        int consumers = Integer.parseInt(a.get("consumers"));
        long records = Long.parseLong(a.get("records"));
        int size = Integer.parseInt(a.getOrDefault("size", "100"));
        String isolation = a.getOrDefault("isolation", "read_uncommitted");
        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(ap)) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get(60, TimeUnit.SECONDS);
            ConfigResource r = new ConfigResource(ConfigResource.Type.GROUP, group);
            admin.incrementalAlterConfigs(Map.of(r, List.of(
                    new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOpType()),
                    new AlterConfigOp(new ConfigEntry("share.isolation.level", isolation), AlterConfigOpType()))))
                    .all().get(60, TimeUnit.SECONDS);
        }
        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        pp.put(ProducerConfig.LINGER_MS_CONFIG, 5);
        pp.put(ProducerConfig.BATCH_SIZE_CONFIG, 64 * 1024);
        byte[] value = new byte[size];
        try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(pp)) {
            for (long i = 0; i < records; i++) {
                p.send(new ProducerRecord<>(topic, value));
            }
            p.flush();
        }
        AtomicLong received = new AtomicLong();
        java.util.Set<Long> seen = java.util.concurrent.ConcurrentHashMap.newKeySet();
        List<String> dupes = java.util.Collections.synchronizedList(new ArrayList<>());
        AtomicBoolean stop = new AtomicBoolean();
        List<Thread> threads = new ArrayList<>();
        long[] perConsumer = new long[consumers];
        long started = System.nanoTime();
        for (int c = 0; c < consumers; c++) {
            int me = c;
            Thread t = new Thread(() -> {
                Properties cp = new Properties();
                cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
                cp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
                cp.put(ConsumerConfig.CLIENT_ID_CONFIG, "share-bench-" + me);
                try (KafkaShareConsumer<byte[], byte[]> consumer =
                             new KafkaShareConsumer<>(cp, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
                    consumer.subscribe(List.of(topic));
                    while (!stop.get()) {
                        int n = 0;
                        for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(100))) {
                            n++;
                            if (!seen.add(r.offset()) && dupes.size() < 20) {
                                dupes.add(r.offset() + "@" + r.deliveryCount().orElse((short) -1) + "/c" + me);
                            }
                        }
                        perConsumer[me] += n;
                        received.addAndGet(n);
                        if (seen.size() >= records) {
                            stop.set(true);
                        }
                    }
                }
            });
            t.start();
            threads.add(t);
        }
        for (Thread t : threads) {
            t.join(600_000);
        }
        long closed = System.nanoTime();
        double seconds = (closed - started) / 1e9;
        StringBuilder per = new StringBuilder("[");
        for (int c = 0; c < consumers; c++) {
            per.append(c == 0 ? "" : ",").append(perConsumer[c]);
        }
        per.append("]");
        System.out.println("RESULT {\"consumers\":" + consumers + ",\"records\":" + records + ",\"received\":"
                + received.get() + ",\"seconds\":" + String.format("%.3f", seconds) + ",\"records_per_s\":"
                + Math.round(seen.size() / seconds) + ",\"distinct\":" + seen.size() + ",\"per_consumer\":" + per
                + ",\"duplicates\":\"" + dupes + "\"}");
        System.exit(0);
    }

    private static AlterConfigOp.OpType AlterConfigOpType() {
        return AlterConfigOp.OpType.SET;
    }
}
