#!/usr/bin/env bash
# Every document the code, tests, scripts and docs cite is in the repository:
# each NAME.md named in a tracked file (vendor/ aside) resolves to a tracked
# file, as a path from the repository's root, from the citing file's
# directory, or (a bare name) as a file of that name anywhere in it. Documents
# of other projects are named with their project ("librdkafka's
# tests/README.md") and listed below. Run by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."

# FILE:NAME pairs that cite another project's document on purpose.
EXTERNAL=(
    "crates/e2e/librdkafka/TESTS.md:tests/README.md" # librdkafka's own, in its source
)

mapfile -t tracked < <(git ls-files)
declare -A have base
for f in "${tracked[@]}"; do
    have[$f]=1
    base[${f##*/}]=1
done

bad=0
while IFS=: read -r file line name; do
    # This script names examples, not documents.
    [ "$file" = scripts/check-citations.sh ] && continue
    case " ${EXTERNAL[*]} " in *" $file:$name "*) continue ;; esac
    # A path built in a script from a variable ("$repo/docs/x.md", "vendor/*/X.md").
    name=${name#*\$repo/}
    dir=${file%/*}
    [ "$dir" = "$file" ] && dir=.
    resolved=$(realpath -m --relative-to=. "$dir/$name")
    if [ -n "${have[$name]:-}" ] || [ -n "${have[$resolved]:-}" ]; then
        continue
    fi
    if [[ $name != */* ]] && [ -n "${base[$name]:-}" ]; then
        continue
    fi
    if [[ $name == */\** ]] || [[ $name == \*/* ]]; then
        continue
    fi
    echo "$file:$line: cites $name, which is not in the repository"
    bad=1
done < <(printf '%s\0' "${tracked[@]}" | grep -zv '^vendor/' |
    xargs -0 grep -nIoE '[A-Za-z0-9_.$/*-]*[A-Za-z0-9_-]+\.md\b' /dev/null)

[ "$bad" = 0 ] || {
    echo "==> cite documents that are in the repository (docs/), or name the other project whose document it is (EXTERNAL in $0)"
    exit 1
}
echo "==> every cited document is in the repository"
