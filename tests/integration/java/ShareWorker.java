import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Share consumers in one JVM, for tests/integration/test_share_groups.py:
 * {@code ShareWorker BOOTSTRAP GROUP TOPIC CONSUMERS}.
 *
 * <p>Sets the group's {@code share.auto.offset.reset} to earliest, then runs CONSUMERS
 * {@link KafkaShareConsumer}s (explicit acknowledgement) on TOPIC: a record whose value starts
 * with "reject" is rejected, every other one accepted. After each poll it commits and prints,
 * one line per record, {@code ACCEPTED <value> <delivery>} or {@code REJECTED <value>} when its
 * partition's commit succeeded, else {@code UNCERTAIN <value> <error>} (the acknowledgement may
 * or may not have been stored). Runs until its standard input closes, closes the consumers and
 * prints {@code EXIT}.
 */
public final class ShareWorker {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], group = args[1], topic = args[2];
        int consumers = Integer.parseInt(args[3]);
        Properties admin = new Properties();
        admin.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin a = Admin.create(admin)) {
            ConfigResource r = new ConfigResource(ConfigResource.Type.GROUP, group);
            Map<ConfigResource, Collection<AlterConfigOp>> ops = Map.of(r, List.of(new AlterConfigOp(
                    new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET)));
            a.incrementalAlterConfigs(ops).all().get(60, TimeUnit.SECONDS);
        }
        AtomicBoolean stop = new AtomicBoolean();
        List<Thread> threads = new ArrayList<>();
        for (int c = 0; c < consumers; c++) {
            String clientId = "share-worker-" + c;
            Thread t = new Thread(() -> run(bootstrap, group, topic, clientId, stop), clientId);
            t.start();
            threads.add(t);
        }
        System.out.println("STARTED");
        InputStream in = System.in;
        while (in.read() >= 0) {
            // until the test closes our stdin
        }
        stop.set(true);
        for (Thread t : threads) {
            t.join(60_000);
        }
        System.out.println("EXIT");
        System.out.flush();
        System.exit(0);
    }

    private static void run(String bootstrap, String group, String topic, String clientId, AtomicBoolean stop) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, clientId);
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 50);
        p.put("share.acknowledgement.mode", "explicit");
        try (KafkaShareConsumer<byte[], byte[]> consumer =
                     new KafkaShareConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            consumer.subscribe(List.of(topic));
            while (!stop.get()) {
                List<String[]> settled = new ArrayList<>();
                try {
                    for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                        String v = new String(r.value(), StandardCharsets.UTF_8);
                        boolean reject = v.startsWith("reject");
                        consumer.acknowledge(r, reject ? AcknowledgeType.REJECT : AcknowledgeType.ACCEPT);
                        settled.add(new String[] {v, reject ? "REJECTED" : "ACCEPTED",
                                String.valueOf(r.deliveryCount().orElse((short) 0))});
                    }
                    if (settled.isEmpty()) {
                        continue;
                    }
                    Map<TopicIdPartition, Optional<KafkaException>> result = consumer.commitSync(Duration.ofSeconds(30));
                    Optional<KafkaException> failed = result.values().stream()
                            .filter(Optional::isPresent).map(Optional::get).findFirst();
                    for (String[] s : settled) {
                        if (failed.isPresent()) {
                            System.out.println("UNCERTAIN " + s[0] + " " + failed.get().getClass().getSimpleName());
                        } else {
                            System.out.println(s[1] + " " + s[0] + " " + s[2]);
                        }
                    }
                } catch (Exception e) {
                    for (String[] s : settled) {
                        System.out.println("UNCERTAIN " + s[0] + " " + e.getClass().getSimpleName());
                    }
                    System.out.println("ERROR " + clientId + " " + e);
                }
            }
        }
    }
}
