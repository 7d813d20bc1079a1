"""The Grafana dashboard and the Prometheus alert rules of tools/grafana/ query only what
a running broker exports: every metric name of every PromQL expression is looked up in a
real broker's /metrics, histogram_quantile is only given histogram buckets and rate() only
counters. The files' structure is checked too: every panel has queries and uses the
${DS_PROMETHEUS} data source; every alert has an expression, a `for`, a severity and a
summary."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "tools" / "grafana" / "corelog-dashboard.json"
ALERTS = ROOT / "tools" / "grafana" / "corelog-alerts.yml"
DS = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
SEVERITIES = {"page", "warning"}
# Series Prometheus itself writes for every scrape target, not the broker.
PROMETHEUS_OWN = {"up"}

_NAME = r"[A-Za-z_:][A-Za-z0-9_:]*"
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
             "group_left", "group_right", "inf", "nan"}
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: what is left once strings, label
    matchers, ranges, grouping clauses, numbers, keywords and function names are gone."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"(?<![\w:.])\d+(\.\d+)?([eE][+-]?\d+)?", " ", e)
    names = set()
    for m in re.finditer(_NAME, e):
        if re.match(r"\s*\(", e[m.end():]) or m.group(0) in _KEYWORDS:
            continue
        names.add(m.group(0))
    return names


def call_arguments(expr: str, function: str) -> list[str]:
    """The argument text of every call of `function` in `expr`."""
    out = []
    for m in re.finditer(rf"\b{function}\s*\(", expr):
        depth, i = 1, m.end()
        while i < len(expr) and depth:
            depth += {"(": 1, ")": -1}.get(expr[i], 0)
            i += 1
        out.append(expr[m.end():i - 1])
    return out


def test_the_extractor_finds_metric_names_only():
    expr = ('histogram_quantile(0.99, sum by (api, le) (rate(corelog_x_seconds_bucket'
            '{api=~"Produce|Fetch",instance=~"$instance"}[$__rate_interval]))) > 1.5e3 '
            'and on (instance) predict_linear(avail_bytes[6h], 24 * 3600) < 0 '
            'or topk(10, max without (shard) (lag_sum{group=~"$group"})) / up{job="corelog"}')
    assert metric_names(expr) == {"corelog_x_seconds_bucket", "avail_bytes", "lag_sum", "up"}
    assert call_arguments("rate(a[5m]) + rate(b{c=\"(\"}[1m])", "rate") == \
        ["a[5m]", "b{c=\"(\"}[1m]"]


def dashboard_exprs() -> list[tuple[str, str]]:
    doc = json.loads(DASHBOARD.read_text())
    out = []
    for p in doc["panels"]:
        for t in p.get("targets", []):
            out.append((p["title"], t["expr"]))
    variables = doc["templating"]["list"]
    for v in variables:
        if v.get("type") == "query":
            # Grafana's label_values(METRIC, LABEL): the metric is what must exist.
            m = re.fullmatch(r"label_values\((.+),\s*\w+\)", v["query"]["query"])
            assert m, v["query"]
            out.append((f"variable {v['name']}", m.group(1)))
    return out


def alert_rules() -> list[dict]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


def test_the_dashboard_is_an_importable_grafana_model():
    doc = json.loads(DASHBOARD.read_text())
    assert doc["title"] and doc["uid"] and doc["schemaVersion"] >= 36
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    ds = variables["DS_PROMETHEUS"]
    assert ds["type"] == "datasource" and ds["query"] == "prometheus"
    assert variables["instance"]["type"] == "query"
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    panels = [p for p in doc["panels"] if p["type"] != "row"]
    assert len(panels) >= 20
    for p in panels:
        assert p["datasource"] == DS, p["title"]
        assert p["targets"], f"{p['title']} has no query"
        for t in p["targets"]:
            assert t["expr"].strip(), p["title"]
            assert t["datasource"] == DS, p["title"]
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
    for v in doc["templating"]["list"]:
        if v["type"] == "query":
            assert v["datasource"] == DS, v["name"]
    # The subjects an operator looks for, each on a panel.
    titles = " | ".join(p["title"].lower() for p in panels)
    for subject in ("produce / fetch bytes", "records appended", "requests by api",
                    "stage latency p99", "errors by api and code", "isr shrinks",
                    "under-replicated", "offline partitions", "lag by group",
                    "disk available", "resident memory", "connections", "active controllers"):
        assert subject in titles, subject


def test_every_alert_says_what_and_how_urgent():
    rules = alert_rules()
    assert len(rules) >= 8
    names = [r["alert"] for r in rules]
    assert len(names) == len(set(names))
    for r in rules:
        assert r["expr"].strip(), r["alert"]
        assert re.fullmatch(r"\d+[smh]", r["for"]), r["alert"]
        assert r["labels"]["severity"] in SEVERITIES, r["alert"]
        assert r["annotations"]["summary"].strip(), r["alert"]
        assert r["annotations"]["description"].strip(), r["alert"]
    severities = {r["labels"]["severity"] for r in rules}
    assert severities == SEVERITIES


def get_metrics(broker) -> str:
    with _NO_PROXY.open(f"http://{broker.http}/metrics", timeout=10) as r:
        assert r.status == 200
        return r.read().decode()


def exposition(text: str) -> tuple[dict[str, str], set[str]]:
    """({family: type} from the TYPE lines, {sample names})."""
    types, samples = {}, set()
    for line in text.splitlines():
        m = re.match(rf"# TYPE ({_NAME}) (\w+)$", line)
        if m:
            types[m.group(1)] = m.group(2)
        elif line and not line.startswith("#"):
            samples.add(re.match(_NAME, line).group(0))
    return types, samples


@pytest.fixture(scope="module")
def scraped(module_broker_factory) -> str:
    """A broker's /metrics after produce, consume, a group commit behind the end (lag
    series) and a refused fetch (error series)."""
    broker = module_broker_factory()
    topic = "dashboard"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    for i in range(200):
        p.produce(topic, b"x" * 100, partition=i % 2)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "dash",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
    got = 0
    while got < 50:
        got += sum(1 for m in c.consume(50, 1.0) if m.error() is None)
    c.commit(offsets=[TopicPartition(topic, 0, 10), TopicPartition(topic, 1, 20)],
             asynchronous=False)
    c.close()
    bad = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "dash-bad",
                    "auto.offset.reset": "error", "enable.auto.commit": False})
    bad.assign([TopicPartition(topic, 0, 10_000_000)])
    bad.consume(1, 2.0)
    bad.close()
    return get_metrics(broker)


def check_against(text: str, where: str, expr: str) -> list[str]:
    """What is wrong with `expr` against the exposition `text` (nothing: [])."""
    types, samples = exposition(text)
    wrong = []
    for name in sorted(metric_names(expr) - PROMETHEUS_OWN):
        if name not in samples:
            wrong.append(f"{where}: {name} is not in /metrics")
    for arg in call_arguments(expr, "histogram_quantile"):
        for name in metric_names(arg):
            family = name.removesuffix("_bucket")
            if not name.endswith("_bucket") or types.get(family) != "histogram":
                wrong.append(f"{where}: histogram_quantile of {name}, not a histogram's _bucket")
    for fn in ("rate", "irate", "increase"):
        for arg in call_arguments(expr, fn):
            for name in metric_names(arg) - PROMETHEUS_OWN:
                # The TYPE line names a counter with or without its _total.
                counter = name.endswith("_total") and "counter" in (
                    types.get(name), types.get(name[:-6]))
                bucket = re.sub(r"_(bucket|sum|count)$", "", name)
                if not counter and types.get(bucket) != "histogram":
                    wrong.append(f"{where}: {fn}() of {name}, not a counter")
    for fn in ("deriv", "predict_linear"):
        for arg in call_arguments(expr, fn):
            for name in metric_names(arg):
                if types.get(name) != "gauge":
                    wrong.append(f"{where}: {fn}() of {name}, not a gauge")
    return wrong


def test_every_dashboard_query_names_exported_metrics(scraped):
    wrong = [w for title, expr in dashboard_exprs() for w in check_against(scraped, title, expr)]
    assert not wrong, "\n".join(wrong)


def test_every_alert_names_exported_metrics(scraped):
    wrong = [w for r in alert_rules() for w in check_against(scraped, r["alert"], r["expr"])]
    assert not wrong, "\n".join(wrong)


def test_a_name_the_broker_does_not_export_is_caught(scraped):
    # The check itself: a misspelt metric, a gauge given to histogram_quantile and a
    # gauge given to rate() are each reported.
    assert check_against(scraped, "t", "sum(corelog_requests_totl)")
    assert check_against(scraped, "t", "histogram_quantile(0.9, corelog_connections_open)")
    assert check_against(scraped, "t", "rate(corelog_connections_open[5m])")
    assert not check_against(scraped, "t", "rate(corelog_requests_total[5m]) and up")
