"""Apache Kafka's own command-line tools against the real broker, run as a user runs them.

Each check runs a tool of Apache Kafka 4.4.0 (kafka-topics, kafka-configs,
kafka-consumer-groups, the console producer and consumer, kafka-get-offsets,
kafka-delete-records, the producer and consumer perf tests, the verifiable producer and
consumer) through tools/kafka-cli/kafka-cli.sh, the same main classes Kafka's bin/*.sh
scripts start, with ``--bootstrap-server`` pointing at a corelog broker, and asserts what
the tool prints: the describe tables, the offsets, the JSON events.

The expectations are Kafka's: what these tools print against an Apache Kafka 4.4 broker.
Where corelog lacks an API a tool needs, the test fails and its message names what the
tool sent and what came back (the tool's stderr and the broker's error counters).

docs/clients-and-tools.md's "Kafka's CLI tools" section shows commands that these tests run with the
same arguments (modulo the broker address and topic names); test_docs.py runs that section itself.

Skipped when there is no ``java``, or no Kafka jars and no ``mvn`` to fetch them
(``tools/kafka-cli/kafka-cli.sh --fetch``).
"""

from __future__ import annotations

import json
import os
import collections
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer

import kwire as W
from launcher import REPO_ROOT, die_with_parent, wait_until

KAFKA_CLI = REPO_ROOT / "tools" / "kafka-cli" / "kafka-cli.sh"
KAFKA_LIBS = Path(os.environ.get("KAFKA_CLI_LIBS", REPO_ROOT / ".cache" / "kafka" / "libs"))

pytestmark = pytest.mark.skipif(shutil.which(os.environ.get("JAVA", "java")) is None,
                                reason="java not installed (Kafka's CLI tools need a JVM)")

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# ---------------------------------------------------------------------------------------
# running the tools
# ---------------------------------------------------------------------------------------

def broker_errors(broker) -> Counter:
    """{(api, error name): count} from the broker's corelog_errors_total, all shards."""
    if broker is None:
        return Counter()
    try:
        with _NO_PROXY.open(f"http://{broker.http}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return Counter()
    out: Counter = Counter()
    for m in re.finditer(r'^corelog_errors_total\{([^}]*)\} (\S+)$', text, re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        out[(labels.get("api", "?"), f'{labels.get("error", "?")}({labels.get("code", "?")})')] += int(float(m.group(2)))
    return out


class Run:
    """One finished tool run: ``rc``, ``out`` (stdout), ``err`` (stderr)."""

    def __init__(self, argv, rc, out, err, broker, errors_before):
        self.argv, self.rc, self.out, self.err = argv, rc, out, err
        self.broker, self._errors_before = broker, errors_before

    @property
    def lines(self) -> list[str]:
        """stdout's non-blank lines."""
        return [line for line in self.out.splitlines() if line.strip()]

    @property
    def text(self) -> str:
        return self.out + "\n" + self.err

    def why(self) -> str:
        """What to read when an assertion on this run fails."""
        delta = broker_errors(self.broker)
        delta.subtract(self._errors_before)
        errs = ", ".join(f"{api} {err} x{n}" for (api, err), n in sorted(delta.items()) if n > 0)
        interesting = [line for line in self.err.splitlines()
                       if re.search(r"Exception|does not support|ERROR|WARN|Error|error", line)
                       and not line.lstrip().startswith("at ")]
        return (f"\n$ kafka-cli.sh {' '.join(self.argv)}\nrc={self.rc}\n"
                f"--- stdout (tail)\n{self.out[-3000:]}\n"
                f"--- stderr (errors, warnings)\n" + "\n".join(interesting[-40:]) +
                f"\n--- broker error responses during the run: {errs or 'none'}")


class _Jvm:
    """JVM options that make the many short tool runs cheaper on a small machine, without
    changing what the tools do: C1 only (-XX:TieredStopAtLevel=1), and a class-data-sharing
    archive of Kafka's classes that the first run dumps and every later run maps
    (-XX:ArchiveClassesAtExit / -XX:SharedArchiveFile; about a third of the CPU time of
    kafka-topics --describe). The user's KAFKA_OPTS come last. Set by the kafka_tools
    fixture."""
    archive: Path | None = None
    dumping = False

    @classmethod
    def env(cls) -> dict:
        opts = ["-XX:TieredStopAtLevel=1", "-Xlog:cds*=off"]  # (the JVM logs CDS warnings on stdout)
        if cls.archive is not None:
            if cls.archive.exists():
                opts.append(f"-XX:SharedArchiveFile={cls.archive}")
            elif not cls.dumping:
                cls.dumping = True
                opts.append(f"-XX:ArchiveClassesAtExit={cls.archive}")
        return {**os.environ, "KAFKA_OPTS": " ".join(opts + [os.environ.get("KAFKA_OPTS", "")]).strip()}


def kafka(tool: str, *args: str, broker=None, input: str | None = None, timeout: float = 120,
          check: bool = True) -> Run:
    """Run one of Kafka's tools (``kafka-topics.sh`` ...) to completion."""
    argv = [tool, *map(str, args)]
    before = broker_errors(broker)
    p = subprocess.run([str(KAFKA_CLI), *argv], input=input, capture_output=True, text=True, env=_Jvm.env(),
                       timeout=timeout, stdin=None if input is not None else subprocess.DEVNULL)
    r = Run(argv, p.returncode, p.stdout, p.stderr, broker, before)
    if check:
        assert r.rc == 0, f"tool failed{r.why()}"
    return r


class Background:
    """A tool running in the background; its stdout goes to a file (JSON events for the
    verifiable producer and consumer)."""

    def __init__(self, tool: str, *args: str, path: Path, broker=None):
        self.argv = [tool, *map(str, args)]
        self.path, self.broker = path, broker
        self._errors_before = broker_errors(broker)
        self._out = open(path, "w")
        self._err = open(path.with_suffix(".err"), "w")
        self.proc = subprocess.Popen([str(KAFKA_CLI), *self.argv], stdin=subprocess.DEVNULL,
                                     stdout=self._out, stderr=self._err,
                                     env=_Jvm.env(), preexec_fn=die_with_parent)

    def text(self) -> str:
        return self.path.read_text()

    def events(self, name: str | None = None) -> list[dict]:
        out = []
        for line in self.text().splitlines():
            if line.startswith("{") and line.endswith("}"):
                e = json.loads(line)
                if name is None or e.get("name") == name:
                    out.append(e)
        return out

    def wait_for(self, what: str, pred, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return
            if self.proc.poll() is not None and not pred():
                break
            time.sleep(0.2)
        raise AssertionError(f"{what}: not seen within {timeout}s{self.why()}")

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM (the tools' shutdown hooks close their clients cleanly) and wait."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self._out.close()
        self._err.close()
        return rc

    def why(self) -> str:
        err = self.path.with_suffix(".err").read_text()
        r = Run(self.argv, self.proc.poll(), self.text(), err, self.broker, self._errors_before)
        return r.why()


def table(run: Run, first: str = "GROUP") -> list[dict]:
    """Rows of the (last) whitespace-aligned table whose header starts with ``first``
    (kafka-consumer-groups' describe and reset tables)."""
    lines = run.out.splitlines()
    starts = [i for i, line in enumerate(lines) if line.split()[:1] == [first]]
    assert starts, f"no table with header {first!r}{run.why()}"
    header = lines[starts[-1]].split()
    rows = []
    for line in lines[starts[-1] + 1:]:
        if not line.strip():
            break
        cells = line.split()
        assert len(cells) == len(header), f"row {line!r} does not fit header {header}{run.why()}"
        rows.append(dict(zip(header, cells)))
    return rows


def describe_topic(run: Run) -> tuple[dict, list[dict]]:
    """kafka-topics --describe of one topic: (topic line, partition lines) as dicts of the
    tab-separated ``Key: value`` fields."""
    def fields(line):
        out = {}
        for cell in line.strip("\n").split("\t"):
            if cell.strip():
                k, _, v = cell.strip().partition(":")
                out[k] = v.strip()
        return out
    lines = [line for line in run.out.splitlines() if line.strip()]
    heads = [fields(line) for line in lines if line.startswith("Topic:")]
    parts = [fields(line) for line in lines if line.startswith("\t")]
    assert len(heads) == 1, f"expected one topic in the describe output{run.why()}"
    return heads[0], parts


def topic_configs(head: dict) -> dict:
    """The ``Configs:`` cell of a kafka-topics describe line as {key: value}."""
    cell = head.get("Configs", "")
    return dict(kv.split("=", 1) for kv in cell.split(",") if kv)


CONFIG_LINE = re.compile(r"^  (?P<name>[^=\s]+)=(?P<value>.*) sensitive=(?P<sensitive>true|false) "
                         r"synonyms=\{(?P<synonyms>.*)\}$")


def config_entries(run: Run) -> dict[str, tuple[str, list[str]]]:
    """kafka-configs --describe of one entity: {name: (value, [synonym "SOURCE:name=value"...])}."""
    out = {}
    for line in run.out.splitlines():
        m = CONFIG_LINE.match(line)
        if m:
            syn = [s for s in m.group("synonyms").split(", ") if s]
            out[m.group("name")] = (m.group("value"), syn)
    return out


def quota_lines(run: Run) -> dict[str, dict[str, float]]:
    """kafka-configs --describe of quota entities: {entity: {key: value}}."""
    out = {}
    for line in run.lines:
        m = re.match(r"^Quota configs for (.*) are (.*)$", line)
        if m:
            out[m.group(1)] = {k: float(v) for k, v in
                               (kv.split("=", 1) for kv in m.group(2).split(", ") if kv)}
    return out


def offsets(run: Run) -> dict[tuple[str, int], int]:
    """kafka-get-offsets' ``topic:partition:offset`` lines."""
    out = {}
    for line in run.lines:
        m = re.match(r"^(.+):(\d+):(-?\d+)$", line)
        assert m, f"unexpected kafka-get-offsets line {line!r}{run.why()}"
        out[(m.group(1), int(m.group(2)))] = int(m.group(3))
    return out


def no_deprecation_warning(run: Run) -> None:
    assert "deprecated" not in run.text.lower(), f"the current spelling printed a deprecation warning{run.why()}"


def api_note(broker, key: int, name: str, min_version: int = 0) -> str:
    """What the broker's ApiVersions says about one API the tool needs."""
    try:
        _, body = W.roundtrip(broker.bootstrap, W.api_versions_v0(1))
        _, apis = W.parse_api_versions_v0(body)
    except Exception as e:  # noqa: BLE001 - only for a failure message
        return f"\n--- (ApiVersions probe failed: {e!r})"
    if key not in apis:
        return f"\n--- the broker does not advertise {name} (API key {key}); the tool needs v{min_version}+"
    lo, hi = apis[key]
    return f"\n--- the broker advertises {name} (API key {key}) v{lo}-v{hi}; the tool needs v{min_version}+"


# ---------------------------------------------------------------------------------------
# fixtures
# ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def kafka_tools(tmp_path_factory):
    """Kafka's jars in .cache/kafka/libs (fetched with Maven when missing)."""
    _Jvm.archive, _Jvm.dumping = tmp_path_factory.mktemp("kafka-cli-cds") / "kafka-tools.jsa", False
    if not (KAFKA_LIBS.is_dir() and any(KAFKA_LIBS.glob("kafka-tools-*.jar"))):
        if shutil.which("mvn") is None:
            pytest.skip(f"Kafka's jars are not in {KAFKA_LIBS} and mvn is not installed to fetch them "
                        f"(tools/kafka-cli/kafka-cli.sh --fetch)")
        subprocess.run([str(KAFKA_CLI), "--fetch"], check=True, timeout=1200)
    return KAFKA_LIBS


# Kafka's tests run their brokers with group.initial.rebalance.delay.ms=0 too: a group's
# first member joins at once instead of waiting 3 s for more.
BROKER_ARGS = ["--group-initial-rebalance-delay-ms", "0"]


@pytest.fixture(scope="module")
def kb(kafka_tools, module_broker_factory):
    """One broker for the checks that do not change broker-wide state."""
    return module_broker_factory(extra_args=BROKER_ARGS, name="kafka-cli")


@pytest.fixture
def fresh(kafka_tools, broker_factory):
    """A broker of its own, for checks that change broker-wide state (broker configs,
    default quotas)."""
    return broker_factory(extra_args=BROKER_ARGS, name="kafka-cli-own")


def produce_lines(broker, topic: str, lines: list[str]) -> Run:
    r = kafka("kafka-console-producer.sh", "--bootstrap-server", broker.bootstrap, "--topic", topic,
              "--reader-property", "parse.key=true", "--reader-property", "key.separator=:",
              "--command-property", "acks=all",
              broker=broker, input="".join(f"{line}\n" for line in lines))
    no_deprecation_warning(r)
    return r


def end_offsets(broker, topic: str) -> dict[int, int]:
    r = kafka("kafka-get-offsets.sh", "--bootstrap-server", broker.bootstrap, "--topic", topic,
              "--time", "-1", broker=broker)
    return {p: o for (t, p), o in offsets(r).items() if t == topic}


# ---------------------------------------------------------------------------------------
# kafka-topics
# ---------------------------------------------------------------------------------------

def test_topics_create_describe_alter_list_delete(kb):
    bs = kb.bootstrap
    topic = "cli-topics"

    r = kafka("kafka-topics.sh", "--bootstrap-server", bs, "--create", "--topic", topic,
              "--partitions", "3", "--config", "retention.ms=3600000",
              "--config", "max.message.bytes=2000000", broker=kb)
    assert r.lines == [f"Created topic {topic}."], r.why()

    r = kafka("kafka-topics.sh", "--bootstrap-server", bs, "--describe", "--topic", topic, broker=kb)
    head, parts = describe_topic(r)
    assert head["Topic"] == topic, r.why()
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", head["TopicId"]) and head["TopicId"] != "AAAAAAAAAAAAAAAAAAAAAA", r.why()
    assert head["PartitionCount"] == "3" and head["ReplicationFactor"] == "1", r.why()
    assert topic_configs(head) == {"retention.ms": "3600000", "max.message.bytes": "2000000"}, r.why()
    assert [(p["Topic"], p["Partition"], p["Leader"], p["Replicas"], p["Isr"]) for p in parts] == \
        [(topic, str(i), "0", "0", "0") for i in range(3)], r.why()
    topic_id = head["TopicId"]

    # more partitions: nothing printed on success, the describe shows them
    r = kafka("kafka-topics.sh", "--bootstrap-server", bs, "--alter", "--topic", topic,
              "--partitions", "5", broker=kb)
    assert r.lines == [], r.why()
    r = kafka("kafka-topics.sh", "--bootstrap-server", bs, "--describe", "--topic", topic, broker=kb)
    head, parts = describe_topic(r)
    assert head["PartitionCount"] == "5" and head["TopicId"] == topic_id, r.why()
    assert [p["Partition"] for p in parts] == ["0", "1", "2", "3", "4"], r.why()
    assert all(p["Leader"] == "0" and p["Isr"] == "0" for p in parts), r.why()

    # fewer partitions is not an increase; a second create is TopicExists; a bad config is refused
    r = kafka("kafka-topics.sh", "--bootstrap-server", bs, "--alter", "--topic", topic,
              "--partitions", "2", broker=kb, check=False)
    assert r.rc == 1 and "InvalidPartitionsException" in r.err, r.why()
    r = kafka("kafka-topics.sh", "--bootstrap-server", bs, "--create", "--topic", topic,
              "--partitions", "1", broker=kb, check=False)
    assert r.rc == 1 and "TopicExistsException" in r.err, r.why()
    r = kafka("kafka-topics.sh", "--bootstrap-server", bs, "--create", "--topic", "cli-topics-bad",
              "--config", "no.such.config=1", broker=kb, check=False)
    assert r.rc == 1 and "InvalidConfigurationException" in r.err, r.why()

    # --list: every topic, internal ones too unless --exclude-internal
    r = kafka("kafka-topics.sh", "--bootstrap-server", bs, "--list", broker=kb)
    listed = set(r.lines)
    assert topic in listed and "cli-topics-bad" not in listed, r.why()
    r2 = kafka("kafka-topics.sh", "--bootstrap-server", bs, "--list", "--exclude-internal", broker=kb)
    assert topic in r2.lines and not any(t.startswith("__") for t in r2.lines), r2.why()
    assert listed - set(r2.lines) <= {"__consumer_offsets"}, r2.why()

    # --delete, then it is gone
    r = kafka("kafka-topics.sh", "--bootstrap-server", bs, "--delete", "--topic", topic, broker=kb)
    assert r.lines == [], r.why()
    r = kafka("kafka-topics.sh", "--bootstrap-server", bs, "--list", broker=kb)
    assert topic not in r.lines, r.why()
    r = kafka("kafka-topics.sh", "--bootstrap-server", bs, "--describe", "--topic", topic,
              broker=kb, check=False)
    assert r.rc == 1 and f"Topic '{topic}' does not exist as expected" in r.out, r.why()


def test_topics_describe_shows_eligible_leader_replicas(kb):
    """Against a Kafka 4.x broker, kafka-topics --describe reads partitions with
    DescribeTopicPartitions (API 75) and prints the (empty) ELR lists, "Elr: " and
    "LastKnownElr: "; "N/A" is what it prints when it had to fall back to Metadata."""
    topic = "cli-elr"
    kafka("kafka-topics.sh", "--bootstrap-server", kb.bootstrap, "--create", "--topic", topic,
          "--partitions", "2", broker=kb)
    r = kafka("kafka-topics.sh", "--bootstrap-server", kb.bootstrap, "--describe", "--topic", topic, broker=kb)
    _, parts = describe_topic(r)
    assert [(p["Partition"], p["Elr"], p["LastKnownElr"]) for p in parts] == \
        [("0", "", ""), ("1", "", "")], r.why() + api_note(kb, 75, "DescribeTopicPartitions")


# ---------------------------------------------------------------------------------------
# kafka-configs
# ---------------------------------------------------------------------------------------

def test_configs_group_alter_describe_delete(kb):
    """kafka-configs --entity-type groups (Kafka 4): a group's consumer.* configs are set,
    described as the group's (DYNAMIC_GROUP_CONFIG), refused out of the broker's bounds, and
    deleted back to the broker's value."""
    bs = kb.bootstrap
    group = "cli-group-configs"

    def configs(*args):
        return kafka("kafka-configs.sh", "--bootstrap-server", bs, "--entity-type", "groups",
                     "--entity-name", group, *args, broker=kb, check=False)

    r = configs("--alter", "--add-config", "consumer.session.timeout.ms=50000,consumer.heartbeat.interval.ms=6000")
    assert r.lines == [f"Completed updating config for group {group}."], r.why()
    got = config_entries(configs("--describe"))
    assert got["consumer.session.timeout.ms"][0] == "50000", got
    assert got["consumer.session.timeout.ms"][1][0] == "DYNAMIC_GROUP_CONFIG:consumer.session.timeout.ms=50000", got
    assert got["consumer.heartbeat.interval.ms"][0] == "6000", got
    r = configs("--alter", "--add-config", "consumer.session.timeout.ms=1000")
    assert r.rc != 0 and "group.consumer.min.session.timeout.ms" in r.out + r.err, r.why()
    r = configs("--alter", "--delete-config", "consumer.heartbeat.interval.ms")
    assert r.lines == [f"Completed updating config for group {group}."], r.why()
    got = config_entries(configs("--describe"))
    assert "consumer.heartbeat.interval.ms" not in got or got["consumer.heartbeat.interval.ms"][0] == "5000", got
    assert got["consumer.session.timeout.ms"][0] == "50000", got


def test_configs_topic_describe_alter_delete(kb):
    bs = kb.bootstrap
    topic = "cli-configs"
    kafka("kafka-topics.sh", "--bootstrap-server", bs, "--create", "--topic", topic, "--partitions", "1",
          "--config", "max.message.bytes=2000000", broker=kb)

    def describe(*extra):
        return kafka("kafka-configs.sh", "--bootstrap-server", bs, "--entity-type", "topics",
                     "--entity-name", topic, "--describe", *extra, broker=kb)

    r = describe()
    assert r.lines[0] == f"Dynamic configs for topic {topic} are:", r.why()
    assert r.lines[1:] == ["  max.message.bytes=2000000 sensitive=false synonyms="
                           "{DYNAMIC_TOPIC_CONFIG:max.message.bytes=2000000, DEFAULT_CONFIG:message.max.bytes=1048588}"], r.why()

    r = kafka("kafka-configs.sh", "--bootstrap-server", bs, "--entity-type", "topics", "--entity-name", topic,
              "--alter", "--add-config", "retention.ms=7200000,segment.ms=3600000", broker=kb)
    assert r.lines == [f"Completed updating config for topic {topic}."], r.why()
    r = kafka("kafka-configs.sh", "--bootstrap-server", bs, "--entity-type", "topics", "--entity-name", topic,
              "--alter", "--delete-config", "max.message.bytes", broker=kb)
    assert r.lines == [f"Completed updating config for topic {topic}."], r.why()

    r = describe()
    got = config_entries(r)
    assert sorted(got) == ["retention.ms", "segment.ms"], r.why()
    assert got["retention.ms"][0] == "7200000" and got["segment.ms"][0] == "3600000", r.why()
    assert got["retention.ms"][1][0] == "DYNAMIC_TOPIC_CONFIG:retention.ms=7200000", r.why()
    assert got["segment.ms"][1][0] == "DYNAMIC_TOPIC_CONFIG:segment.ms=3600000", r.why()
    assert [line.split("=")[0] for line in r.lines[1:]] == ["  retention.ms", "  segment.ms"], \
        "entries are printed sorted by name" + r.why()

    # --all: the deleted override is back to the broker default
    r = describe("--all")
    assert r.lines[0] == f"All configs for topic {topic} are:", r.why()
    got = config_entries(r)
    assert got["max.message.bytes"] == ("1048588", ["DEFAULT_CONFIG:message.max.bytes=1048588"]), r.why()
    assert got["retention.ms"][0] == "7200000" and got["segment.bytes"][0] == "1073741824", r.why()

    # kafka-topics --describe shows the overrides too
    r = kafka("kafka-topics.sh", "--bootstrap-server", bs, "--describe", "--topic", topic, broker=kb)
    head, _ = describe_topic(r)
    assert topic_configs(head) == {"retention.ms": "7200000", "segment.ms": "3600000"}, r.why()

    # a bad value is INVALID_CONFIG and changes nothing
    r = kafka("kafka-configs.sh", "--bootstrap-server", bs, "--entity-type", "topics", "--entity-name", topic,
              "--alter", "--add-config", "retention.ms=abc", broker=kb, check=False)
    assert r.rc == 1 and "InvalidConfigurationException" in r.err, r.why()
    r = describe()
    assert config_entries(r)["retention.ms"][0] == "7200000", r.why()


def test_configs_dynamic_broker_config(fresh):
    """log.retention.ms is a cluster-wide dynamic broker config in Kafka (it may also be set
    per broker): set per broker (DYNAMIC_BROKER_CONFIG) and as the cluster default
    (DYNAMIC_DEFAULT_BROKER_CONFIG), the per-broker value wins, and a topic without an
    override inherits whichever applies."""
    bs = fresh.bootstrap
    topic = "cli-broker-config"
    kafka("kafka-topics.sh", "--bootstrap-server", bs, "--create", "--topic", topic, "--partitions", "1", broker=fresh)

    def topic_retention():
        r = kafka("kafka-configs.sh", "--bootstrap-server", bs, "--entity-type", "topics", "--entity-name", topic,
                  "--describe", "--all", broker=fresh)
        value, synonyms = config_entries(r)["retention.ms"]
        return value, synonyms[0] if synonyms else None

    r = kafka("kafka-configs.sh", "--bootstrap-server", bs, "--entity-type", "brokers", "--entity-name", "0",
              "--describe", broker=fresh)
    assert r.lines == ["Dynamic configs for broker 0 are:"], r.why()

    # per broker
    r = kafka("kafka-configs.sh", "--bootstrap-server", bs, "--entity-type", "brokers", "--entity-name", "0",
              "--alter", "--add-config", "log.retention.ms=86400000", broker=fresh, check=False)
    assert r.rc == 0 and r.lines == ["Completed updating config for broker 0."], r.why()
    r = kafka("kafka-configs.sh", "--bootstrap-server", bs, "--entity-type", "brokers", "--entity-name", "0",
              "--describe", broker=fresh)
    assert r.lines[0] == "Dynamic configs for broker 0 are:", r.why()
    got = config_entries(r)
    assert list(got) == ["log.retention.ms"], r.why()
    assert got["log.retention.ms"][0] == "86400000", r.why()
    assert got["log.retention.ms"][1][0] == "DYNAMIC_BROKER_CONFIG:log.retention.ms=86400000", r.why()
    assert topic_retention() == ("86400000", "DYNAMIC_BROKER_CONFIG:log.retention.ms=86400000")

    # the cluster-wide default: below the per-broker value
    r = kafka("kafka-configs.sh", "--bootstrap-server", bs, "--entity-type", "brokers", "--entity-default",
              "--alter", "--add-config", "log.retention.ms=172800000", broker=fresh, check=False)
    assert r.rc == 0 and r.lines == ["Completed updating default config for brokers in the cluster."], r.why()
    r = kafka("kafka-configs.sh", "--bootstrap-server", bs, "--entity-type", "brokers", "--entity-default",
              "--describe", broker=fresh)
    assert r.lines == ["Default configs for brokers in the cluster are:",
                       "  log.retention.ms=172800000 sensitive=false synonyms="
                       "{DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=172800000}"], r.why()
    r = kafka("kafka-configs.sh", "--bootstrap-server", bs, "--entity-type", "brokers", "--entity-name", "0",
              "--describe", "--all", broker=fresh)
    value, synonyms = config_entries(r)["log.retention.ms"]
    assert (value, synonyms[:2]) == ("86400000", ["DYNAMIC_BROKER_CONFIG:log.retention.ms=86400000",
                                                  "DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=172800000"]), r.why()
    assert topic_retention() == ("86400000", "DYNAMIC_BROKER_CONFIG:log.retention.ms=86400000")

    # drop the per-broker value: the default applies
    r = kafka("kafka-configs.sh", "--bootstrap-server", bs, "--entity-type", "brokers", "--entity-name", "0",
              "--alter", "--delete-config", "log.retention.ms", broker=fresh)
    assert r.lines == ["Completed updating config for broker 0."], r.why()
    assert topic_retention() == ("172800000", "DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=172800000")

    # drop the default: back to the static value
    r = kafka("kafka-configs.sh", "--bootstrap-server", bs, "--entity-type", "brokers", "--entity-default",
              "--alter", "--delete-config", "log.retention.ms", broker=fresh)
    assert r.lines == ["Completed updating default config for brokers in the cluster."], r.why()
    value, source = topic_retention()
    assert value == "604800000" and source is not None and source.split(":")[0] in (
        "STATIC_BROKER_CONFIG", "DEFAULT_CONFIG"), (value, source)


def test_configs_client_quotas(fresh):
    bs = fresh.bootstrap
    # the spelling docs/quotas-and-limits.md's "Quotas" section shows
    r = kafka("kafka-configs.sh", "--bootstrap-server", bs, "--alter", "--entity-type", "clients",
              "--entity-name", "greedy", "--add-config", "producer_byte_rate=1048576", broker=fresh)
    assert r.lines == ["Completed updating config for client greedy."], r.why()
    r = kafka("kafka-configs.sh", "--bootstrap-server", bs, "--entity-type", "clients", "--entity-name", "greedy",
              "--alter", "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152", broker=fresh)
    assert r.lines == ["Completed updating config for client greedy."], r.why()
    r = kafka("kafka-configs.sh", "--bootstrap-server", bs, "--entity-type", "clients", "--entity-name", "greedy",
              "--describe", broker=fresh)
    assert quota_lines(r) == {"client-id 'greedy'": {"producer_byte_rate": 1048576.0,
                                                     "consumer_byte_rate": 2097152.0}}, r.why()
    assert len(r.lines) == 1, r.why()

    r = kafka("kafka-configs.sh", "--bootstrap-server", bs, "--entity-type", "clients", "--entity-default",
              "--alter", "--add-config", "producer_byte_rate=4194304", broker=fresh)
    assert r.lines == ["Completed updating default config for clients in the cluster."], r.why()
    r = kafka("kafka-configs.sh", "--bootstrap-server", bs, "--entity-type", "clients", "--describe", broker=fresh)
    assert quota_lines(r) == {"client-id 'greedy'": {"producer_byte_rate": 1048576.0, "consumer_byte_rate": 2097152.0},
                              "the default client-id": {"producer_byte_rate": 4194304.0}}, r.why()

    r = kafka("kafka-configs.sh", "--bootstrap-server", bs, "--entity-type", "clients", "--entity-name", "greedy",
              "--alter", "--delete-config", "consumer_byte_rate", broker=fresh)
    assert r.lines == ["Completed updating config for client greedy."], r.why()
    r = kafka("kafka-configs.sh", "--bootstrap-server", bs, "--entity-type", "clients", "--entity-name", "greedy",
              "--describe", broker=fresh)
    assert r.lines == ["Quota configs for client-id 'greedy' are producer_byte_rate=1048576.0"], r.why()

    # deleting a key the entity does not have is refused by the tool (it reads the quotas first)
    r = kafka("kafka-configs.sh", "--bootstrap-server", bs, "--entity-type", "clients", "--entity-name", "greedy",
              "--alter", "--delete-config", "consumer_byte_rate", broker=fresh, check=False)
    assert r.rc == 1 and "Invalid config(s): consumer_byte_rate" in r.text, r.why()

    r = kafka("kafka-configs.sh", "--bootstrap-server", bs, "--entity-type", "clients", "--entity-default",
              "--alter", "--delete-config", "producer_byte_rate", broker=fresh)
    r = kafka("kafka-configs.sh", "--bootstrap-server", bs, "--entity-type", "clients", "--describe", broker=fresh)
    assert quota_lines(r) == {"client-id 'greedy'": {"producer_byte_rate": 1048576.0}}, r.why()


def test_configs_user_quotas(fresh):
    """User quotas: describing users also lists their SCRAM credentials
    (DescribeUserScramCredentials); a user without credentials shows just its quotas."""
    bs = fresh.bootstrap
    r = kafka("kafka-configs.sh", "--bootstrap-server", bs, "--entity-type", "users", "--entity-name", "alice",
              "--alter", "--add-config", "producer_byte_rate=1048576", broker=fresh)
    assert r.lines == ["Completed updating config for user alice."], r.why()
    r = kafka("kafka-configs.sh", "--bootstrap-server", bs, "--entity-type", "users", "--entity-name", "alice",
              "--describe", broker=fresh, check=False)
    scram = api_note(fresh, 50, "DescribeUserScramCredentials")
    assert r.rc == 0 and r.lines == ["Quota configs for user-principal 'alice' are producer_byte_rate=1048576.0"], \
        r.why() + scram
    r = kafka("kafka-configs.sh", "--bootstrap-server", bs, "--entity-type", "users", "--describe",
              broker=fresh, check=False)
    assert r.rc == 0 and r.lines == ["Quota configs for user-principal 'alice' are producer_byte_rate=1048576.0"], \
        r.why() + scram


# ---------------------------------------------------------------------------------------
# console producer / consumer, consumer groups
# ---------------------------------------------------------------------------------------

def test_console_producer_consumer_keys_and_groups(kb):
    bs = kb.bootstrap
    topic = "cli-console"
    kafka("kafka-topics.sh", "--bootstrap-server", bs, "--create", "--topic", topic, "--partitions", "1", broker=kb)
    produce_lines(kb, topic, ["k1:hello", "k2:hello world", "k3:\u00e9t\u00e9"])

    # --from-beginning as a group member; --max-messages ends it (and commits on close)
    r = kafka("kafka-console-consumer.sh", "--bootstrap-server", bs, "--topic", topic, "--from-beginning",
              "--max-messages", "3", "--formatter-property", "print.key=true",
              "--formatter-property", "key.separator=:", "--group", "cli-console-group", broker=kb)
    no_deprecation_warning(r)
    assert r.lines == ["k1:hello", "k2:hello world", "k3:\u00e9t\u00e9"], r.why()
    assert "Processed a total of 3 messages" in r.err, r.why()

    # the group resumes from its committed offset: only the new records
    produce_lines(kb, topic, ["k4:four", "k5:five"])
    r = kafka("kafka-console-consumer.sh", "--bootstrap-server", bs, "--topic", topic, "--from-beginning",
              "--max-messages", "2", "--formatter-property", "print.key=true",
              "--formatter-property", "print.offset=true", "--formatter-property", "print.partition=true",
              "--group", "cli-console-group", broker=kb)
    assert r.lines == ["Partition:0\tOffset:3\tk4\tfour", "Partition:0\tOffset:4\tk5\tfive"], r.why()

    # without a group, --from-beginning reads everything again
    r = kafka("kafka-console-consumer.sh", "--bootstrap-server", bs, "--topic", topic, "--from-beginning",
              "--max-messages", "5", "--formatter-property", "print.key=true", broker=kb)
    assert r.lines == ["k1\thello", "k2\thello world", "k3\t\u00e9t\u00e9", "k4\tfour", "k5\tfive"], r.why()

    # what the group committed
    r = kafka("kafka-consumer-groups.sh", "--bootstrap-server", bs, "--describe", "--group", "cli-console-group", broker=kb)
    assert [(row["TOPIC"], row["PARTITION"], row["CURRENT-OFFSET"], row["LOG-END-OFFSET"], row["LAG"])
            for row in table(r)] == [(topic, "0", "5", "5", "0")], r.why()


def test_share_groups_console_share_consumer_and_kafka_share_groups(kb):
    """KIP-932 from Kafka's own tools: kafka-configs sets the group's
    share.auto.offset.reset, kafka-console-share-consumer reads and accepts, and
    kafka-share-groups lists, describes (start offsets, members), resets, deletes the
    offsets of a topic and deletes the group."""
    bs = kb.bootstrap
    topic, group = "cli-share", "cli-share-group"
    kafka("kafka-topics.sh", "--bootstrap-server", bs, "--create", "--topic", topic, "--partitions", "1", broker=kb)
    kafka("kafka-configs.sh", "--bootstrap-server", bs, "--entity-type", "groups", "--entity-name", group,
          "--alter", "--add-config", "share.auto.offset.reset=earliest", broker=kb)
    produce_lines(kb, topic, [f"k{i}:v{i}" for i in range(10)])

    def share_consume(n: int) -> Run:
        return kafka("kafka-console-share-consumer.sh", "--bootstrap-server", bs, "--topic", topic,
                     "--group", group, "--max-messages", str(n), broker=kb)

    r = share_consume(10)
    assert r.lines == [f"v{i}" for i in range(10)], r.why()

    r = kafka("kafka-share-groups.sh", "--bootstrap-server", bs, "--list", broker=kb)
    assert group in r.lines, r.why()
    r = kafka("kafka-share-groups.sh", "--bootstrap-server", bs, "--describe", "--group", group, broker=kb)
    assert [(row["GROUP"], row["TOPIC"], row["PARTITION"], row["START-OFFSET"]) for row in table(r)] == \
        [(group, topic, "0", "10")], r.why()
    r = kafka("kafka-share-groups.sh", "--bootstrap-server", bs, "--describe", "--group", group, "--state", broker=kb)
    assert [(row["STATE"], row["#MEMBERS"]) for row in table(r)] == [("Empty", "0")], r.why()

    # Back to the start: every record is delivered again.
    r = kafka("kafka-share-groups.sh", "--bootstrap-server", bs, "--reset-offsets", "--group", group,
              "--topic", topic, "--to-earliest", "--execute", broker=kb)
    assert [(row["TOPIC"], row["PARTITION"], row["NEW-OFFSET"]) for row in table(r)] == [(topic, "0", "0")], r.why()
    r = share_consume(10)
    assert r.lines == [f"v{i}" for i in range(10)], r.why()

    r = kafka("kafka-share-groups.sh", "--bootstrap-server", bs, "--delete-offsets", "--group", group,
              "--topic", topic, broker=kb)
    assert r.rc == 0 and "Successful" in r.text, r.why()
    r = kafka("kafka-share-groups.sh", "--bootstrap-server", bs, "--delete", "--group", group, broker=kb)
    assert r.rc == 0 and "successful" in r.text.lower(), r.why()
    r = kafka("kafka-share-groups.sh", "--bootstrap-server", bs, "--list", broker=kb)
    assert group not in r.lines, r.why()


def test_consumer_groups_list_describe_reset_delete(kb, tmp_path):
    bs = kb.bootstrap
    topic = "cli-groups"
    group = "cli-group"
    kafka("kafka-topics.sh", "--bootstrap-server", bs, "--create", "--topic", topic, "--partitions", "2", broker=kb)
    produce_lines(kb, topic, [f"k{i}:v{i}" for i in range(20)])
    ends = end_offsets(kb, topic)
    assert sum(ends.values()) == 20 and min(ends.values()) >= 2, ends

    r = kafka("kafka-console-consumer.sh", "--bootstrap-server", bs, "--topic", topic, "--group", group,
              "--from-beginning", "--max-messages", "20", broker=kb)
    assert sorted(r.lines) == sorted(f"v{i}" for i in range(20)), r.why()

    r = kafka("kafka-consumer-groups.sh", "--bootstrap-server", bs, "--list", broker=kb)
    assert group in r.lines, r.why()

    r = kafka("kafka-consumer-groups.sh", "--bootstrap-server", bs, "--describe", "--group", group, broker=kb)
    rows = sorted(table(r), key=lambda row: int(row["PARTITION"]))
    assert [(row["GROUP"], row["TOPIC"], row["PARTITION"], row["CURRENT-OFFSET"], row["LOG-END-OFFSET"], row["LAG"],
             row["CONSUMER-ID"], row["HOST"], row["CLIENT-ID"]) for row in rows] == \
        [(group, topic, str(p), str(ends[p]), str(ends[p]), "0", "-", "-", "-") for p in (0, 1)], r.why()
    assert f"Consumer group '{group}' has no active members." in r.text, r.why()

    r = kafka("kafka-consumer-groups.sh", "--bootstrap-server", bs, "--describe", "--group", group, "--state", broker=kb)
    (row,) = table(r)
    assert (row["GROUP"], row["COORDINATOR"], row["(ID)"], row["STATE"], row["#MEMBERS"]) == \
        (group, bs, "(0)", "Empty", "0"), r.why()

    # --reset-offsets --to-earliest, then one partition --to-offset
    r = kafka("kafka-consumer-groups.sh", "--bootstrap-server", bs, "--group", group, "--topic", topic,
              "--reset-offsets", "--to-earliest", "--execute", broker=kb)
    assert sorted((row["TOPIC"], row["PARTITION"], row["NEW-OFFSET"]) for row in table(r)) == \
        [(topic, "0", "0"), (topic, "1", "0")], r.why()
    r = kafka("kafka-consumer-groups.sh", "--bootstrap-server", bs, "--group", group, "--topic", f"{topic}:1",
              "--reset-offsets", "--to-offset", "1", "--execute", broker=kb)
    assert [(row["TOPIC"], row["PARTITION"], row["NEW-OFFSET"]) for row in table(r)] == [(topic, "1", "1")], r.why()
    # --dry-run shows, changes nothing
    r = kafka("kafka-consumer-groups.sh", "--bootstrap-server", bs, "--group", group, "--topic", topic,
              "--reset-offsets", "--to-latest", "--dry-run", broker=kb)
    assert sorted((row["PARTITION"], row["NEW-OFFSET"]) for row in table(r)) == \
        [("0", str(ends[0])), ("1", str(ends[1]))], r.why()
    r = kafka("kafka-consumer-groups.sh", "--bootstrap-server", bs, "--describe", "--group", group, broker=kb)
    assert sorted((row["PARTITION"], row["CURRENT-OFFSET"], row["LAG"]) for row in table(r)) == \
        [("0", "0", str(ends[0])), ("1", "1", str(ends[1] - 1))], r.why()

    # the group reads from the reset positions: all of partition 0, partition 1 from offset 1
    n = ends[0] + ends[1] - 1
    r = kafka("kafka-console-consumer.sh", "--bootstrap-server", bs, "--topic", topic, "--group", group,
              "--max-messages", str(n), "--formatter-property", "print.partition=true",
              "--formatter-property", "print.offset=true", broker=kb)
    seen = sorted(tuple(int(c.split(":")[1]) for c in line.split("\t")[:2]) for line in r.lines)
    assert seen == sorted([(0, o) for o in range(ends[0])] + [(1, o) for o in range(1, ends[1])]), r.why()

    # a live member: shown by --members; the group can be neither reset nor deleted
    live = Background("kafka-console-consumer.sh", "--bootstrap-server", bs, "--topic", topic,
                      "--group", "cli-live", "--from-beginning", "--timeout-ms", "120000",
                      path=tmp_path / "live.out", broker=kb)
    try:
        live.wait_for("the live consumer's 20 records", lambda: len(live.text().splitlines()) >= 20)
        r = kafka("kafka-consumer-groups.sh", "--bootstrap-server", bs, "--describe", "--group", "cli-live",
                  "--members", broker=kb)
        (m,) = table(r)
        assert m["GROUP"] == "cli-live" and m["CONSUMER-ID"].startswith("console-consumer-"), r.why()
        assert (m["HOST"], m["CLIENT-ID"], m["#PARTITIONS"]) == ("/127.0.0.1", "console-consumer", "2"), r.why()
        r = kafka("kafka-consumer-groups.sh", "--bootstrap-server", bs, "--describe", "--group", "cli-live",
                  "--state", broker=kb)
        (s,) = table(r)
        assert (s["ASSIGNMENT-STRATEGY"], s["STATE"], s["#MEMBERS"]) == ("range", "Stable", "1"), r.why()
        r = kafka("kafka-consumer-groups.sh", "--bootstrap-server", bs, "--delete", "--group", "cli-live", broker=kb)
        assert "GroupNotEmptyException" in r.text, r.why()
        r = kafka("kafka-consumer-groups.sh", "--bootstrap-server", bs, "--group", "cli-live", "--topic", topic,
                  "--reset-offsets", "--to-earliest", "--execute", broker=kb)
        assert "Assignments can only be reset if the group 'cli-live' is inactive, but the current state is Stable." \
            in r.text, r.why()
    finally:
        live.stop()

    # --delete (the live one too, now that its member has left)
    for g in (group, "cli-live"):
        r = kafka("kafka-consumer-groups.sh", "--bootstrap-server", bs, "--delete", "--group", g, broker=kb)
        assert r.lines == [f"Deletion of requested consumer groups ('{g}') was successful."], r.why()
    r = kafka("kafka-consumer-groups.sh", "--bootstrap-server", bs, "--list", broker=kb)
    assert group not in r.lines and "cli-live" not in r.lines, r.why()
    r = kafka("kafka-consumer-groups.sh", "--bootstrap-server", bs, "--describe", "--group", group,
              broker=kb, check=False)
    assert f"Consumer group '{group}' does not exist." in r.text, r.why()


# ---------------------------------------------------------------------------------------
# kafka-get-offsets, kafka-delete-records
# ---------------------------------------------------------------------------------------

BASE_TS = int(time.time() * 1000) - 3_600_000
# partition 0: the newest timestamp is in the middle; partition 1: increasing
TS_LAYOUT = {0: [BASE_TS + 1000, BASE_TS + 5000, BASE_TS + 3000, BASE_TS + 2000], 1: [BASE_TS + 100, BASE_TS + 200]}


def test_consumer_groups_describe_a_consumer_protocol_group(kb):
    """kafka-consumer-groups shows a KIP-848 group as Kafka does: its members with their
    epochs and target assignments (ConsumerGroupDescribe), the broker's assignor, and the
    group's type in the listing."""
    bs = kb.bootstrap
    topic, group = "cli-kip848", "cli-kip848-group"
    kafka("kafka-topics.sh", "--bootstrap-server", bs, "--create", "--topic", topic, "--partitions", "3", broker=kb)
    produce_lines(kb, topic, [f"k{i}:v{i}" for i in range(9)])
    stop, owned = threading.Event(), []

    def run():
        c = Consumer({"bootstrap.servers": bs, "group.id": group, "group.protocol": "consumer",
                      "client.id": "cli-kip848-member", "auto.offset.reset": "earliest"})
        c.subscribe([topic])
        while not stop.is_set():
            c.poll(0.2)
            owned[:] = c.assignment()
        c.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        wait_until(lambda: len(owned) == 3, 30, "the member owns the three partitions")
        r = kafka("kafka-consumer-groups.sh", "--bootstrap-server", bs, "--describe", "--group", group,
                  "--members", "--verbose", broker=kb)
        rows = table(r)
        assert [(row["CLIENT-ID"], row["#PARTITIONS"], row["CURRENT-ASSIGNMENT"], row["TARGET-ASSIGNMENT"])
                for row in rows] == [("cli-kip848-member", "3", f"{topic}:0,1,2", f"{topic}:0,1,2")], r.why()
        assert rows[0]["CURRENT-EPOCH"] == rows[0]["TARGET-EPOCH"] != "0", r.why()
        r = kafka("kafka-consumer-groups.sh", "--bootstrap-server", bs, "--describe", "--group", group, "--state",
                  broker=kb)
        row = table(r)[0]
        assert (row["ASSIGNMENT-STRATEGY"], row["STATE"], row["#MEMBERS"]) == ("uniform", "Stable", "1"), r.why()
        r = kafka("kafka-consumer-groups.sh", "--bootstrap-server", bs, "--list", "--type", broker=kb)
        assert [line.split() for line in r.lines if line.startswith(group)] == [[group, "Consumer"]], r.why()
    finally:
        stop.set()
        t.join(30)


@pytest.fixture(scope="module")
def ts_topic(kb):
    """A topic whose records carry the create times of TS_LAYOUT."""
    from confluent_kafka import Producer
    topic = "cli-offsets"
    kafka("kafka-topics.sh", "--bootstrap-server", kb.bootstrap, "--create", "--topic", topic,
          "--partitions", "2", broker=kb)
    p = Producer({"bootstrap.servers": kb.bootstrap, "acks": "all", "linger.ms": 50})
    for partition, stamps in TS_LAYOUT.items():
        for i, ts in enumerate(stamps):
            p.produce(topic, value=f"p{partition}-{i}".encode(), partition=partition, timestamp=ts)
    assert p.flush(30) == 0
    return topic


def test_get_offsets_earliest_latest_by_timestamp(kb, ts_topic):
    bs, t = kb.bootstrap, ts_topic
    r = kafka("kafka-get-offsets.sh", "--bootstrap-server", bs, "--topic", t, "--time", "-1", broker=kb)
    assert r.lines == [f"{t}:0:4", f"{t}:1:2"], r.why()
    r = kafka("kafka-get-offsets.sh", "--bootstrap-server", bs, "--topic", t, "--time", "-2", broker=kb)
    assert r.lines == [f"{t}:0:0", f"{t}:1:0"], r.why()
    # the first offset whose timestamp is at or after the given one; none: not printed
    r = kafka("kafka-get-offsets.sh", "--bootstrap-server", bs, "--topic", t, "--time", str(BASE_TS + 2500), broker=kb)
    assert r.lines == [f"{t}:0:1"], r.why()
    r = kafka("kafka-get-offsets.sh", "--bootstrap-server", bs, "--topic-partitions", f"{t}:1",
              "--time", str(BASE_TS + 150), broker=kb)
    assert r.lines == [f"{t}:1:1"], r.why()


def test_get_offsets_max_timestamp(kb, ts_topic):
    """--time -3: the offset of the record with the largest timestamp (ListOffsets v7+,
    KIP-734)."""
    bs, t = kb.bootstrap, ts_topic
    r = kafka("kafka-get-offsets.sh", "--bootstrap-server", bs, "--topic", t, "--time", "-3", broker=kb)
    assert r.lines == [f"{t}:0:1", f"{t}:1:1"], r.why() + api_note(kb, 2, "ListOffsets", 7)


def test_delete_records(kb, tmp_path):
    bs = kb.bootstrap
    topic = "cli-delete-records"
    kafka("kafka-topics.sh", "--bootstrap-server", bs, "--create", "--topic", topic, "--partitions", "2", broker=kb)
    produce_lines(kb, topic, [f"k{i}:v{i}" for i in range(20)])
    ends = end_offsets(kb, topic)
    assert sum(ends.values()) == 20 and min(ends.values()) >= 4, ends

    spec = tmp_path / "delete.json"
    # offset -1: up to the high watermark
    spec.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0, "offset": 3},
                                               {"topic": topic, "partition": 1, "offset": -1}], "version": 1}))
    r = kafka("kafka-delete-records.sh", "--bootstrap-server", bs, "--offset-json-file", spec, broker=kb)
    assert r.lines[:2] == ["Executing records delete operation", "Records delete operation completed:"], r.why()
    assert sorted(r.lines[2:]) == [f"partition: {topic}-0\tlow_watermark: 3",
                                   f"partition: {topic}-1\tlow_watermark: {ends[1]}"], r.why()

    r = kafka("kafka-get-offsets.sh", "--bootstrap-server", bs, "--topic", topic, "--time", "-2", broker=kb)
    assert r.lines == [f"{topic}:0:3", f"{topic}:1:{ends[1]}"], r.why()
    r = kafka("kafka-console-consumer.sh", "--bootstrap-server", bs, "--topic", topic, "--partition", "0",
              "--from-beginning", "--max-messages", str(ends[0] - 3), "--formatter-property", "print.offset=true",
              broker=kb)
    assert [line.split("\t")[0] for line in r.lines] == [f"Offset:{o}" for o in range(3, ends[0])], r.why()

    # beyond the high watermark: OFFSET_OUT_OF_RANGE for that partition
    spec.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0, "offset": ends[0] + 10}],
                                "version": 1}))
    r = kafka("kafka-delete-records.sh", "--bootstrap-server", bs, "--offset-json-file", spec, broker=kb)
    assert r.lines[2:] == [f"partition: {topic}-0\terror: org.apache.kafka.common.errors.OffsetOutOfRangeException: "
                           "The requested offset is not within the range of offsets maintained by the server."], r.why()


# ---------------------------------------------------------------------------------------
# perf tests
# ---------------------------------------------------------------------------------------

PERF_RECORDS = 20000
PERF_LINE = re.compile(r"^(\d+) records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, "
                       r"[\d.]+ ms max latency, \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99.9th\.$")


def consumer_perf_row(r: Run) -> dict:
    header_i = next(i for i, line in enumerate(r.lines) if line.startswith("start.time"))
    header = [h.strip() for h in r.lines[header_i].split(",")]
    return dict(zip(header, (c.strip() for c in r.lines[header_i + 1].split(","))))


def test_producer_and_consumer_perf_test(kb):
    bs = kb.bootstrap
    topic = "cli-perf"
    kafka("kafka-topics.sh", "--bootstrap-server", bs, "--create", "--topic", topic, "--partitions", "2", broker=kb)

    r = kafka("kafka-producer-perf-test.sh", "--bootstrap-server", bs, "--topic", topic,
              "--num-records", PERF_RECORDS, "--record-size", "100", "--throughput", "-1",
              "--command-property", "acks=all", broker=kb, timeout=180)
    no_deprecation_warning(r)
    m = PERF_LINE.match(r.lines[-1])
    assert m and int(m.group(1)) == PERF_RECORDS, r.why()
    assert sum(end_offsets(kb, topic).values()) == PERF_RECORDS

    r = kafka("kafka-consumer-perf-test.sh", "--bootstrap-server", bs, "--topic", topic,
              "--num-records", PERF_RECORDS, broker=kb, timeout=180)
    no_deprecation_warning(r)
    row = consumer_perf_row(r)
    assert int(row["data.consumed.in.nMsg"]) == PERF_RECORDS, r.why()
    assert row["data.consumed.in.MB"] == f"{PERF_RECORDS * 100 / 1024 / 1024:.4f}", r.why()


# ---------------------------------------------------------------------------------------
# verifiable producer and consumer
# ---------------------------------------------------------------------------------------

# exit status of a JVM stopped by SIGTERM after its shutdown hooks ran (128 + 15)
STOPPED = (0, 143)


def test_verifiable_producer_consumer_nothing_lost(kb, tmp_path):
    """Kafka's system-test check: everything the verifiable producer saw acked is consumed,
    exactly once, by a group whose membership changes while it is produced (a second member
    joins, then the first leaves cleanly), and the group's committed offsets end at the log
    end."""
    bs = kb.bootstrap
    topic, group, n = "cli-verifiable", "cli-verifiable-group", 6000
    kafka("kafka-topics.sh", "--bootstrap-server", bs, "--create", "--topic", topic, "--partitions", "3", broker=kb)

    def consumer(name):
        return Background("kafka-verifiable-consumer.sh", "--bootstrap-server", bs, "--topic", topic,
                          "--group-id", group, "--verbose", path=tmp_path / f"{name}.out", broker=kb)

    def consumed(c):
        return len(c.events("record_data"))

    a = consumer("a")
    procs = [a]
    try:
        a.wait_for("consumer a assigned", lambda: a.events("partitions_assigned"))
        producer = Background("kafka-verifiable-producer.sh", "--bootstrap-server", bs, "--topic", topic,
                              "--max-messages", n, "--throughput", "1000", "--acks", "-1",
                              "--repeating-keys", "60", path=tmp_path / "producer.out", broker=kb)
        procs.append(producer)
        a.wait_for("consumer a reading", lambda: consumed(a) >= 200)
        b = consumer("b")
        procs.append(b)
        b.wait_for("consumer b assigned", lambda: any(e["partitions"] for e in b.events("partitions_assigned")))
        assert a.stop() in STOPPED, a.why()
        producer.wait_for("producer done", lambda: producer.proc.poll() is not None, timeout=120)
        assert producer.proc.returncode == 0, producer.why()

        # what the producer saw acked
        assert not producer.events("producer_send_error"), producer.why()
        (tool,) = producer.events("tool_data")
        assert tool["sent"] == n and tool["acked"] == n, producer.why()
        acked = {(e["partition"], e["offset"]): (e["key"], e["value"]) for e in producer.events("producer_send_success")}
        assert len(acked) == n and sorted(int(v) for _, v in acked.values()) == list(range(n)), producer.why()
        ends = {}
        for p, o in acked:
            ends[p] = max(ends.get(p, 0), o + 1)
        assert sorted(ends) == [0, 1, 2] and sum(ends.values()) == n, ("acked offsets leave gaps", ends)
        assert end_offsets(kb, topic) == ends

        def committed():
            last = {}
            for c in (a, b):
                for e in c.events("offsets_committed"):
                    assert e["success"], c.why()
                    for o in e["offsets"]:
                        last[o["partition"]] = max(last.get(o["partition"], 0), o["offset"])
            return last

        b.wait_for("group committed to the log end", lambda: committed() == ends, timeout=120)

        def b_owns_all():
            assigned = b.events("partitions_assigned")
            return assigned and sorted(p["partition"] for p in assigned[-1]["partitions"]) == [0, 1, 2]
        # a's leave is a rebalance b takes part in (on its next heartbeat) before it is stopped
        b.wait_for("b assigned every partition after a left", b_owns_all, timeout=60)
        assert b.stop() in STOPPED, b.why()
    finally:
        for proc in procs:
            proc.stop()

    # every acked record consumed exactly once, as produced
    got = Counter()
    for c in (a, b):
        for e in c.events("record_data"):
            got[(e["partition"], e["offset"])] += 1
            assert acked.get((e["partition"], e["offset"])) == (e["key"], e["value"]), \
                f"record {e} is not what was acked there{c.why()}"
    dups = {k: v for k, v in got.items() if v > 1}
    lost = set(acked) - set(got)
    assert not dups and not lost, f"{len(dups)} consumed twice (e.g. {sorted(dups)[:5]}), " \
                                  f"{len(lost)} acked but never consumed (e.g. {sorted(lost)[:5]})"
    assert sum(e["count"] for c in (a, b) for e in c.events("records_consumed")) == n

    # the membership changes were rebalances: a gave up its partitions when b joined
    assert a.events("partitions_revoked") and len(a.events("partitions_assigned")) >= 2, a.why()
    b_last = b.events("partitions_assigned")[-1]["partitions"]
    assert sorted(p["partition"] for p in b_last) == [0, 1, 2], b.why()
    assert "shutdown_complete" in [e["name"] for e in a.events()], a.why()

    # what kafka-consumer-groups reports agrees
    r = kafka("kafka-consumer-groups.sh", "--bootstrap-server", bs, "--describe", "--group", group, broker=kb)
    assert sorted((int(row["PARTITION"]), int(row["CURRENT-OFFSET"]), int(row["LOG-END-OFFSET"]), row["LAG"])
                  for row in table(r)) == [(p, ends[p], ends[p], "0") for p in (0, 1, 2)], r.why()


def test_verifiable_producer_consumer_across_leader_kills(kafka_tools, broker_factory, tmp_path):
    """The same check on three brokers with replication factor 3 (min.insync.replicas 2):
    partition leaders are killed (-9) and restarted while the verifiable producer writes
    at acks=all (idempotent, the Java client's default) and a verifiable consumer group
    reads. Every acked record is in the log exactly once, at the offset it was acked at,
    and the group consumes each of them."""
    fast = [*BROKER_ARGS, "--broker-session-timeout-ms", "3000", "--broker-heartbeat-interval-ms", "500",
            "--replica-lag-time-max-ms", "3000"]
    brokers = broker_factory.cluster(voters=3, extra_args=fast)
    bs = ",".join(b.bootstrap for b in brokers)
    topic, group, n = "cli-verifiable-rf3", "cli-verifiable-rf3-group", 20000
    kafka("kafka-topics.sh", "--bootstrap-server", bs, "--create", "--topic", topic, "--partitions", "3",
          "--replication-factor", "3", "--config", "min.insync.replicas=2", broker=brokers[0])
    config = tmp_path / "producer.properties"
    config.write_text("enable.idempotence=true\nretries=2147483647\ndelivery.timeout.ms=120000\n"
                      "request.timeout.ms=10000\n")
    consumer = Background("kafka-verifiable-consumer.sh", "--bootstrap-server", bs, "--topic", topic,
                          "--group-id", group, "--verbose", path=tmp_path / "consumer.out", broker=brokers[0])
    producer = None
    try:
        consumer.wait_for("consumer assigned", lambda: consumer.events("partitions_assigned"))
        producer = Background("kafka-verifiable-producer.sh", "--bootstrap-server", bs, "--topic", topic,
                              "--max-messages", n, "--throughput", "2000", "--acks", "-1",
                              "--producer.config", str(config), path=tmp_path / "producer.out",
                              broker=brokers[0])
        for round_ in range(3):
            time.sleep(2)
            r = kafka("kafka-topics.sh", "--bootstrap-server", bs, "--describe", "--topic", topic,
                      broker=brokers[0])
            leaders = re.findall(r"Partition: (\d+)\s+Leader: (\d+)", r.text)
            victim = next(b for b in brokers if str(b.node_id) == leaders[round_ % 3][1])
            victim.kill()
            time.sleep(4)
            victim.restart()
        producer.wait_for("producer done", lambda: producer.proc.poll() is not None, timeout=180)
        assert producer.proc.returncode == 0, producer.why()
        assert not producer.events("producer_send_error"), producer.why()
        acked = {(e["partition"], e["offset"]): e["value"] for e in producer.events("producer_send_success")}
        assert sorted(int(v) for v in acked.values()) == list(range(n)), "every record acked once"
        ends: dict[int, int] = {}
        for p, o in acked:
            ends[p] = max(ends.get(p, 0), o + 1)
        # No gap and nothing twice: the log holds exactly the acked records.
        assert sum(ends.values()) == n, ("the log holds more than what was acked", ends)
        consumer.wait_for("every acked record consumed",
                          lambda: {(e["partition"], e["offset"]) for e in consumer.events("record_data")}
                          >= set(acked), timeout=120)
        for e in consumer.events("record_data"):
            assert acked[(e["partition"], e["offset"])] == e["value"], f"{e} is not what was acked there"
    finally:
        consumer.stop()
        if producer is not None:
            producer.stop()


# ---------------------------------------------------------------------------------------
# the spellings of Kafka before KIP-1147 (deprecated in 4.4, still what 3.x users type)
# ---------------------------------------------------------------------------------------

def test_deprecated_spellings_still_work(kb):
    bs = kb.bootstrap
    topic = "cli-legacy"
    kafka("kafka-topics.sh", "--bootstrap-server", bs, "--create", "--topic", topic, "--partitions", "1", broker=kb)
    r = kafka("kafka-console-producer.sh", "--bootstrap-server", bs, "--topic", topic,
              "--property", "parse.key=true", "--property", "key.separator=:", "--producer-property", "acks=all",
              broker=kb, input="a:1\nb:2\n")
    assert "--property is deprecated" in r.text, r.why()
    r = kafka("kafka-console-consumer.sh", "--bootstrap-server", bs, "--topic", topic, "--from-beginning",
              "--max-messages", "2", "--property", "print.key=true", "--property", "key.separator=:", broker=kb)
    # (the tool prints its deprecation warning on stdout)
    assert [line for line in r.lines if "is deprecated" not in line] == ["a:1", "b:2"], r.why()

    r = kafka("kafka-producer-perf-test.sh", "--topic", topic, "--num-records", "5000", "--record-size", "100",
              "--throughput", "-1", "--producer-props", f"bootstrap.servers={bs}", "acks=all", broker=kb)
    m = PERF_LINE.match(r.lines[-1])
    assert m and int(m.group(1)) == 5000, r.why()
    r = kafka("kafka-consumer-perf-test.sh", "--bootstrap-server", bs, "--topic", topic, "--messages", "5002",
              broker=kb)
    assert int(consumer_perf_row(r)["data.consumed.in.nMsg"]) == 5002, r.why()


# ---------------------------------------------------------------------------------------
# a cluster
# ---------------------------------------------------------------------------------------

def test_topics_and_quorum_tools_on_a_three_broker_cluster(kafka_tools, broker_factory):
    brokers = broker_factory.cluster(voters=3, extra_args=BROKER_ARGS)
    servers = ",".join(b.bootstrap for b in brokers)
    kafka("kafka-topics.sh", "--bootstrap-server", brokers[2].bootstrap, "--create",
          "--topic", "cli-spread", "--partitions", "6", broker=brokers[2])
    r = kafka("kafka-topics.sh", "--bootstrap-server", servers, "--describe", "--topic", "cli-spread",
              broker=brokers[0])
    placed = re.findall(r"Partition: (\d+)\s+Leader: (\d+)\s+Replicas: (\d+)\s+Isr: (\d+)", r.text)
    assert len(placed) == 6, f"six partitions described{r.why()}"
    assert all(l == rep == isr for _, l, rep, isr in placed), r.text
    assert sorted(collections.Counter(l for _, l, _, _ in placed).items()) == [("1", 2), ("2", 2), ("3", 2)], r.text
    # Replicated: every broker holds each partition and is in its ISR.
    kafka("kafka-topics.sh", "--bootstrap-server", servers, "--create", "--topic", "cli-rf3",
          "--partitions", "2", "--replication-factor", "3", broker=brokers[0])
    r = kafka("kafka-topics.sh", "--bootstrap-server", servers, "--describe", "--topic", "cli-rf3",
              broker=brokers[0])
    placed = re.findall(r"Partition: (\d+)\s+Leader: (\d+)\s+Replicas: ([\d,]+)\s+Isr: ([\d,]+)", r.text)
    assert len(placed) == 2, f"two partitions described{r.why()}"
    for _, leader, replicas, isr in placed:
        assert sorted(replicas.split(",")) == ["1", "2", "3"] and sorted(isr.split(",")) == ["1", "2", "3"], r.text
        assert leader == replicas.split(",")[0], r.text
    r = kafka("kafka-topics.sh", "--bootstrap-server", servers, "--create", "--topic", "cli-rf4",
              "--partitions", "1", "--replication-factor", "4", broker=brokers[0], check=False)
    assert r.rc != 0 and "InvalidReplicationFactor" in r.text, f"replication factor 4 refused{r.why()}"

    # KIP-836 through any broker: the leader, its epoch, the voters.
    r = kafka("kafka-metadata-quorum.sh", "--bootstrap-server", brokers[1].bootstrap, "describe", "--status",
              broker=brokers[1])
    leader = re.search(r"LeaderId:\s+(\d+)", r.text)
    assert leader and leader.group(1) in ("1", "2", "3"), f"a leader among the voters{r.why()}"
    assert re.search(r"LeaderEpoch:\s+\d+", r.text) and re.search(r"HighWatermark:\s+\d+", r.text), r.text
    voters = re.search(r"CurrentVoters:\s+(.*)", r.text)
    assert voters and all(f'"id": {i}' in voters.group(1) or f"{i}" in voters.group(1) for i in (1, 2, 3)), r.text
    r = kafka("kafka-metadata-quorum.sh", "--bootstrap-server", brokers[0].bootstrap, "describe", "--replication",
              broker=brokers[0])
    roles = re.findall(r"^(\d+)\s+.*\b(Leader|Follower|Observer)\b", r.text, re.M)
    assert sorted(roles) == sorted([(leader.group(1), "Leader")] + [(i, "Follower") for i in "123" if i != leader.group(1)]), r.text


def test_reassign_partitions_and_leader_election_tools(kafka_tools, broker_factory, tmp_path):
    """kafka-reassign-partitions --generate proposes a placement over the brokers given
    and --execute starts the moves (AlterPartitionReassignments), which complete once
    the added replicas are in sync; kafka-leader-election (preferred) then gives each
    partition to its first replica. --execute --throttle sets the replication throttles
    and --verify, once every move is complete, clears them; --cancel stops a move the
    throttle holds back."""
    fast = ["--broker-session-timeout-ms", "3000", "--broker-heartbeat-interval-ms", "500",
            "--auto-leader-rebalance-enable", "false", *BROKER_ARGS]
    brokers = broker_factory.cluster(voters=3, extra_args=fast)
    servers = ",".join(b.bootstrap for b in brokers)
    kafka("kafka-topics.sh", "--bootstrap-server", servers, "--create", "--topic", "mv",
          "--replica-assignment", "1:2,2:3", broker=brokers[0])
    produce_lines(brokers[0], "mv", [f"k{i}:v{i}" for i in range(20)])

    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": "mv"}]}))
    r = kafka("kafka-reassign-partitions.sh", "--bootstrap-server", servers,
              "--topics-to-move-json-file", topics, "--broker-list", "1,2,3", "--generate",
              broker=brokers[0])
    current, proposed = (json.loads(line) for line in r.lines if line.startswith("{"))
    assert [p["replicas"] for p in current["partitions"]] == [[1, 2], [2, 3]], r.text
    assert sorted(p["partition"] for p in proposed["partitions"]) == [0, 1], r.text
    assert all(len(p["replicas"]) == 2 and set(p["replicas"]) <= {1, 2, 3}
               for p in proposed["partitions"]), r.text

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "mv", "partition": 0, "replicas": [2, 3]},
        {"topic": "mv", "partition": 1, "replicas": [3, 1]}]}))
    r = kafka("kafka-reassign-partitions.sh", "--bootstrap-server", servers,
              "--reassignment-json-file", plan, "--execute", "--throttle", "50000000",
              broker=brokers[0])
    assert "Successfully started partition reassignments for mv-0,mv-1" in r.text, r.why()
    # --throttle set the rates on every broker of the moves and the replica lists.
    r = kafka("kafka-configs.sh", "--bootstrap-server", servers, "--describe",
              "--entity-type", "brokers", "--entity-name", "3", broker=brokers[0])
    assert "follower.replication.throttled.rate=50000000" in r.text, r.why()
    r = kafka("kafka-configs.sh", "--bootstrap-server", servers, "--describe",
              "--entity-type", "topics", "--entity-name", "mv", broker=brokers[0])
    assert "leader.replication.throttled.replicas=" in r.text, r.why()

    def described() -> list[tuple[str, str, str]]:
        r = kafka("kafka-topics.sh", "--bootstrap-server", servers, "--describe", "--topic", "mv",
                  broker=brokers[0])
        return re.findall(r"Partition: \d+\s+Leader: (\d+)\s+Replicas: ([\d,]+)\s+Isr: ([\d,]+)",
                          r.text)
    # --verify reports each move, and once all are complete clears the throttles.
    deadline = time.monotonic() + 60
    while True:
        r = kafka("kafka-reassign-partitions.sh", "--bootstrap-server", servers,
                  "--reassignment-json-file", plan, "--verify", broker=brokers[0])
        if "Reassignment of partition mv-1 is completed" in r.text \
                and "Reassignment of partition mv-0 is completed" in r.text:
            break
        assert "is still in progress" in r.text, r.why()
        assert time.monotonic() < deadline, f"the moves complete: {r.text}"
        time.sleep(1)
    assert "Clearing broker-level throttles" in r.text, r.why()
    assert [(rep, isr) for _, rep, isr in described()] == [("2,3", "2,3"), ("3,1", "3,1")]
    r = kafka("kafka-configs.sh", "--bootstrap-server", servers, "--describe",
              "--entity-type", "brokers", "--entity-name", "3", broker=brokers[0])
    assert "throttled.rate" not in r.text, r.text
    r = kafka("kafka-configs.sh", "--bootstrap-server", servers, "--describe",
              "--entity-type", "topics", "--entity-name", "mv", broker=brokers[0])
    assert "throttled.replicas" not in r.text, r.text
    # mv-1's leader, 2, was removed: it handed over to 3, the first of the target.
    assert [leader for leader, _, _ in described()] == ["2", "3"]

    # Broker 2 dies and returns: mv-0 is led by 3 until the preferred election.
    brokers[1].kill()
    deadline = time.monotonic() + 30
    while described()[0][0] != "3":
        assert time.monotonic() < deadline, f"mv-0 fails over to 3: {described()}"
        time.sleep(0.5)
    brokers[1].restart()
    deadline = time.monotonic() + 60
    while described()[0][2] != "2,3":
        assert time.monotonic() < deadline, f"broker 2 back in sync: {described()}"
        time.sleep(1)
    kafka("kafka-leader-election.sh", "--bootstrap-server", servers, "--election-type", "preferred",
          "--all-topic-partitions", broker=brokers[0])
    assert [leader for leader, _, _ in described()] == ["2", "3"]
    r = kafka("kafka-console-consumer.sh", "--bootstrap-server", servers, "--topic", "mv",
              "--from-beginning", "--max-messages", "20", "--timeout-ms", "20000",
              broker=brokers[0])
    assert sorted(r.lines) == sorted(f"v{i}" for i in range(20)), r.why()

    # --cancel: a move held to 2 KB/s by its throttle (some 20 KB to copy) is still in
    # progress when cancelled; mv-0 has its replicas back and the throttles are cleared.
    produce_lines(brokers[0], "mv", [f"c{i}:{'x' * 200}" for i in range(200)])
    back = tmp_path / "back.json"
    back.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "mv", "partition": 0, "replicas": [2, 1]}]}))
    r = kafka("kafka-reassign-partitions.sh", "--bootstrap-server", servers,
              "--reassignment-json-file", back, "--execute", "--throttle", "2000",
              broker=brokers[0])
    assert "Successfully started partition reassignment for mv-0" in r.text, r.why()
    r = kafka("kafka-reassign-partitions.sh", "--bootstrap-server", servers,
              "--reassignment-json-file", back, "--cancel", broker=brokers[0])
    assert "Successfully cancelled partition reassignment for: mv-0" in r.text, r.why()
    assert described()[0][1] == "2,3", described()
    r = kafka("kafka-configs.sh", "--bootstrap-server", servers, "--describe",
              "--entity-type", "brokers", "--entity-name", "1", broker=brokers[0])
    assert "throttled.rate" not in r.text, r.text


# ---------------------------------------------------------------------------------------
# kafka-transactions
# ---------------------------------------------------------------------------------------

def test_transactions_list_describe_find_hanging_and_abort(kafka_tools, broker_factory):
    """kafka-transactions as an operator uses it: the coordinator's transactions listed and
    described, a hanging transaction (open in a partition, unknown to any coordinator)
    found and aborted, after which read_committed consumers move past it. The broker does
    not verify transactional batches with their coordinator
    (transaction.partition.verification.enable=false), which is how a hanging transaction
    gets into a log (a broker from before KIP-890 wrote it, say)."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    broker = broker_factory(extra_args=BROKER_ARGS + ["--transaction-partition-verification-enable",
                                                      "false"], name="kafka-cli-txn")
    topic = "tx-cli"
    kafka("kafka-topics.sh", "--bootstrap-server", broker.bootstrap, "--create", "--topic", topic,
          "--partitions", "2", broker=broker)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tx-cli-1"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, value=b"open", partition=0)
    p.flush(30)

    r = kafka("kafka-transactions.sh", "--bootstrap-server", broker.bootstrap, "list", broker=broker)
    rows = table(r, first="TransactionalId")
    assert any(row["TransactionalId"] == "tx-cli-1" and row["TransactionState"] == "Ongoing"
               for row in rows), r.out
    r = kafka("kafka-transactions.sh", "--bootstrap-server", broker.bootstrap, "describe",
              "--transactional-id", "tx-cli-1", broker=broker)
    row = table(r, first="CoordinatorId")[0]
    assert row["TransactionState"] == "Ongoing" and f"{topic}-0" in row["TopicPartitions"], r.out

    # A hanging transaction: a transactional batch in partition 1 from a producer no
    # coordinator knows, written an hour ago (older than the 15 minutes find-hanging allows).
    old = int(time.time() * 1000) - 3_600_000
    batch = W.record_batch([(None, b"ghost", [], old)], old, producer_id=987_654, producer_epoch=3,
                           base_sequence=0, attributes=0x10)
    with W.connect(broker.bootstrap) as s:
        s.sendall(W.produce_v3(1, topic, {1: batch}, transactional_id="ghost"))
        _, body = W.recv_response(s)
    assert W.parse_produce_v3(body)[(topic, 1)]["error_code"] == 0

    r = kafka("kafka-transactions.sh", "--bootstrap-server", broker.bootstrap, "find-hanging",
              "--broker-id", "0", broker=broker)
    hanging = table(r, first="Topic")
    assert [(h["Topic"], h["Partition"], h["ProducerId"]) for h in hanging] == [(topic, "1", "987654")], r.out
    start = hanging[0]["StartOffset"]

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "tx-cli-reader",
                  "isolation.level": "read_committed"})
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 1), 30)[1] == 0, "the ghost holds the LSO"
        kafka("kafka-transactions.sh", "--bootstrap-server", broker.bootstrap, "abort", "--topic", topic,
              "--partition", "1", "--start-offset", start, broker=broker)
        assert c.get_watermark_offsets(TopicPartition(topic, 1), 30)[1] == 2, "marker written, LSO past it"
    finally:
        c.close()
    r = kafka("kafka-transactions.sh", "--bootstrap-server", broker.bootstrap, "find-hanging",
              "--broker-id", "0", broker=broker)
    assert table(r, first="Topic") == [], r.out
    p.abort_transaction(30)


def test_reassign_partitions_moves_replicas_between_log_dirs(kafka_tools, broker_factory, tmp_path):
    """kafka-reassign-partitions with ``log_dirs`` moves replicas between one broker's disks
    (AlterReplicaLogDirs) while a producer writes to them, paced by
    --replica-alter-log-dirs-throttle; --verify follows each move (DescribeLogDirs' future
    replica) and, once all are done, clears the throttle. Nothing acknowledged is lost,
    and a restart finds every partition where it was moved. Runs docs/deployment.md's
    <!-- runnable: move-disk --> procedure."""
    from launcher import Broker
    from storage_faults import Load, check_log
    from test_log_dirs import partitions_in
    wd = Path(tempfile.mkdtemp(prefix="corelog-it-movedirs-"))
    broker_factory.workdirs.append(wd)
    b = Broker(wd, extra_args=[*BROKER_ARGS, "--log-dirs", "./d1,./d2"], name="movedirs")
    b.pass_data_dir, b.cwd = False, wd
    broker_factory.brokers.append(b)
    b.start()
    topic, n = "movedirs", 4
    kafka("kafka-topics.sh", "--bootstrap-server", b.bootstrap, "--create", "--topic", topic,
          "--partitions", n, broker=b)
    node = int(re.search(r"Replicas: (\d+)", kafka("kafka-topics.sh", "--bootstrap-server", b.bootstrap,
                                                   "--describe", "--topic", topic, broker=b).text)[1])
    d1, d2 = wd / "d1", wd / "d2"
    before = (partitions_in(d1, topic), partitions_in(d2, topic))
    assert before[0] and before[1], before
    load = Load(b.bootstrap, topic, rate=5_000).start()
    load.wait_acked(5_000)

    # Every partition to the other disk: partition 0 by docs/deployment.md's procedure
    # (<!-- runnable: move-disk -->, its broker, topic and paths put in), the rest by a
    # plan of the test's own.
    target = {p: d2 if p in before[0] else d1 for p in range(n)}
    from test_docs import procedure
    script = (procedure("docs/deployment.md", "move-disk")
              .replace("127.0.0.1:9092", b.bootstrap).replace("/mnt/disk2/corelog", str(target[0]))
              .replace('"events"', f'"{topic}"').replace('"replicas": [1]', f'"replicas": [{node}]'))
    env = {**_Jvm.env(), "PATH": f"{KAFKA_CLI.parent / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    doc = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=180)
    assert doc.returncode == 0, doc.stdout + doc.stderr
    assert (f"Successfully started moving log directory to {target[0]} for replica {topic}-0 "
            f"with broker {node}") in doc.stdout, doc.stdout
    plan = tmp_path / "dirs.json"

    def partitions(ps):
        return {"version": 1, "partitions": [
            {"topic": topic, "partition": p, "replicas": [node], "log_dirs": [str(target[p])]}
            for p in ps]}
    plan.write_text(json.dumps(partitions(range(1, n))))
    r = kafka("kafka-reassign-partitions.sh", "--bootstrap-server", b.bootstrap,
              "--reassignment-json-file", plan, "--execute",
              "--replica-alter-log-dirs-throttle", "5000000", broker=b)
    assert all(f"Successfully started moving log directory to {target[p]} for replica {topic}-{p} with broker {node}" in r.text
               for p in range(1, n)), r.why()
    r = kafka("kafka-configs.sh", "--bootstrap-server", b.bootstrap, "--describe",
              "--entity-type", "brokers", "--entity-name", node, broker=b)
    assert "replica.alter.log.dirs.io.max.bytes.per.second=5000000" in r.text, r.why()
    plan.write_text(json.dumps(partitions(range(n))))
    deadline = time.monotonic() + 90
    while True:
        r = kafka("kafka-reassign-partitions.sh", "--bootstrap-server", b.bootstrap,
                  "--reassignment-json-file", plan, "--verify", broker=b)
        if "is still in progress" not in r.text and "is not found" not in r.text:
            break
        assert time.monotonic() < deadline, f"the moves complete: {r.text}"
        time.sleep(1)
    assert all(f"Reassignment of replica {topic}-{p}-{node} completed successfully" in r.text
               for p in range(n)), r.why()
    assert "Clearing broker-level throttles" in r.text, r.why()
    after = (partitions_in(d1, topic), partitions_in(d2, topic))
    assert after == (before[1], before[0]), (before, after)
    r = kafka("kafka-configs.sh", "--bootstrap-server", b.bootstrap, "--describe",
              "--entity-type", "brokers", "--entity-name", node, broker=b)
    assert "replica.alter.log.dirs" not in r.text, r.text

    acked = load.count()
    load.wait_acked(acked + 2_000)
    load.stop(flush=30)
    assert not load.errors, load.errors[:3]
    b.stop()
    b.start()
    assert (partitions_in(d1, topic), partitions_in(d2, topic)) == after
    check_log(b.bootstrap, topic, n, {k: v[0] for k, v in load.acked.items()})
