"""Share groups (KIP-932) against the real broker.

Hand-built frames (kwire's flexible encoding) for Kafka's error codes and exact
answers: ShareGroupHeartbeat, ShareGroupDescribe and ListGroups (several members read one
partition, group ids shared with the other group types, the `share.version` gate, a
group back exactly after a restart); the share-group state APIs between brokers (epochs,
fencing, the state replayed after a restart); ShareFetch and ShareAcknowledge (records
held by another member, session epochs, redelivery after a lock runs out, release at a
session's close). And Java share consumers (``java/ShareWorker.java``) on a three-broker
cluster whose partition leader is killed under load.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

import kwire as W
from launcher import die_with_parent, wait_until
from test_cluster import FAST as FAST_CLUSTER, leaders as cluster_leaders
from test_consumer_protocol import join as consumer_join
from test_groups import create_topic, produce

ShareClient = W.ShareClient
heartbeat = W.share_heartbeat

SHARE_GROUP_DESCRIBE = 77
LIST_GROUPS = 16
FLAGS = ["--group-share-session-timeout-ms", "6000", "--group-share-heartbeat-interval-ms", "500"]

ERR_NONE = 0
ERR_UNKNOWN_MEMBER_ID = 25
ERR_UNSUPPORTED_VERSION = 35
ERR_INVALID_REQUEST = 42
ERR_GROUP_ID_NOT_FOUND = 69
ERR_FENCED_MEMBER_EPOCH = 110


def describe(bootstrap: str, group: str) -> dict:
    """ShareGroupDescribe v1 of one group."""
    body = W.c_array([W.compact_string(group)]) + W.i8(0) + W.tags()
    r = W.flex_roundtrip(bootstrap, SHARE_GROUP_DESCRIBE, 1, body)
    r.i32()
    assert r.c_len() == 1
    g = {"error": r.i16(), "message": r.c_string(), "group": r.c_string(), "state": r.c_string(),
         "epoch": r.i32(), "assignment_epoch": r.i32(), "assignor": r.c_string(), "members": {}}
    for _ in range(r.c_len()):
        m = {"id": r.c_string(), "rack": r.c_string(), "epoch": r.i32(), "client": r.c_string(),
             "host": r.c_string(), "topics": [r.c_string() for _ in range(r.c_len())]}
        parts = {}
        for _ in range(r.c_len()):
            tid, name = r.uuid(), r.c_string()
            parts[name] = sorted(r.i32() for _ in range(r.c_len()))
            r.skip_tags()
        r.skip_tags()
        m["assignment"] = parts
        r.skip_tags()
        g["members"][m["id"]] = m
    r.i32()  # authorized operations
    r.skip_tags()
    return g


def list_groups(bootstrap: str, types: list[str]) -> dict[str, tuple[str, str, str]]:
    """ListGroups v5 filtered by group type: id -> (protocol type, state, type)."""
    body = W.c_array([]) + W.c_array([W.compact_string(t) for t in types]) + W.tags()
    r = W.flex_roundtrip(bootstrap, LIST_GROUPS, 5, body)
    r.i32()
    assert r.i16() == ERR_NONE
    out = {}
    for _ in range(r.c_len()):
        gid, proto, state, gtype = r.c_string(), r.c_string(), r.c_string(), r.c_string()
        r.skip_tags()
        out[gid] = (proto, state, gtype)
    return out


def partitions(answer: dict) -> list[int]:
    return [p for ps in (answer["assignment"] or {}).values() for p in ps]


def test_members_share_one_partition_and_errors_are_kafkas(broker_factory):
    b = broker_factory(extra_args=FLAGS)
    create_topic(b.bootstrap, "share-one", 1)
    g = "share-one-group"
    a, c = str(uuid.uuid4()), str(uuid.uuid4())
    first = heartbeat(b.bootstrap, g, a, 0, ["share-one"])
    assert (first["error"], first["epoch"], first["member"], first["interval"]) == (ERR_NONE, 1, a, 500), first
    assert partitions(first) == [0]
    second = heartbeat(b.bootstrap, g, c, 0, ["share-one"])
    # No revocation: the second member reads the partition at once, beside the first.
    assert (second["epoch"], partitions(second)) == (2, [0]), second
    again = heartbeat(b.bootstrap, g, a, 1)
    assert (again["error"], again["epoch"], again["assignment"]) == (ERR_NONE, 2, None), again

    d = describe(b.bootstrap, g)
    assert (d["error"], d["state"], d["epoch"], d["assignment_epoch"], d["assignor"]) == \
        (ERR_NONE, "Stable", 2, 2, "simple"), d
    assert {m: v["assignment"] for m, v in d["members"].items()} == {a: {"share-one": [0]}, c: {"share-one": [0]}}
    assert d["members"][a]["topics"] == ["share-one"] and d["members"][a]["host"].startswith("/")

    # Kafka's refusals.
    assert heartbeat(b.bootstrap, g, "", 0, ["share-one"])["error"] == ERR_INVALID_REQUEST
    assert heartbeat(b.bootstrap, g, str(uuid.uuid4()), 0)["error"] == ERR_INVALID_REQUEST
    assert heartbeat(b.bootstrap, g, a, 2, rack="")["error"] == ERR_INVALID_REQUEST
    assert heartbeat(b.bootstrap, g, str(uuid.uuid4()), 2)["error"] == ERR_UNKNOWN_MEMBER_ID
    assert heartbeat(b.bootstrap, g, a, 9)["error"] == ERR_FENCED_MEMBER_EPOCH
    missing = heartbeat(b.bootstrap, "share-no-such-group", a, 3)
    assert missing["error"] == ERR_GROUP_ID_NOT_FOUND, missing
    assert describe(b.bootstrap, "share-no-such-group")["error"] == ERR_GROUP_ID_NOT_FOUND

    # One namespace of group ids: a consumer group's id is not a share group's, nor
    # the other way round.
    create_topic(b.bootstrap, "share-other", 2)
    assert consumer_join(b.bootstrap, "share-consumers", str(uuid.uuid4()), ["share-other"])["error"] == ERR_NONE
    taken = heartbeat(b.bootstrap, "share-consumers", a, 0, ["share-other"])
    assert taken["error"] == ERR_GROUP_ID_NOT_FOUND and "not a share group" in taken["message"], taken
    assert consumer_join(b.bootstrap, g, str(uuid.uuid4()), ["share-other"])["error"] == ERR_GROUP_ID_NOT_FOUND

    listed = list_groups(b.bootstrap, ["share"])
    assert listed == {g: ("share", "Stable", "share")}, listed
    assert g not in list_groups(b.bootstrap, ["consumer", "classic"])

    left = heartbeat(b.bootstrap, g, c, -1)
    assert (left["error"], left["epoch"]) == (ERR_NONE, -1), left
    back = heartbeat(b.bootstrap, g, a, 2)
    assert (back["epoch"], back["assignment"]) == (3, None), "the group moved on; a keeps its partition"


def test_a_share_group_comes_back_exactly_after_a_restart(broker_factory):
    b = broker_factory(extra_args=FLAGS)
    create_topic(b.bootstrap, "share-restart", 4)
    g = "share-restart-group"
    members = [str(uuid.uuid4()) for _ in range(3)]
    epochs = {}
    for m in members:
        epochs[m] = heartbeat(b.bootstrap, g, m, 0, ["share-restart"])["epoch"]
    for m in members:
        epochs[m] = heartbeat(b.bootstrap, g, m, epochs[m])["epoch"]
    before = describe(b.bootstrap, g)
    assert before["epoch"] == 3 and all(v["epoch"] == 3 for v in before["members"].values()), before
    assert sorted(len(v["assignment"]["share-restart"]) for v in before["members"].values()) == [1, 1, 2]

    b.restart()
    wait_until(lambda: heartbeat(b.bootstrap, g, members[0], 3)["error"] == ERR_NONE, 30,
               "a member's heartbeat at its epoch is accepted by the reloaded group")
    after = describe(b.bootstrap, g)
    assert (after["epoch"], after["members"]) == (before["epoch"], before["members"]), after


def test_share_version_zero_turns_share_groups_off(broker_factory):
    b = broker_factory(extra_args=["--share-version", "0"])
    create_topic(b.bootstrap, "share-off", 1)
    off = heartbeat(b.bootstrap, "share-off-group", str(uuid.uuid4()), 0, ["share-off"])
    assert off["error"] == ERR_UNSUPPORTED_VERSION, off
    assert describe(b.bootstrap, "share-off-group")["error"] == ERR_UNSUPPORTED_VERSION


INITIALIZE_STATE, READ_STATE, WRITE_STATE, DELETE_STATE, READ_SUMMARY = 83, 84, 85, 86, 87
ERR_FENCED_LEADER_EPOCH = 74
ERR_FENCED_STATE_EPOCH = 124
ERR_UNKNOWN_TOPIC_OR_PARTITION = 3


def state_call(bootstrap: str, api: int, group: str, tid: bytes, partition: int, fields: bytes) -> W.Flex:
    """One share-group state request for one partition; the reader is left just past
    the answer's partition index (its error code and message come next)."""
    body = (W.compact_string(group)
            + W.c_array([tid + W.c_array([W.i32(partition) + fields + W.tags()]) + W.tags()])
            + W.tags())
    r = W.flex_roundtrip(bootstrap, api, 0, body)
    assert r.c_len() == 1
    assert r.uuid() == tid
    assert r.c_len() == 1
    assert r.i32() == partition
    return r


def state_error(r: W.Flex) -> tuple[int, str | None]:
    return r.i16(), r.c_string()


def read_state(bootstrap: str, group: str, tid: bytes, leader_epoch: int) -> dict:
    r = state_call(bootstrap, READ_STATE, group, tid, 0, W.i32(leader_epoch))
    err, msg = state_error(r)
    out = {"error": err, "message": msg, "state_epoch": r.i32(), "start": r.i64(), "batches": []}
    for _ in range(r.c_len()):
        out["batches"].append((r.i64(), r.i64(), r.i8(), r.i16()))
        r.skip_tags()
    return out


def write_state(bootstrap: str, group: str, tid: bytes, state_epoch: int, leader_epoch: int, start: int,
                batches: list[tuple[int, int, int, int]]) -> int:
    bs = [W.i64(f) + W.i64(l) + W.i8(s) + W.i16(c) + W.tags() for f, l, s, c in batches]
    fields = W.i32(state_epoch) + W.i32(leader_epoch) + W.i64(start) + W.c_array(bs)
    return state_error(state_call(bootstrap, WRITE_STATE, group, tid, 0, fields))[0]


def test_share_state_is_kept_fenced_and_survives_a_restart(broker_factory):
    """The share coordinator's APIs (between brokers, here by hand): initialize, read
    (which records the reader's leader epoch), write, summary, delete; Kafka's fencing
    codes; the state replayed from __share_group_state after a restart."""
    b = broker_factory(extra_args=FLAGS)
    create_topic(b.bootstrap, "share-state", 1)
    g = "share-state-group"
    # The topic's id, from a share member's assignment.
    tid = next(iter(heartbeat(b.bootstrap, "share-state-ids", str(uuid.uuid4()), 0, ["share-state"])["assignment"]))

    uninitialized = read_state(b.bootstrap, g, tid, 0)
    assert uninitialized["error"] == ERR_INVALID_REQUEST, uninitialized
    assert write_state(b.bootstrap, g, tid, 0, 0, 5, []) == ERR_INVALID_REQUEST
    r = state_call(b.bootstrap, READ_SUMMARY, g, tid, 0, W.i32(-1))
    assert state_error(r)[0] == ERR_NONE and (r.i32(), r.i32(), r.i64()) == (0, 0, -1), "a key never seen"

    r = state_call(b.bootstrap, INITIALIZE_STATE, g, tid, 0, W.i32(3) + W.i64(10))
    assert state_error(r) == (ERR_NONE, None)
    assert read_state(b.bootstrap, g, tid, 5)["start"] == 10
    # Acknowledged 10-14, archived 15, available again 16-17 (delivered twice).
    assert write_state(b.bootstrap, g, tid, 3, 5, 10, [(10, 14, 2, 1), (15, 15, 4, 5), (16, 17, 0, 2)]) == ERR_NONE
    assert write_state(b.bootstrap, g, tid, 3, 5, 15, []) == ERR_NONE
    want = {"error": ERR_NONE, "message": None, "state_epoch": 3, "start": 15,
            "batches": [(15, 15, 4, 5), (16, 17, 0, 2)]}
    assert read_state(b.bootstrap, g, tid, 5) == want
    # An older leader, an older state epoch, a bad delivery state.
    assert write_state(b.bootstrap, g, tid, 3, 4, -1, []) == ERR_FENCED_LEADER_EPOCH
    assert read_state(b.bootstrap, g, tid, 4)["error"] == ERR_FENCED_LEADER_EPOCH
    assert write_state(b.bootstrap, g, tid, 2, 5, -1, []) == ERR_FENCED_STATE_EPOCH
    assert write_state(b.bootstrap, g, tid, 3, 5, -1, [(18, 18, 1, 1)]) == ERR_INVALID_REQUEST
    r = state_call(b.bootstrap, INITIALIZE_STATE, g, tid, 0, W.i32(2) + W.i64(0))
    assert state_error(r)[0] == ERR_FENCED_STATE_EPOCH
    unknown = state_call(b.bootstrap, READ_STATE, g, b"\x01" * 16, 0, W.i32(0))
    assert state_error(unknown)[0] == ERR_UNKNOWN_TOPIC_OR_PARTITION

    b.restart()
    wait_until(lambda: read_state(b.bootstrap, g, tid, 5)["error"] == ERR_NONE, 30,
               "the share coordinator reloaded its partition")
    assert read_state(b.bootstrap, g, tid, 5) == want
    assert write_state(b.bootstrap, g, tid, 3, 4, -1, []) == ERR_FENCED_LEADER_EPOCH, "the leader epoch was kept"
    r = state_call(b.bootstrap, READ_SUMMARY, g, tid, 0, W.i32(-1))
    assert state_error(r)[0] == ERR_NONE and (r.i32(), r.i32(), r.i64()) == (3, 5, 15)

    r = state_call(b.bootstrap, DELETE_STATE, g, tid, 0, b"")
    assert state_error(r)[0] == ERR_NONE
    assert read_state(b.bootstrap, g, tid, 5)["error"] == ERR_INVALID_REQUEST
    b.restart()
    wait_until(lambda: state_call(b.bootstrap, READ_SUMMARY, g, tid, 0, W.i32(-1)).i16() == ERR_NONE, 30,
               "the share coordinator reloaded its partition")
    assert read_state(b.bootstrap, g, tid, 5)["error"] == ERR_INVALID_REQUEST, "deleted stays deleted"


ERR_INVALID_RECORD_STATE = 121
ERR_SHARE_SESSION_NOT_FOUND = 122
ERR_INVALID_SHARE_SESSION_EPOCH = 123


def test_share_fetch_and_acknowledge_by_hand(broker_factory):
    """Raw ShareFetch/ShareAcknowledge: acquisition by two members, Kafka's error codes
    for records not held and for session epochs, redelivery after a lock runs out, and
    release when a session closes."""
    b = broker_factory(extra_args=FLAGS + ["--group-share-record-lock-duration-ms", "1000"])
    create_topic(b.bootstrap, "share-raw", 1)
    g = "share-raw-group"
    a_id, c_id = str(uuid.uuid4()), str(uuid.uuid4())
    tid = next(iter(heartbeat(b.bootstrap, g, a_id, 0, ["share-raw"])["assignment"]))
    heartbeat(b.bootstrap, g, c_id, 0, ["share-raw"])
    a, c = ShareClient(b.bootstrap, g, a_id), ShareClient(b.bootstrap, g, c_id)
    try:
        first = a.fetch(0, tid)
        assert first["error"] == ERR_NONE and first["lock_ms"] == 1000, first
        # Records are not nullable in Kafka's schema: an empty answer has empty records.
        assert first["partitions"][(tid, 0)]["records"] == b"", first
        produce(b.bootstrap, "share-raw", 10)
        # record_limit (v2): exactly MaxRecords, though the ten are one log batch.
        got = a.fetch(1, tid, max_records=4, max_wait_ms=2000, version=2)["partitions"][(tid, 0)]
        assert got["acquired"] == [(0, 3, 1)], got
        assert got["records"], "the records come with their ranges"
        other = c.fetch(0, tid, max_records=100, max_wait_ms=500)["partitions"][(tid, 0)]
        assert other["acquired"] == [(4, 9, 1)], other
        # c cannot acknowledge a's records; a's own, all or nothing.
        stolen = c.acknowledge(1, tid, [(0, 0, 1)])["partitions"][(tid, 0)]
        assert stolen[0] == ERR_INVALID_RECORD_STATE, stolen
        assert a.acknowledge(2, tid, [(0, 1, 1), (2, 2, 3)])["partitions"][(tid, 0)] == (ERR_NONE, None)
        # Session epochs.
        assert a.acknowledge(7, tid, [(3, 3, 1)])["error"] == ERR_INVALID_SHARE_SESSION_EPOCH
        assert a.acknowledge(0, tid, [(3, 3, 1)])["error"] == ERR_INVALID_SHARE_SESSION_EPOCH
        stranger = ShareClient(b.bootstrap, g, str(uuid.uuid4()))
        assert stranger.fetch(5, tid)["error"] == ERR_SHARE_SESSION_NOT_FOUND
        stranger.close()
        assert c.acknowledge(2, tid, [(4, 9, 1)])["partitions"][(tid, 0)] == (ERR_NONE, None)
        # a holds 3 and stops: after its lock (1 s) c gets it, delivered twice.
        time.sleep(1.5)
        again = c.fetch(3, tid, max_wait_ms=500)["partitions"][(tid, 0)]
        assert again["acquired"] == [(3, 3, 2)], again
        # c closes its session: 3 goes back (this delivery not counted).
        closed = c.fetch(-1, tid)
        assert closed["error"] == ERR_NONE, closed
        back = a.fetch(3, tid, max_wait_ms=500)["partitions"][(tid, 0)]
        assert back["error"] == ERR_NONE, back
        assert back["acquired"] == [(3, 3, 2)], back
    finally:
        a.close()
        c.close()



def test_share_fetch_max_bytes_and_max_records_as_kafka_applies_them(broker_factory):
    """MaxBytes is soft for the fetch's first batch only (KIP-74): 1 byte still brings
    one whole batch; 1,500 bytes over 1,000-byte records one per batch bring one record,
    not two. MaxRecords in batch_optimized mode (v1, and v2's default) ends at the end of
    the log batch holding the last record allowed; in record_limit mode it is exact."""
    b = broker_factory(extra_args=FLAGS)
    create_topic(b.bootstrap, "share-limits", 1)
    create_topic(b.bootstrap, "share-batch", 1)
    g = "share-limits-group"
    member = str(uuid.uuid4())
    tid = next(iter(heartbeat(b.bootstrap, g, member, 0, ["share-limits"])["assignment"]))
    c = ShareClient(b.bootstrap, g, member)
    try:
        assert c.fetch(0, tid)["error"] == ERR_NONE
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0, "batch.size": 1})
        for i in range(6):
            p.produce("share-limits", b"%04d" % i + b"x" * 996)
            p.flush(10)
        epoch = 1
        seen = []
        for max_bytes in (1, 1500, 1500):
            got = c.fetch(epoch, tid, max_records=100, max_wait_ms=2000,
                          max_bytes=max_bytes)["partitions"][(tid, 0)]
            epoch += 1
            assert got["error"] == ERR_NONE, got
            assert len(data_values(got["records"])) == 1, (max_bytes, got)
            (first, last, _), = got["acquired"]
            assert first == last, (max_bytes, got)
            seen.append(first)
        assert seen == [0, 1, 2], seen
        # Enough for two batches: two records.
        got = c.fetch(epoch, tid, max_records=100, max_wait_ms=2000,
                      max_bytes=2 * 1100)["partitions"][(tid, 0)]
        epoch += 1
        assert [(a, z) for a, z, _ in got["acquired"]] == [(3, 4)], got
    finally:
        c.close()

    # Ten records in one log batch.
    g2 = "share-batch-group"
    m2 = str(uuid.uuid4())
    tid2 = next(iter(heartbeat(b.bootstrap, g2, m2, 0, ["share-batch"])["assignment"]))
    c = ShareClient(b.bootstrap, g2, m2)
    try:
        assert c.fetch(0, tid2)["error"] == ERR_NONE
        produce(b.bootstrap, "share-batch", 10)
        whole = c.fetch(1, tid2, max_records=4, max_wait_ms=2000)["partitions"][(tid2, 0)]
        assert [(a, z) for a, z, _ in whole["acquired"]] == [(0, 9)], whole
        assert c.acknowledge(2, tid2, [(0, 9, 2)])["partitions"][(tid2, 0)] == (ERR_NONE, None)
    finally:
        c.close()


def test_renew_keeps_a_lock_and_v2_renews_fetch_nothing(broker_factory):
    """KIP-1222 (v2): RENEW starts a record's lock again, so it outlives its first lock;
    a ShareFetch that renews (IsRenewAck) must ask for nothing; RENEW without
    IsRenewAck is refused."""
    b = broker_factory(extra_args=FLAGS + ["--group-share-record-lock-duration-ms", "1000"])
    create_topic(b.bootstrap, "share-renew", 1)
    g = "share-renew-group"
    a_id, c_id = str(uuid.uuid4()), str(uuid.uuid4())
    tid = next(iter(heartbeat(b.bootstrap, g, a_id, 0, ["share-renew"])["assignment"]))
    heartbeat(b.bootstrap, g, c_id, 0, ["share-renew"])
    a, c = ShareClient(b.bootstrap, g, a_id), ShareClient(b.bootstrap, g, c_id)
    try:
        assert a.fetch(0, tid, version=2)["error"] == ERR_NONE
        produce(b.bootstrap, "share-renew", 3)
        got = a.fetch(1, tid, max_wait_ms=2000, version=2)["partitions"][(tid, 0)]
        assert got["acquired"] == [(0, 2, 1)], got
        time.sleep(0.6)
        renewed = a.acknowledge(2, tid, [(0, 2, 4)], version=2, renew=True)
        assert renewed["lock_ms"] == 1000 and renewed["partitions"][(tid, 0)] == (ERR_NONE, None), renewed
        # Not without IsRenewAck, nor with a fetch that asks for records.
        refused = a.acknowledge(3, tid, [(0, 0, 4)], version=2)["partitions"][(tid, 0)]
        assert refused[0] == ERR_INVALID_REQUEST, refused
        assert a.fetch(4, tid, acks=[(0, 0, 4)], version=2, renew=True)["error"] == ERR_INVALID_REQUEST
        time.sleep(0.6)
        # 1.2 s after the acquisition, past the first lock: still a's.
        assert c.fetch(0, tid, max_wait_ms=100, version=2)["partitions"][(tid, 0)]["acquired"] == []
        done = a.fetch(4, tid, acks=[(0, 2, 4)], max_records=0, max_wait_ms=0, min_bytes=0, max_bytes=0,
                       version=2, renew=True)
        assert done["error"] == ERR_NONE and done["partitions"][(tid, 0)]["ack_error"] == ERR_NONE, done
        assert a.acknowledge(5, tid, [(0, 2, 1)], version=2)["partitions"][(tid, 0)] == (ERR_NONE, None)
    finally:
        a.close()
        c.close()


def test_a_share_groups_own_configs_apply(broker_factory):
    """A share group's configs (kafka-configs --entity-type groups): its heartbeat
    interval is what its members are told, its delivery count limit archives a record
    released that many times, and with share.renew.acknowledge.enable=false a RENEW is
    INVALID_RECORD_STATE, as in Kafka. The leader's share metrics count all of it."""
    b = broker_factory(extra_args=FLAGS + ["--group-share-record-lock-duration-ms", "1000"])
    topic, g = "share-configs", "share-configs-group"
    create_topic(b.bootstrap, topic, 1)
    # The bounds are Kafka's, widened to the broker's own settings (500 ms, 6 s here).
    set_group_configs(b.bootstrap, g, {"share.auto.offset.reset": "earliest",
                                       "share.heartbeat.interval.ms": "700",
                                       "share.session.timeout.ms": "7000",
                                       "share.delivery.count.limit": "2",
                                       "share.renew.acknowledge.enable": "false"})
    produce(b.bootstrap, topic, 2)
    m = str(uuid.uuid4())
    joined = heartbeat(b.bootstrap, g, m, 0, [topic])
    assert joined["interval"] == 700, joined
    tid = next(iter(joined["assignment"]))
    c = ShareClient(b.bootstrap, g, m)
    try:
        got = c.fetch(0, tid, max_wait_ms=2000, version=2)["partitions"][(tid, 0)]
        assert got["acquired"] == [(0, 1, 1)], got
        renew = c.acknowledge(1, tid, [(0, 0, 4)], version=2, renew=True)["partitions"][(tid, 0)]
        assert renew[0] == ERR_INVALID_RECORD_STATE, renew
        # Released twice: the second release reaches the limit of 2 and archives it.
        assert c.acknowledge(2, tid, [(0, 1, 2)], version=2)["partitions"][(tid, 0)] == (ERR_NONE, None)
        again = c.fetch(3, tid, max_wait_ms=2000, version=2)["partitions"][(tid, 0)]
        assert again["acquired"] == [(0, 1, 2)], again
        assert c.acknowledge(4, tid, [(0, 0, 2), (1, 1, 1)], version=2)["partitions"][(tid, 0)] \
            == (ERR_NONE, None)
        assert c.fetch(5, tid, max_wait_ms=300, version=2)["partitions"][(tid, 0)]["acquired"] == []
        # The leader's counts, in records (summed over shards).
        assert b.metric("corelog_share_records_acquired") == 4
        assert b.metric("corelog_share_records_acknowledged", type="release") == 3
        assert b.metric("corelog_share_records_acknowledged", type="accept") == 1
        assert b.metric("corelog_share_records_acknowledged", type="renew") == 0
        assert b.metric("corelog_share_records_archived_at_delivery_limit") == 1
        assert b.metric("corelog_share_partitions") == 1
    finally:
        c.close()


WORKER = Path(__file__).resolve().parent / "java" / "ShareWorker.java"
KAFKA_LIBS = Path(os.environ.get("KAFKA_CLI_LIBS", Path(__file__).resolve().parents[2] / ".cache" / "kafka" / "libs"))
LOG4J = Path(__file__).resolve().parents[2] / "tools" / "kafka-cli" / "log4j2.properties"


class Worker:
    """ShareWorker (Java KafkaShareConsumers) in a child JVM; its lines kept as they come."""

    def __init__(self, boot: str, group: str, topic: str, consumers: int, log: Path):
        self.lines: list[str] = []
        self.log = log
        argv = [os.environ.get("JAVA", "java"), "-cp", f"{KAFKA_LIBS}/*", "-Xmx256m", "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1", f"-Dlog4j2.configurationFile={LOG4J}",
                str(WORKER), boot, group, topic, str(consumers)]
        with open(log, "ab") as err:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                         text=True, preexec_fn=die_with_parent)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def settled(self, kind: str) -> list[str]:
        return [l.split()[1] for l in list(self.lines) if l.startswith(kind + " ")]

    def stop(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def describe(self) -> str:
        try:
            tail = self.log.read_text(errors="replace").splitlines()[-40:]
        except OSError:
            tail = []
        return "\n".join(self.lines[-20:] + ["--- log ---"] + tail)


@pytest.mark.skipif(not any(KAFKA_LIBS.glob("kafka-clients-*.jar")), reason="Kafka's jars are not fetched")
def test_share_consumers_lose_nothing_when_the_partition_leader_dies(broker_factory, tmp_path):
    """Three brokers; Java share consumers read one replicated partition while a producer
    writes it, and its leader is killed. Every record acknowledged to the producer is in
    the end accepted by some consumer exactly once, unless it was rejected; a rejected
    one is never accepted; and the share partition's start offset reaches the log end
    (nothing left undelivered)."""
    brokers = broker_factory.cluster(3, extra_args=[*FAST_CLUSTER, *FLAGS, "--group-share-record-lock-duration-ms", "3000"])
    boot = ",".join(b.bootstrap for b in brokers)
    topic, group = "share-failover", "share-failover-group"
    admin = AdminClient({"bootstrap.servers": boot})
    admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])[topic].result(30)
    wait_until(lambda: cluster_leaders(brokers, topic).get(0, -1) >= 0, 30, "the partition has a leader")
    worker = Worker(boot, group, topic, 3, tmp_path / "worker.log")
    acked: list[str] = []
    errors: list[str] = []
    stop = threading.Event()

    def produce_loop():
        p = Producer({"bootstrap.servers": boot, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                      "message.timeout.ms": 120_000})
        i = 0
        while not stop.is_set() and i < 3000:
            v = f"reject-{i}" if i % 10 == 3 else f"v-{i}"
            try:
                p.produce(topic, value=v.encode(),
                          on_delivery=lambda err, m: (errors if err else acked).append(str(err) if err else m.value().decode()))
                i += 1
            except BufferError:
                p.poll(0.05)
            if i % 20 == 0:
                p.poll(0)
                time.sleep(0.01)
        p.flush(150)

    producer = threading.Thread(target=produce_loop, daemon=True)
    try:
        wait_until(lambda: "STARTED" in worker.lines, 60, "the share consumers started")
        producer.start()
        wait_until(lambda: len(worker.settled("ACCEPTED")) >= 300, 60,
                   lambda: f"consumers under way\n{worker.describe()}")
        leader = cluster_leaders(brokers, topic)[0]
        victim = next(b for b in brokers if b.node_id == leader)
        victim.kill()
        wait_until(lambda: cluster_leaders([b for b in brokers if b is not victim], topic).get(0, -1) not in (-1, leader),
                   30, "a new leader")
        time.sleep(3)
        victim.start()
        producer.join(180)
        assert not errors, errors[:5]

        def done():
            settled = set(worker.settled("ACCEPTED")) | set(worker.settled("REJECTED"))
            return set(acked) <= settled | set(worker.settled("UNCERTAIN"))
        wait_until(done, 120, lambda: f"every record settled\n{worker.describe()}")
    finally:
        stop.set()
        worker.stop()
    accepted = worker.settled("ACCEPTED")
    rejected = set(worker.settled("REJECTED"))
    uncertain = set(worker.settled("UNCERTAIN"))
    dup = {v for v in accepted if accepted.count(v) > 1}
    assert not dup, f"accepted twice: {sorted(dup)[:10]}"
    assert not (set(accepted) & rejected), "a rejected record was accepted"
    assert all(v.startswith("reject") for v in rejected)
    missing = set(acked) - set(accepted) - rejected - uncertain
    assert not missing, f"never settled: {sorted(missing)[:10]}"
    # Nothing is left in flight: a fresh member of the group finds nothing to acquire on
    # the partition's leader (an uncertain acknowledgement that was not stored would be
    # delivered again).
    member = str(uuid.uuid4())
    joined = next(a for a in (heartbeat(b.bootstrap, group, member, 0, [topic]) for b in brokers)
                  if a["error"] == ERR_NONE)
    tid = next(iter(joined["assignment"]))
    leader = cluster_leaders(brokers, topic)[0]
    last = ShareClient(next(b for b in brokers if b.node_id == leader).bootstrap, group, member)
    try:
        left = last.fetch(0, tid, max_wait_ms=1000)["partitions"].get((tid, 0), {})
        assert left.get("error") == ERR_NONE and left.get("acquired") == [], left
    finally:
        last.close()
    print(f"accepted {len(accepted)}, rejected {len(rejected)}, uncertain {len(uncertain)}, acked {len(acked)}")


def set_group_configs(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    """The group's own configs, as kafka-configs --entity-type groups sets them."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
    r = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    admin = AdminClient({"bootstrap.servers": bootstrap})  # held until the answer
    admin.incremental_alter_configs([r])[r].result(30)


def start_earliest(bootstrap: str, group: str) -> None:
    """The group's share.auto.offset.reset set to earliest."""
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest"})


def data_values(records: bytes) -> list[bytes]:
    """The values of the data records (not transaction markers) in `records`."""
    return [r["value"] for b in W.decode_batches(records) if not b["attributes"] & 0x20
            for r in b["records"]]


def test_read_committed_share_groups_get_no_aborted_records(broker_factory):
    """share.isolation.level=read_committed (a group config): a share group reads up to
    the last stable offset, and the data of an aborted transaction is archived, never
    delivered; transaction markers are delivered as Kafka delivers them (the consumer
    acknowledges them as gaps). A read_uncommitted group gets everything below the high
    watermark. The group's share.record.lock.duration.ms is the lock its fetches get."""
    b = broker_factory(extra_args=FLAGS + ["--group-share-record-lock-duration-ms", "1000"])
    topic = "share-txn"
    create_topic(b.bootstrap, topic, 1)
    rc, ru = "share-rc", "share-ru"
    set_group_configs(b.bootstrap, rc, {"share.auto.offset.reset": "earliest",
                                        "share.isolation.level": "read_committed",
                                        "share.record.lock.duration.ms": "2500"})
    start_earliest(b.bootstrap, ru)

    txn = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "share-txn-producer",
                    "linger.ms": 0})
    txn.init_transactions(30)

    def transaction(values: list[bytes], end: str | None) -> None:
        txn.begin_transaction()
        for v in values:
            txn.produce(topic, v, partition=0)
        txn.flush(30)
        if end == "commit":
            txn.commit_transaction(30)
        elif end == "abort":
            txn.abort_transaction(30)

    transaction([b"c0", b"c1", b"c2"], "commit")   # 0-2, marker 3
    transaction([b"x0", b"x1", b"x2"], "abort")    # 4-6, marker 7
    plain = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
    for v in (b"p0", b"p1"):                       # 8-9
        plain.produce(topic, v, partition=0)
        plain.flush(30)
    transaction([b"o0", b"o1"], None)              # 10-11, still open: the LSO is 10

    a_id, u_id = str(uuid.uuid4()), str(uuid.uuid4())
    tid = next(iter(heartbeat(b.bootstrap, rc, a_id, 0, [topic])["assignment"]))
    heartbeat(b.bootstrap, ru, u_id, 0, [topic])
    a, u = ShareClient(b.bootstrap, rc, a_id), ShareClient(b.bootstrap, ru, u_id)
    try:
        first = a.fetch(0, tid, max_wait_ms=2000)
        assert first["lock_ms"] == 2500, first
        got = first["partitions"][(tid, 0)]
        assert got["acquired"] == [(0, 3, 1), (7, 9, 1)], got
        assert data_values(got["records"]) == [b"c0", b"c1", b"c2", b"p0", b"p1"], got
        everything = u.fetch(0, tid, max_wait_ms=2000)
        assert everything["lock_ms"] == 1000, everything
        assert everything["partitions"][(tid, 0)]["acquired"] == [(0, 11, 1)], everything
        # Settled, markers as gaps; the archived records never come back.
        assert a.acknowledge(1, tid, [(0, 2, 1), (3, 3, 0), (7, 7, 0), (8, 9, 1)])["partitions"][(tid, 0)] \
            == (ERR_NONE, None)
        assert a.fetch(2, tid, max_wait_ms=300)["partitions"][(tid, 0)]["acquired"] == []
        # The open transaction commits: the LSO passes it.
        txn.commit_transaction(30)                # marker 12
        later = a.fetch(3, tid, max_wait_ms=2000)["partitions"][(tid, 0)]
        assert later["acquired"] == [(10, 12, 1)], later
        assert data_values(later["records"]) == [b"o0", b"o1"], later
    finally:
        a.close()
        u.close()


def test_librdkafka_share_consumers_settle_every_record_once(broker_factory):
    """librdkafka's share consumer (confluent-kafka ShareConsumer, explicit
    acknowledgement), two of them on one partition: every tenth record rejected, every
    tenth other released at its first delivery; each other record is accepted exactly
    once, the released ones on their second delivery, and both consumers take part."""
    from confluent_kafka import AcknowledgeType, ShareConsumer
    b = broker_factory(extra_args=FLAGS)
    topic, group, n = "share-rdk", "share-rdk-group", 200
    create_topic(b.bootstrap, topic, 1)
    start_earliest(b.bootstrap, group)
    accepted: dict[bytes, int] = {}
    rejected: set[bytes] = set()
    second: dict[bytes, int] = {}
    per: list[int] = [0, 0]
    lock = threading.Lock()
    stop = threading.Event()
    failures: list[str] = []

    def run(i: int):
        c = ShareConsumer({"bootstrap.servers": b.bootstrap, "group.id": group,
                           "share.acknowledgement.mode": "explicit", "client.id": f"rdk-share-{i}",
                           "max.poll.records": 10})
        try:
            c.subscribe([topic])
            while not stop.is_set():
                msgs = list(c.poll(0.3))
                for m in msgs:
                    if m.error():
                        failures.append(str(m.error()))
                        continue
                    with lock:
                        if m.offset() % 10 == 3:
                            c.acknowledge(m, AcknowledgeType.REJECT)
                            rejected.add(m.value())
                        elif m.offset() % 10 == 7 and m.delivery_count() == 1:
                            c.acknowledge(m, AcknowledgeType.RELEASE)
                        else:
                            c.acknowledge(m, AcknowledgeType.ACCEPT)
                            accepted[m.value()] = accepted.get(m.value(), 0) + 1
                            if m.offset() % 10 == 7:
                                second[m.value()] = m.delivery_count()
                            per[i] += 1
                if msgs:
                    c.commit_sync()
        except Exception as e:  # noqa: BLE001 - reported below
            failures.append(repr(e))
        finally:
            c.close()

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    try:
        # Both consumers in the group and assigned the partition first, then the
        # records, in rounds (records produced before one joins could all go to the other).
        wait_until(lambda: (lambda d: len(d["members"]) == 2 and all(
            m["assignment"] == {topic: [0]} for m in d["members"].values()))(
                describe(b.bootstrap, group)) or failures, 30,
            lambda: f"both consumers assigned: {describe(b.bootstrap, group)}")
        for r in range(10):
            produce(b.bootstrap, topic, n // 10, prefix=f"r{r}")
        wait_until(lambda: len(accepted) == n - n // 10 or failures, 60,
                   lambda: f"accepted {len(accepted)} of {n - n // 10}")
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not failures, failures[:5]
    assert all(v == 1 for v in accepted.values()), {k: v for k, v in accepted.items() if v > 1}
    assert len(rejected) == n // 10 and not (rejected & set(accepted))
    assert len(second) == n // 10 and set(second.values()) == {2}, second
    assert all(x > 0 for x in per), per


def test_librdkafka_share_consumer_with_a_one_byte_fetch_max_bytes_gets_every_record(broker_factory):
    """fetch.max.bytes=1 is soft, as Kafka has it: each fetch still brings a whole batch,
    so a librdkafka share consumer so configured reads every record."""
    from confluent_kafka import ShareConsumer
    b = broker_factory(extra_args=FLAGS)
    topic, group = "share-tiny", "share-tiny-group"
    create_topic(b.bootstrap, topic, 1)
    start_earliest(b.bootstrap, group)
    produce(b.bootstrap, topic, 30)
    c = ShareConsumer({"bootstrap.servers": b.bootstrap, "group.id": group,
                       "fetch.max.bytes": 1, "client.id": "rdk-share-tiny"})
    got: list[bytes] = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(got) < 30 and time.monotonic() < deadline:
            got.extend(m.value() for m in c.poll(0.5) if not m.error())
    finally:
        c.close()
    assert len(got) == 30 and len(set(got)) == 30, got


ALTER_SHARE_GROUP_OFFSETS = 91
DELETE_GROUPS = 42


def alter_share_group_offsets(bootstrap: str, group: str, topic: str,
                              starts: dict[int, int]) -> tuple[int, dict[int, int]]:
    """AlterShareGroupOffsets v0: (top-level error, partition -> error)."""
    parts = W.c_array([W.i32(p) + W.i64(o) + W.tags() for p, o in starts.items()])
    body = W.compact_string(group) + W.c_array([W.compact_string(topic) + parts + W.tags()]) + W.tags()
    r = W.flex_roundtrip(bootstrap, ALTER_SHARE_GROUP_OFFSETS, 0, body)
    r.i32()
    top, _ = r.i16(), r.c_string()
    out = {}
    for _ in range(r.c_len()):
        r.c_string(), r.uuid()
        for _ in range(r.c_len()):
            p, code, _ = r.i32(), r.i16(), r.c_string()
            r.skip_tags()
            out[p] = code
        r.skip_tags()
    return top, out


def delete_groups(bootstrap: str, groups: list[str]) -> dict[str, int]:
    """DeleteGroups v2: group -> error."""
    body = W.c_array([W.compact_string(g) for g in groups]) + W.tags()
    r = W.flex_roundtrip(bootstrap, DELETE_GROUPS, 2, body)
    r.i32()
    out = {}
    for _ in range(r.c_len()):
        g, code = r.c_string(), r.i16()
        r.skip_tags()
        out[g] = code
    return out


def test_share_group_administration_reaches_state_on_any_broker(broker_factory):
    """On a cluster a share partition's state may be kept by another broker than the one
    serving the administration request: AlterShareGroupOffsets and DeleteGroups reach it
    there (they were INVALID_REQUEST whenever it was elsewhere, which made them fail now
    and then). Kafka answers no INVALID_REQUEST from these APIs."""
    brokers = broker_factory.cluster(3, extra_args=[*FAST_CLUSTER, *FLAGS])
    bs = ",".join(b.bootstrap for b in brokers)
    topic = "share-admin"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, 6, 3)])[topic].result(30)
    wait_until(lambda: all(l >= 0 for l in cluster_leaders(brokers, topic).values())
               and len(cluster_leaders(brokers, topic)) == 6, 30, "every partition has a leader")
    for i in range(4):
        group = f"share-admin-{i}"
        answers = {}

        def altered() -> bool:
            # Sent to each broker: its group coordinator answers, the others
            # NOT_COORDINATOR (16); 15 while the coordinators load.
            for b in brokers:
                answers[b.bootstrap] = alter_share_group_offsets(
                    b.bootstrap, group, topic, {p: 5 * p for p in range(6)})
            return any(top not in (15, 16) for top, _ in answers.values())

        wait_until(altered, 30, lambda: f"the group's coordinator answers: {answers}")
        (via, (top, codes)), = [(b, a) for b, a in answers.items() if a[0] not in (15, 16)]
        assert (top, codes) == (ERR_NONE, {p: ERR_NONE for p in range(6)}), (group, top, codes)
        assert delete_groups(via, [group]) == {group: ERR_NONE}
        assert delete_groups(via, [group]) == {group: ERR_GROUP_ID_NOT_FOUND}
