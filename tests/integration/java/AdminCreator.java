import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;

/**
 * One Java AdminClient, kept for the whole run, creating a topic every {@code period_ms}:
 * {@code AdminCreator BOOTSTRAP PREFIX COUNT PERIOD_MS}. Prints one line per create,
 * {@code <name> <start_ms> <end_ms> ok|error <message>}, wall-clock milliseconds, so that
 * a test can tell when admin requests stopped and started succeeding around a failure.
 * Run as a single source file (java -cp 'kafka libs/*' AdminCreator.java ...).
 */
public final class AdminCreator {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "20000");
        String prefix = args[1];
        int count = Integer.parseInt(args[2]);
        long period = Long.parseLong(args[3]);
        try (Admin admin = Admin.create(props)) {
            for (int i = 0; i < count; i++) {
                String name = prefix + i;
                long start = System.currentTimeMillis();
                String outcome;
                try {
                    admin.createTopics(List.of(new NewTopic(name, 1, (short) 1)))
                            .all().get(25, TimeUnit.SECONDS);
                    outcome = "ok";
                } catch (Exception e) {
                    Throwable cause = e.getCause() == null ? e : e.getCause();
                    outcome = "error " + cause.getClass().getSimpleName() + ": "
                            + String.valueOf(cause.getMessage()).replace('\n', ' ');
                }
                long end = System.currentTimeMillis();
                System.out.println(name + " " + start + " " + end + " " + outcome);
                System.out.flush();
                long left = period - (end - start);
                if (left > 0) {
                    Thread.sleep(left);
                }
            }
        }
    }
}
