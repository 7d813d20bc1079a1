"""The layout reads top-down: no crate's modules import each other in a circle, and each
crate depends only on the corelog crates its top-level doc allows.

A module's imports are the `crate::X` and `super::X` paths in its source (comments and
`#[cfg(test)] mod tests` left out); a cycle is reported at the level of top-level
modules and of their children. Cargo already refuses cycles between crates; the crate
rules below keep the direction docs/architecture.md's Layout section describes."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Source directory of each crate whose modules must not form cycles.
CRATES = {
    "corelog": "src",
    "corelog-shards": "shards/src",
    "corelog-partition": "partition/src",
    "corelog-storage": "storage/src",
    "corelog-metrics": "metrics/src",
    "corelog-kafka-client": "client/src",
    "corelog-load": "tools/loadgen/src",
    "corelog-controller": "controller/src",
    "corelog-fuzz-targets": "tools/fuzz-targets/src",
    "corelog-record-batch": "record-batch/src",
    "corelog-sim": "sim/src",
}

# The corelog crates each crate may depend on (normal dependencies).
ALLOWED = {
    # corelog-kafka-client: `corelog admin` speaks to a cluster as a Kafka client.
    "corelog": {"corelog-shards", "corelog-partition", "corelog-storage", "corelog-metrics", "corelog-controller",
                "corelog-kafka-client"},
    "corelog-shards": {"corelog-partition", "corelog-storage", "corelog-metrics", "corelog-controller", "corelog-kafka-client"},
    "corelog-partition": {"corelog-storage"},
    # corelog-record-batch: the RecordBatch v2 header layout, one table for both.
    "corelog-storage": {"corelog-record-batch"},
    "corelog-metrics": set(),
    "corelog-kafka-client": {"corelog-record-batch"},
    "corelog-load": {"corelog-kafka-client", "corelog-metrics"},
    "corelog-controller": set(),
    # corelog-controller: the metadata log, snapshot and controller-port decoders.
    "corelog-fuzz-targets": {"corelog", "corelog-storage", "corelog-partition", "corelog-controller", "corelog-shards"},
    # A leaf: the header layout depends on nothing.
    "corelog-record-batch": set(),
    # The simulator runs the real partition layer and storage engine, and the transaction
    # coordinator's pure rules (corelog-shards' txn::rules and txn::state).
    "corelog-sim": {"corelog-partition", "corelog-storage", "corelog-shards"},
    # fuzz/ (cargo fuzz, its own workspace, never built here): libFuzzer wrappers around
    # the bodies in tools/fuzz-targets, and nothing else of ours.
    "corelog-fuzz": {"corelog-fuzz-targets"},
}
MANIFESTS = {
    "corelog": "Cargo.toml",
    "corelog-shards": "shards/Cargo.toml",
    "corelog-partition": "partition/Cargo.toml",
    "corelog-storage": "storage/Cargo.toml",
    "corelog-metrics": "metrics/Cargo.toml",
    "corelog-kafka-client": "client/Cargo.toml",
    "corelog-load": "tools/loadgen/Cargo.toml",
    "corelog-controller": "controller/Cargo.toml",
    "corelog-fuzz-targets": "tools/fuzz-targets/Cargo.toml",
    "corelog-record-batch": "record-batch/Cargo.toml",
    "corelog-sim": "sim/Cargo.toml",
    "corelog-fuzz": "fuzz/Cargo.toml",
}


def module_graph(src: Path) -> dict[str, set[str]]:
    """module path (`a::b`) -> module paths it imports, for every `.rs` under `src`."""
    files = {}
    for p in src.rglob("*.rs"):
        parts = list(p.relative_to(src).with_suffix("").parts)
        if parts[-1] in ("mod", "lib", "main"):
            parts = parts[:-1]
        files["::".join(parts)] = p
    graph = {}
    for name, path in files.items():
        text = path.read_text()
        text = re.sub(r"#\[cfg\(test\)\]\s*mod tests\s*\{.*", "", text, flags=re.S)
        text = re.sub(r"//[^\n]*", "", text)
        parent = name.rsplit("::", 1)[0] if "::" in name else ""
        deps = set(re.findall(r"\bcrate::([a-z_][a-z0-9_]*)", text)) | set(grouped(text, "crate"))
        children = re.findall(r"\bsuper::([a-z_][a-z0-9_]*)", text) + grouped(text, "super")
        for child in children:
            deps.add(f"{parent}::{child}" if parent else child)
        graph[name] = deps
    return graph


def grouped(text: str, root: str) -> list[str]:
    """The first names of a grouped import's items: `a` and `b` of `crate::{a::X, b}`."""
    names = []
    for m in re.finditer(rf"\b{root}::\{{", text):
        depth, item, i = 1, "", m.end()
        while i < len(text) and depth:
            c = text[i]
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
            if depth == 1 and c == ",":
                names.append(item)
                item = ""
            elif depth >= 1:
                item += c
            i += 1
        names.append(item)
    return [n for n in (re.match(r"\s*([a-z_][a-z0-9_]*)", x) for x in names) if n for n in [n.group(1)]]


def collapse(graph: dict[str, set[str]], depth: int) -> dict[str, set[str]]:
    cut = lambda n: "::".join(n.split("::")[:depth])  # noqa: E731
    names = {cut(n) for n in graph if n}
    out: dict[str, set[str]] = {n: set() for n in names}
    for m, deps in graph.items():
        a = cut(m)
        if not a:
            continue
        for d in deps:
            b = cut(d)
            if b in names and b != a and not b.startswith(a + "::") and not a.startswith(b + "::"):
                out[a].add(b)
    return out


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(u: str) -> list[str] | None:
        state[u] = 1
        stack.append(u)
        for v in sorted(graph.get(u, ())):
            if state.get(v) == 1:
                return stack[stack.index(v):] + [v]
            if v not in state:
                found = visit(v)
                if found:
                    return found
        stack.pop()
        state[u] = 2
        return None

    for u in sorted(graph):
        if u not in state:
            found = visit(u)
            if found:
                return found
    return None


def test_the_checker_finds_a_cycle(tmp_path):
    (tmp_path / "lib.rs").write_text("pub mod a;\npub mod b;\n")
    (tmp_path / "a.rs").write_text("use crate::b::B;\n")
    (tmp_path / "b.rs").write_text("// crate::a in a comment does not count\nuse crate::a::A;\n")
    assert find_cycle(collapse(module_graph(tmp_path), 1)) == ["a", "b", "a"]
    (tmp_path / "b.rs").write_text("// crate::a only in a comment\n")
    assert find_cycle(collapse(module_graph(tmp_path), 1)) is None
    # A grouped import names its modules too.
    (tmp_path / "b.rs").write_text("use crate::{a, c::{D, E}};\n")
    assert find_cycle(collapse(module_graph(tmp_path), 1)) == ["a", "b", "a"]


def test_no_crate_has_a_module_cycle():
    failures = []
    for crate, src in CRATES.items():
        graph = module_graph(ROOT / src)
        for depth in (1, 2):
            cycle = find_cycle(collapse(graph, depth))
            if cycle:
                failures.append(f"{crate} ({src}): {' -> '.join(cycle)}")
    assert not failures, "module cycles:\n" + "\n".join(failures)


def test_crates_depend_only_downwards():
    failures = []
    for crate, manifest in MANIFESTS.items():
        deps = tomllib.loads((ROOT / manifest).read_text()).get("dependencies", {})
        ours = {d for d in deps if d in ALLOWED}
        extra = ours - ALLOWED[crate]
        if extra:
            failures.append(f"{crate} depends on {sorted(extra)}, allowed {sorted(ALLOWED[crate])}")
    assert not failures, "\n".join(failures)
