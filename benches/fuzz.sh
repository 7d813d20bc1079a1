#!/usr/bin/env bash
# Runs every fuzz target under libFuzzer (cargo fuzz, nightly) for SECONDS each, from its
# seed corpus (fuzz/corpus/<target>, copied: what libFuzzer finds goes to a scratch
# corpus, not into the repository), and prints one line per target: executions,
# executions per second, coverage (edges) and features, and whether it found a crash.
# A crash's input is kept under fuzz/artifacts/<target>/ (git-ignored).
#
#   benches/fuzz.sh [SECONDS] [TARGET...]        # default: 60 s, every target
#   FUZZ_SANITIZER=none benches/fuzz.sh ...      # without AddressSanitizer (cargo fuzz's
#                                                # default, `address`): 2-3x the
#                                                # executions; the targets are safe Rust
# FUZZ_RUNS=N stops each target after N executions instead (SECONDS still bounds it).
#
# Needs: rustup's nightly toolchain and cargo-fuzz (cargo install cargo-fuzz --locked).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^corelog-fuzz$')
fi
sanitizer=${FUZZ_SANITIZER:-address}
runs=${FUZZ_RUNS:--1}
cargo +nightly fuzz build --fuzz-dir fuzz -O -s "$sanitizer"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
printf '%-26s %14s %10s %8s %9s %s\n' target executions exec/s cov features result
for t in "${targets[@]}"; do
    mkdir -p "$scratch/$t" "fuzz/artifacts/$t"
    cp fuzz/corpus/"$t"/* "$scratch/$t"/ 2>/dev/null || true
    log="$scratch/$t.log"
    status=ok
    cargo +nightly fuzz run --fuzz-dir fuzz -O -s "$sanitizer" "$t" "$scratch/$t" -- \
        -max_total_time="$secs" -runs="$runs" -max_len=65536 -print_final_stats=1 \
        -artifact_prefix="fuzz/artifacts/$t/" >"$log" 2>&1 || status="CRASH (see fuzz/artifacts/$t/)"
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    printf '%-26s %14s %10s %8s %9s %s\n' "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "$status"
    if [ "$status" != ok ]; then
        grep -E "panicked|ERROR|SUMMARY" "$log" | head -5 || true
    fi
done
