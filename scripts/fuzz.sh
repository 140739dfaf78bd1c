#!/usr/bin/env bash
# Fuzzes the decoders of untrusted input with the cargo-fuzz targets in fuzz/:
# frame (the length-delimited codec, then every frame decoded), request (request
# and response decoding, produce/fetch records as the broker and the consumer
# check them), record_batch (RecordBatch v2 parse/verify_crc/validate/split/
# records on raw bytes), batch_builder (built batches round-trip; damaged ones are
# refused without a panic), controller (decoded requests through the
# controller's decisions), log_recovery (Log::open on a garbled directory).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET]   every target for that long (default 300)
#   scripts/fuzz.sh --smoke                every target for 20 s (CI)
#   scripts/fuzz.sh [...] TARGET...        only the targets named
#   scripts/fuzz.sh --list                 the targets
#   scripts/fuzz.sh --build                only build the targets (CI builds
#                                          them beside the tests, then runs them)
#
# Needs a nightly toolchain (rustup toolchain install nightly); installs
# cargo-fuzz (cargo install cargo-fuzz --locked) when it is missing. Each target
# grows its corpus in fuzz/corpus/TARGET (not checked in) from the checked-in
# seeds in fuzz/seeds/TARGET. A crash, a panic, a timeout (30 s on one input) or
# running out of memory stops the run: the script exits 1 and prints where the
# input is (fuzz/artifacts/TARGET/) and the command that replays it. Make such an
# input a regression test beside the code it broke.
#
# Targets run FUZZ_PARALLEL at a time (default: one per core), each on one
# core for its SECONDS, so a target is fuzzed as long as it would be alone;
# their output is printed as each one ends.
#
# Environment: FUZZ_JOBS (fuzzing processes per target, default 1),
# FUZZ_SANITIZER (none or address; default none: the crates forbid unsafe code,
# and address halves the speed), FUZZ_NICE (nice level, default 10),
# FUZZ_TOOLCHAIN (default nightly; stable also builds the targets when
# FUZZ_SANITIZER is none, for a machine with no nightly).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

seconds=300
targets=()
list=0
build_only=0
for arg in "$@"; do
    case "$arg" in
        --smoke) seconds=20 ;;
        --list) list=1 ;;
        --build) build_only=1 ;;
        -h|--help) usage_from_header "$0"; exit 0 ;;
        ''|*[!0-9]*)
            case "$arg" in
                -*) die "unknown option $arg (expected SECONDS, --smoke, --list, --build, --help or target names)" ;;
            esac
            targets+=("$arg") ;;
        *) seconds=$arg ;;
    esac
done
[ "$seconds" -gt 0 ] || die "SECONDS_PER_TARGET must be at least 1"
jobs="${FUZZ_JOBS:-1}"
parallel="${FUZZ_PARALLEL:-$(nproc)}"
[[ "$parallel" =~ ^[1-9][0-9]*$ ]] || die "FUZZ_PARALLEL=$parallel: give a number of targets to run at once, 1 or more"
sanitizer="${FUZZ_SANITIZER:-none}"
nice_level="${FUZZ_NICE:-10}"
toolchain="${FUZZ_TOOLCHAIN:-nightly}"

all_targets=$(sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^syncline-fuzz$')
if [ "$list" = 1 ]; then
    echo "$all_targets"
    exit 0
fi
if [ "${#targets[@]}" -eq 0 ]; then
    mapfile -t targets <<<"$all_targets"
fi
for t in "${targets[@]}"; do
    grep -qx "$t" <<<"$all_targets" || die "no fuzz target $t (targets: $(tr "\n" " " <<<"$all_targets"))"
done

# A nightly toolchain: cargo-fuzz needs it for sanitizers (-Zsanitizer).
if ! cargo +"$toolchain" --version >/dev/null 2>&1; then
    if [ "$toolchain" = nightly ]; then
        die "no nightly Rust toolchain is installed: cargo-fuzz needs one (rustup toolchain install nightly; or FUZZ_TOOLCHAIN=stable with FUZZ_SANITIZER=none)"
    fi
    die "no $toolchain Rust toolchain is installed (FUZZ_TOOLCHAIN)"
fi
if [ "$sanitizer" != none ] && [ "$toolchain" != nightly ]; then
    die "FUZZ_SANITIZER=$sanitizer needs the nightly toolchain"
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "==> installing cargo-fuzz (cargo install cargo-fuzz --locked)"
    cargo install cargo-fuzz --locked || die "could not install cargo-fuzz"
fi

echo "==> building the fuzz targets ($(cargo +"$toolchain" --version), sanitizer $sanitizer)"
nice -n "$nice_level" cargo +"$toolchain" fuzz build --fuzz-dir fuzz -s "$sanitizer"

[ "$build_only" = 0 ] || exit 0

logs=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$logs"' EXIT

# fuzz_one TARGET: fuzzes TARGET for $seconds, its output in $logs/TARGET.log,
# its exit status in $logs/TARGET.status.
fuzz_one() {
    local t=$1 parallel_args=() status
    mkdir -p "fuzz/corpus/$t" "fuzz/seeds/$t" "fuzz/artifacts/$t"
    if [ "$jobs" -gt 1 ]; then
        parallel_args=("-fork=$jobs")
    fi
    set +e
    nice -n "$nice_level" cargo +"$toolchain" fuzz run --fuzz-dir fuzz -s "$sanitizer" "$t" \
        "fuzz/corpus/$t" "fuzz/seeds/$t" -- \
        -max_total_time="$seconds" -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 \
        "${parallel_args[@]}" >"$logs/$t.log" 2>&1
    status=$?
    set -e
    echo "$status" >"$logs/$t.status"
}

# report TARGET: prints TARGET's output and adds its summary row (and, when it
# failed, where its input is).
summary=()
failed=()
report() {
    local t=$1 log="$logs/$1.log" status last runs cov ft corp
    status=$(cat "$logs/$t.status")
    echo "==> fuzzed $t for ${seconds}s (exit $status)"
    cat "$log"
    # The last status line: "#RUNS DONE cov: N ft: N corp: N/SIZE ...".
    last=$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    [ -n "$runs" ] || runs=$(sed -n 's/^#\([0-9]*\).*/\1/p' <<<"$last")
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9a-zA-Z]*\).*/\1/p' <<<"$last")
    summary+=("$(printf '%-14s %12s %8s %8s %12s' "$t" "${runs:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}")")
    if [ "$status" -ne 0 ]; then
        failed+=("$t")
        echo "${RED:-}$PROG: $t FAILED (exit $status)${RESET:-}" >&2
        inputs=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log")
        if [ -n "$inputs" ]; then
            for input in $inputs; do
                echo "    input: $input" >&2
                echo "    replay: cargo +$toolchain fuzz run --fuzz-dir fuzz -s $sanitizer $t $input" >&2
                echo "    shrink: cargo +$toolchain fuzz tmin --fuzz-dir fuzz -s $sanitizer $t $input" >&2
            done
        else
            echo "    no crash input was written (see the output above)" >&2
        fi
    fi
}

# Up to $parallel targets at once; each one reported as it ends.
running=()
for t in "${targets[@]}"; do
    while [ "${#running[@]}" -ge "$parallel" ]; do
        wait -n || true
        still=()
        for r in "${running[@]}"; do
            if [ -e "$logs/$r.status" ]; then report "$r"; else still+=("$r"); fi
        done
        running=("${still[@]}")
    done
    echo "==> fuzzing $t for ${seconds}s"
    fuzz_one "$t" &
    pids+=($!)
    running+=("$t")
done
wait
for r in "${running[@]}"; do report "$r"; done

echo "==> fuzzing summary (${seconds}s per target)"
printf '%-14s %12s %8s %8s %12s\n' target executions cov features corpus
printf '%s\n' "${summary[@]}"
if [ "${#failed[@]}" -gt 0 ]; then
    die "fuzz targets failed: ${failed[*]} (inputs in fuzz/artifacts/)"
fi
echo "fuzz: ${#targets[@]} passed, 0 failed"
