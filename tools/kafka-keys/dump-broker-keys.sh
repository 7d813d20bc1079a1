#!/usr/bin/env bash
# Regenerates shards/src/kafka_broker_keys/table.rs from the Kafka jars pinned in
# tests/java/pom.xml (fetched by tools/kafka-cli/kafka-cli.sh --fetch):
#
#   tools/kafka-keys/dump-broker-keys.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
"$repo/tools/kafka-cli/kafka-cli.sh" --fetch
libs="${KAFKA_CLI_LIBS:-$repo/.cache/kafka/libs}"
out="$repo/shards/src/kafka_broker_keys/table.rs"
"${JAVA:-java}" -cp "$libs/*" "$here/DumpBrokerKeys.java" > "$out.tmp"
mv "$out.tmp" "$out"
echo "wrote $out ($(grep -c 'KafkaKey {' "$out") keys)"
