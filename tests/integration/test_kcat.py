"""Smoke test with the kcat CLI (skipped when kcat is not installed)."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
pytestmark = pytest.mark.skipif(KCAT is None, reason="kcat not installed")


def kcat(*args: str, stdin: bytes | None = None, timeout: float = 60) -> bytes:
    p = subprocess.run([KCAT, *args], input=stdin, capture_output=True, timeout=timeout)
    assert p.returncode == 0, f"kcat {' '.join(args)} -> {p.returncode}\nstderr: {p.stderr.decode(errors='replace')[-2000:]}"
    return p.stdout


def test_kcat_produce_list_consume(broker):
    b = ["-b", broker.bootstrap]
    topic = "it-kcat"
    lines = [f"key{i}:value {i} \u00e9\u00e8".encode() for i in range(300)]
    # produce (auto-creates the topic with the broker default partition count)
    kcat(*b, "-P", "-t", topic, "-K:", "-X", "acks=all", stdin=b"\n".join(lines) + b"\n")

    md = json.loads(kcat(*b, "-L", "-J", "-t", topic))
    (t,) = [t for t in md["topics"] if t["topic"] == topic]
    assert t.get("error") in (None, "", "Success") and t["partitions"], md
    assert [br["name"] for br in md["brokers"]] == [broker.bootstrap], md["brokers"]

    out = kcat(*b, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%p %o %k:%s\n")
    seen = {}
    for row in out.decode().splitlines():
        p, o, kv = row.split(" ", 2)
        seen.setdefault(int(p), []).append((int(o), kv))
    got = sorted(kv for rows in seen.values() for _, kv in rows)
    assert got == sorted(line.decode() for line in lines)
    for p, rows in seen.items():
        assert [o for o, _ in rows] == list(range(len(rows))), f"partition {p} offsets"
    # per key, messages of one partition keep production order
    order = {line.decode(): i for i, line in enumerate(lines)}
    for p, rows in seen.items():
        idx = [order[kv] for _, kv in rows]
        assert idx == sorted(idx), f"partition {p} out of production order"
