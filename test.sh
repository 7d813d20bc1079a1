#!/usr/bin/env bash
# Full test run: Rust unit/integration tests, the Python end-to-end suite
# (tests/integration, which also runs Apache Kafka's CLI tools), the Java client's tests
# (tests/java) and the franz-go tests (tests/go), all against the real release binary.
# Kafka's jars (Maven Central) and franz-go (the Go module proxy) are fetched into the
# git-ignored .cache/, so a second run fetches nothing.
#
# Environment:
#   CORELOG_BIN           broker binary for the Python suite
#                         (default: ${CARGO_TARGET_DIR:-target}/release/corelog)
#   PYTEST_ARGS           extra arguments for pytest (e.g. "-k hostile -x")
#   IT_TIMEOUT_S          hard limit for the whole Python suite (default 1800)
set -euo pipefail
cd "$(dirname "$0")"

log() { printf '\n=== %s\n' "$*"; }

# ---------------------------------------------------------------------------
# Python test dependencies (versions the suite was written against)
# ---------------------------------------------------------------------------
# cryptography: the OAUTHBEARER tests sign their own JWTs (test_oauthbearer.py).
# PyYAML: test_dashboard.py reads the Prometheus alert rules.
PY_DEPS=(confluent-kafka==2.16.1 kafka-python==3.0.12 "pytest>=8,<10" "cryptography>=42" "PyYAML>=6")
log "installing Python test dependencies: ${PY_DEPS[*]}"
if ! python3 -m pip --version >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pip >/dev/null
    else
        echo "error: python3 -m pip is not available" >&2
        exit 1
    fi
fi
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_WARN_SCRIPT_LOCATION=1
# Debian's system Python refuses global installs (PEP 668); CI machines are throwaway.
if python3 -c 'import sys, sysconfig, os; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")) else 1)'; then
    export PIP_BREAK_SYSTEM_PACKAGES=1
fi
python3 -m pip install --quiet "${PY_DEPS[@]}"

# kcat is optional (its tests are skipped without it)
if ! command -v kcat >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO="sudo -n"
    if command -v apt-get >/dev/null 2>&1 && { [ -z "$SUDO" ] || sudo -n true 2>/dev/null; }; then
        log "installing kcat"
        export DEBIAN_FRONTEND=noninteractive
        $SUDO apt-get install -y -qq kcat >/dev/null 2>&1 \
            || { $SUDO apt-get update -qq >/dev/null 2>&1 && $SUDO apt-get install -y -qq kcat >/dev/null 2>&1; } \
            || echo "warning: could not install kcat; kcat tests will be skipped"
    else
        echo "warning: kcat missing and apt-get unusable; kcat tests will be skipped"
    fi
fi

# ---------------------------------------------------------------------------
# Java (Apache Kafka's client, CLI tools and broker) and Go (franz-go)
# ---------------------------------------------------------------------------
apt_install() {
    [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 || return 1
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq "$@" >/dev/null 2>&1 \
        || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq "$@" >/dev/null 2>&1; }
}
command -v java >/dev/null 2>&1 || { log "installing a JDK"; apt_install openjdk-17-jdk-headless; }
command -v mvn >/dev/null 2>&1 || { log "installing Maven"; apt_install maven; }
command -v go >/dev/null 2>&1 || { log "installing Go"; apt_install golang-go; }
# The TLS tests make their own CA and certificates with the openssl command line.
command -v openssl >/dev/null 2>&1 || { log "installing openssl"; apt_install openssl; }
# The docs' commands (tests/integration/test_docs.py) ask the brokers' /health with curl.
command -v curl >/dev/null 2>&1 || { log "installing curl"; apt_install curl; }
# The full-disk test makes an ext4 image of its own and loop-mounts it.
command -v mkfs.ext4 >/dev/null 2>&1 || { log "installing e2fsprogs"; apt_install e2fsprogs; }
# The package test builds the .deb (dpkg-dev, binutils) and verifies its unit (systemd).
command -v dpkg-shlibdeps >/dev/null 2>&1 || { log "installing dpkg-dev"; apt_install dpkg-dev binutils; }
command -v systemd-analyze >/dev/null 2>&1 || { log "installing systemd-analyze"; apt_install systemd; }
# The histogram page's test renders it in a headless browser.
command -v chromium-headless-shell >/dev/null 2>&1 \
    || { log "installing a headless browser"; apt_install chromium-headless-shell; }
# test_ktls runs itself in a qemu guest with Debian's kernel where this one lacks kTLS
# (tools/kernel-vm/run.sh, which fetches that kernel on first use).
command -v qemu-system-x86_64 >/dev/null 2>&1 \
    || { log "installing qemu"; apt_install qemu-system-x86 busybox-static kmod; }
log "fetching Apache Kafka's jars (tests/java/pom.xml) into .cache/"
tools/kafka-cli/kafka-cli.sh --fetch
export GOMODCACHE="$PWD/.cache/go-mod" GOPATH="$PWD/.cache/go" GOFLAGS=-modcacherw
log "fetching franz-go (tests/go/go.mod) into .cache/"
(cd tests/go && go mod download)

# ---------------------------------------------------------------------------
# Rust
# ---------------------------------------------------------------------------
# The binaries first: corelog-load's integration tests and the Python suite run the real
# broker process named by CORELOG_BIN.
log "cargo build --release --bins"
cargo build --release --bins
target_dir="${CARGO_TARGET_DIR:-target}"
case "$target_dir" in /*) ;; *) target_dir="$PWD/$target_dir" ;; esac
export CORELOG_BIN="${CORELOG_BIN:-$target_dir/release/corelog}"

log "cargo test --workspace --release"
cargo test --workspace --release

log "pytest tests/layering: no module cycles, crates depend only downwards"
python3 -m pytest -q -p no:cacheprovider tests/layering

# ---------------------------------------------------------------------------
# end-to-end suite against the real broker
# ---------------------------------------------------------------------------
log "pytest tests/integration (CORELOG_BIN=$CORELOG_BIN)"
# SIGINT first so pytest tears the brokers down and prints its summary.
# shellcheck disable=SC2086
timeout --signal=INT --kill-after=60 "${IT_TIMEOUT_S:-1800}" \
    python3 -m pytest -q -ra -p no:cacheprovider -o faulthandler_timeout=300 \
    tests/integration ${PYTEST_ARGS:-}

# ---------------------------------------------------------------------------
# Apache Kafka's Java client and franz-go against the real broker
# ---------------------------------------------------------------------------
log "mvn test: the Java client (tests/java)"
mvn -B -ntp -Dmaven.repo.local="$PWD/.cache/m2" -f tests/java/pom.xml test \
    -Dcorelog.bin="$CORELOG_BIN"

log "go test: franz-go (tests/go)"
(cd tests/go && CORELOG_BIN="$CORELOG_BIN" go test -count=1 -timeout 600s ./...)
