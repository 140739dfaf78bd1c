# shellcheck shell=bash
# The phases of scripts/test.sh and .ci/run: what each one cost (seconds) and
# what it ran (tests, seeds, targets), printed as one table at the end so that
# every change to the suite shows its cost. Sourced after lib.sh, never run.
#
#   phases_begin              starts the table, or joins the one of the script
#                             that called this one (SYNCLINE_PHASES)
#   phase NAME COUNT CMD...   runs CMD, its output shown as it comes; records
#                             the phase; returns CMD's status
#   background NAME FN        starts shell function FN (which runs phases of
#                             its own) at the lowest CPU priority, its output
#                             kept for later
#   await NAME                waits for it, prints its output; its status
#                             (the one it wrote: see await)
#   phase_table               prints the table
#
# COUNT names what a phase's output says it ran: nextest, doctests, sim, fuzz,
# bench, compose, scale, hostile, or - (nothing to count: a build, a lint, an install).
#
# Why a background: the end-to-end tests are timed and run one cluster at a
# time, and leave most of both cores idle while their brokers wait on timers.
# CPU-bound work that times nothing (release builds, the simulation's seeds,
# the fuzz targets' build) runs beside them under SCHED_IDLE: the kernel gives
# it a core only when no other task wants one, so the timed tests keep the CPU
# they would have had alone.

# phases_begin: SYNCLINE_PHASES is the file of rows (NAME, fg or bg, start,
# end, status, what ran; tab-separated), made here unless a calling script
# made it; SYNCLINE_PHASES_T0 the start of the whole run.
phases_begin() {
    PHASES_OWNER=0
    if [ -z "${SYNCLINE_PHASES:-}" ]; then
        SYNCLINE_PHASES=$(mktemp "${TMPDIR:-/tmp}/syncline-phases.XXXXXX")
        SYNCLINE_PHASES_T0=$(date +%s)
        PHASES_OWNER=1
        export SYNCLINE_PHASES SYNCLINE_PHASES_T0
    fi
    PHASE_WHERE=fg
    declare -gA BG_PID BG_LOG
}

# count_ran COUNT LOG: what the output in LOG says the phase ran.
count_ran() {
    case "$1" in
    nextest)
        # "Summary [ 12.3s] 909 tests run: 909 passed, 0 skipped", or with
        # cargo test's runner "test result: ok. 12 passed; ..." per binary.
        if grep -q 'Summary \[' "$2"; then
            sed -n 's/.*Summary \[[^]]*\] *\([0-9]*\) tests\{0,1\} run.*/\1/p' "$2"
        else
            sed -n 's/^test result: [a-zA-Z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\1 \2/p' "$2"
        fi | awk '{ n += $1 + $2 } END { printf "%d tests\n", n }'
        ;;
    doctests)
        sed -n 's/^test result: [a-zA-Z]*\. \([0-9]*\) passed.*/\1/p' "$2" |
            awk '{ n += $1 } END { printf "%d doc tests\n", n }'
        ;;
    sim)
        # "seeds 1..251: 250 valid, 0 INVALID, 0 not run; ..."
        sed -n 's/^seeds [0-9.]*: \([0-9]*\) valid, \([0-9]*\) INVALID.*/\1 \2/p' "$2" |
            awk '{ n += $1 + $2 } END { printf "%d seeds\n", n }'
        ;;
    fuzz)
        # "fuzz: 11 passed, 0 failed", after a summary row per target whose
        # second column is its executions.
        awk '/^==> fuzzing summary/ { on = 1; next }
             on && $2 ~ /^[0-9]+$/ { runs += $2 }
             /^fuzz: [0-9]+ passed/ { targets = $2 }
             END { printf "%d targets, %d executions\n", targets, runs }' "$2"
        ;;
    bench)
        # "==> (b) RF 3, acks=all, ..."
        grep -c '^==> ([a-z])' "$2" | awk '{ printf "%d measurements\n", $1 }'
        ;;
    compose)
        grep -c 'PASSED$' "$2" | awk '{ printf "%d tests\n", $1 }'
        ;;
    hostile)
        # "==> phase 3: unread-flood, 6 s"; the first is without attack.
        grep -c '^==> phase [0-9]*: ' "$2" | awk '{ printf "%d attacks\n", ($1 > 0 ? $1 - 1 : 0) }'
        ;;
    scale)
        # "==> 30 partitions: starting three brokers in ..."
        grep -c '^==> [0-9]* partitions: starting' "$2" | awk '{ printf "%d clusters\n", $1 }'
        ;;
    *) echo "-" ;;
    esac
}

# phase NAME COUNT CMD...: see the header.
phase() {
    local name=$1 count=$2 log start status
    shift 2
    log=$(mktemp "${TMPDIR:-/tmp}/syncline-phase.XXXXXX")
    start=$(date +%s)
    echo "==> [$name] $*"
    set +e
    "$@" 2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
    set -e
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$PHASE_WHERE" "$start" "$(date +%s)" \
        "$status" "$(count_ran "$count" "$log")" >>"$SYNCLINE_PHASES"
    rm -f "$log"
    [ "$status" = 0 ] || echo "${RED:-}==> [$name] FAILED (exit $status)${RESET:-}"
    return "$status"
}

# Lowers this shell (and what it starts) to SCHED_IDLE, or else to nice 19.
lowest_cpu_priority() {
    chrt --idle --pid 0 "$BASHPID" 2>/dev/null || renice -n 19 -p "$BASHPID" >/dev/null
}

# background NAME FN: see the header. The job is a process group of its own,
# which phases_end kills if the script ends before awaiting it.
background() {
    local name=$1 fn=$2 log
    log=$(mktemp "${TMPDIR:-/tmp}/syncline-background.XXXXXX")
    set -m
    # The job's status goes to a file of its own: see await.
    (
        trap 'echo $? >"$log.status"' EXIT
        set -e
        PHASE_WHERE=bg
        lowest_cpu_priority
        "$fn"
    ) >"$log" 2>&1 &
    BG_PID[$name]=$!
    set +m
    BG_LOG[$name]=$log
    echo "==> [$name] started in the background (lowest CPU priority; output when it ends)"
}

# await NAME: see the header. The status is the one the job wrote, not what
# `wait` says: once a job has ended, its pid is free, and when a later child
# of this shell is given the same pid (pid_max is 32,768 here, and a full run
# starts more processes than that), bash keeps that child's status under the
# pid, or none (127). A job that wrote none was killed.
await() {
    local name=$1 status log
    [ -n "${BG_PID[$name]:-}" ] || die "no background job $name"
    log=${BG_LOG[$name]}
    wait "${BG_PID[$name]}" 2>/dev/null || true
    status=$(cat "$log.status" 2>/dev/null) || status="none: it was killed"
    echo "==> [$name] background job ended (exit $status); its output:"
    sed 's/^/    /' "$log"
    rm -f "$log" "$log.status"
    unset "BG_PID[$name]"
    [ "$status" = 0 ]
}

# phases_end: kills background jobs still running (the script is ending
# early); the table's owner prints it and removes its file. For an EXIT trap.
phases_end() {
    local name
    for name in "${!BG_PID[@]}"; do
        kill -- "-${BG_PID[$name]}" 2>/dev/null || true
        echo "==> [$name] background job stopped: the script ended before it"
        rm -f "${BG_LOG[$name]}" "${BG_LOG[$name]}.status"
    done
    if [ "${PHASES_OWNER:-0}" = 1 ]; then
        phase_table
        rm -f "$SYNCLINE_PHASES"
    fi
}

# phase_table: every phase so far, in the order they ended; background phases
# overlapped the foreground ones, so only the wall-clock total adds up.
phase_table() {
    local now
    now=$(date +%s)
    echo
    echo "==> phases (seconds of wall-clock time; bg: in the background, beside the phases above it)"
    awk -F'\t' -v now="$now" -v t0="$SYNCLINE_PHASES_T0" '
        { printf "%-44s %-2s %6d  %-4s  %s\n", $1, $2, $4 - $3, ($5 == 0 ? "ok" : "FAIL"), $6 }
        END { printf "%-44s    %6d\n", "total (wall clock)", now - t0 }' "$SYNCLINE_PHASES"
}
