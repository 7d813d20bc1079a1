#!/usr/bin/env python3
"""The macro benchmark harness: one command, a fixed set of workloads, every figure next
to the machine limit it should be read against.

    benches/harness.sh            # full run (< 10 minutes on a 2-core machine)
    benches/harness.sh --quick    # smoke run (< 2 minutes)
    benches/harness.sh --peer kafka [--quick]   # and Apache Kafka beside it (~11 / ~4 min)
    benches/harness.sh --only W1,W6 --no-build   # some workloads, on the broker CORELOG_BIN names
    benches/harness.sh --tls --only W1,W2,W7 [--peer kafka]   # the load over TLS
    benches/harness.sh --only W1,W2 --log-dirs /mnt/disk1,/mnt/disk2   # corelog on two disks

Steps: build release binaries; measure the limits (direct sequential disk write and
read with fio, loopback TCP with iperf3 where installed); for each workload start a
broker on a fresh data directory, drive it with corelog-load, sample the CPU of every
broker shard thread and of the load generator, and record the load generator's JSON;
write benches/results/<stamp>/results.{md,json} plus every workload's .hgrm and .svg.

Workloads (fixed; see issue "load generator"):
  W1 produce 1 KiB, acks=1, as fast as possible
  W2 produce 1 KiB, acks=all, durability ack-all (fsync before ack)
  W3 produce 100 B, acks=1, as fast as possible
  W4 produce + consume at about half of W2's rate: produce-ack and end-to-end latency
  W5 catch-up consume of data already on disk (>= 2 GiB full, 256 MiB quick)
  W6 1,000 partitions, keyed traffic, 16 producers
  W7 one consumer reading from the tail cache (data that fits it; median of 5 reads),
     against loopback TCP

With --peer kafka (benches/kafka_peer.py), every workload also runs, right after
corelog's, against Apache Kafka at the release tests/java/pom.xml pins (jars from Maven
Central, cached): a fresh single-node KRaft broker per workload, log dirs in the same
scratch directory, the same corelog-load command (W4 at corelog's W2 rate), Kafka's
defaults except W2's topic flush.messages=1 (so both brokers fsync before acks=all is
answered) and any --kafka-config. Then W1 is cross-checked with kafka-producer-perf-test
(and a one-producer corelog-load) against both. results.{md,json} gain the side-by-side
table: throughput of each and corelog / Kafka, p50/p99/p99.9 of each, CPU-seconds per GB
moved of each broker process (/proc/PID/stat over the measured window), durability of
each. Without --peer nothing of this runs.

With --tls, every broker (corelog and Kafka alike) serves an SSL listener beside its
plaintext one, with a certificate from a CA the run makes (openssl, as the tests do), and
corelog-load drives it over TLS (`--security-protocol SSL`, the broker's name verified):
rustls in corelog, the JDK's TLS in Kafka. Setup (topic creation, readiness) stays on
the plaintext listener. The cross-check is skipped (kafka-producer-perf-test would run
in plaintext).

Bottleneck naming is a rule of thumb over the samples: a broker shard thread or the load
generator above 90 % of a core is "CPU"; throughput above 80 % of the disk or loopback
limit is "disk" / "network"; otherwise the workload is latency-bound (acks, fsync, rate).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The broker launcher and port allocator the integration tests use (tests/integration/launcher.py).
sys.path.insert(0, str(ROOT / "tests" / "integration"))
import launcher  # noqa: E402
from launcher import free_port  # noqa: E402
from certs import CertificateAuthority, Issued  # noqa: E402

BROKER = launcher.corelog_bin()
LOAD = ROOT / "target" / "release" / "corelog-load"
CLK_TCK = os.sysconf("SC_CLK_TCK")



def portable(text: str) -> str:
    """`text` without this machine's paths, for results that are committed: the
    repository's root becomes relative, a run's temporary directory `$WORK`."""
    text = text.replace(str(ROOT) + "/", "")
    return re.sub(r"/tmp/corelog-[A-Za-z0-9_.-]+", "$WORK", text)

def log(msg: str) -> None:
    print(f"[harness {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def write_json_results(name: str, doc: dict) -> Path:
    """Prints `doc` and writes it to benches/results/<UTC stamp>-<name>.json (the
    one-file results of the benches that compare clusters); returns the file."""
    text = json.dumps(doc, indent=2)
    print(text)
    results = ROOT / "benches" / "results"
    results.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = results / f"{stamp}-{name}.json"
    path.write_text(text + "\n")
    return path


# ---------------------------------------------------------------------------- limits

def results_dir(name: str, *crates: str) -> Path:
    """Builds the release binaries of `crates` and makes ``benches/results/<stamp>-<name>/``."""
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + name
    out = ROOT / "benches" / "results" / stamp
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cargo", "build", "--release", "-q", *[a for c in crates for a in ("-p", c)]],
                   cwd=ROOT, check=True)
    return out


def prepare(name: str) -> tuple[Path, Path, float | None]:
    """Set-up shared by the focused benchmarks: builds the release binaries, makes
    ``benches/results/<stamp>-<name>/`` and a scratch directory, and measures the disk's
    direct-write bandwidth there (the limit every figure is a ratio to).
    Returns (results dir, scratch dir, MB/s or None without fio)."""
    out = results_dir(name, "corelog", "corelog-load")
    work = Path(tempfile.mkdtemp(prefix=f"corelog-{name}-", dir=os.environ.get("TMPDIR", "/tmp")))
    disk = fio(work, "write", "256M")
    log(f"disk direct write: {disk} MB/s")
    return out, work, disk


def fio(work: Path, rw: str, size: str) -> float | None:
    if not shutil.which("fio"):
        return None
    out = subprocess.run(
        ["fio", "--name=limit", f"--directory={work}", f"--rw={rw}", "--direct=1", "--bs=1M",
         f"--size={size}", "--ioengine=io_uring", "--numjobs=1", "--end_fsync=1",
         "--output-format=json"],
        capture_output=True, text=True, check=False)
    for f in work.glob("limit*"):
        f.unlink()
    if out.returncode != 0:
        return None
    job = json.loads(out.stdout)["jobs"][0]
    side = "write" if "write" in rw else "read"
    return round(job[side]["bw_bytes"] / 1e6, 1)


def iperf3() -> float | None:
    if not shutil.which("iperf3"):
        return None
    port = free_port()
    server = subprocess.Popen(["iperf3", "-s", "-1", "-p", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    time.sleep(0.3)
    try:
        out = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", "3", "-J"],
                             capture_output=True, text=True, timeout=30, check=False)
        j = json.loads(out.stdout)
        return round(j["end"]["sum_received"]["bits_per_second"] / 8 / 1e6, 1)
    except (ValueError, KeyError, subprocess.TimeoutExpired):
        return None
    finally:
        server.kill()
        server.wait()


# ---------------------------------------------------------------------------- CPU

def thread_ticks(pid: int) -> dict[str, int]:
    """{thread name + tid: utime+stime ticks} of a process."""
    out = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            stat = (task / "stat").read_text()
            name = (task / "comm").read_text().strip()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        out[f"{name}/{task.name}"] = int(fields[11]) + int(fields[12])
    return out


def cpu_share(before: dict[str, int], after: dict[str, int], seconds: float) -> dict[str, float]:
    return {k: round((after[k] - before.get(k, 0)) / CLK_TCK / seconds, 2)
            for k in after if seconds > 0}


def process_ticks(pid: int) -> int | None:
    """utime+stime of a whole process: every thread, also those that have exited."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])


def machine_busy_ticks() -> int:
    """Busy ticks of all CPUs (/proc/stat: user, nice, system, irq, softirq, steal)."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return f[0] + f[1] + f[2] + f[5] + f[6] + (f[7] if len(f) > 7 else 0)


def block_device(path: Path) -> str | None:
    """The /proc/diskstats name of the block device holding `path` (None if not found)."""
    try:
        st = os.stat(path)
        want = (os.major(st.st_dev), os.minor(st.st_dev))
        for line in Path("/proc/diskstats").read_text().splitlines():
            f = line.split()
            if (int(f[0]), int(f[1])) == want:
                return f[2]
    except (OSError, ValueError, IndexError):
        pass
    return None


def device_bytes_written(device: str | None) -> int:
    """Bytes written to `device` since boot (/proc/diskstats sectors written x 512)."""
    if device is None:
        return 0
    for line in Path("/proc/diskstats").read_text().splitlines():
        f = line.split()
        if len(f) > 9 and f[2] == device:
            return int(f[9]) * 512
    return 0


class CpuSampler:
    """Samples a process's CPU (process_ticks), the machine's busy CPU and the bytes
    written to the data device every 50 ms on a thread, so the figures of a window that
    is known only afterwards (the load generator's measured seconds, which end when it
    exits) can be read off by interpolation."""

    def __init__(self, pid: int, period: float = 0.05, device: str | None = None):
        self.pid, self.period, self.device = pid, period, device
        self.samples: list[tuple[float, int, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._sample()
        self._thread.start()

    def _sample(self) -> None:
        t = process_ticks(self.pid)
        if t is not None:
            self.samples.append((time.monotonic(), t, machine_busy_ticks(),
                                 device_bytes_written(self.device)))

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            self._sample()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _at(self, t: float, i: int) -> float:
        s = self.samples
        if t <= s[0][0]:
            return float(s[0][i])
        for a, b in zip(s, s[1:]):
            if a[0] <= t <= b[0]:
                w = (t - a[0]) / (b[0] - a[0]) if b[0] > a[0] else 1.0
                return a[i] + w * (b[i] - a[i])
        return float(s[-1][i])

    def device_written(self, t0: float, t1: float) -> float:
        """Bytes written to the data device between two monotonic times."""
        if not self.samples:
            return 0.0
        return self._at(t1, 3) - self._at(t0, 3)

    def window(self, t0: float, t1: float) -> tuple[float, float]:
        """(process CPU-seconds, machine busy CPU-seconds) between two monotonic times."""
        if not self.samples:
            return 0.0, 0.0
        return ((self._at(t1, 1) - self._at(t0, 1)) / CLK_TCK,
                (self._at(t1, 2) - self._at(t0, 2)) / CLK_TCK)


def moved_bytes(result: dict) -> int:
    """Bytes the load generator moved in its measured window: produced (or fetched)
    plus, in e2e, fetched."""
    return int(result.get("bytes") or 0) + int((result.get("consumed") or {}).get("bytes") or 0)


def process_cpu(sampler: CpuSampler, t_end: float, result: dict) -> dict:
    """The broker process's CPU over the load generator's measured window, taken as its
    last `duration_s` seconds before it exited, and per GB (10^9 bytes) moved in it."""
    window = float(result.get("duration_s") or 0.0)
    proc_s, busy_s = sampler.window(t_end - window, t_end)
    gb = moved_bytes(result) / 1e9
    written = sampler.device_written(t_end - window, t_end)
    produced = int(result.get("bytes") or 0) if result.get("mode") in ("produce", "e2e") else 0
    return {
        # Device bytes written in the window / record bytes produced in it (Kafka writes
        # to the page cache: what it has not written back by the window's end is missing).
        "device_bytes_written": int(written),
        "write_amplification": round(written / produced, 2) if produced and sampler.device else None,
        "window_s": round(window, 3),
        "broker_process_cpu_s": round(proc_s, 3),
        "broker_process_cores": round(proc_s / window, 2) if window > 0 else None,
        "machine_busy_cores": round(busy_s / window, 2) if window > 0 else None,
        "gb_moved": round(gb, 4),
        "cpu_s_per_gb": round(proc_s / gb, 3) if gb > 0 else None,
    }


# ---------------------------------------------------------------------------- broker

class Tls:
    """The run's TLS material (--tls): a CA and one server certificate for 127.0.0.1,
    and the load generator's arguments to use it."""

    def __init__(self, work: Path):
        self.ca = CertificateAuthority(work / "pki", name="harness-ca")
        self.server: Issued = self.ca.issue("broker", "localhost", server=True)

    def client_args(self) -> list[str]:
        return ["--security-protocol", "SSL", "--ssl-ca-location", str(self.ca.cert)]


def tls_paths(broker) -> dict[str, int]:
    """corelog_tls_sessions by path (kernel, user), summed over the shards."""
    return {path: int(broker.metric("corelog_tls_sessions", path=path))
            for path in ("kernel", "user")}


class WorkloadBroker(launcher.Broker):
    """The broker of one workload (tests/integration/launcher.py's): started and healthy
    once constructed, in a directory of its own under `work`, logging warnings and
    above; stop() ends it (SIGTERM, SIGKILL after 30 s) and removes its data. With
    `tls`, an SSL listener beside the plaintext one, and the load goes there."""

    def __init__(self, work: Path, shards: int, extra: list[str], tls: Tls | None = None,
                 log_dirs: list[Path] | None = None):
        super().__init__(Path(tempfile.mkdtemp(prefix="corelog-", dir=work)), shards=shards,
                         extra_args=extra, log_level="warn")
        self.tls = tls
        # --log-dirs: a fresh directory of its own under each (one per disk), in place of
        # the data directory.
        self.log_dirs = [Path(tempfile.mkdtemp(prefix="corelog-", dir=d)) for d in log_dirs or []]
        if self.log_dirs:
            self.pass_data_dir = False
            self.extra_args += ["--log-dirs", ",".join(str(d) for d in self.log_dirs)]
        if tls:
            self.ssl_port = free_port()
            self.extra_args += [
                "--listeners", f"PLAINTEXT://127.0.0.1:{self.port},SSL://127.0.0.1:{self.ssl_port}",
                "--security", f"ssl.keystore.location={tls.server.chain}"]
        self.start()

    @property
    def load_bootstrap(self) -> str:
        return f"127.0.0.1:{self.ssl_port}" if self.tls else self.bootstrap

    def client_args(self) -> list[str]:
        return self.tls.client_args() if self.tls else []

    @property
    def data(self) -> Path:
        return self.log_dirs[0] if self.log_dirs else self.data_dir

    def stop(self) -> None:
        self.begin_teardown()
        self.finish_teardown(timeout=launcher.STOP_TIMEOUT_S)
        for d in [self.data_dir, *self.log_dirs]:
            shutil.rmtree(d, ignore_errors=True)


def load(broker: WorkloadBroker, out: Path, name: str, mode: str, args: list[str]) -> tuple[dict, dict]:
    """Runs corelog-load; returns (its JSON, CPU shares of broker threads and the client)."""
    j, hgrm, svg = out / f"{name}.json", out / f"{name}.hgrm", out / f"{name}.svg"
    cmd = [str(LOAD), mode, "--bootstrap", broker.load_bootstrap, "--json", str(j), "--hgrm",
           str(hgrm), "--plot", str(svg), *args, *broker.client_args()]
    log(f"{name}: {' '.join(cmd[1:])}")
    sampler = CpuSampler(broker.proc.pid, device=block_device(broker.data))
    b0, t0 = thread_ticks(broker.proc.pid), time.time()
    log_path = out / f"{name}.log"
    try:
        with open(log_path, "w") as client_log:
            client = subprocess.Popen(cmd, stdout=client_log, stderr=subprocess.STDOUT)
            # wait4 gives the client's own CPU time (rusage) as it exits.
            _, status, usage = os.wait4(client.pid, 0)
            client.returncode = os.waitstatus_to_exitcode(status)
        t_end = time.monotonic()
    finally:
        sampler.stop()
    seconds = time.time() - t0
    b1 = thread_ticks(broker.proc.pid)
    if client.returncode != 0:
        raise RuntimeError(f"{name}: corelog-load failed ({client.returncode}):\n"
                           f"{log_path.read_text()[-2000:]}")
    client_cpu = round((usage.ru_utime + usage.ru_stime) / seconds, 2)
    result = json.loads(j.read_text())
    shares = cpu_share(b0, b1, seconds)
    shard_cpu = {k.split("/")[0] + "#" + k.split("/")[1]: v for k, v in shares.items()
                 if k.startswith("corelog-shard") and v > 0}
    cpu = {"broker_shards": shard_cpu,
           "broker_total": round(sum(shares.values()), 2),
           "client": client_cpu, "client_threads": threads_of(cmd),
           **process_cpu(sampler, t_end, result)}
    return result, cpu


def threads_of(cmd: list[str]) -> int:
    return int(cmd[cmd.index("--threads") + 1]) if "--threads" in cmd else 1


# ---------------------------------------------------------------------------- verdict

def bottleneck(mb_s: float, limit_mb_s: float | None, cpu: dict, what: str) -> str:
    hot = [f"CPU on {k} ({int(v * 100)} %)" for k, v in cpu["broker_shards"].items() if v >= 0.9]
    client = cpu.get("client")
    if isinstance(client, (int, float)) and client >= 0.9 * max(1, cpu.get("client_threads", 1)):
        hot.append(f"load generator CPU ({int(client * 100)} %)")
    if limit_mb_s and mb_s >= 0.8 * limit_mb_s:
        hot.append(f"{what} ({mb_s / limit_mb_s:.0%} of its limit)")
    busy, cpus = cpu.get("machine_busy_cores"), os.cpu_count() or 1
    if not hot and isinstance(busy, (int, float)) and busy >= 0.75 * cpus:
        # No one thread is saturated, but the machine is: say who holds its cores. The
        # broker's threads other than its shards are io_uring's kernel workers (writes
        # that cannot complete without blocking are handed to them) and its helpers.
        shards = sum(cpu["broker_shards"].values())
        broker = cpu.get("broker_process_cores") or shards
        client = client if isinstance(client, (int, float)) else 0.0
        rest = max(0.0, busy - broker - client)
        who = (f"broker shards {shards:.2f}, broker io_uring workers and helpers "
               f"{max(0.0, broker - shards):.2f}" if cpu["broker_shards"]
               else f"broker process {broker:.2f}")
        hot.append(f"machine CPU ({busy:.2f} of {cpus} cores busy: {who}, load generator "
                   f"{client:.2f}, other (kernel block-I/O workers, softirq) {rest:.2f})")
    if hot:
        return "; ".join(hot)
    return "latency-bound (no core or device saturated)"


def fmt(v, digits=1):
    return "—" if v is None else (f"{v:,.{digits}f}" if isinstance(v, float) else f"{v:,}")


def main() -> int:
    ap = argparse.ArgumentParser(description="corelog's macro benchmark (see the module docstring)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--shards", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--peer", choices=["kafka"],
                    help="also run every workload against Apache Kafka (the release pinned in "
                         "tests/java/pom.xml), right after corelog, and compare")
    ap.add_argument("--kafka-heap", default=None,
                    help="the Kafka broker's heap options (default: bin/kafka-server-start.sh's, "
                         "-Xmx1G -Xms1G)")
    ap.add_argument("--kafka-config", action="append", default=[], metavar="KEY=VALUE",
                    help="a Kafka broker setting beyond its defaults (repeatable; recorded in "
                         "the results)")
    ap.add_argument("--only", default=None, metavar="W1,W2,...",
                    help="run only these workloads (W4 without W2 runs at 1,000 msg/s)")
    ap.add_argument("--tls", action="store_true",
                    help="drive every broker over TLS (an SSL listener beside the plaintext one)")
    ap.add_argument("--tls-user-space", action="store_true",
                    help="with --tls: keep corelog's sessions in user space (rustls), not "
                         "handed to the kernel (--tls-kernel-offload false)")
    ap.add_argument("--log-dirs", default=None, metavar="DIR,DIR",
                    help="corelog keeps its logs in a fresh directory under each of these "
                         "(one per disk: `log.dirs`) instead of one data directory")
    ap.add_argument("--no-build", action="store_true",
                    help="use the binaries as they are (the broker named by CORELOG_BIN, "
                         "e.g. for benches/ab.py's A/B runs)")
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else None
    log_dirs = [Path(d) for d in args.log_dirs.split(",")] if args.log_dirs else None
    quick = args.quick
    started = time.time()
    peer = None
    kafka_extra: dict[str, str] = {}
    if args.peer:
        import kafka_peer as peer  # noqa: PLC0415 (only --peer needs it)
        for kv in args.kafka_config:
            k, sep, v = kv.partition("=")
            if not sep or not k:
                ap.error(f"--kafka-config wants KEY=VALUE, not {kv!r}")
            kafka_extra[k.strip()] = v.strip()
        log(f"fetching Apache Kafka's jars (cached in {peer.LIBS.relative_to(ROOT)})")
        kafka_version = peer.fetch()
    elif args.kafka_config or args.kafka_heap:
        ap.error("--kafka-config and --kafka-heap need --peer kafka")
    kafka_heap = args.kafka_heap or (peer.SERVER_HEAP if peer else None)
    stamp = (dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + ("-quick" if quick else "")
             + ("-tls" if args.tls else "") + (f"-vs-{args.peer}" if args.peer else ""))
    out = args.out or (ROOT / "benches" / "results" / stamp)
    out.mkdir(parents=True, exist_ok=True)

    if not args.no_build:
        log("building release binaries")
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "corelog", "-p", "corelog-load"],
                       cwd=ROOT, check=True)
    log(f"broker: {BROKER}")
    work = Path(tempfile.mkdtemp(prefix="corelog-harness-", dir=os.environ.get("TMPDIR", "/tmp")))
    try:
        tls = Tls(work) if args.tls else None
        log("measuring limits")
        limits = {
            "disk_write_mb_s": fio(work, "write", "256M" if quick else "1G"),
            "disk_read_mb_s": fio(work, "read", "256M" if quick else "1G"),
            "loopback_mb_s": iperf3(),
        }
        log(f"limits: {limits}")
        # A max-rate workload can write at the disk's speed for its whole duration, and the
        # broker refuses produces once the filesystem is 95 % full (--disk-fill-max-percent):
        # a run without that room measures refusals (the errors column), not throughput.
        seconds = 6 if quick else 30
        need = int((limits["disk_write_mb_s"] or 0) * 1e6 * seconds)
        st = os.statvfs(work)
        room = st.f_bavail * st.f_frsize - int(0.05 * st.f_blocks * st.f_frsize)
        if room < need:
            log(f"WARNING: {room / 1e9:.1f} GB left before the broker's 95 % guard, and a "
                f"max-rate workload may write up to {need / 1e9:.1f} GB "
                f"({limits['disk_write_mb_s']:.0f} MB/s for {seconds} s): if its errors "
                "column is not 0, free space or set TMPDIR to a larger filesystem")
        d = "6s" if quick else "30s"
        warm = "1s" if quick else "3s"
        common = ["--duration", d, "--warmup", warm, "--threads", "1", "--max-in-flight", "5"]
        rows = []
        peer_rows = []

        def make_row(name, desc, mode, largs, res, cpu, limit, limit_name, kind="corelog"):
            lat = res.get("latency_ms", {})
            mb = res.get("mb_per_s", 0.0)
            verdict = bottleneck(mb, limit, cpu, limit_name)
            if kind != "corelog":
                verdict = peer_bottleneck(verdict, cpu)
            return {
                "workload": name, "description": desc, "mode": mode, "args": largs,
                "msgs_per_s": res.get("msgs_per_s"), "mb_per_s": mb, "errors": res.get("errors"),
                "latency_ms": lat, "e2e_latency_ms": res.get("e2e_latency_ms"),
                "limit_name": limit_name, "limit_mb_s": limit,
                "ratio_to_limit": round(mb / limit, 3) if limit else None,
                "cpu": cpu, "bottleneck": verdict,
            }

        def kafka_broker(name):
            return peer.KafkaBroker(work, kafka_heap, kafka_extra,
                                    log_path=out / f"{name}-kafka-server.log",
                                    tls=tls.server if tls else None,
                                    client_args=tls.client_args() if tls else [])

        def corelog_broker(extra: list[str]) -> WorkloadBroker:
            """A workload's corelog broker; with --tls-user-space its TLS sessions stay in
            rustls."""
            offload = ["--tls-kernel-offload", "false"] if args.tls_user_space else []
            return WorkloadBroker(work, args.shards, extra + offload, tls, log_dirs)

        def run(name, desc, mode, largs, extra_broker=(), limit=None, limit_name="disk",
                kafka_topic_config=None):
            if only is not None and name not in only:
                return {}
            broker = corelog_broker(list(extra_broker))
            try:
                res, cpu = load(broker, out, name, mode, largs)
                paths = tls_paths(broker) if tls else {}
            finally:
                broker.stop()
            rows.append(make_row(name, desc, mode, largs, res, cpu, limit, limit_name))
            if paths:
                # Where the load's TLS sessions were sealed: kernel (kTLS) or user (rustls).
                rows[-1]["tls_sessions"] = paths
            lat = res.get("latency_ms", {})
            log(f"{name}: {res.get('msgs_per_s')} msg/s, {res.get('mb_per_s')} MB/s, p99 {lat.get('p99')} ms")
            if peer:
                # The same corelog-load command; Kafka gets the topic made beforehand (with
                # the workload's topic config) and fully led, see KafkaBroker.create_topic.
                topic = largs[largs.index("--topic") + 1]
                partitions = int(largs[largs.index("--partitions") + 1])
                kb = kafka_broker(name)
                try:
                    kb.create_topic(topic, partitions, kafka_topic_config)
                    kres, kcpu = load(kb, out, f"{name}-kafka", mode, largs)
                finally:
                    kb.stop()
                r = make_row(name, desc, mode, largs, kres, kcpu, limit, limit_name, kind="kafka")
                r["kafka_topic_config"] = kafka_topic_config or {}
                peer_rows.append(r)
                klat = kres.get("latency_ms", {})
                log(f"{name} on Kafka: {kres.get('msgs_per_s')} msg/s, {kres.get('mb_per_s')} MB/s, "
                    f"p99 {klat.get('p99')} ms")
            return res

        def kib(acks: str) -> list[str]:
            return ["--message-size", "1024", "--acks", acks, "--partitions", "8", "--producers", "4",
                    "--batch-size", "65536", "--linger-ms", "2", *common]

        run("W1", "produce 1 KiB, acks=1, max rate", "produce", ["--topic", "w1", *kib("1")],
            limit=limits["disk_write_mb_s"])
        w2res = run("W2", "produce 1 KiB, acks=all, fsync before ack", "produce",
                    ["--topic", "w2", *kib("all")],
                    extra_broker=["--durability", "ack-all"], limit=limits["disk_write_mb_s"],
                    kafka_topic_config={"flush.messages": "1"})
        run("W3", "produce 100 B, acks=1, max rate", "produce",
            ["--topic", "w3", "--message-size", "100", "--acks", "1", "--partitions", "8",
             "--producers", "4", "--batch-size", "65536", "--linger-ms", "2", *common],
            limit=limits["disk_write_mb_s"])
        # Half of corelog's W2, for Kafka too (the same corelog-load command for both).
        rate = max(1000, int((w2res.get("msgs_per_s") or 2000) / 2))
        run("W4", f"produce + consume at {rate:,} msg/s (half of W2), acks=all", "e2e",
            ["--topic", "w4", "--message-size", "1024", "--acks", "all", "--partitions", "8",
             "--producers", "2", "--consumers", "1", "--rate", str(rate), "--linger-ms", "1",
             *common], limit=limits["disk_write_mb_s"])

        def read_passes(broker, name, read, passes):
            """`passes` reads from offset 0 on one broker; the median one by throughput
            (a read of memory takes a fraction of a second, so one pass is at the mercy
            of a noisy moment of the VM). Each pass keeps its own files."""
            runs = [load(broker, out, name if i == 0 else f"{name}-pass{i + 1}", "consume", read)
                    for i in range(passes)]
            if passes > 1:
                log(f"{name}: passes {[r.get('mb_per_s') for r, _ in runs]} MB/s; the median kept")
            return sorted(runs, key=lambda rc: rc[0].get("mb_per_s") or 0)[passes // 2]

        def fill_then_read(name, desc, partitions, fill, read, limit, limit_name,
                           before_kafka_read=None, passes=1):
            """Fills a topic, then reads it back from offset 0 on the same broker; on
            Kafka too with --peer (`before_kafka_read(kb)` returns extra row fields)."""
            if only is not None and name not in only:
                return
            broker = corelog_broker([])
            try:
                log(f"{name}: filling")
                load(broker, out, f"{name}-fill", "produce", fill)
                res, cpu = read_passes(broker, name, read, passes)
                paths = tls_paths(broker) if tls else {}
            finally:
                broker.stop()
            rows.append(make_row(name, desc, "consume", [], res, cpu, limit, limit_name))
            if paths:
                rows[-1]["tls_sessions"] = paths
            log(f"{name}: {res.get('msgs_per_s')} msg/s, {res.get('mb_per_s')} MB/s")
            if not peer:
                return
            kb = kafka_broker(name)
            try:
                kb.create_topic(fill[fill.index("--topic") + 1], partitions)
                log(f"{name} on Kafka: filling")
                load(kb, out, f"{name}-fill-kafka", "produce", fill)
                extra = before_kafka_read(kb) if before_kafka_read else {}
                kres, kcpu = read_passes(kb, f"{name}-kafka", read, passes)
            finally:
                kb.stop()
            r = make_row(name, desc, "consume", [], kres, kcpu, limit, limit_name, kind="kafka")
            r.update(extra)
            peer_rows.append(r)
            log(f"{name} on Kafka: {kres.get('msgs_per_s')} msg/s, {kres.get('mb_per_s')} MB/s")

        def evict(kb):
            # corelog reads with O_DIRECT; make Kafka read from the disk too, not from
            # the page cache its writes left behind.
            evicted = kb.evict_page_cache()
            log(f"W5 on Kafka: {evicted >> 20} MiB of log files written back and evicted "
                "from the page cache")
            return {"page_cache_evicted_bytes": evicted}

        # W5: fill, then read back from the disk.
        catch_up_bytes = (256 << 20) if quick else (2 << 30)
        n = catch_up_bytes // 1024
        fill_then_read(
            "W5", f"catch-up consume of {catch_up_bytes >> 20} MiB on disk", 8,
            ["--topic", "w5", "--message-size", "1024", "--acks", "1", "--partitions", "8",
             "--producers", "4", "--batch-size", "262144", "--messages", str(n)],
            ["--topic", "w5", "--messages", str(n), "--consumers", "1", "--message-size", "1024"],
            limits["disk_read_mb_s"], "disk read", before_kafka_read=evict)

        run("W6", "1,000 partitions, keyed (uniform over 100k keys), 16 producers", "produce",
            ["--topic", "w6", "--message-size", "1024", "--acks", "1", "--partitions", "1000",
             "--producers", "16", "--keys", "uniform:100000", "--batch-size", "16384",
             "--linger-ms", "5", *common], limit=limits["disk_write_mb_s"])

        # W7: one consumer at the head of the log, reading from memory: a fill that fits
        # the partitions' tail caches (2 MiB each by default), then one consumer from
        # offset 0, five times (the median pass is kept). Its limit is loopback TCP:
        # nothing comes from the disk. Kafka reads what it just wrote from the page
        # cache, its tail cache.
        tail_parts = 64 if quick else 384
        tail_bytes = tail_parts * (3 << 19)  # 1.5 MiB a partition, inside its 2 MiB cache
        n = tail_bytes // 1024
        fill_then_read(
            "W7", f"one consumer reading {tail_bytes >> 20} MiB from the tail cache", tail_parts,
            ["--topic", "w7", "--message-size", "1024", "--acks", "1", "--partitions",
             str(tail_parts), "--producers", "4", "--batch-size", "262144", "--messages", str(n)],
            ["--topic", "w7", "--messages", str(n), "--consumers", "1", "--message-size", "1024"],
            limits["loopback_mb_s"], "loopback", passes=5)

        doc = {"stamp": stamp, "quick": quick, "shards": args.shards, "cpus": os.cpu_count(),
               "tls": bool(tls), "tls_user_space": bool(tls and args.tls_user_space),
               "kernel": os.uname().release, "limits": limits, "workloads": rows}
        xcheck = None
        if peer and not tls and (only is None or "W1" in only):
            records = 200_000 if quick else 1_000_000
            log(f"cross-check of W1 with kafka-producer-perf-test, {records:,} records, both brokers")
            xcheck = cross_check(peer, work, out, records, args.shards, kafka_broker)
        if peer:
            doc["peer"] = {
                "name": "kafka", "version": kafka_version,
                "server_properties": {k: v for k, v in peer.server_properties(
                    0, 0, Path("<scratch>/kafka-<port>/data"), kafka_extra).items()},
                "config_overrides": kafka_extra, "heap": kafka_heap,
                "jvm_opts": peer.SERVER_JVM_OPTS,
                "read_ahead_kb": read_ahead_kb(work),
                "workloads": peer_rows,
                "comparison": compare(rows, peer_rows, out),
                "cross_check": xcheck,
            }
        doc["harness_seconds"] = round(time.time() - started, 1)
        total_s = doc["harness_seconds"]
        (out / "results.json").write_text(json.dumps(doc, indent=2))
        (out / "results.md").write_text(markdown(doc))
        print(markdown(doc))
        log(f"done in {total_s} s; results in {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ---------------------------------------------------------------------------- peer

# What each broker promises when it acknowledges, per workload (`--peer`).
DURABILITY_OF = {
    "W1": ("acks=1", "acks=1"), "W2": ("acks=all", "acks=all flush"), "W3": ("acks=1", "acks=1"),
    "W4": ("acks=all", "acks=all"), "W5": ("acks=1", "acks=1"), "W6": ("acks=1", "acks=1"),
    "W7": ("acks=1", "acks=1"),
}
DURABILITY_SHORT = {
    ("corelog", "acks=1"): "O_DIRECT write done; fdatasync ≤ 1 s later",
    ("corelog", "acks=all"): "fdatasync before ack (group commit)",
    ("kafka", "acks=1"): "page cache; no fsync (defaults)",
    ("kafka", "acks=all"): "page cache; no fsync (defaults) — NOT matched",
    ("kafka", "acks=all flush"): "fsync of every append before ack (`flush.messages=1`)",
}


def peer_bottleneck(verdict: str, cpu: dict) -> str:
    """A peer's threads are not corelog shards: name its whole process instead."""
    cores, cpus = cpu.get("broker_process_cores"), os.cpu_count() or 1
    if isinstance(cores, (int, float)) and cores >= 0.9 * cpus:
        hot = f"CPU: broker process {cores:.2f} of {cpus} cores"
        return hot if verdict.startswith("latency-bound") else f"{hot}; {verdict}"
    return verdict


def first_error(log_path: Path) -> str | None:
    """The first error corelog-load printed in a run's log, if any."""
    try:
        for line in log_path.read_text(errors="replace").splitlines():
            if line.startswith("error: "):
                return line[len("error: "):].strip()
    except OSError:
        pass
    return None


def compare(rows: list[dict], peer_rows: list[dict], out: Path) -> list[dict]:
    peers = {r["workload"]: r for r in peer_rows}
    table = []
    for r in rows:
        p = peers.get(r["workload"])
        if p is None:
            continue
        ours, theirs = DURABILITY_OF.get(r["workload"], ("acks=1", "acks=1"))

        def ratio(a, b):
            return round(a / b, 2) if isinstance(a, (int, float)) and b else None

        table.append({
            "workload": r["workload"], "description": r["description"],
            "corelog_msgs_per_s": r["msgs_per_s"], "kafka_msgs_per_s": p["msgs_per_s"],
            "corelog_mb_per_s": r["mb_per_s"], "kafka_mb_per_s": p["mb_per_s"],
            "throughput_ratio": ratio(r["msgs_per_s"], p["msgs_per_s"]),
            "corelog_latency_ms": {k: r["latency_ms"].get(k) for k in ("p50", "p99", "p999")},
            "kafka_latency_ms": {k: p["latency_ms"].get(k) for k in ("p50", "p99", "p999")},
            "corelog_e2e_latency_ms": ({k: r["e2e_latency_ms"].get(k) for k in ("p50", "p99", "p999")}
                                       if r["e2e_latency_ms"] else None),
            "kafka_e2e_latency_ms": ({k: p["e2e_latency_ms"].get(k) for k in ("p50", "p99", "p999")}
                                     if p["e2e_latency_ms"] else None),
            "corelog_cpu_s_per_gb": r["cpu"].get("cpu_s_per_gb"),
            "kafka_cpu_s_per_gb": p["cpu"].get("cpu_s_per_gb"),
            "corelog_broker_cores": r["cpu"].get("broker_process_cores"),
            "kafka_broker_cores": p["cpu"].get("broker_process_cores"),
            "corelog_errors": r["errors"], "kafka_errors": p["errors"],
            "corelog_first_error": first_error(out / f"{r['workload']}.log") if r["errors"] else None,
            "kafka_first_error": first_error(out / f"{p['workload']}-kafka.log") if p["errors"] else None,
            "corelog_durability": DURABILITY_SHORT[("corelog", ours)],
            "kafka_durability": DURABILITY_SHORT[("kafka", theirs)],
        })
    return table


def cross_check(peer, work: Path, out: Path, records: int, shards: int, kafka_broker) -> dict:
    """W1's shape from Kafka's own producer benchmark (one Java producer, so one
    connection) against each broker, and corelog-load with one producer (one connection)
    against each, every run on a fresh broker: the same records, size, acks=1, batch and
    linger. The broker's CPU is its process's over the whole perf-test run."""
    props = {"acks": "1", "batch.size": "65536", "linger.ms": "2", "enable.idempotence": "false",
             "compression.type": "none"}
    load_args = ["--topic", "xcheck", "--partitions", "8", "--producers", "1",
                 "--message-size", "1024", "--acks", "1", "--batch-size", "65536",
                 "--linger-ms", "2", "--messages", str(records), "--threads", "1",
                 "--max-in-flight", "5"]
    doc: dict = {"records": records, "record_bytes": 1024, "partitions": 8,
                 "perf_test_producer_props": props, "corelog_load_args": load_args}
    gb = records * 1024 / 1e9
    for kind in ("corelog", "kafka"):
        doc[kind] = {}
        for client in ("perf_test", "corelog_load"):
            b = (WorkloadBroker(work, shards, []) if kind == "corelog"
                 else kafka_broker(f"xcheck-{client.replace('_', '-')}"))
            try:
                peer.create_topic(b.bootstrap, "xcheck", 8)
                if client == "perf_test":
                    sampler = CpuSampler(b.proc.pid)
                    t0 = time.monotonic()
                    try:
                        r = peer.producer_perf_test(b.bootstrap, "xcheck", records, 1024, props,
                                                    out / f"xcheck-perf-test-{kind}.log")
                    finally:
                        t1 = time.monotonic()
                        sampler.stop()
                    cpu_s, _ = sampler.window(t0, t1)
                    r["broker_process_cpu_s"] = round(cpu_s, 3)
                    r["cpu_s_per_gb"] = round(cpu_s / gb, 3)
                else:
                    res, cpu = load(b, out, f"xcheck-corelog-load-{kind}", "produce", load_args)
                    r = {"msgs_per_s": res.get("msgs_per_s"), "mb_per_s": res.get("mb_per_s"),
                         "errors": res.get("errors"),
                         "latency_ms": {k: res.get("latency_ms", {}).get(k)
                                        for k in ("mean", "p50", "p99", "p999", "max")},
                         "broker_process_cpu_s": cpu.get("broker_process_cpu_s"),
                         "cpu_s_per_gb": cpu.get("cpu_s_per_gb")}
            finally:
                b.stop()
            doc[kind][client] = r
            log(f"cross-check {client} on {kind}: {r['msgs_per_s']} msg/s, {r['mb_per_s']} MB/s")
    for client in ("perf_test", "corelog_load"):
        a, b = doc["corelog"][client]["msgs_per_s"], doc["kafka"][client]["msgs_per_s"]
        doc[f"{client}_ratio"] = round(a / b, 2) if a and b else None
    return doc


def read_ahead_kb(path: Path) -> int | None:
    """The readahead of the block device under `path` (it sizes what a page fault on a
    memory-mapped file reads: Kafka's indexes are mmapped)."""
    st = os.stat(path)
    dev = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    for q in (dev / "queue" / "read_ahead_kb", dev.parent / "queue" / "read_ahead_kb",
              dev.resolve().parent / "queue" / "read_ahead_kb"):
        try:
            return int(q.read_text())
        except (OSError, ValueError):
            continue
    return None


def markdown(doc: dict) -> str:
    lim = doc["limits"]
    lines = [
        f"# corelog macro benchmark {doc['stamp']}",
        "",
        f"{doc['cpus']} CPUs, broker with {doc['shards']} shards; harness took {doc['harness_seconds']} s."
        + (" The load ran over TLS (an SSL listener; rustls in corelog, the JDK's TLS in Kafka)."
           if doc.get("tls") else "")
        + (" corelog's sessions were kept in user space (--tls-kernel-offload false)."
           if doc.get("tls_user_space") else "")
        + (f" Kernel {doc['kernel']}." if doc.get("kernel") else ""),
        "",
        f"Limits measured in this run: disk direct sequential write {fmt(lim['disk_write_mb_s'])} MB/s, "
        f"read {fmt(lim['disk_read_mb_s'])} MB/s (fio, 1 MiB blocks, io_uring); loopback TCP "
        f"{fmt(lim['loopback_mb_s'])} MB/s (iperf3).",
        "",
        "| workload | msg/s | MB/s | ratio to limit | p50 ms | p99 ms | p99.9 ms | p99.99 ms | e2e p50 / p99 / p99.9 / p99.99 ms | errors | bottleneck |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in doc["workloads"]:
        lat, e2e = r["latency_ms"] or {}, r["e2e_latency_ms"]
        e2e_s = " / ".join(fmt(e2e.get(k), 2) for k in ("p50", "p99", "p999", "p9999")) if e2e else "—"
        ratio = f"{r['ratio_to_limit']:.2f} of {r['limit_name']}" if r["ratio_to_limit"] is not None else "—"
        lines.append(
            f"| {r['workload']}: {r['description']} | {fmt(r['msgs_per_s'], 0)} | {fmt(r['mb_per_s'])} | {ratio} "
            f"| {fmt(lat.get('p50'), 2)} | {fmt(lat.get('p99'), 2)} | {fmt(lat.get('p999'), 2)} "
            f"| {fmt(lat.get('p9999'), 2)} | {e2e_s} | {fmt(r['errors'], 0)} | {r['bottleneck']} |")
    lines += ["", "CPU per broker shard thread (share of one core) and the load generator:", ""]
    for r in doc["workloads"]:
        lines.append(f"- {r['workload']}: shards {r['cpu']['broker_shards']}, broker total "
                     f"{r['cpu']['broker_total']}, load generator {r['cpu']['client']}")
    amp = [r for r in doc["workloads"] if r["cpu"].get("write_amplification") is not None]
    if amp:
        lines += ["", "Write amplification (bytes written to the data device in the measured "
                  "window, /proc/diskstats, ÷ record bytes produced in it):", ""]
        for r in amp:
            lines.append(f"- {r['workload']}: {r['cpu']['write_amplification']} "
                         f"({r['cpu']['device_bytes_written'] / 1e6:,.0f} MB written)")
    lines += ["", "Commands: see each workload's `.log` next to this file; every run's "
              "`.hgrm` and `.svg` latency plot are there too.", ""]
    if "peer" in doc:
        lines += peer_markdown(doc)
    return "\n".join(lines)


def peer_markdown(doc: dict) -> list[str]:
    pr = doc["peer"]

    def lat(d):
        return " / ".join(fmt(d.get(k), 2) for k in ("p50", "p99", "p999")) if d else "—"

    def thr(msgs, mb):
        return f"{fmt(msgs, 0)} ({fmt(mb)} MB/s)"

    overrides = ", ".join(f"`{k}={v}`" for k, v in pr["config_overrides"].items()) or "none"
    lines = [
        f"## Side by side with Apache Kafka {pr['version']}",
        "",
        f"Each workload ran on corelog and then on Kafka {pr['version']} (kafka_2.13 from Maven "
        "Central), each broker fresh, on this machine, data on the same disk, driven by the "
        "same corelog-load command. Kafka: single-node KRaft (combined broker + controller), "
        f"heap `{pr['heap']}`, JVM `{pr['jvm_opts']}` (bin/kafka-server-start.sh's), "
        f"Kafka's defaults otherwise (num.io.threads 8, num.network.threads 3, …); "
        f"overrides: {overrides}; topics created beforehand with the same partition count "
        "and used once every partition answered ListOffsets. Block-device readahead under "
        f"the data: {fmt(pr['read_ahead_kb'])} KiB.",
        "",
    ]
    if (pr["read_ahead_kb"] or 0) >= 1024 and "log.index.size.max.bytes" not in pr["config_overrides"]:
        lines += [
            "Kafka memory-maps each segment's offset and time index, preallocated sparse to "
            "`log.index.size.max.bytes` (10 MiB); with a readahead this large a page fault on "
            "one can zero-fill up to that much of it, so a first write to many partitions "
            "(W6: 2,000 index files) costs Kafka seconds of kernel time. "
            "`--kafka-config log.index.size.max.bytes=1048576` shows Kafka without it.",
            "",
        ]
    lines += [
        "| workload | corelog msg/s (MB/s) | Kafka msg/s (MB/s) | corelog ÷ Kafka | corelog p50 / p99 / p99.9 ms | Kafka p50 / p99 / p99.9 ms | CPU-s per GB corelog | CPU-s per GB Kafka | durability corelog | durability Kafka | errors corelog / Kafka |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for c in pr["comparison"]:
        ours, theirs = lat(c["corelog_latency_ms"]), lat(c["kafka_latency_ms"])
        if c["corelog_e2e_latency_ms"]:
            ours += f"; e2e {lat(c['corelog_e2e_latency_ms'])}"
            theirs += f"; e2e {lat(c['kafka_e2e_latency_ms'])}"
        ratio = f"{c['throughput_ratio']:.2f}" if c["throughput_ratio"] is not None else "—"
        if c["workload"] == "W4":
            ratio += " (fixed rate)"
        lines.append(
            f"| {c['workload']}: {c['description']} | {thr(c['corelog_msgs_per_s'], c['corelog_mb_per_s'])} "
            f"| {thr(c['kafka_msgs_per_s'], c['kafka_mb_per_s'])} | {ratio} | {ours} | {theirs} "
            f"| {fmt(c['corelog_cpu_s_per_gb'], 2)} | {fmt(c['kafka_cpu_s_per_gb'], 2)} "
            f"| {c['corelog_durability']} | {c['kafka_durability']} "
            f"| {fmt(c['corelog_errors'], 0)} / {fmt(c['kafka_errors'], 0)} |")
    refused = [f"- {c['workload']} on {label}: {c[f'{side}_errors']:,} messages refused; "
               f"first error: `{c[f'{side}_first_error']}`"
               for c in pr["comparison"]
               for side, label in (("corelog", "corelog"), ("kafka", "Kafka")) if c[f"{side}_errors"]]
    if refused:
        lines += ["", "Errors (messages not acknowledged; corelog-load does not retry):", "", *refused]
    from kafka_peer import DURABILITY  # noqa: PLC0415
    lines += [
        "",
        "Latency is produce-ack latency (W4 also end-to-end; W5 and W7 fetch round trip). CPU-s per GB: "
        "utime + stime of the whole broker process (all threads, /proc/PID/stat, sampled every "
        "50 ms) over the load generator's measured window, divided by the GB (10^9 bytes) it "
        "produced plus fetched in that window. Kernel work done outside the process is not in "
        "it: Kafka's page-cache writeback runs in kernel flusher threads, while corelog's "
        "O_DIRECT writes are submitted by its own threads (io_uring). W4 runs both at half of "
        "corelog's W2 rate, so its ratio is about 1 by construction; compare its latencies.",
        "",
        "Durability, as each broker acknowledges:",
        "",
        f"- corelog, acks=1 (W1, W3, W5's and W7's fills, W6): {DURABILITY['corelog']['acks=1']}.",
        f"- corelog, acks=all (W2, W4): {DURABILITY['corelog']['acks=all']}.",
        f"- Kafka, acks=1 (W1, W3, W5's and W7's fills, W6): {DURABILITY['kafka']['acks=1']}.",
        f"- Kafka, W2: {DURABILITY['kafka']['acks=all flush']}. Both brokers fsync before "
        "acknowledging W2: corelog's ack-all durability and Kafka's flush.messages=1 alike.",
        f"- Kafka, W4: {DURABILITY['kafka']['acks=all']} (its default; corelog fsyncs before "
        "this ack, so W4's durability is not matched).",
        "- W5 reads what a fill at acks=1 wrote; before the read Kafka's log files were "
        "written back and dropped from the page cache (fsync + POSIX_FADV_DONTNEED, "
        "only those files), so both brokers read from the disk (corelog reads with O_DIRECT).",
        "- W7 reads what a fill at acks=1 just wrote, from memory on both: corelog's tail "
        "caches, Kafka's page cache.",
        "",
        "Per workload, both brokers (process cores = broker CPU-s ÷ window; machine = all "
        "busy CPUs, including the load generator and anything else running):",
        "",
    ]
    for r, p in zip(doc["workloads"], pr["workloads"]):
        rc, pc = r["cpu"], p["cpu"]
        lines.append(
            f"- {r['workload']}: corelog process {fmt(rc.get('broker_process_cores'), 2)} cores, "
            f"machine {fmt(rc.get('machine_busy_cores'), 2)}, load generator {rc['client']}; "
            f"Kafka process {fmt(pc.get('broker_process_cores'), 2)} cores, machine "
            f"{fmt(pc.get('machine_busy_cores'), 2)}, load generator {pc['client']}; "
            f"Kafka bottleneck: {p['bottleneck']}")
    x = pr["cross_check"]
    if x is None:
        return lines
    lines += [
        "",
        "### Cross-check of W1 with kafka-producer-perf-test",
        "",
        f"{x['records']:,} records of {x['record_bytes']} B to a {x['partitions']}-partition topic, "
        "as fast as possible, each run on a fresh broker: Kafka's producer benchmark "
        f"(`{' '.join(f'{k}={v}' for k, v in x['perf_test_producer_props'].items())}`, one Java "
        "producer) and corelog-load with one producer (`"
        + " ".join(x["corelog_load_args"]) + "`); one connection each. Broker CPU for "
        "perf-test: the whole run of the tool.",
        "",
        "| client | corelog msg/s (MB/s) | Kafka msg/s (MB/s) | corelog ÷ Kafka | corelog p50 / p99 / p99.9 ms | Kafka p50 / p99 / p99.9 ms | CPU-s per GB corelog | CPU-s per GB Kafka |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for client, label in (("perf_test", "kafka-producer-perf-test"), ("corelog_load", "corelog-load")):
        a, b = x["corelog"][client], x["kafka"][client]
        ratio = x.get(f"{client}_ratio")
        lines.append(
            f"| {label} | {thr(a['msgs_per_s'], a['mb_per_s'])} | {thr(b['msgs_per_s'], b['mb_per_s'])} "
            f"| {fmt(ratio, 2)} | {lat(a['latency_ms'])} | {lat(b['latency_ms'])} "
            f"| {fmt(a.get('cpu_s_per_gb'), 2)} | {fmt(b.get('cpu_s_per_gb'), 2)} |")
    lines += ["", "kafka-producer-perf-test reports whole milliseconds; its output is in "
              "`xcheck-perf-test-*.log`. Kafka's runs are the `*-kafka.*` files next to this one.", ""]
    return lines


if __name__ == "__main__":
    sys.exit(main())
