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
    """{labels: value} of one metric family in Prometheus text ("" for no labels)."""
    out = {}
    for line in text.splitlines():
        m = re.match(rf"^{re.escape(name)}(?:\{{(.*)\}})? (\S+)$", line)
        if m:
            out[m.group(1) or ""] = float(m.group(2))
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


def labelled(text: str, name: str) -> dict[frozenset, float]:
    """{frozenset of (label, value): value} of one metric family in Prometheus text."""
    return {frozenset(re.findall(r'(\w+)="([^"]*)"', k)): v for k, v in series(text, name).items()}


def test_consumer_group_lag_is_the_high_watermark_minus_the_commit(broker):
    """corelog_consumer_group_lag{group,topic,partition}: the broker that coordinates a
    group exports, per committed partition, its high watermark minus the committed
    offset (the partitions live on both shards, the group on one), with the group's sum
    and max; consumed to the end and committed, it is 0."""
    topic, group = "lagged", "laggers"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(30)
    produced = {0: 50, 1: 20, 2: 7}
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5})
    for q, n in produced.items():
        for i in range(n):
            p.produce(topic, b"v", partition=q)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    high = {q: c.get_watermark_offsets(TopicPartition(topic, q), 10)[1] for q in produced}
    assert high == produced
    committed = {0: 10, 1: 20, 2: 0}
    c.commit(offsets=[TopicPartition(topic, q, o) for q, o in committed.items()],
             asynchronous=False)

    def lags(text):
        out = {}
        for labels, v in labelled(text, "corelog_consumer_group_lag").items():
            d = dict(labels)
            if d["group"] == group:
                assert d["topic"] == topic and "shard" not in d, d
                out[int(d["partition"])] = v
        return out

    def of_group(text, name):
        return {dict(k)["group"]: v for k, v in labelled(text, name).items()}.get(group)

    _, _, text = get(broker, "/metrics")
    want = {q: high[q] - committed[q] for q in produced}
    assert lags(text) == want, series(text, "corelog_consumer_group_lag")
    assert of_group(text, "corelog_consumer_group_lag_sum") == sum(want.values())
    assert of_group(text, "corelog_consumer_group_lag_max") == max(want.values())
    assert total(text, "corelog_consumer_group_lag_unknown_partitions") == 0
    assert total(text, "corelog_consumer_group_lag_groups_omitted") == 0

    # Consumed to the end and committed: no lag.
    c.assign([TopicPartition(topic, q, committed[q]) for q in produced])
    left = sum(want.values())
    while left > 0:
        left -= sum(1 for m in c.consume(100, 1.0) if m.error() is None)
    c.commit(asynchronous=False)
    c.close()
    _, _, text = get(broker, "/metrics")
    assert lags(text) == {q: 0 for q in produced}, series(text, "corelog_consumer_group_lag")
    assert of_group(text, "corelog_consumer_group_lag_sum") == 0
    assert of_group(text, "corelog_consumer_group_lag_max") == 0


def test_the_broker_reports_its_disk_memory_connections_and_controller(broker):
    _, _, text = get(broker, "/metrics")
    assert total(text, "corelog_active_controller") == 1
    assert total(text, "corelog_offline_partitions") == 0
    assert total(text, "corelog_fenced_brokers") == 0
    size = total(text, "corelog_data_dir_filesystem_size_bytes")
    assert 0 < total(text, "corelog_data_dir_filesystem_available_bytes") <= size
    assert total(text, "corelog_produce_refused_disk") == 0
    assert re.search(r"^process_resident_memory_bytes [1-9]", text, re.M), "memory"
    assert re.search(r"^process_open_fds [1-9]", text, re.M), "descriptors"
    assert re.search(r"^process_cpu_seconds_total \d", text, re.M), "cpu"
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    for i in range(30):
        p.produce("counted", b"x" * 1000)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "open"})
    c.list_topics(timeout=10)
    _, _, text = get(broker, "/metrics")
    # The producer's 30 records, and the consumer's connection (at least) open.
    assert total(text, "corelog_appended_records_total") >= 30
    assert total(text, "corelog_log_size_bytes") >= 30 * 1000
    assert total(text, "corelog_connections_open") >= 1
    c.close()


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


def png_pixels(path) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB(A) bytes) of an 8-bit RGB or RGBA PNG without
    interlacing, which is what Chromium's screenshots are."""
    import struct
    import zlib
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "a PNG"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos:pos + 4]), data[pos + 4:pos + 8]
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", chunk)
            assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw, rows, prev = zlib.decompress(idat), [], bytes(width * bpp)
    stride = width * bpp
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 0xFF
            elif f == 2:
                line[i] = (line[i] + b) & 0xFF
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line))
        prev = bytes(line)
    return width, bpp, rows


def test_the_histogram_page_draws_the_stages_in_a_browser(broker, tmp_path):
    """/histograms/plot is a page a person reads without a tool: a headless browser
    renders it, its DOM holds a plot whose legend names the produce path's stages, and the
    screenshot shows each stage's curve in its colour."""
    import shutil
    import subprocess
    import pytest
    browser = shutil.which("chromium-headless-shell") or shutil.which("chromium")
    if browser is None:
        pytest.skip("no headless browser (test.sh installs chromium-headless-shell)")
    topic = "plotted"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 1})
    for i in range(2000):
        p.produce(topic, value=b"x" * 100)
        if i % 200 == 0:
            p.flush(10)
    assert p.flush(30) == 0

    status, ctype, html = get(broker, "/histograms/plot")
    assert status == 200 and ctype.startswith("text/html")
    url = f"http://{broker.http}/histograms/plot"
    flags = ["--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-proxy-server"]
    dom = subprocess.run([browser, *flags, "--dump-dom", url], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    # The browser built a document with the plots and their legends.
    assert dom.count("<svg") == 2 and "<path d=\"M" in dom, dom[:2000]
    legend = re.findall(r"<text[^>]*>([^<]+)</text>", dom)
    for stage in ("request_queue", "append", "fsync", "replication_wait", "Produce"):
        assert stage in legend, f"{stage} not in the legend: {legend}"

    shot = tmp_path / "plot.png"
    subprocess.run([browser, *flags, f"--screenshot={shot}", "--window-size=1000,1400", url],
                   capture_output=True, timeout=60, check=True)
    width, bpp, rows = png_pixels(shot)
    counts: dict[bytes, int] = {}
    for row in rows[:700]:  # the first plot: the stages
        for x in range(0, width * bpp, bpp):
            px = row[x:x + 3]
            counts[px] = counts.get(px, 0) + 1
    # Each curve of the stages drawn (colours in legend order: request_queue, mesh,
    # append, fsync, ...): its legend swatch alone is 20 px, a drawn curve hundreds.
    for colour in ("1f77b4", "2ca02c", "9467bd"):
        assert counts.get(bytes.fromhex(colour), 0) > 100, (colour, counts.get(bytes.fromhex(colour)))
