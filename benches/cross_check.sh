#!/usr/bin/env bash
# Cross-check of corelog-load against an independent client on W1 (1 KiB, acks=1, as fast
# as possible): kcat (librdkafka) producing N messages from a file, timed, against
# corelog-load producing the same N messages, each on a fresh broker.
# Usage: benches/cross_check.sh [messages]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1000000}
command -v kcat >/dev/null || apt-get install -y -qq kcat >/dev/null
cargo build --release -q -p corelog -p corelog-load
work=$(mktemp -d "${TMPDIR:-/tmp}/corelog-xcheck.XXXXXX")
pid=
trap 'kill "$pid" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT

start_broker() {
    port=$((20000 + RANDOM % 20000))
    rm -rf "$work/data"
    ./target/release/corelog serve --listen 127.0.0.1:$port --http 127.0.0.1:$((port + 1)) \
    --controller-listen 127.0.0.1:$((port + 2)) \
        --data-dir "$work/data" --log-level warn &
    pid=$!
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$((port + 1))/health" >/dev/null && break; sleep 0.1; done
}
stop_broker() { kill "$pid"; wait "$pid" || true; }

# 1 KiB messages: 1023 bytes + newline delimiter.
python3 -c "
import sys
line = b'x' * 1023 + b'\n'
with open('$work/msgs', 'wb') as f:
    for _ in range($n): f.write(line)
"
start_broker
./target/release/corelog-load produce --bootstrap 127.0.0.1:$port --topic x --partitions 8 --messages 1 >/dev/null
t0=$(date +%s.%N)
kcat -P -b 127.0.0.1:$port -t x -X acks=1 -X linger.ms=2 -X batch.size=65536 \
    -X queue.buffering.max.kbytes=1048576 -l "$work/msgs"
t1=$(date +%s.%N)
stop_broker
kcat_s=$(python3 -c "print($t1 - $t0)")

start_broker
./target/release/corelog-load produce --bootstrap 127.0.0.1:$port --topic x --partitions 8 \
    --producers 1 --message-size 1024 --acks 1 --batch-size 65536 --linger-ms 2 \
    --messages "$n" --json "$work/load.json" >/dev/null
stop_broker
python3 - "$n" "$kcat_s" "$work/load.json" <<'PY'
import json, sys
n, kcat_s = int(sys.argv[1]), float(sys.argv[2])
load = json.load(open(sys.argv[3]))
print(json.dumps({
    "messages": n, "message_bytes": 1024,
    "kcat_msgs_per_s": round(n / kcat_s), "kcat_mb_per_s": round(n * 1024 / 1e6 / kcat_s, 1),
    "corelog_load_msgs_per_s": round(load["msgs_per_s"]), "corelog_load_mb_per_s": round(load["mb_per_s"], 1),
}, indent=2))
PY
