#!/usr/bin/env python3
"""The macro benchmark harness: one command, a fixed set of workloads, every figure next
to the machine limit it should be read against.

    benches/harness.sh            # full run (< 10 minutes on a 2-core machine)
    benches/harness.sh --quick    # smoke run (< 2 minutes)

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

Bottleneck naming is a rule of thumb over the samples: a broker shard thread or the load
generator above 90 % of a core is "CPU"; throughput above 80 % of the disk or loopback
limit is "disk" / "network"; otherwise the workload is latency-bound (acks, fsync, rate).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BROKER = ROOT / "target" / "release" / "corelog"
LOAD = ROOT / "target" / "release" / "corelog-load"
CLK_TCK = os.sysconf("SC_CLK_TCK")
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def log(msg: str) -> None:
    print(f"[harness {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------- limits

def prepare(name: str) -> tuple[Path, Path, float | None]:
    """Set-up shared by the focused benchmarks: builds the release binaries, makes
    ``benches/results/<stamp>-<name>/`` and a scratch directory, and measures the disk's
    direct-write bandwidth there (the limit every figure is a ratio to).
    Returns (results dir, scratch dir, MB/s or None without fio)."""
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + name
    out = ROOT / "benches" / "results" / stamp
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "corelog", "-p", "corelog-load"],
                   cwd=ROOT, check=True)
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


# ---------------------------------------------------------------------------- broker

class Broker:
    def __init__(self, work: Path, shards: int, extra: list[str]):
        self.port, self.http = free_port(), free_port()
        self.data = work / f"data-{self.port}"
        self.log = open(work / f"broker-{self.port}.log", "w")
        self.proc = subprocess.Popen(
            [str(BROKER), "serve", "--listen", f"127.0.0.1:{self.port}",
             "--http", f"127.0.0.1:{self.http}", "--data-dir", str(self.data),
             "--shards", str(shards), "--log-level", "warn", *extra],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                with NO_PROXY.open(f"http://127.0.0.1:{self.http}/health", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("broker did not become healthy")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.data, ignore_errors=True)


def load(broker: Broker, out: Path, name: str, mode: str, args: list[str]) -> tuple[dict, dict]:
    """Runs corelog-load; returns (its JSON, CPU shares of broker threads and the client)."""
    j, hgrm, svg = out / f"{name}.json", out / f"{name}.hgrm", out / f"{name}.svg"
    cmd = [str(LOAD), mode, "--bootstrap", broker.bootstrap, "--json", str(j), "--hgrm", str(hgrm),
           "--plot", str(svg), *args]
    log(f"{name}: {' '.join(cmd[1:])}")
    b0, t0 = thread_ticks(broker.proc.pid), time.time()
    log_path = out / f"{name}.log"
    with open(log_path, "w") as client_log:
        client = subprocess.Popen(cmd, stdout=client_log, stderr=subprocess.STDOUT)
        # wait4 gives the client's own CPU time (rusage) as it exits.
        _, status, usage = os.wait4(client.pid, 0)
        client.returncode = os.waitstatus_to_exitcode(status)
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
           "client": client_cpu, "client_threads": threads_of(cmd)}
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
    if hot:
        return "; ".join(hot)
    return "latency-bound (no core or device saturated)"


def fmt(v, digits=1):
    return "—" if v is None else (f"{v:,.{digits}f}" if isinstance(v, float) else f"{v:,}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--shards", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    quick = args.quick
    started = time.time()
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + ("-quick" if quick else "")
    out = args.out or (ROOT / "benches" / "results" / stamp)
    out.mkdir(parents=True, exist_ok=True)

    log("building release binaries")
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "corelog", "-p", "corelog-load"],
                   cwd=ROOT, check=True)
    work = Path(tempfile.mkdtemp(prefix="corelog-harness-", dir=os.environ.get("TMPDIR", "/tmp")))
    try:
        log("measuring limits")
        limits = {
            "disk_write_mb_s": fio(work, "write", "256M" if quick else "1G"),
            "disk_read_mb_s": fio(work, "read", "256M" if quick else "1G"),
            "loopback_mb_s": iperf3(),
        }
        log(f"limits: {limits}")
        d = "6s" if quick else "30s"
        warm = "1s" if quick else "3s"
        common = ["--duration", d, "--warmup", warm, "--threads", "1", "--max-in-flight", "5"]
        rows = []

        def run(name, desc, mode, largs, extra_broker=(), limit=None, limit_name="disk"):
            broker = Broker(work, args.shards, list(extra_broker))
            try:
                res, cpu = load(broker, out, name, mode, largs)
            finally:
                broker.stop()
            lat = res.get("latency_ms", {})
            e2e = res.get("e2e_latency_ms")
            mb = res.get("mb_per_s", 0.0)
            rows.append({
                "workload": name, "description": desc, "mode": mode, "args": largs,
                "msgs_per_s": res.get("msgs_per_s"), "mb_per_s": mb, "errors": res.get("errors"),
                "latency_ms": lat, "e2e_latency_ms": e2e,
                "limit_name": limit_name, "limit_mb_s": limit,
                "ratio_to_limit": round(mb / limit, 3) if limit else None,
                "cpu": cpu, "bottleneck": bottleneck(mb, limit, cpu, limit_name),
            })
            log(f"{name}: {res.get('msgs_per_s')} msg/s, {mb} MB/s, p99 {lat.get('p99')} ms")
            return res

        def kib(acks: str) -> list[str]:
            return ["--message-size", "1024", "--acks", acks, "--partitions", "8", "--producers", "4",
                    "--batch-size", "65536", "--linger-ms", "2", *common]

        run("W1", "produce 1 KiB, acks=1, max rate", "produce", ["--topic", "w1", *kib("1")],
            limit=limits["disk_write_mb_s"])
        w2res = run("W2", "produce 1 KiB, acks=all, fsync before ack", "produce",
                    ["--topic", "w2", *kib("all")],
                    extra_broker=["--durability", "ack-all"], limit=limits["disk_write_mb_s"])
        run("W3", "produce 100 B, acks=1, max rate", "produce",
            ["--topic", "w3", "--message-size", "100", "--acks", "1", "--partitions", "8",
             "--producers", "4", "--batch-size", "65536", "--linger-ms", "2", *common],
            limit=limits["disk_write_mb_s"])
        rate = max(1000, int((w2res.get("msgs_per_s") or 2000) / 2))
        run("W4", f"produce + consume at {rate:,} msg/s (half of W2), acks=all", "e2e",
            ["--topic", "w4", "--message-size", "1024", "--acks", "all", "--partitions", "8",
             "--producers", "2", "--consumers", "1", "--rate", str(rate), "--linger-ms", "1",
             *common], limit=limits["disk_write_mb_s"])

        # W5: fill, then read back from offset 0 on the same broker.
        catch_up_bytes = (256 << 20) if quick else (2 << 30)
        n = catch_up_bytes // 1024
        broker = Broker(work, args.shards, [])
        try:
            log(f"W5: filling {catch_up_bytes >> 20} MiB")
            load(broker, out, "W5-fill", "produce",
                 ["--topic", "w5", "--message-size", "1024", "--acks", "1", "--partitions", "8",
                  "--producers", "4", "--batch-size", "262144", "--messages", str(n)])
            res, cpu = load(broker, out, "W5", "consume",
                            ["--topic", "w5", "--messages", str(n), "--consumers", "1",
                             "--message-size", "1024"])
        finally:
            broker.stop()
        mb = res.get("mb_per_s", 0.0)
        limit = limits["disk_read_mb_s"]
        rows.append({
            "workload": "W5", "description": f"catch-up consume of {catch_up_bytes >> 20} MiB on disk",
            "mode": "consume", "args": [], "msgs_per_s": res.get("msgs_per_s"), "mb_per_s": mb,
            "errors": res.get("errors"), "latency_ms": res.get("latency_ms", {}), "e2e_latency_ms": None,
            "limit_name": "disk read", "limit_mb_s": limit,
            "ratio_to_limit": round(mb / limit, 3) if limit else None,
            "cpu": cpu, "bottleneck": bottleneck(mb, limit, cpu, "disk read"),
        })
        log(f"W5: {res.get('msgs_per_s')} msg/s, {mb} MB/s")

        run("W6", "1,000 partitions, keyed (uniform over 100k keys), 16 producers", "produce",
            ["--topic", "w6", "--message-size", "1024", "--acks", "1", "--partitions", "1000",
             "--producers", "16", "--keys", "uniform:100000", "--batch-size", "16384",
             "--linger-ms", "5", *common], limit=limits["disk_write_mb_s"])

        total_s = round(time.time() - started, 1)
        doc = {"stamp": stamp, "quick": quick, "shards": args.shards, "cpus": os.cpu_count(),
               "limits": limits, "workloads": rows, "harness_seconds": total_s}
        (out / "results.json").write_text(json.dumps(doc, indent=2))
        (out / "results.md").write_text(markdown(doc))
        print(markdown(doc))
        log(f"done in {total_s} s; results in {out.relative_to(ROOT)}")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


def markdown(doc: dict) -> str:
    lim = doc["limits"]
    lines = [
        f"# corelog macro benchmark {doc['stamp']}",
        "",
        f"{doc['cpus']} CPUs, broker with {doc['shards']} shards; harness took {doc['harness_seconds']} s.",
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
    lines += ["", "Commands: see each workload's `.log` next to this file; every run's "
              "`.hgrm` and `.svg` latency plot are there too.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
