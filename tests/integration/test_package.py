"""The Debian package (docs/package.md, tools/package/): built by the documented command
with the binaries under test, its control data and files checked, its systemd unit
verified, `corelog check` run under the unit's limits, its maintainer scripts run on this
host, and the broker started from the unpacked package the way the unit starts it:
ExecStart, User, Group, UMask, NoNewPrivileges, CapabilityBoundingSet and the Limit*
lines are read from the unit file, and the test is the service manager (NOTIFY_SOCKET,
WATCHDOG_USEC from WatchdogSec). Where PID 1 is systemd the package is also installed,
started and purged for real.

What a host cannot give is said, not hidden:
- Raising RLIMIT_MEMLOCK/RLIMIT_NOFILE to the unit's values needs CAP_SYS_RESOURCE (and
  fs.nr_open at least LimitNOFILE). Without it, `corelog check` runs with getrlimit(2)
  answering the unit's values (an LD_PRELOAD shim compiled here, so the check's own
  arithmetic judges the unit's numbers), and the broker runs under the unit's limits
  lowered to this host's hard limits; the test prints which.
- The maintainer scripts run for real (adduser, the data directory, deluser) only where
  the test is root and neither the corelog user nor /var/lib/corelog exists; systemd's
  helpers (deb-systemd-helper, deb-systemd-invoke, systemctl) are stubs that record
  their calls, so this host's systemd state is never touched.
- The rest of the unit's sandbox (ProtectSystem=, PrivateTmp=, ...) takes effect only
  under systemd: the real-systemd test, or `systemd-analyze verify` for its syntax.
"""

from __future__ import annotations

import os
import pwd
import grp
import re
import resource
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
import tomllib
from pathlib import Path

import pytest

from launcher import REPO_ROOT, corelog_bin, free_port

DOC = REPO_ROOT / "docs" / "package.md"
UNIT = "/usr/lib/systemd/system/corelog.service"
CONF = "/etc/corelog/corelog.toml"
DATA = "/var/lib/corelog"
RUNNABLE = "<!-- runnable: package -->"
INFINITY = resource.RLIM_INFINITY


# --------------------------------------------------------------------------- helpers

def run(argv, **kw) -> subprocess.CompletedProcess:
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("timeout", 120)
    return subprocess.run(argv, **kw)


def doc_blocks() -> list[tuple[str | None, str, str]]:
    """(marker line before it or None, language, text) of every fenced block of the doc."""
    lines = DOC.read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        before = lines[i - 1].strip() if i > 0 else None
        j = i + 1
        while not lines[j].startswith("```"):
            j += 1
        blocks.append((before, m.group(1), "\n".join(lines[i + 1:j])))
        i = j + 1
    return blocks


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def one(section: dict[str, list[str]], key: str) -> str:
    values = section.get(key)
    assert values, f"the unit sets no {key}="
    return values[-1]


def timespan_s(value: str) -> float:
    """A systemd time span in seconds ("60", "90s", "1min 30s", "500ms")."""
    units = {"": 1, "s": 1, "sec": 1, "ms": 1e-3, "m": 60, "min": 60, "h": 3600, "hr": 3600}
    total = 0.0
    for num, unit in re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", value):
        total += float(num) * units[unit]
    return total


def rlimit_value(v: str) -> int:
    if v == "infinity":
        return INFINITY
    m = re.fullmatch(r"(\d+)([KMGTPE]?)", v)
    assert m, f"limit {v!r}"
    return int(m.group(1)) * 1024 ** " KMGTPE".index(m.group(2) or " ")


def unit_limits(svc: dict[str, list[str]]) -> dict[str, tuple[int, int]]:
    """{"memlock": (soft, hard), "nofile": (soft, hard)} from LimitMEMLOCK/LimitNOFILE."""
    out = {}
    for name, key in (("memlock", "LimitMEMLOCK"), ("nofile", "LimitNOFILE")):
        soft, _, hard = one(svc, key).partition(":")
        out[name] = (rlimit_value(soft), rlimit_value(hard or soft))
    return out


def prlimit_args(limits: dict[str, tuple[int, int]]) -> list[str]:
    text = lambda v: "unlimited" if v == INFINITY else str(v)  # noqa: E731
    return [f"--{name}={text(s)}:{text(h)}" for name, (s, h) in limits.items()]


def can_apply(limits) -> bool:
    return run(["prlimit", *prlimit_args(limits), "true"]).returncode == 0


def lowered_to_host(limits) -> dict[str, tuple[int, int]]:
    """The unit's limits, each no higher than this process's hard limit."""
    res = {"memlock": resource.RLIMIT_MEMLOCK, "nofile": resource.RLIMIT_NOFILE}
    out = {}
    for name, (soft, hard) in limits.items():
        host = resource.getrlimit(res[name])[1]
        cap = lambda v: v if host == INFINITY or (v != INFINITY and v <= host) else host  # noqa: E731
        out[name] = (cap(soft), cap(hard))
    return out


def exec_start(svc) -> list[str]:
    line = one(svc, "ExecStart").lstrip("@-:+!")
    return shlex.split(line)


def broker_stop_bound_s() -> float:
    """What the broker itself bounds of a stop: the controlled shutdown's wait plus the
    drain of in-flight requests, read from the source so the unit is checked against
    what the broker does now."""
    cluster = (REPO_ROOT / "src" / "cluster.rs").read_text()
    limits = (REPO_ROOT / "src" / "limits.rs").read_text()
    m = re.search(r"CONTROLLED_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs\((\d+)\)", cluster)
    d = re.search(r"SHUTDOWN_DRAIN_MS: u64 = ([\d_]+);", limits)
    assert m and d, "the broker's stop bounds moved: update this test and the unit's comment"
    return int(m.group(1)) + int(d.group(1).replace("_", "")) / 1000


def stub_dir(where: Path) -> tuple[Path, Path]:
    """deb-systemd-helper, deb-systemd-invoke and systemctl that only record their calls
    (`was-enabled` answers yes, as on a first install)."""
    bin_dir, calls = where / "stub-bin", where / "stub-calls"
    bin_dir.mkdir(exist_ok=True)
    for name in ("deb-systemd-helper", "deb-systemd-invoke", "systemctl"):
        p = bin_dir / name
        p.write_text(f'#!/bin/sh\necho "{name} $*" >> "{calls}"\nexit 0\n')
        p.chmod(0o755)
    return bin_dir, calls


def maintainer_script(ctl: Path, stubs: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{stubs}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    env.pop("DPKG_ROOT", None)
    return run([str(ctl), *args], env=env)


def calls_of(calls: Path) -> list[str]:
    lines = calls.read_text().splitlines() if calls.exists() else []
    calls.unlink(missing_ok=True)
    return lines


def produce_and_consume(bootstrap: str, topic: str) -> None:
    ck = pytest.importorskip("confluent_kafka")
    producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                            "message.timeout.ms": 20_000})
    sent = [f"package-{i}".encode() for i in range(5)]
    errors = []
    for v in sent:
        producer.produce(topic, value=v, on_delivery=lambda e, m: e and errors.append(e))
    assert producer.flush(20) == 0 and not errors, errors
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "package-smoke",
                            "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([ck.TopicPartition(topic, 0, 0)])
        got, deadline = [], time.monotonic() + 20
        while len(got) < len(sent) and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
        assert got == sent
    finally:
        consumer.close()


# --------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def deb(tmp_path_factory) -> Path:
    """The package, built by docs/package.md's runnable block as written, with the
    binaries under test (CORELOG_BIN_DIR) and a scratch output directory."""
    for tool in ("dpkg-deb", "dpkg-shlibdeps", "strip"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is missing (apt install dpkg-dev binutils)")
    bin_dir = corelog_bin().parent
    for b in ("corelog", "corelog-load"):
        assert (bin_dir / b).is_file(), f"{bin_dir / b} not built (cargo build --release --bins)"
    blocks = [text for before, _, text in doc_blocks() if before == RUNNABLE]
    assert len(blocks) == 1, f"one runnable block (the build) in {DOC}, found {len(blocks)}"
    out = tmp_path_factory.mktemp("deb-out")
    env = {**os.environ, "CORELOG_BIN_DIR": str(bin_dir), "CORELOG_DEB_OUT_DIR": str(out)}
    r = run(["bash", "-euo", "pipefail", "-c", blocks[0]], cwd=REPO_ROOT, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    path = Path(r.stdout.strip().splitlines()[-1])
    assert path.parent == out and path.is_file(), r.stdout
    return path


@pytest.fixture(scope="module")
def root(deb):
    """The package unpacked (dpkg -x) under a scratch root in which another user may
    read, beside a scratch area (tmp_path's own directory is private to root)."""
    base = Path(tempfile.mkdtemp(prefix="corelog-package-"))
    base.chmod(0o755)
    (base / "fs").mkdir()
    r = run(["dpkg-deb", "-x", str(deb), str(base / "fs")])
    assert r.returncode == 0, r.stderr
    r = run(["dpkg-deb", "-e", str(deb), str(base / "control")])
    assert r.returncode == 0, r.stderr
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def unit(root):
    return parse_unit((root / "fs" / UNIT.lstrip("/")).read_text())


@pytest.fixture(scope="module")
def service_user(root, unit):
    """The unit's User, created by the package's own postinst (systemd's helpers
    stubbed) where this host has neither the user nor /var/lib/corelog and the test is
    root; an existing user is used as it is. None where neither can be had. A user the
    postinst created is removed again by the postrm's purge (test_postrm_purge...; here
    too if that test did not run)."""
    name = one(unit["Service"], "User")
    info = {"name": name, "created": False}
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        pw = None
    if pw is None:
        if os.geteuid() != 0 or not shutil.which("adduser") or Path(DATA).exists():
            yield None
            return
        stubs, calls = stub_dir(root)
        r = maintainer_script(root / "control" / "postinst", stubs, "configure")
        assert r.returncode == 0, r.stderr
        pw = pwd.getpwnam(name)
        info.update(created=True, stubs=stubs, calls=calls, install_calls=calls_of(calls))
    info.update(uid=pw.pw_uid, gid=pw.pw_gid, home=pw.pw_dir, shell=pw.pw_shell)
    yield info
    if info["created"]:
        try:
            pwd.getpwnam(name)
        except KeyError:
            return
        maintainer_script(root / "control" / "postrm", info["stubs"], "purge")


# --------------------------------------------------------------------------- tests

def test_package_fields_files_and_scripts(deb, root):
    field = lambda f: run(["dpkg-deb", "--field", str(deb), f]).stdout.strip()  # noqa: E731
    cargo = tomllib.loads((REPO_ROOT / "Cargo.toml").read_text())["package"]["version"]
    assert field("Package") == "corelog"
    assert field("Version") == cargo.replace("-", "~", 1)
    assert field("Architecture") == run(["dpkg", "--print-architecture"]).stdout.strip()
    depends = [d.strip().split(" ")[0] for d in field("Depends").split(",")]
    assert "adduser" in depends and "libc6" in depends, depends
    assert field("Maintainer") and field("Description")
    assert deb.name == f"corelog_{field('Version')}_{field('Architecture')}.deb"

    listing = run(["dpkg-deb", "--contents", str(deb)]).stdout
    paths = {line.split()[-1].lstrip(".") for line in listing.splitlines()}
    for p in ("/usr/bin/corelog", "/usr/bin/corelog-load", CONF, UNIT,
              "/usr/share/doc/corelog/copyright", "/usr/share/doc/corelog/package.md"):
        assert p in paths, f"{p} not in the package:\n{listing}"
    assert not any(p.startswith(DATA) for p in paths), "the data directory is postinst's"
    fs = root / "fs"
    for b in ("corelog", "corelog-load"):
        assert os.access(fs / "usr/bin" / b, os.X_OK)
    assert stat.S_IMODE((fs / CONF.lstrip("/")).stat().st_mode) == 0o640
    r = run([str(fs / "usr/bin/corelog"), "--version"])
    assert r.returncode == 0 and cargo in r.stdout, r

    ctl = root / "control"
    assert (ctl / "conffiles").read_text().split() == [CONF]
    for s in ("postinst", "prerm", "postrm"):
        assert os.access(ctl / s, os.X_OK), s
        r = run(["sh", "-n", str(ctl / s)])
        assert r.returncode == 0, f"{s}: {r.stderr}"
    assert re.search(r"adduser (--quiet )?--system --group --no-create-home --home /var/lib/corelog corelog",
                     (ctl / "postinst").read_text())
    for line in (ctl / "md5sums").read_text().splitlines():
        digest, path = line.split(maxsplit=1)
        r = run(["md5sum", str(fs / path)])
        assert r.stdout.split()[0] == digest, path


def test_docs_mark_every_shell_block():
    blocks = doc_blocks()
    shell = [(before, text) for before, lang, text in blocks if lang in ("sh", "bash", "shell", "console", "")]
    assert shell, DOC
    for before, text in shell:
        assert before == RUNNABLE or re.fullmatch(r"<!-- not-run: .+ -->", before or ""), \
            f"unmarked shell block in {DOC}:\n{text}"
    runnable = [text for before, text in shell if before == RUNNABLE]
    assert any("tools/package/build-deb.sh" in t for t in runnable)


def test_the_shipped_configuration_parses(root):
    conf = tomllib.loads((root / "fs" / CONF.lstrip("/")).read_text())
    assert conf["data-dir"] == DATA
    # The broker starting on it (with ports and data dir moved) is
    # test_the_broker_runs_as_the_unit_starts_it.


def test_unit_verifies_and_says_what_the_broker_needs(root, unit, tmp_path):
    svc = unit["Service"]
    assert one(svc, "Type") == "notify"
    assert one(svc, "NotifyAccess") == "main"
    assert one(svc, "Restart") == "on-failure"
    assert one(svc, "KillSignal") == "SIGTERM"
    assert one(svc, "User") == one(svc, "Group") == "corelog"
    assert exec_start(svc) == ["/usr/bin/corelog", "serve", "--config", CONF]
    assert DATA in " ".join(svc.get("ReadWritePaths", []))
    assert "SystemCallFilter" not in svc, "a system call filter risks blocking io_uring"
    assert timespan_s(one(svc, "WatchdogSec")) >= 2
    bound = broker_stop_bound_s()
    assert timespan_s(one(svc, "TimeoutStopSec")) >= 2 * bound, \
        f"TimeoutStopSec must cover the broker's own {bound} s of stop with margin"
    assert unit["Install"]["WantedBy"] == ["multi-user.target"]

    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze is missing (apt install systemd)")
    # verify checks that ExecStart's binary exists and is executable: the copy points it
    # at the unpacked binary; every other line is the shipped one.
    fs = root / "fs"
    text = (fs / UNIT.lstrip("/")).read_text()
    copy = tmp_path / "corelog.service"
    copy.write_text(text.replace("ExecStart=/usr/bin/corelog ", f"ExecStart={fs}/usr/bin/corelog ", 1))
    assert copy.read_text() != text
    r = run(["systemd-analyze", "verify", "--man=no", str(copy)])
    said = [line for line in (r.stdout + r.stderr).splitlines() if "corelog" in line]
    assert r.returncode == 0 and not said, "\n".join(said) or r.stderr


def test_corelog_check_finds_the_units_limits_enough(root, unit, tmp_path):
    limits = unit_limits(unit["Service"])
    corelog = str(root / "fs/usr/bin/corelog")
    data = tmp_path / "check-data"
    argv = [corelog, "check", "--data-dir", str(data)]
    if can_apply(limits):
        how, cmd, env = "prlimit", ["prlimit", *prlimit_args(limits), *argv], None
    elif shutil.which("cc"):
        # No CAP_SYS_RESOURCE here: getrlimit answers the unit's values instead.
        shim = tmp_path / "rlimit-shim.so"
        src = tmp_path / "rlimit-shim.c"
        src.write_text(RLIMIT_SHIM_C)
        r = run(["cc", "-shared", "-fPIC", "-O2", "-o", str(shim), str(src), "-ldl"])
        assert r.returncode == 0, r.stderr
        env = {**os.environ, "LD_PRELOAD": str(shim)}
        for name, (_, hard) in limits.items():
            env[f"FAKE_RLIMIT_{name.upper()}"] = "unlimited" if hard == INFINITY else str(hard)
        how, cmd = "getrlimit shim (this host cannot raise its limits to the unit's)", argv
    else:
        pytest.skip("cannot raise the limits to the unit's (no CAP_SYS_RESOURCE) and no cc for the shim")
    print(f"corelog check under the unit's limits {prlimit_args(limits)} via {how}")
    r = run(cmd, env=env)
    print(r.stdout)
    for what in ("RLIMIT_MEMLOCK", "RLIMIT_NOFILE"):
        line = next((x for x in r.stdout.splitlines() if re.match(rf"\S+\s+{what}\b", x)), None)
        assert line and line.startswith("ok "), f"{what} under the unit's limits: {line}\n{r.stdout}"

    # The check has teeth: under less than it wants it says so (lowering needs no privilege).
    r = run(["prlimit", "--memlock=65536:65536", "--nofile=2048:2048", *argv])
    assert re.search(r"^FAIL\s+RLIMIT_MEMLOCK", r.stdout, re.M), r.stdout
    assert re.search(r"^warn\s+RLIMIT_NOFILE", r.stdout, re.M), r.stdout


def test_installed_under_systemd(deb):
    """Where PID 1 is systemd: dpkg -i, the postinst starts the unit, a produce and
    consume on the shipped 127.0.0.1:9092, systemctl stop, dpkg --purge."""
    comm = Path("/proc/1/comm").read_text().strip()
    if comm != "systemd":
        pytest.skip(f"PID 1 is {comm!r}, not systemd: the unit cannot be started for real here")
    if os.geteuid() != 0:
        pytest.skip("installing the package needs root")
    if run(["dpkg-query", "-W", "corelog"]).returncode == 0:
        pytest.skip("a corelog package is installed on this host already")
    try:
        pwd.getpwnam("corelog")
        pytest.skip("a corelog user exists on this host already")
    except KeyError:
        pass
    if Path(DATA).exists():
        pytest.skip(f"{DATA} exists on this host already")
    for port in (9092, 9093, 9644):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                pytest.skip(f"127.0.0.1:{port}, which the shipped configuration uses, is taken")
    try:
        r = run(["dpkg", "-i", str(deb)], timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        deadline = time.monotonic() + 90
        while run(["systemctl", "is-active", "corelog"]).stdout.strip() != "active":
            assert time.monotonic() < deadline, run(["journalctl", "-u", "corelog", "-n", "50"]).stdout
            time.sleep(0.5)
        show = dict(line.split("=", 1) for line in run(
            ["systemctl", "show", "corelog", "-p", "MainPID", "-p", "StatusText",
             "-p", "LimitNOFILE", "-p", "LimitMEMLOCK", "-p", "UnitFileState"]).stdout.splitlines())
        assert show["UnitFileState"] == "enabled", show
        assert show["StatusText"] == "serving", show
        status = Path(f"/proc/{show['MainPID']}/status").read_text()
        assert re.search(rf"^Uid:\s+{pwd.getpwnam('corelog').pw_uid}\s", status, re.M), status
        produce_and_consume("127.0.0.1:9092", "package-systemd")
        r = run(["systemctl", "stop", "corelog"], timeout=120)
        assert r.returncode == 0, r.stderr
        show = dict(line.split("=", 1) for line in run(
            ["systemctl", "show", "corelog", "-p", "Result", "-p", "ExecMainStatus"]).stdout.splitlines())
        assert show == {"Result": "success", "ExecMainStatus": "0"}, show
    finally:
        run(["dpkg", "--purge", "corelog"], timeout=300)
    with pytest.raises(KeyError):
        pwd.getpwnam("corelog")
    assert not Path(DATA).exists()


def test_postinst_creates_the_user_and_data_dir_and_enables_the_unit(root, service_user):
    if service_user is None or not service_user["created"]:
        pytest.skip("the corelog user or /var/lib/corelog exists already, or the test is not "
                    "root: the postinst is not run against this host")
    systemd_runs = Path("/run/systemd/system").is_dir()
    pw = pwd.getpwnam("corelog")
    assert pw.pw_uid < 1000 and pw.pw_dir == DATA, pw
    assert grp.getgrgid(pw.pw_gid).gr_name == "corelog"
    st = os.stat(DATA)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (pw.pw_uid, pw.pw_gid, 0o750)
    calls = service_user["install_calls"]
    assert "deb-systemd-helper enable corelog.service" in calls, calls
    started = [c for c in calls if c.startswith("deb-systemd-invoke")]
    assert started == (["deb-systemd-invoke start corelog.service"] if systemd_runs else []), calls

    ctl, stubs, log = root / "control", service_user["stubs"], service_user["calls"]
    # Again, as an upgrade from an older version: the user is kept; restart, not start.
    r = maintainer_script(ctl / "postinst", stubs, "configure", "0.0.1")
    assert r.returncode == 0, r.stderr
    assert pwd.getpwnam("corelog").pw_uid == pw.pw_uid
    invoked = [c for c in calls_of(log) if c.startswith("deb-systemd-invoke")]
    assert invoked == (["deb-systemd-invoke restart corelog.service"] if systemd_runs else [])
    # remove (not purge) keeps the user and the data and masks the unit.
    for script, arg in (("prerm", "remove"), ("postrm", "remove")):
        r = maintainer_script(ctl / script, stubs, arg)
        assert r.returncode == 0, r.stderr
    removed = calls_of(log)
    assert "deb-systemd-helper mask corelog.service" in removed, removed
    assert ("deb-systemd-invoke stop corelog.service" in removed) == systemd_runs, removed
    assert pwd.getpwnam("corelog").pw_uid == pw.pw_uid and Path(DATA).is_dir()
    # Installed again: unmasked and enabled.
    r = maintainer_script(ctl / "postinst", stubs, "configure")
    assert r.returncode == 0, r.stderr
    again = calls_of(log)
    assert again[:1] == ["deb-systemd-helper unmask corelog.service"], again


def test_the_broker_runs_as_the_unit_starts_it(root, unit, service_user):
    svc = unit["Service"]
    fs = root / "fs"
    # ExecStart as written, its absolute paths taken from the unpacked package.
    argv = [str(fs / a.lstrip("/")) if a.startswith("/") and (fs / a.lstrip("/")).exists() else a
            for a in exec_start(svc)]
    conf = fs / CONF.lstrip("/")
    assert argv[0] == str(fs / "usr/bin/corelog") and str(conf) in argv, argv

    # The shipped configuration with only its data directory and ports moved.
    data = root / "data"
    port, controller, http = free_port(), free_port(), free_port()
    shipped = conf.read_text()
    moves = {
        r'^data-dir = ".*"$': f'data-dir = "{data}"',
        r'^listeners = "PLAINTEXT://127\.0\.0\.1:9092"$': f'listeners = "PLAINTEXT://127.0.0.1:{port}"',
        r'^controller-listen = "127\.0\.0\.1:9093"$': f'controller-listen = "127.0.0.1:{controller}"',
        r'^http = "127\.0\.0\.1:9644"$': f'http = "127.0.0.1:{http}"',
    }
    moved = shipped
    for pattern, line in moves.items():
        moved, n = re.subn(pattern, line, moved, flags=re.M)
        assert n == 1, f"the shipped configuration has no single line {pattern}"
    changed = [(a, b) for a, b in zip(shipped.splitlines(), moved.splitlines()) if a != b]
    assert len(changed) == len(moves), changed
    conf.write_text(moved)

    if service_user is not None:
        uid, gid, name = service_user["uid"], service_user["gid"], service_user["name"]
        home, shell = service_user["home"], service_user["shell"]
        assert name == one(svc, "User") and grp.getgrgid(gid).gr_name == one(svc, "Group")
        # As the postinst leaves them: the data directory the user's, the file the group's.
        data.mkdir(mode=0o750)
        os.chown(data, uid, gid)
        os.chown(conf, 0, gid)
        conf.chmod(0o640)
        who = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--init-groups"]
    else:
        print("no corelog user could be had here: the broker runs as the test's own user")
        uid, name, home, shell = os.geteuid(), pwd.getpwuid(os.geteuid()).pw_name, "/", "/bin/sh"
        data.mkdir()
        who = ["setpriv"]
    if one(svc, "NoNewPrivileges") == "yes":
        who.append("--no-new-privs")
    if svc.get("CapabilityBoundingSet") == [""] and os.geteuid() == 0:
        who += ["--bounding-set=-all", "--inh-caps=-all"]
    umask = one(svc, "UMask")

    limits = unit_limits(svc)
    if not can_apply(limits):
        limits = lowered_to_host(limits)
        print(f"this host cannot raise its limits to the unit's: the broker runs under "
              f"{prlimit_args(limits)} (the unit's, lowered to the host's hard limits)")

    watchdog_s = timespan_s(one(svc, "WatchdogSec"))
    stop_s = timespan_s(one(svc, "TimeoutStopSec"))
    start_s = min(timespan_s(one(svc, "TimeoutStartSec")), 60)
    sock_path = root / "notify.sock"
    manager = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    manager.bind(str(sock_path))
    sock_path.chmod(0o777)  # as systemd's own notification socket
    manager.settimeout(0.5)
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
           "HOME": home, "USER": name, "LOGNAME": name, "SHELL": shell,
           "NOTIFY_SOCKET": str(sock_path), "WATCHDOG_USEC": str(int(watchdog_s * 1_000_000))}
    # One pid from prlimit to the broker (each execs the next); the shell sets
    # WATCHDOG_PID to it, as systemd names the main process.
    cmd = ["prlimit", *prlimit_args(limits), *who,
           "sh", "-c", f'umask {umask}; WATCHDOG_PID=$$ exec "$@"', "sh", *argv]
    log_path = root / "journal.log"
    got: list[tuple[float, str]] = []

    def read_until(pred, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not pred():
            try:
                got.append((time.monotonic(), manager.recv(4096).decode()))
            except socket.timeout:
                pass

    def seen(what: str) -> bool:
        return any(what in m for _, m in got)

    with open(log_path, "wb") as log:
        started = time.monotonic()
        proc = subprocess.Popen(cmd, cwd="/", env=env, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        read_until(lambda: seen("READY=1") or proc.poll() is not None, start_s)
        assert seen("READY=1"), f"no READY=1: {got}\n{log_path.read_text()[-4000:]}"

        status = Path(f"/proc/{proc.pid}/status").read_text()
        assert re.search(rf"^Uid:\s+{uid}\s+{uid}\s", status, re.M), status
        if "--no-new-privs" in who:
            assert re.search(r"^NoNewPrivs:\s+1$", status, re.M), status
        proc_limits = Path(f"/proc/{proc.pid}/limits").read_text()
        for label, name_ in (("Max locked memory", "memlock"), ("Max open files", "nofile")):
            hard = limits[name_][1]
            row = next(x for x in proc_limits.splitlines() if x.startswith(label)).split()
            assert row[-2] == ("unlimited" if hard == INFINITY else str(hard)), (label, row)

        produce_and_consume(f"127.0.0.1:{port}", "package-smoke")

        # The first watchdog ping comes at half of WatchdogSec, well before it runs out.
        read_until(lambda: seen("WATCHDOG=1") or proc.poll() is not None, watchdog_s)
        ping = next((t for t, m in got if "WATCHDOG=1" in m), None)
        assert ping is not None, got
        assert watchdog_s / 2 - 1 <= ping - started < watchdog_s, (ping - started, watchdog_s)

        stop_begun = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        read_until(lambda: seen("STOPPING=1"), 10)
        assert seen("STOPPING=1"), got
        assert proc.wait(timeout=stop_s) == 0, log_path.read_text()[-4000:]
        assert time.monotonic() - stop_begun < stop_s
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        manager.close()
    journal = log_path.read_text()
    assert f"data_dir={data}" in journal and "stopped cleanly" in journal, journal[-4000:]
    assert "\x1b[" not in journal, "colour codes in a log that is not a terminal"
    assert re.search(r"^\S+Z\s+INFO ", journal, re.M), "each line carries its level as text"
    # What the broker wrote is the service user's, and not world-readable (UMask).
    written = [p for p in data.rglob("*") if not p.is_symlink()]
    assert written, "the broker wrote nothing in its data directory"
    for p in written:
        st = p.stat()
        assert st.st_uid == uid, p
        assert stat.S_IMODE(st.st_mode) & int(umask, 8) == 0, (p, oct(st.st_mode))


def test_postrm_purge_removes_the_user_and_the_data(root, service_user):
    if service_user is None or not service_user["created"]:
        pytest.skip("the postinst was not run against this host (see the postinst test)")
    r = maintainer_script(root / "control" / "postrm", service_user["stubs"], "purge")
    assert r.returncode == 0, r.stderr
    with pytest.raises(KeyError):
        pwd.getpwnam("corelog")
    with pytest.raises(KeyError):
        grp.getgrnam("corelog")
    assert not Path(DATA).exists()
    assert "deb-systemd-helper purge corelog.service" in calls_of(service_user["calls"])


RLIMIT_SHIM_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/resource.h>

/* getrlimit(2) answering FAKE_RLIMIT_MEMLOCK / FAKE_RLIMIT_NOFILE ("unlimited" or a
   number) for both soft and hard limit; every other resource as the kernel says. */
static int fake(int res, rlim_t *cur, rlim_t *max) {
    const char *v = res == RLIMIT_MEMLOCK ? getenv("FAKE_RLIMIT_MEMLOCK")
                  : res == RLIMIT_NOFILE ? getenv("FAKE_RLIMIT_NOFILE") : NULL;
    if (!v) return 0;
    *cur = *max = v[0] == 'u' ? RLIM_INFINITY : strtoull(v, NULL, 10);
    return 1;
}

int getrlimit(__rlimit_resource_t res, struct rlimit *r) {
    if (fake(res, &r->rlim_cur, &r->rlim_max)) return 0;
    int (*real)(__rlimit_resource_t, struct rlimit *) = dlsym(RTLD_NEXT, "getrlimit");
    return real(res, r);
}

int getrlimit64(__rlimit_resource_t res, struct rlimit64 *r) {
    rlim_t cur, max;
    if (fake(res, &cur, &max)) { r->rlim_cur = cur; r->rlim_max = max; return 0; }
    int (*real)(__rlimit_resource_t, struct rlimit64 *) = dlsym(RTLD_NEXT, "getrlimit64");
    return real(res, r);
}
"""
