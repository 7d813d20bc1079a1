"""CreateTopics and CreatePartitions requests whose answers Kafka defines: the error code
and message of each of its request checks (ReplicationControlManager.createTopic and
createPartitions, validateManualPartitionAssignment), sent by kafka-python with
raise_errors=False so the answer is seen as the broker gave it. A cluster of brokers 1,
2 and 3 is expected. Used by `test_topic_admin_checks.py` and, against Apache Kafka, by
`benches/admin_against_kafka.py`."""
from __future__ import annotations

import time

from kafka import KafkaAdminClient
from kafka.admin import NewPartitions

NONE, INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR = 0, 37, 38
INVALID_REPLICA_ASSIGNMENT, INVALID_REQUEST = 39, 42

# (what, topic options, expected code, a piece of Kafka's message)
CREATE_CASES = [
    ("assignments with a partition count", {"num_partitions": 2, "assignments": {0: [1], 1: [2]}},
     INVALID_REQUEST, "but numPartitions was not set to -1"),
    ("assignments with a replication factor", {"replication_factor": 1, "assignments": {0: [1]}},
     INVALID_REQUEST, "but replication factor was not set to -1"),
    ("assignments with both", {"num_partitions": 1, "replication_factor": 1, "assignments": {0: [1]}},
     INVALID_REQUEST, "but replication factor was not set to -1"),
    ("partitions not 0..n", {"assignments": {0: [1], 2: [2]}},
     INVALID_REPLICA_ASSIGNMENT, "consecutive 0-based integer sequence"),
    ("an empty replica list", {"assignments": {0: []}},
     INVALID_REPLICA_ASSIGNMENT, "an empty replica list"),
    ("a broker twice", {"assignments": {0: [1, 1]}},
     INVALID_REPLICA_ASSIGNMENT, "includes the broker 1 more than once"),
    ("an unknown broker", {"assignments": {0: [1, 9]}},
     INVALID_REPLICA_ASSIGNMENT, "includes broker 9, but no such broker is registered"),
    ("lists of different lengths", {"assignments": {0: [1, 2], 1: [3]}},
     INVALID_REPLICA_ASSIGNMENT, "with 1 replica(s), but this is not consistent with previous partitions, which have 2"),
    ("replication factor 0", {"num_partitions": 1, "replication_factor": 0},
     INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0"),
    ("replication factor -2", {"num_partitions": 1, "replication_factor": -2},
     INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0"),
    ("partition count 0", {"num_partitions": 0, "replication_factor": 1},
     INVALID_PARTITIONS, "invalid non-positive value"),
    ("replication factor above the brokers", {"num_partitions": 1, "replication_factor": 4},
     INVALID_REPLICATION_FACTOR, ""),
    ("a valid assignment", {"assignments": {0: [1, 2], 1: [2, 3]}}, NONE, ""),
]

# On a topic created with replicas [[1, 2], [2, 3]]: (what, new total, new lists, code, message)
GROW_CASES = [
    ("the same count", 2, None, INVALID_PARTITIONS, "already has 2 partition(s)"),
    ("fewer", 1, None, INVALID_PARTITIONS, "currently has 2 partition(s); 1 would not be an increase"),
    ("fewer lists than new partitions", 4, [[1, 2]], INVALID_REPLICA_ASSIGNMENT,
     "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified"),
    ("another replication factor", 3, [[1]], INVALID_REPLICA_ASSIGNMENT,
     "with 1 replica(s), but this is not consistent with previous partitions, which have 2"),
    ("a broker twice", 3, [[3, 3]], INVALID_REPLICA_ASSIGNMENT, "includes the broker 3 more than once"),
    ("an unknown broker", 3, [[3, 9]], INVALID_REPLICA_ASSIGNMENT, "includes broker 9, but no such broker"),
    ("explicit lists", 4, [[3, 1], [1, 2]], NONE, ""),
]


def _admin(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)


def check_create_topics(bootstrap: str, prefix: str) -> list[str]:
    """Each CREATE_CASES request on its own topic; the mismatches with Kafka's answers."""
    client = _admin(bootstrap)
    wrong = []
    try:
        for i, (what, options, code, message) in enumerate(CREATE_CASES):
            name = f"{prefix}-c{i}"
            r = client.create_topics({name: options}, raise_errors=False)
            (t,) = r["topics"]
            got = (t["error_code"], t.get("error_message") or "")
            if got[0] != code or message not in got[1]:
                wrong.append(f"{what}: {got}, Kafka answers ({code}, '...{message}...')")
    finally:
        client.close()
    return wrong


def replicas_of(client: KafkaAdminClient, topic: str) -> dict[int, list[int]]:
    (t,) = client.describe_topics([topic])
    return {p["partition_index"]: list(p["replica_nodes"]) for p in t["partitions"]}


def check_create_partitions(bootstrap: str, topic: str) -> list[str]:
    """GROW_CASES on `topic` (created here with replicas [[1, 2], [2, 3]]); the
    mismatches with Kafka's answers, then whether the explicit lists were applied."""
    client = _admin(bootstrap)
    wrong = []
    try:
        r = client.create_topics({topic: {"assignments": {0: [1, 2], 1: [2, 3]}}},
                                 raise_errors=False)
        assert r["topics"][0]["error_code"] == NONE, r
        deadline = time.time() + 20
        while len(replicas_of(client, topic)) != 2 and time.time() < deadline:
            time.sleep(0.2)
        for what, total, lists, code, message in GROW_CASES:
            r = client.create_partitions({topic: NewPartitions(total, lists)}, raise_errors=False)
            (t,) = r.results  # the response itself (kafka-python returns it as it came)
            got = (t.error_code, t.error_message or "")
            if got[0] != code or message not in got[1]:
                wrong.append(f"{what}: {got}, Kafka answers ({code}, '...{message}...')")
        deadline = time.time() + 20
        want = {0: [1, 2], 1: [2, 3], 2: [3, 1], 3: [1, 2]}
        while (got := replicas_of(client, topic)) != want and time.time() < deadline:
            time.sleep(0.2)
        if got != want:
            wrong.append(f"replicas after growing: {got}, asked for {want}")
    finally:
        client.close()
    return wrong
