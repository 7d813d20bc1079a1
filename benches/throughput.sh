#!/usr/bin/env bash
# Produce/fetch throughput of corelog from a real client, next to the disk's direct
# sequential write bandwidth measured in the same run (the limit the figure is read
# against). Usage: benches/throughput.sh [messages]   (needs fio; installs it if apt works)
set -euo pipefail
cd "$(dirname "$0")/.."
messages=${1:-1000000}
command -v fio >/dev/null || apt-get install -y -qq fio >/dev/null
python3 -c "import confluent_kafka" 2>/dev/null || python3 -m pip install --quiet confluent-kafka
cargo build --release --bins -q
work=$(mktemp -d "${TMPDIR:-/tmp}/corelog-bench.XXXXXX")
trap 'kill "$pid" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT

fio --name=seqwrite --directory="$work" --rw=write --direct=1 --bs=1M --size=1G \
    --ioengine=io_uring --numjobs=1 --end_fsync=1 --output-format=json >"$work/fio.json"
disk_mb_s=$(python3 -c "import json;j=json.load(open('$work/fio.json'));print(round(j['jobs'][0]['write']['bw_bytes']/1e6,1))")
rm -f "$work"/seqwrite*

port=$((20000 + RANDOM % 20000))
./target/release/corelog serve --listen 127.0.0.1:$port --http 127.0.0.1:$((port + 1)) \
    --controller-listen 127.0.0.1:$((port + 2)) \
    --data-dir "$work/data" --log-level warn &
pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$((port + 1))/health" >/dev/null && break; sleep 0.1; done
cpu_ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
before=$(cpu_ticks)
result=$(python3 benches/throughput.py --bootstrap 127.0.0.1:$port --messages "$messages")
broker_cpu_s=$(awk -v a="$before" -v b="$(cpu_ticks)" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.2f", (b - a) / hz}')
python3 - "$result" "$disk_mb_s" "$broker_cpu_s" <<'PY'
import json, sys
r = json.loads(sys.argv[1]); disk = float(sys.argv[2])
r["broker_cpu_s_both_phases"] = float(sys.argv[3])
r["disk_direct_seq_write_mb_per_s"] = disk
r["produce_ratio_to_disk"] = round(r["produce_mb_per_s"] / disk, 3)
r["fetch_ratio_to_disk"] = round(r["fetch_mb_per_s"] / disk, 3)
print(json.dumps(r, indent=2))
PY
