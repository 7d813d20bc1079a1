#!/usr/bin/env bash
# The macro benchmark harness (see benches/harness.py).
# Usage: benches/harness.sh [--quick] [--peer kafka [--kafka-config KEY=VALUE]... [--kafka-heap OPTS]]
# Installs fio and iperf3 through apt when they are missing and apt is usable. --peer kafka
# also needs java (17+) and, the first time, mvn (tools/kafka-cli/kafka-cli.sh --fetch).
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in fio iperf3; do
    if ! command -v "$tool" >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$tool" >/dev/null 2>&1 \
            || echo "warning: could not install $tool; its limit will be missing" >&2
    fi
done
exec python3 benches/harness.py "$@"
