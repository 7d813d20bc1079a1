#!/usr/bin/env bash
# Runs one of Apache Kafka's command-line tools against corelog, the way Kafka's own
# bin/*.sh scripts do (the tool's main class on Kafka's classpath), without a Kafka
# installation: the jars come from Maven Central at the version pinned in
# tests/java/pom.xml and are cached in .cache/kafka/libs.
#
#   tools/kafka-cli/kafka-cli.sh --fetch                 fetch (or refresh) the jars only
#   tools/kafka-cli/kafka-cli.sh kafka-topics.sh ARGS    run a tool (the .sh is optional)
#
# Tools: kafka-topics, kafka-configs, kafka-acls, kafka-consumer-groups, kafka-share-groups,
# kafka-console-share-consumer, kafka-console-producer,
# kafka-console-consumer, kafka-get-offsets, kafka-delete-records,
# kafka-producer-perf-test, kafka-consumer-perf-test, kafka-e2e-latency, kafka-verifiable-producer,
# kafka-verifiable-consumer, kafka-metadata-quorum, kafka-reassign-partitions,
# kafka-leader-election, kafka-features, kafka-storage, kafka-server-start
# (the last two run Apache Kafka itself, for the side-by-side benchmarks).
#
# Environment: KAFKA_CLI_LIBS (jar folder), KAFKA_HEAP_OPTS (default -Xmx512m),
# KAFKA_OPTS (extra JVM options), JAVA (java binary).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
libs="${KAFKA_CLI_LIBS:-$repo/.cache/kafka/libs}"

fetch() {
    command -v mvn >/dev/null || { echo "kafka-cli: mvn (Maven) is needed to fetch Kafka's jars" >&2; exit 1; }
    local stamp="$libs/.pom.sha256" sum
    sum="$(sha256sum "$repo/tests/java/pom.xml" | cut -d' ' -f1)"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$sum" ]; then
        return 0
    fi
    # Into a fresh folder that replaces the old one only once Maven has succeeded: a failed
    # refresh (offline, say, after an unrelated edit of the pom) leaves the working jars.
    local tmp="$libs.fetch.$$"
    rm -rf "$tmp"
    if ! mvn -B -q -Dmaven.repo.local="$repo/.cache/m2" -f "$repo/tests/java/pom.xml" \
        dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$tmp" >&2; then
        rm -rf "$tmp"
        echo "kafka-cli: fetching Kafka's jars failed (any jars already in $libs are left as they were)" >&2
        exit 1
    fi
    echo "$sum" >"$tmp/.pom.sha256"
    rm -rf "$libs"
    mv "$tmp" "$libs"
}

if [ "${1:-}" = "--fetch" ]; then
    fetch
    exit 0
fi
[ $# -ge 1 ] || { sed -n '2,20p' "$0" >&2; exit 2; }
tool="${1%.sh}"
shift
case "$tool" in
    kafka-topics)               main=org.apache.kafka.tools.TopicCommand ;;
    kafka-configs)              main=org.apache.kafka.tools.ConfigCommand ;;
    kafka-acls)                 main=org.apache.kafka.tools.AclCommand ;;
    kafka-consumer-groups)      main=org.apache.kafka.tools.consumer.group.ConsumerGroupCommand ;;
    kafka-share-groups)         main=org.apache.kafka.tools.consumer.group.ShareGroupCommand ;;
    kafka-console-share-consumer) main=org.apache.kafka.tools.consumer.ConsoleShareConsumer ;;
    kafka-console-producer)     main=org.apache.kafka.tools.ConsoleProducer ;;
    kafka-console-consumer)     main=org.apache.kafka.tools.consumer.ConsoleConsumer ;;
    kafka-get-offsets)          main=org.apache.kafka.tools.GetOffsetShell ;;
    kafka-delete-records)       main=org.apache.kafka.tools.DeleteRecordsCommand ;;
    kafka-producer-perf-test)   main=org.apache.kafka.tools.ProducerPerformance ;;
    kafka-consumer-perf-test)   main=org.apache.kafka.tools.ConsumerPerformance ;;
    kafka-e2e-latency)          main=org.apache.kafka.tools.EndToEndLatency ;;
    kafka-verifiable-producer)  main=org.apache.kafka.tools.VerifiableProducer ;;
    kafka-verifiable-consumer)  main=org.apache.kafka.tools.VerifiableConsumer ;;
    kafka-metadata-quorum)      main=org.apache.kafka.tools.MetadataQuorumCommand ;;
    kafka-reassign-partitions)  main=org.apache.kafka.tools.reassign.ReassignPartitionsCommand ;;
    kafka-leader-election)      main=org.apache.kafka.tools.LeaderElectionCommand ;;
    kafka-transactions)         main=org.apache.kafka.tools.TransactionsCommand ;;
    kafka-features)             main=org.apache.kafka.tools.FeatureCommand ;;
    kafka-storage)              main=kafka.tools.StorageTool ;;
    kafka-server-start)         main=kafka.Kafka ;;
    *) echo "kafka-cli: unknown tool '$tool'" >&2; exit 2 ;;
esac
[ -d "$libs" ] || fetch
# shellcheck disable=SC2086
exec "${JAVA:-java}" ${KAFKA_HEAP_OPTS:--Xmx512m} -XX:+UseG1GC -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$here/log4j2.properties" ${KAFKA_OPTS:-} \
    -cp "$libs/*" "$main" "$@"
