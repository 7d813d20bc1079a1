"""The HTTP endpoint: /metrics (Prometheus text) and /histograms agree with what a real
client did, across shards."""

from __future__ import annotations

import json
import re
import urllib.request

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def get(broker, path: str) -> tuple[int, str, str]:
    with _NO_PROXY.open(f"http://{broker.http}{path}", timeout=10) as r:
        return r.status, r.headers.get("Content-Type", ""), r.read().decode()


def series(text: str, name: str) -> dict[str, float]:
    """{labels: value} of one metric family in Prometheus text."""
    out = {}
    for line in text.splitlines():
        m = re.match(rf"^{re.escape(name)}\{{(.*)\}} (\S+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def total(text: str, name: str, **labels: str) -> float:
    want = [f'{k}="{v}"' for k, v in labels.items()]
    return sum(v for k, v in series(text, name).items() if all(w in k for w in want))


def test_metrics_count_what_clients_did(broker):
    topic = "metered"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 4, 1)])[topic].result(30)
    n, size = 3000, 200
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(n):
        p.produce(topic, b"v" * size, key=str(i).encode(), partition=i % 4)
    assert p.flush(30) == 0

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "m", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, q, 0) for q in range(4)])
    got = 0
    while got < n:
        got += sum(1 for m in c.consume(1000, 1.0) if m.error() is None)
    # A fetch at an offset beyond the log: OFFSET_OUT_OF_RANGE, counted as an error.
    c2 = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "m2",
                   "auto.offset.reset": "error", "enable.auto.commit": False})
    c2.assign([TopicPartition(topic, 0, 10_000_000)])
    c2.consume(1, 2.0)
    c.close()
    c2.close()

    status, ctype, text = get(broker, "/metrics")
    assert status == 200 and ctype.startswith("text/plain")
    # Both shards report.
    shards = {m for m in re.findall(r'shard="(\d+)"', text)}
    assert shards == {"0", "1"}, shards
    assert total(text, "corelog_requests_total", api="Produce") >= 1
    produced = total(text, "corelog_request_received_bytes_total", api="Produce")
    assert produced >= n * size, produced
    fetched = total(text, "corelog_response_sent_bytes_total", api="Fetch")
    assert fetched >= n * size, fetched
    assert total(text, "corelog_errors_total", api="Fetch", error="OFFSET_OUT_OF_RANGE") >= 1
    assert total(text, "corelog_errors_total", api="Produce") == 0
    # Histogram counts equal request counts, per API.
    assert total(text, "corelog_request_latency_seconds_count", api="Produce") == \
        total(text, "corelog_requests_total", api="Produce")
    # acks=all produces waited for group-commit fsyncs and direct-I/O appends.
    assert total(text, "corelog_stage_latency_seconds_count", stage="fsync") >= 1
    assert total(text, "corelog_stage_latency_seconds_count", stage="append") >= 1

    status, ctype, body = get(broker, "/histograms?format=json")
    assert status == 200 and ctype.startswith("application/json")
    doc = json.loads(body)
    assert sorted(doc["shards"]) == [0, 1]
    produce = doc["histograms"]["Produce"]
    assert produce["count"] == total(text, "corelog_requests_total", api="Produce")
    for key in ("p50", "p90", "p99", "p999", "p9999", "max"):
        assert produce[key] >= 0
    assert produce["p50"] <= produce["p99"] <= produce["max"]

    status, _, hgrm = get(broker, "/histograms/produce.hgrm")
    assert status == 200
    assert "Percentile" in hgrm.splitlines()[0] and "#[Max" in hgrm


def test_each_refused_config_change_counts_once(broker):
    """Every error code a response carries is counted once, by the dispatcher: here two
    resources of one IncrementalAlterConfigs refused with INVALID_CONFIG count 2."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for t in ("cfg-a", "cfg-b"):
        admin.create_topics([NewTopic(t, 1, 1)])[t].result(30)
    bad = [ConfigResource("topic", t, incremental_configs=[
        ConfigEntry("no.such.key", "1", incremental_operation=AlterConfigOpType.SET)])
        for t in ("cfg-a", "cfg-b")]
    for f in admin.incremental_alter_configs(bad).values():
        try:
            f.result(30)
        except Exception:
            pass
        else:
            raise AssertionError("an unknown key is refused")
    _, _, text = get(broker, "/metrics")
    assert total(text, "corelog_errors_total", api="IncrementalAlterConfigs") == 2, \
        series(text, "corelog_errors_total")
