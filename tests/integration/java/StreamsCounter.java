import java.io.InputStream;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.common.config.TopicConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * A Kafka Streams application with {@code processing.guarantee=exactly_once_v2}, for
 * tests/integration/test_streams_eos.py:
 * {@code StreamsCounter BOOTSTRAP APPLICATION_ID INPUT OUTPUT STATE_DIR THREADS}.
 *
 * <p>It aggregates the input topic (string keys, values decimal integers) per key into a
 * KTable of "COUNT SUM" and writes every update of that table to the output topic: the
 * record cache is off, so each input record gives exactly one output record, and a
 * read_committed reader of the output sees, per key, the aggregate after each of the
 * key's input records in turn. A record processed twice (its transaction's output or
 * changelog kept along with a retry's) shows up there as a repeated or skipped count.
 * Internal topics (the store's changelog) get 3 replicas and min.insync.replicas 2.
 *
 * <p>Runs until its standard input closes, then closes the application and exits 0.
 * Prints, one per line: {@code STATE <old> <new>} on each state change, {@code PROGRESS
 * <records processed> <state>} every second, {@code UNCAUGHT <exception>} when a stream
 * thread dies (the application is then shut down: a Streams application under broker
 * failures must recover by itself, not lose threads) and {@code EXIT <code>} last. It
 * exits 2 if the application reached ERROR. Run as a single source file (java -cp 'kafka
 * libs/*' StreamsCounter.java ...).
 */
public final class StreamsCounter {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String applicationId = args[1];
        String input = args[2];
        String output = args[3];
        Path stateDir = Path.of(args[4]);
        int threads = Integer.parseInt(args[5]);

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, applicationId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.toString());
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, threads);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 3);
        props.put(StreamsConfig.topicPrefix(TopicConfig.MIN_IN_SYNC_REPLICAS_CONFIG), "2");
        // Small transactions, committed often: many commits happen around each kill.
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        // Every update of the table forwarded (no cache merging them): one output record
        // per input record, which is what the test counts.
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);

        StreamsBuilder builder = new StreamsBuilder();
        AtomicLong processed = new AtomicLong();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
                .peek((k, v) -> processed.incrementAndGet())
                .groupByKey(Grouped.with(Serdes.String(), Serdes.String()))
                .aggregate(
                        () -> "0 0",
                        (key, value, agg) -> {
                            String[] cs = agg.split(" ");
                            long count = Long.parseLong(cs[0]) + 1;
                            long sum = Long.parseLong(cs[1]) + Long.parseLong(value);
                            return count + " " + sum;
                        },
                        Materialized.<String, String, KeyValueStore<Bytes, byte[]>>as("counts")
                                .withKeySerde(Serdes.String())
                                .withValueSerde(Serdes.String()))
                .toStream()
                .to(output, Produced.with(Serdes.String(), Serdes.String()));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch done = new CountDownLatch(1);
        streams.setStateListener((now, old) -> {
            System.out.println("STATE " + old + " " + now);
            System.out.flush();
            if (now == KafkaStreams.State.ERROR) {
                done.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(e -> {
            System.out.println("UNCAUGHT " + String.valueOf(e).replace('\n', ' '));
            System.out.flush();
            e.printStackTrace();
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        ScheduledExecutorService ticker = Executors.newSingleThreadScheduledExecutor(r -> {
            Thread t = new Thread(r, "progress");
            t.setDaemon(true);
            return t;
        });
        ticker.scheduleAtFixedRate(() -> {
            System.out.println("PROGRESS " + processed.get() + " " + streams.state());
            System.out.flush();
        }, 1, 1, TimeUnit.SECONDS);
        Thread stdin = new Thread(() -> {
            try (InputStream in = System.in) {
                while (in.read() >= 0) {
                    // nothing: the test closes the stream to stop the application
                }
            } catch (Exception e) {
                // closed: stop as well
            }
            done.countDown();
        }, "stdin");
        stdin.setDaemon(true);
        stdin.start();

        streams.start();
        done.await();
        boolean error = streams.state() == KafkaStreams.State.ERROR;
        streams.close(Duration.ofSeconds(20));
        ticker.shutdownNow();
        int code = error ? 2 : 0;
        System.out.println("EXIT " + code);
        System.out.flush();
        System.exit(code);
    }
}
