#!/usr/bin/env python3
"""Issue 53's disk scenarios run once against Apache Kafka (KRaft, the release
tests/java/pom.xml pins) and once against corelog, each a single broker with two log
directories, to confirm what the tools expect and to write down where the two differ:

- `describe`: DescribeLogDirs v4 of a new topic of 6 partitions: per directory, its error
  and the partitions it holds (both spread a topic over the directories);
- `alter_errors`: AlterReplicaLogDirs' answers for a path that is not a log directory, a
  partition the cluster lacks, and a partition moved to the other directory;
- `reassign`: kafka-reassign-partitions with `log_dirs` --execute, then --verify until the
  move is reported complete: what the tool printed, and where the partition ended;
- `failed_disk` (root only): the second directory on an ext4 loop filesystem the kernel
  remounts read-only after an error (trigger_fs_error), then a produce to every
  partition: DescribeLogDirs' error per directory, and which partitions still took the
  produce.

    sudo python3 benches/jbod_against_kafka.py [--corelog]

Results are printed and written to benches/results/<stamp>-jbod-against-<kind>.json.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benches"))
sys.path.insert(0, str(ROOT / "tests" / "integration"))
import kafka_peer  # noqa: E402
import kwire  # noqa: E402
import launcher  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from harness import write_json_results  # noqa: E402

TOPIC, N = "jbod", 6


def describe(bootstrap: str) -> list[dict]:
    return [{"dir": Path(d.path).name, "error": d.error_code, "partitions": sorted(d.partitions)}
            for d in kwire.describe_log_dirs(bootstrap, TOPIC, list(range(N)))]


def where(bootstrap: str, p: int) -> str | None:
    return next((d["dir"] for d in describe(bootstrap) if p in d["partitions"]), None)


def loop_fs(image: Path, mount: Path) -> str:
    st = os.statvfs(image.parent)
    subprocess.run(["truncate", "-s", str(st.f_bavail * st.f_frsize), str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", "-N", "4096", str(image)], check=True)
    loop = subprocess.run(["losetup", "-f", "--show", str(image)], check=True,
                          capture_output=True, text=True).stdout.strip()
    mount.mkdir(parents=True)
    subprocess.run(["mount", "-o", "errors=remount-ro", loop, str(mount)], check=True)
    return loop


def scenarios(bootstrap: str, dirs: list[Path], node: int, work: Path, loop: str | None) -> dict:
    out: dict = {}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, N, 1)])[TOPIC].result(60)
    time.sleep(2)
    out["describe"] = describe(bootstrap)
    p0 = where(bootstrap, 0)
    other = next(d for d in dirs if d.name != p0)
    out["alter_errors"] = {
        "not a log dir": kwire.alter_replica_log_dirs(bootstrap, [(str(work / "nowhere"), TOPIC, 0)]),
        "unknown partition": kwire.alter_replica_log_dirs(bootstrap, [(str(other), TOPIC, 99)]),
        "moved": kwire.alter_replica_log_dirs(bootstrap, [(str(other), TOPIC, 0)]),
    }
    out["alter_errors"] = {k: {f"{t}-{p}": c for (t, p), c in v.items()} for k, v in out["alter_errors"].items()}
    deadline = time.time() + 60
    while where(bootstrap, 0) != other.name and time.time() < deadline:
        time.sleep(0.5)
    out["moved_to"] = where(bootstrap, 0)

    p1 = where(bootstrap, 1)
    target = next(d for d in dirs if d.name != p1)
    plan = work / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": TOPIC, "partition": 1, "replicas": [node], "log_dirs": [str(target)]}]}))
    execute = kafka_peer.cli("kafka-reassign-partitions", "--bootstrap-server", bootstrap,
                             "--reassignment-json-file", str(plan), "--execute",
                             "--replica-alter-log-dirs-throttle", "10000000").stdout
    verify = ""
    deadline = time.time() + 90
    while time.time() < deadline:
        verify = kafka_peer.cli("kafka-reassign-partitions", "--bootstrap-server", bootstrap,
                                "--reassignment-json-file", str(plan), "--verify").stdout
        if "still in progress" not in verify:
            break
        time.sleep(1)
    path_re = re.compile(re.escape(str(work)) + r"[^\s\"]*")
    out["reassign"] = {"execute": path_re.sub("<dir>", execute).strip().splitlines()[-3:],
                       "verify": path_re.sub("<dir>", verify).strip().splitlines(),
                       "ended_in": where(bootstrap, 1), "asked": target.name}

    if loop is not None:
        on_disk2 = [p for d in describe(bootstrap) if d["dir"] == "disk2" for p in d["partitions"]]
        Path(f"/sys/fs/ext4/{Path(loop).name}/trigger_fs_error").write_text("1")
        prod = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 15000})
        results: dict[int, str] = {}
        for p in range(N):
            prod.produce(TOPIC, value=b"after", partition=p,
                         on_delivery=lambda e, m, p=p: results.__setitem__(p, "ok" if e is None else e.name()))
        prod.flush(30)
        time.sleep(2)
        out["failed_disk"] = {
            "describe": [{"dir": Path(d.path).name, "error": d.error_code}
                         for d in kwire.describe_log_dirs(bootstrap, TOPIC, list(range(N)))],
            "produce": {str(p): results.get(p) for p in range(N)},
            "partitions_on_failed_disk_before": on_disk2,
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corelog", action="store_true", help="a corelog broker instead")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="jbod-against-"))
    kind = "corelog" if args.corelog else "kafka"
    dirs = [work / "disk1", work / "disk2"]
    loop = None
    if os.geteuid() == 0:
        # A directory under the mount point: Kafka refuses a log directory holding the
        # filesystem's lost+found (not a topic-partition), corelog ignores it.
        loop = loop_fs(work / "disk2.img", work / "mnt2")
        dirs[1] = work / "mnt2" / "disk2"
        dirs[1].mkdir()
    broker = None
    try:
        if kind == "kafka":
            broker = kafka_peer.KafkaBroker(work, extra={"log.dirs": ",".join(map(str, dirs))})
            node = 1
        else:
            broker = launcher.Broker(work, name="corelog-jbod", log_level="warn",
                                     extra_args=["--log-dirs", ",".join(map(str, dirs))])
            broker.pass_data_dir = False
            broker.start()
            node = 0
        out = {"broker": kind, **scenarios(broker.bootstrap, dirs, node, work, loop)}
    finally:
        if broker is not None:
            broker.stop()
        if loop is not None:
            subprocess.run(["umount", "-l", str(work / "mnt2")], check=False)
            subprocess.run(["losetup", "-d", loop], check=False)
    print(json.dumps(out, indent=2))
    write_json_results(f"jbod-against-{kind}", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
