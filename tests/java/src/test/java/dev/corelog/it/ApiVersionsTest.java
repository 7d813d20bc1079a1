package dev.corelog.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.kafka.common.message.ApiVersionsResponseData.ApiVersion;
import org.apache.kafka.common.protocol.ApiKeys;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.requests.AbstractResponse;
import org.apache.kafka.common.requests.ApiVersionsRequest;
import org.apache.kafka.common.requests.ApiVersionsResponse;
import org.apache.kafka.common.requests.RequestHeader;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * What the broker advertises in ApiVersions, against what the Java client (4.4) needs for
 * the features the other tests use. A client negotiates min(its latest, the broker's max),
 * so an API the broker leaves out, or advertises below the version a feature needs, is a
 * feature the Java client cannot use; Admin hides some of those behind silent fallbacks
 * (describeCluster and describeTopics fall back to Metadata), which only this test sees.
 */
class ApiVersionsTest {

    @RegisterExtension
    static final CorelogBroker broker = new CorelogBroker("ApiVersionsTest");

    /** An API the Java client sends for a feature this suite tests, and the version it needs. */
    private record Need(ApiKeys api, int version, String feature) { }

    private static final List<Need> NEEDS = List.of(
            new Need(ApiKeys.PRODUCE, 3, "KafkaProducer.send"),
            new Need(ApiKeys.FETCH, 4, "KafkaConsumer.poll"),
            new Need(ApiKeys.LIST_OFFSETS, 7, "Admin.listOffsets(OffsetSpec.maxTimestamp()) (KIP-734)"),
            new Need(ApiKeys.LIST_OFFSETS, 8, "Admin.listOffsets(OffsetSpec.earliestLocal()) (KIP-1005)"),
            new Need(ApiKeys.METADATA, 0, "every client"),
            new Need(ApiKeys.OFFSET_FOR_LEADER_EPOCH, 3, "KafkaConsumer validating its position after a leader change (KIP-320)"),
            new Need(ApiKeys.OFFSET_COMMIT, 7, "commitSync/commitAsync of a static member (KIP-345)"),
            new Need(ApiKeys.OFFSET_FETCH, 1, "KafkaConsumer.committed, Admin.listConsumerGroupOffsets"),
            new Need(ApiKeys.FIND_COORDINATOR, 0, "group coordinator lookup"),
            new Need(ApiKeys.JOIN_GROUP, 5, "group.instance.id (KIP-345)"),
            new Need(ApiKeys.SYNC_GROUP, 3, "group.instance.id (KIP-345)"),
            new Need(ApiKeys.HEARTBEAT, 3, "group.instance.id (KIP-345)"),
            new Need(ApiKeys.LEAVE_GROUP, 3, "consumer close / removeMembersFromConsumerGroup"),
            new Need(ApiKeys.DESCRIBE_GROUPS, 3, "Admin.describeConsumerGroups with authorized operations (KIP-430)"),
            new Need(ApiKeys.LIST_GROUPS, 5, "Admin.listGroups(ListGroupsOptions.forConsumerGroups()) (type filter, KIP-848)"),
            new Need(ApiKeys.API_VERSIONS, 0, "every client"),
            new Need(ApiKeys.CREATE_TOPICS, 5, "Admin.createTopics (configs and partition count in the result)"),
            new Need(ApiKeys.DELETE_TOPICS, 1, "Admin.deleteTopics"),
            new Need(ApiKeys.DELETE_RECORDS, 0, "Admin.deleteRecords"),
            new Need(ApiKeys.INIT_PRODUCER_ID, 0, "idempotent producer (the Java default)"),
            new Need(ApiKeys.DESCRIBE_CONFIGS, 1, "Admin.describeConfigs"),
            new Need(ApiKeys.INCREMENTAL_ALTER_CONFIGS, 0, "Admin.incrementalAlterConfigs"),
            new Need(ApiKeys.DESCRIBE_LOG_DIRS, 4, "Admin.describeLogDirs (total/usable bytes)"),
            new Need(ApiKeys.CREATE_PARTITIONS, 0, "Admin.createPartitions"),
            new Need(ApiKeys.DELETE_GROUPS, 0, "Admin.deleteConsumerGroups"),
            new Need(ApiKeys.OFFSET_DELETE, 0, "Admin.deleteConsumerGroupOffsets"),
            new Need(ApiKeys.DESCRIBE_CLIENT_QUOTAS, 0, "Admin.describeClientQuotas"),
            new Need(ApiKeys.ALTER_CLIENT_QUOTAS, 0, "Admin.alterClientQuotas"),
            new Need(ApiKeys.DESCRIBE_CLUSTER, 0, "Admin.describeCluster (else it falls back to Metadata)"),
            new Need(ApiKeys.DESCRIBE_PRODUCERS, 0, "Admin.describeProducers"),
            new Need(ApiKeys.DESCRIBE_TOPIC_PARTITIONS, 0, "Admin.describeTopics by name (else it falls back to Metadata)"));

    @Test
    void everyApiTheJavaClientNeedsIsAdvertisedAtTheVersionItNeeds() throws IOException {
        Map<Short, ApiVersion> advertised = apiVersions(broker.port());
        System.out.println(table(advertised));

        List<String> missing = new ArrayList<>();
        for (Need n : NEEDS) {
            ApiVersion v = advertised.get(n.api().id);
            int need = Math.max(n.version(), n.api().oldestVersion());
            if (v == null) {
                missing.add(String.format("%s(%d) not advertised; needs v%d+ for %s",
                        n.api().name, n.api().id, need, n.feature()));
            } else if (v.maxVersion() < need) {
                missing.add(String.format("%s(%d) advertised v%d-v%d; needs v%d+ for %s",
                        n.api().name, n.api().id, v.minVersion(), v.maxVersion(), need, n.feature()));
            }
        }
        assertEquals(List.of(), missing, "APIs the Java client needs:\n" + String.join("\n", missing)
                + "\n\nbroker vs client:\n" + table(advertised));
    }

    @Test
    void advertisedRangesAreWellFormedAndOverlapTheClients() throws IOException {
        Map<Short, ApiVersion> advertised = apiVersions(broker.port());
        List<String> bad = new ArrayList<>();
        for (ApiVersion v : advertised.values()) {
            if (v.minVersion() < 0 || v.minVersion() > v.maxVersion()) {
                bad.add("api " + v.apiKey() + ": range v" + v.minVersion() + "-v" + v.maxVersion());
                continue;
            }
            if (!ApiKeys.hasId(v.apiKey())) {
                continue; // newer than this client; nothing to compare
            }
            ApiKeys k = ApiKeys.forId(v.apiKey());
            // Advertising beyond what exists in Kafka is a lie a client may act on.
            if (v.maxVersion() > k.latestVersion(true)) {
                bad.add(k.name + ": advertised v" + v.maxVersion() + " > Kafka's latest v" + k.latestVersion(true));
            }
            if (v.maxVersion() < k.oldestVersion()) {
                bad.add(k.name + ": advertised v" + v.minVersion() + "-v" + v.maxVersion()
                        + ", all below the Java client's oldest v" + k.oldestVersion());
            }
        }
        assertEquals(List.of(), bad);
        assertTrue(advertised.containsKey(ApiKeys.API_VERSIONS.id), "ApiVersions must advertise itself");
    }

    /** A raw ApiVersions v3 exchange (what every Kafka client sends first). */
    static Map<Short, ApiVersion> apiVersions(int port) throws IOException {
        short version = 3;
        RequestHeader header = new RequestHeader(ApiKeys.API_VERSIONS, version, "corelog-it", 1);
        ByteBuffer request = new ApiVersionsRequest.Builder().build(version).serializeWithHeader(header);
        try (Socket s = new Socket("127.0.0.1", port)) {
            s.setSoTimeout(10_000);
            DataOutputStream out = new DataOutputStream(s.getOutputStream());
            byte[] bytes = new byte[request.remaining()];
            request.get(bytes);
            out.writeInt(bytes.length);
            out.write(bytes);
            out.flush();
            DataInputStream in = new DataInputStream(s.getInputStream());
            byte[] body = new byte[in.readInt()];
            in.readFully(body);
            ApiVersionsResponse r = (ApiVersionsResponse) AbstractResponse.parseResponse(ByteBuffer.wrap(body), header);
            assertEquals(Errors.NONE.code(), r.data().errorCode(), "ApiVersions v3 error code");
            Map<Short, ApiVersion> m = new TreeMap<>();
            r.data().apiKeys().forEach(v -> m.put(v.apiKey(), v));
            return m;
        }
    }

    private static String table(Map<Short, ApiVersion> advertised) {
        StringBuilder sb = new StringBuilder(String.format("%-32s %-12s %-12s%n", "api", "broker", "java client"));
        for (ApiKeys k : ApiKeys.clientApis()) {
            ApiVersion v = advertised.get(k.id);
            sb.append(String.format("%-32s %-12s %-12s%n", k.name + "(" + k.id + ")",
                    v == null ? "-" : v.minVersion() + ".." + v.maxVersion(),
                    k.oldestVersion() + ".." + k.latestVersion()));
        }
        return sb.toString();
    }
}
