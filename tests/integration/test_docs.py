"""The commands of README.md and docs/*.md, run as a user types them.

Every shell block (```sh, ```bash, ```shell, ```console) of those pages carries a mark
on the line right before it, an HTML comment that GitHub does not show:

``<!-- runnable: NAME [background] [ctrl-c] -->``
    Run by this test. The runnable blocks of one procedure (one NAME in one file) run in
    the order of the page, as written, in one bash with ``set -euo pipefail`` (so
    variables, ``cd`` and jobs started with ``&`` carry from block to block), in a fresh
    scratch directory (relative paths such as ``./data`` work as the user types them).
    ``background``: a long-running command a user leaves in a terminal of its own
    (``corelog serve``); the test starts it in a session of its own, waits until the
    brokers it starts answer /health with "ok", goes on with the next blocks, and at the
    procedure's end presses Ctrl-C there (SIGINT to its process group): it must exit 0
    within 30 s, and print no ERROR line. ``ctrl-c``: before this block, press Ctrl-C in
    every background block still running, as a user stops a broker before starting it
    again.
``<!-- output: NAME -->`` before a ```text block that follows a runnable block
    Every non-blank line of it must appear in what that runnable block printed (stdout
    and stderr), in any order; runs of whitespace count as one space, and ``...`` stands
    for anything within a line.
``<!-- not-run: REASON -->``
    Deliberately not run (installs packages, needs several machines or systemd, takes
    minutes); the reason is required.

An unmarked shell block fails ``test_every_shell_block_is_marked``, so the docs cannot
grow commands that nothing runs. ``test_links_lead_somewhere`` checks the pages' relative
links and their #anchors.

What the test changes, and nothing else:

- Ports. Every port the docs use (``DOC_PORTS``: 9092 and the rest) is replaced, in the
  runnable blocks' text, by a free port of its own, and ``corelog``'s defaults are moved
  the same way (``corelog serve`` without ``--listen``/``--http``/``--controller-listen``
  gets the moved 9092/9644/9093; ``corelog admin`` and ``corelog-load`` without
  ``--bootstrap`` the moved 9092): a test cannot count on 9092 being free.
- PATH. First the binaries under test (``corelog`` — ``$CORELOG_BIN``, default
  ``target/release/corelog`` — and ``corelog-load`` beside it), then Apache Kafka's CLI
  tools (``tools/kafka-cli/bin``, through wrappers that add JVM options that only make
  the many short JVMs start faster: C1 only and a class-data-sharing archive, as
  test_kafka_cli.py does).

Every process a procedure starts is stopped when it ends, failed or not: the test
tags the procedure's environment and kills whatever still carries the tag.

Some procedures are run by another test (``RUN_ELSEWHERE``): docs/package.md's build of
the Debian package, by test_package.py; docs/deployment.md's disk procedures, by
test_log_dir_failure.py and test_kafka_cli.py (``procedure`` gives them a page's block).

Kept from the former test_quick_start.py beyond the quick start itself (which now runs
from docs/quick-start.md, restart included, and whose broker log must hold no ERROR):
``corelog --version`` naming the release and the commit.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from launcher import REPO_ROOT, corelog_bin, free_port

DOC_FILES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
SHELL_LANGS = {"sh", "bash", "shell", "console", "shell-session"}
RUNNABLE_LANGS = {"sh", "bash", "shell"}
# Every port the runnable blocks may name; each is moved to a free one per procedure.
DOC_PORTS = (9092, 9093, 9094, 9192, 9193, 9292, 9293, 9644, 9645, 9646)
PORT_RE = re.compile(r"(?<![\w.])(%s)(?!\w)" % "|".join(map(str, DOC_PORTS)))
# Procedures another test runs: (page, procedure) -> that test, which must name the mark.
RUN_ELSEWHERE = {
    ("docs/package.md", "package"): "test_package.py",
    ("docs/deployment.md", "add-disk"): "test_log_dir_failure.py",
    ("docs/deployment.md", "replace-disk"): "test_log_dir_failure.py",
    ("docs/deployment.md", "move-disk"): "test_kafka_cli.py",
}
# Pages the docs link to that other work writes (generated, or not written yet).
PENDING_PAGES: set[str] = set()
PROCEDURE_TIMEOUT_S = 240
CTRL_C_TIMEOUT_S = 30
HEALTH_TIMEOUT_S = 60

MARK_RE = re.compile(r"^<!--\s*(runnable|not-run|output)\s*:\s*(.*?)\s*-->\s*$")
FENCE_RE = re.compile(r"^( {0,3})(`{3,}|~{3,})\s*([\w+-]*)[^`]*$")


@dataclass
class Block:
    page: str            # relative to the repository root
    line: int            # the opening fence's line, 1-based
    lang: str
    text: str
    mark: str | None     # "runnable", "not-run", "output" or None
    arg: str = ""        # what follows the mark's colon

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


@dataclass
class Step:
    block: Block
    name: str
    background: bool
    ctrl_c: bool
    expect: list[str] = field(default_factory=list)


def procedure(page: str, name: str) -> str:
    """The text of ``page``'s block marked ``<!-- runnable: name -->``, for the test that
    runs it (``RUN_ELSEWHERE``)."""
    [block] = [b for b in parse(REPO_ROOT / page) if b.mark == "runnable" and b.arg == name]
    return block.text


def parse(path: Path) -> list[Block]:
    """Every fenced block of a Markdown page, with the mark on the line before it."""
    page = str(path.relative_to(REPO_ROOT))
    lines = path.read_text(encoding="utf-8").split("\n")
    blocks, i = [], 0
    while i < len(lines):
        m = FENCE_RE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.group(1), m.group(2), m.group(3).lower()
        j = i + 1
        while j < len(lines) and not (lines[j].strip().startswith(fence[0] * len(fence))
                                      and lines[j].strip().strip(fence[0]) == ""):
            j += 1
        body = [line[len(indent):] if line.startswith(indent) else line for line in lines[i + 1:j]]
        before = lines[i - 1].strip() if i > 0 else ""
        mm = MARK_RE.match(before)
        blocks.append(Block(page, i + 1, lang, "\n".join(body) + "\n",
                            mm.group(1) if mm else None, mm.group(2) if mm else ""))
        i = j + 1
    return blocks


def all_blocks() -> list[Block]:
    return [b for path in DOC_FILES for b in parse(path)]


def procedures() -> dict[tuple[str, str], list[Step]]:
    """(page, procedure name) -> its steps in page order, each with the output it must show."""
    procs: dict[tuple[str, str], list[Step]] = {}
    for path in DOC_FILES:
        last: Step | None = None
        for b in parse(path):
            if b.mark == "runnable":
                words = b.arg.split()
                if not words:
                    continue  # reported by test_every_shell_block_is_marked
                step = Step(b, words[0], "background" in words[1:], "ctrl-c" in words[1:])
                procs.setdefault((b.page, step.name), []).append(step)
                last = step
            elif b.mark == "output":
                if last is not None and last.name == b.arg.strip():
                    last.expect += [line for line in b.text.splitlines() if line.strip()]
                last = None
            else:
                last = None
    return procs


PROCEDURES = procedures()


# ---------------------------------------------------------------------------------------
# the marks and the links
# ---------------------------------------------------------------------------------------

def test_every_shell_block_is_marked():
    problems = []
    for path in DOC_FILES:
        blocks = parse(path)
        for k, b in enumerate(blocks):
            if b.lang in SHELL_LANGS:
                if b.mark not in ("runnable", "not-run"):
                    problems.append(f"{b.where}: a ```{b.lang} block without <!-- runnable: NAME --> "
                                    f"or <!-- not-run: REASON --> on the line before it")
                elif b.mark == "not-run" and not b.arg:
                    problems.append(f"{b.where}: <!-- not-run: --> needs a reason")
                elif b.mark == "runnable":
                    words = b.arg.split()
                    if not words or not re.fullmatch(r"[a-z0-9][a-z0-9-]*", words[0]):
                        problems.append(f"{b.where}: <!-- runnable: NAME --> needs a name of "
                                        f"lower-case letters, digits and dashes, got {b.arg!r}")
                    elif set(words[1:]) - {"background", "ctrl-c"}:
                        problems.append(f"{b.where}: unknown options {words[1:]} "
                                        f"(background, ctrl-c)")
                    if b.lang not in RUNNABLE_LANGS:
                        problems.append(f"{b.where}: a runnable block must be sh, bash or shell "
                                        f"(a ```console block has prompts and output)")
            elif b.mark == "output":
                prev = blocks[k - 1] if k else None
                if b.lang != "text":
                    problems.append(f"{b.where}: <!-- output: --> marks a ```text block")
                if prev is None or prev.mark != "runnable" or prev.arg.split()[:1] != [b.arg.strip()]:
                    problems.append(f"{b.where}: <!-- output: {b.arg} --> must follow a runnable "
                                    f"block of procedure {b.arg!r}")
            elif b.mark is not None:
                problems.append(f"{b.where}: <!-- {b.mark}: --> marks a ```{b.lang} block, "
                                f"not a shell block")
        # a mark must stand right before a fence
        lines = path.read_text(encoding="utf-8").split("\n")
        for n, line in enumerate(lines):
            if MARK_RE.match(line.strip()) and not (n + 1 < len(lines) and FENCE_RE.match(lines[n + 1])):
                problems.append(f"{path.relative_to(REPO_ROOT)}:{n + 1}: a mark not followed by a "
                                f"fenced block")
    assert not problems, "\n".join(problems)
    assert PROCEDURES, "no runnable block found"


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"`([^`]*)`", r"\1", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors_of(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    in_fence = False
    for line in path.read_text(encoding="utf-8").split("\n"):
        if FENCE_RE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            a = github_anchor(m.group(1))
            n = seen.get(a, 0)
            seen[a] = n + 1
            out.add(a if n == 0 else f"{a}-{n}")
        out.update(re.findall(r'<a id="([^"]+)"', line))
    return out


def test_links_lead_somewhere():
    problems = []
    for path in DOC_FILES:
        text = path.read_text(encoding="utf-8")
        text = re.sub(r"(?ms)^ {0,3}(`{3,}|~{3,}).*?^ {0,3}\1", "", text)  # not inside blocks
        text = re.sub(r"`[^`\n]*`", "", text)
        for m in re.finditer(r"\]\(([^)\s]+)\)", text):
            target = m.group(1)
            if re.match(r"^[a-z]+:", target):
                continue  # http:, https:, mailto:
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            rel = os.path.relpath(dest, REPO_ROOT)
            where = f"{path.relative_to(REPO_ROOT)}: ({target})"
            if not dest.exists():
                if rel not in PENDING_PAGES:
                    problems.append(f"{where}: {rel} does not exist")
                continue
            if anchor and dest.suffix == ".md" and anchor not in anchors_of(dest):
                problems.append(f"{where}: no heading #{anchor} in {rel}")
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------------------
# running a procedure
# ---------------------------------------------------------------------------------------

def needs_kafka_tools(steps: list[Step]) -> bool:
    return any(re.search(r"\bkafka-[a-z-]+\.sh\b", s.block.text) for s in steps)


def logical_lines(text: str) -> list[str]:
    return text.replace("\\\n", " ").splitlines()


def health_urls(text: str, ports: dict[int, int]) -> list[str]:
    """The /health of every broker a background block starts (after the ports moved)."""
    urls = []
    for line in logical_lines(text):
        if re.search(r"(^|[\s;&|(])corelog\s+serve\b", line):
            m = re.search(r"--http[ =](\S+)", line)
            urls.append(f"http://{m.group(1) if m else f'127.0.0.1:{ports[9644]}'}/health")
    return urls


CORELOG_WRAPPER = r'''#!/usr/bin/env bash
# corelog as the docs type it, its default ports moved as the docs' own ports are.
has() { local want=$1 a; shift; for a in "$@"; do case "$a" in "$want"|"$want"=*) return 0;; esac; done; return 1; }
if [ "${1:-}" = serve ]; then
    shift
    extra=()
    if ! has --listen "$@" && ! has --listeners "$@"; then
        cfg=""; prev=""
        for a in "$@"; do [ "$prev" = --config ] && cfg=$a; case "$a" in --config=*) cfg=${a#--config=};; esac; prev=$a; done
        if [ -z "$cfg" ] || ! grep -Eq '^[[:space:]]*"?listeners"?[[:space:]]*=' "$cfg" 2>/dev/null; then
            extra+=(--listen 127.0.0.1:@P9092@)
        fi
    fi
    has --http "$@" || extra+=(--http 127.0.0.1:@P9644@)
    has --controller-listen "$@" || extra+=(--controller-listen 127.0.0.1:@P9093@)
    exec @BIN@ serve "${extra[@]}" "$@"
fi
if [ "${1:-}" = admin ] && ! has --bootstrap "$@" && ! has --help "$@" && ! has -h "$@"; then
    exec @BIN@ "$@" --bootstrap 127.0.0.1:@P9092@
fi
exec @BIN@ "$@"
'''

LOAD_WRAPPER = r'''#!/usr/bin/env bash
# corelog-load as the docs type it, its default bootstrap moved as the docs' ports are.
case "${1:-}" in
    produce|consume|e2e)
        for a in "$@"; do case "$a" in --bootstrap|--bootstrap=*|--help|-h) exec @BIN@ "$@";; esac; done
        exec @BIN@ "$@" --bootstrap 127.0.0.1:@P9092@ ;;
esac
exec @BIN@ "$@"
'''

KAFKA_TOOL_WRAPPER = r'''#!/usr/bin/env bash
# Apache Kafka's tool of this name (tools/kafka-cli/bin), with JVM options that only make
# it start faster: C1 only, and a class-data-sharing archive that the first run dumps.
a=@JSA@
opts="-XX:TieredStopAtLevel=1 -Xlog:cds*=off"
if [ -s "$a" ]; then
    opts="$opts -XX:SharedArchiveFile=$a"
elif mkdir "$a.lock" 2>/dev/null; then
    opts="$opts -XX:ArchiveClassesAtExit=$a"
fi
KAFKA_OPTS="$opts ${KAFKA_OPTS:-}" exec @KAFKA_BIN@/"$(basename "$0")" "$@"
'''

PRELUDE = r'''set -euo pipefail
__meta=@META@
__bg=()
# Each block's output goes to a file of its own; `current` names the block running.
__block() { echo "$1" > "$__meta/current"; exec >"$__meta/out-$1" 2>&1; }
__wait_healthy() {
    local pid=$1 url deadline=$((SECONDS + @HEALTH@)); shift
    for url in "$@"; do
        until [ "$(curl -s --max-time 2 "$url" 2>/dev/null)" = ok ]; do
            if ! kill -0 "$pid" 2>/dev/null; then
                echo "docs test: the background block exited before $url answered ok" >&2; return 1
            fi
            if [ "$SECONDS" -ge "$deadline" ]; then
                echo "docs test: $url did not answer ok within @HEALTH@ s" >&2; return 1
            fi
            sleep 0.1
        done
    done
}
# Ctrl-C in the terminal of every background block still running: each must exit 0.
__ctrl_c() {
    local pid rc=0 status i
    for pid in ${__bg[@]+"${__bg[@]}"}; do kill -INT -- "-$pid" 2>/dev/null || true; done
    for pid in ${__bg[@]+"${__bg[@]}"}; do
        i=0
        while kill -0 "$pid" 2>/dev/null && [ $i -lt $((@CTRLC@ * 10)) ]; do sleep 0.1; i=$((i + 1)); done
        if kill -0 "$pid" 2>/dev/null; then
            echo "docs test: a background block (pid $pid) still runs @CTRLC@ s after Ctrl-C" >&2; rc=1; continue
        fi
        status=0; wait "$pid" || status=$?
        if [ "$status" -ne 0 ]; then
            echo "docs test: a background block (pid $pid) exited with $status after Ctrl-C" >&2; rc=1
        fi
    done
    __bg=()
    return $rc
}
'''


def move_ports(text: str, ports: dict[int, int]) -> str:
    return PORT_RE.sub(lambda m: str(ports[int(m.group(1))]), text)


def write_executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def procs_with(token: str) -> list[int]:
    """Pids of the processes whose environment carries this procedure's tag."""
    tag = f"CORELOG_DOCS_RUN={token}".encode()
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if tag in (d / "environ").read_bytes().split(b"\0"):
                found.append(int(d.name))
        except OSError:
            pass
    return found


def stop_everything(token: str, shell: subprocess.Popen | None) -> list[str]:
    """Stops every process of the procedure (SIGTERM, then SIGKILL after 10 s); names
    those that were still running."""
    left = procs_with(token)
    names = []
    for pid in left:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            names.append(f"{pid} {cmdline.decode(errors='replace')[:120]}")
        except OSError:
            pass
    for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        for pid in procs_with(token):
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and procs_with(token):
            time.sleep(0.1)
        if not procs_with(token):
            break
    if shell is not None:
        try:
            shell.wait(timeout=5)
        except subprocess.TimeoutExpired:
            shell.kill()
            shell.wait()
    return names


def normalize(line: str) -> str:
    return re.sub(r"\s+", " ", line).strip()


def expected_line_matches(expected: str, output_lines: list[str]) -> bool:
    pattern = re.compile(".*?".join(re.escape(part) for part in normalize(expected).split("...")))
    return any(pattern.search(normalize(line)) for line in output_lines)


def tail(path: Path, n: int) -> str:
    if not path.exists():
        return "(nothing)"
    lines = path.read_text(errors="replace").splitlines()
    return "\n".join(lines[-n:]) or "(nothing)"


@pytest.fixture(scope="module")
def kafka_tool_wrappers(tmp_path_factory):
    """A folder of wrappers of Apache Kafka's tools (tools/kafka-cli/bin), sharing one
    class-data-sharing archive for the whole module."""
    d = tmp_path_factory.mktemp("docs-kafka-tools")
    kafka_bin = REPO_ROOT / "tools" / "kafka-cli" / "bin"
    jsa = d / "kafka-tools.jsa"
    for tool in sorted(kafka_bin.glob("kafka-*.sh")):
        write_executable(d / tool.name, KAFKA_TOOL_WRAPPER
                         .replace("@JSA@", shlex.quote(str(jsa)))
                         .replace("@KAFKA_BIN@", shlex.quote(str(kafka_bin))))
    return d


@pytest.mark.parametrize("key", sorted(PROCEDURES), ids=[f"{p}::{n}" for p, n in sorted(PROCEDURES)])
def test_procedure(key, kafka_tool_wrappers):
    page, name = key
    steps = PROCEDURES[key]
    if key in RUN_ELSEWHERE:
        other = Path(__file__).parent / RUN_ELSEWHERE[key]
        assert other.exists(), f"{page}'s procedure {name!r} is run by {other.name}, which is missing"
        assert f"runnable: {name}" in other.read_text(), \
            f"{other.name} no longer runs {page}'s <!-- runnable: {name} --> blocks"
        return
    binary = corelog_bin()
    assert binary.exists(), f"broker binary {binary} not found (cargo build --release, or CORELOG_BIN)"
    if needs_kafka_tools(steps) and shutil.which(os.environ.get("JAVA", "java")) is None:
        pytest.skip("java not installed (Kafka's CLI tools need a JVM)")
    for tool in ("kcat", "curl", "openssl"):
        if any(re.search(rf"(^|[\s|;&(]){tool}\b", s.block.text, re.M) for s in steps) and not shutil.which(tool):
            pytest.skip(f"{tool} not installed")
    if any(s.background for s in steps) and not shutil.which("curl"):
        pytest.skip("curl not installed (the test asks /health with it)")

    for s in steps:
        for m in re.finditer(r"(?:127\.0\.0\.1|localhost|0\.0\.0\.0):(\d+)", s.block.text):
            assert int(m.group(1)) in DOC_PORTS, \
                f"{s.block.where}: port {m.group(1)} is not one the test moves (DOC_PORTS)"

    ports = {p: free_port() for p in DOC_PORTS}
    scratch = Path(tempfile.mkdtemp(prefix=f"corelog-docs-{name}-"))
    work, meta, shims = scratch / "work", scratch / "test", scratch / "bin"
    for d in (work, meta, shims):
        d.mkdir()
    subst = {"@P9092@": str(ports[9092]), "@P9093@": str(ports[9093]), "@P9644@": str(ports[9644])}
    corelog_w, load_w = CORELOG_WRAPPER, LOAD_WRAPPER
    for k, v in subst.items():
        corelog_w, load_w = corelog_w.replace(k, v), load_w.replace(k, v)
    write_executable(shims / "corelog", corelog_w.replace("@BIN@", shlex.quote(str(binary))))
    write_executable(shims / "corelog-load",
                     load_w.replace("@BIN@", shlex.quote(str(binary.parent / "corelog-load"))))

    script = [PRELUDE.replace("@META@", shlex.quote(str(meta)))
              .replace("@HEALTH@", str(HEALTH_TIMEOUT_S)).replace("@CTRLC@", str(CTRL_C_TIMEOUT_S))]
    for i, s in enumerate(steps):
        text = move_ports(s.block.text, ports)
        script.append(f"\n# ---- {s.block.where}\n__block {i}\n")
        if s.ctrl_c:
            script.append("__ctrl_c\n")
        if s.background:
            (meta / f"block-{i}.sh").write_text(text)
            urls = " ".join(shlex.quote(u) for u in health_urls(text, ports))
            script.append(f'setsid bash -euo pipefail "$__meta/block-{i}.sh" >"$__meta/bg-{i}" 2>&1 </dev/null &\n'
                          f"__bg+=($!)\n"
                          f"__wait_healthy $! {urls}\n")
        else:
            script.append(text)
    script.append("\n__block end\n__ctrl_c\n")
    (meta / "procedure.sh").write_text("".join(script))

    token = uuid.uuid4().hex
    env = {**os.environ,
           "PATH": os.pathsep.join([str(shims), str(kafka_tool_wrappers), os.environ.get("PATH", "")]),
           "CORELOG_DOCS_RUN": token}
    shell, rc, timed_out, left = None, None, False, []
    t0 = time.monotonic()
    try:
        shell = subprocess.Popen(["bash", str(meta / "procedure.sh")], cwd=work, env=env,
                                 stdin=subprocess.DEVNULL, stdout=open(meta / "shell.out", "wb"),
                                 stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = shell.wait(timeout=PROCEDURE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            timed_out = True
    finally:
        left = stop_everything(token, shell)
    elapsed = time.monotonic() - t0

    def report(why: str) -> str:
        current = (meta / "current").read_text().strip() if (meta / "current").exists() else "?"
        out = [f"{page} procedure {name!r}: {why} (after {elapsed:.1f} s; scratch {scratch})"]
        if current.isdigit():
            s = steps[int(current)]
            out += [f"--- block {s.block.where} (ports moved: "
                    f"{', '.join(f'{k}->{v}' for k, v in ports.items())})",
                    move_ports(s.block.text, ports).rstrip(),
                    "--- its output (tail)", tail(meta / f"out-{current}", 60)]
        elif current == "end":
            out += ["--- stopping the background blocks", tail(meta / "out-end", 30)]
        for i, s in enumerate(steps):
            if s.background:
                out += [f"--- background block {s.block.where}, output (tail)", tail(meta / f"bg-{i}", 40)]
        for log in sorted(work.rglob("*.log"))[:4]:
            out += [f"--- {log.relative_to(work)} in the scratch directory (tail)", tail(log, 30)]
        out += ["--- the shell", tail(meta / "shell.out", 20)]
        return "\n".join(out)

    failed = True
    try:
        assert not timed_out, report(f"still running after {PROCEDURE_TIMEOUT_S} s")
        assert rc == 0, report(f"exited with {rc}")
        for i, s in enumerate(steps):
            if s.expect:
                output = (meta / f"out-{i}").read_text(errors="replace").splitlines()
                missing = [e for e in (move_ports(x, ports) for x in s.expect)
                           if not expected_line_matches(e, output)]
                assert not missing, (f"{s.block.where}: the output block after it expects lines "
                                     f"it did not print:\n" + "\n".join(missing) +
                                     f"\n--- what it printed\n{tail(meta / f'out-{i}', 80)}")
            if s.background:
                errors = [line for line in (meta / f"bg-{i}").read_text(errors="replace").splitlines()
                          if re.match(r"^\S+\s+ERROR\s", line) or line.startswith("ERROR")]
                assert not errors, f"{s.block.where}: the broker logged ERROR:\n" + "\n".join(errors[:20])
        failed = False
    finally:
        keep = os.environ.get("CORELOG_IT_KEEP", "")
        if keep == "all" or (failed and keep == "1"):
            print(f"kept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    print(f"{page}::{name}: {elapsed:.1f} s" + (f"; stopped what it left running: {left}" if left else ""))


def test_version_names_the_release_and_the_commit():
    """`corelog --version` (docs/deployment.md) names the package version and the commit
    it was built from (one of this checkout's, when the broker was built from it)."""
    out = subprocess.run([str(corelog_bin()), "--version"], capture_output=True, text=True,
                         timeout=30, check=True).stdout.strip()
    m = re.fullmatch(r"corelog (\d+\.\d+\.\d+) \(commit ([0-9a-f]{12}|unknown)\)", out)
    assert m, out
    version = re.search(r'^version = "([^"]+)"', (REPO_ROOT / "Cargo.toml").read_text(), re.M)
    assert m.group(1) == version.group(1)
    head = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short=12", "HEAD"],
                          capture_output=True, text=True)
    if head.returncode == 0 and m.group(2) != "unknown":
        # A binary built before the last commit names the commit it was built from.
        built = subprocess.run(["git", "-C", str(REPO_ROOT), "merge-base", "--is-ancestor",
                                m.group(2), "HEAD"])
        assert built.returncode == 0, f"{m.group(2)} is not a commit of this checkout"
