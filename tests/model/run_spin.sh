#!/usr/bin/env bash
# tests/model/run_spin.sh — one exhaustive spin run of a Promela model.
#
#   run_spin.sh --model M.pml --work DIR [--expect-error] [--pan "ARGS"] [-- -DNAME=V ...]
#
# Generates the verifier (spin -a, with the -D switches after `--`), compiles
# it with the C compiler (safety mode: assertions and invalid end states;
# state compression) and runs a full search. Passes when the search completes
# with no error — or, with --expect-error (a mutant model), when spin finds
# one; the counter-example is then replayed, compactly, on stdout.
# A search cut short (memory bound, depth bound) is a failure, never a pass.
# Exit 77 (ctest SKIP_RETURN_CODE) when spin or a C compiler is missing.
# Environment: SPIN_MEMLIM (MiB, default 1536), SPIN_DEPTH (default 200000).
set -euo pipefail

model= work= expect_error=0 pan_args=
while (($#)); do
  case $1 in
    --model) model=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --expect-error) expect_error=1; shift ;;
    --pan) pan_args=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "run_spin: unknown argument $1" >&2; exit 2 ;;
  esac
done
defines=("$@")
[[ -n $model && -n $work ]] || { echo "usage: run_spin.sh --model M.pml --work DIR [--expect-error] [-- -D...]" >&2; exit 2; }

command -v spin >/dev/null || { echo "model: SKIPPED: spin is not installed (Debian package spin)"; exit 77; }
cc=${CC:-}
[[ -n $cc ]] || cc=$(command -v gcc || command -v cc || true)
[[ -n $cc ]] || { echo "model: SKIPPED: no C compiler for spin's verifier"; exit 77; }

memlim=${SPIN_MEMLIM:-1536}
depth=${SPIN_DEPTH:-200000}
model=$(cd "$(dirname "$model")" && pwd)/$(basename "$model")
rm -rf "$work"
mkdir -p "$work"
cd "$work"
cp "$model" model.pml

t0=$(date +%s%N)
spin -a "${defines[@]}" model.pml >spin.log 2>&1 || { cat spin.log; exit 1; }
"$cc" -O2 -w -DSAFETY -DCOLLAPSE -DMEMLIM="$memlim" -o pan pan.c >cc.log 2>&1 || { head -30 cc.log; exit 1; }
# shellcheck disable=SC2086
./pan -m"$depth" -w24 $pan_args >pan.log 2>&1 || true
t1=$(date +%s%N)

grep -vE '^\s*(model\.pml:[0-9]+|\(.*of .* states\)|unreached in)' pan.log | grep -vE '^\s*$' |
  grep -E 'errors:|states, stored|transitions|pan:|State-vector|total actual memory' || true
errors=$(sed -n 's/.*errors: \([0-9][0-9]*\).*/\1/p' pan.log | tail -1)
incomplete=0
grep -qE 'reached -DMEMLIM bound|max search depth too small|out of memory' pan.log && incomplete=1
ms=$(( (t1 - t0) / 1000000 ))
printf 'model: %s %s: %d.%03d s (generate, compile, search)\n' "$(basename "$model")" "${defines[*]}" $((ms / 1000)) $((ms % 1000))

replay() {
  # The counter-example, one line per step: process, source line, statement.
  spin -t -p "${defines[@]}" model.pml 2>&1 | sed -E 's/^ *[0-9]+:[[:space:]]+//' |
    grep -E '^proc' | sed -E 's/\(state [0-9]+\)//; s/model\.pml://' |
    awk '{ printf "  %-8s line %-5s %s\n", "proc" $2, $4, substr($0, index($0, $5)) }' |
    grep -vE '\[\(1\)\]|\[else\]|\[goto|\[break\]' | tail -"${SPIN_TRAIL_LINES:-80}"
  spin -t "${defines[@]}" model.pml 2>&1 | grep -E 'assertion violated|invalid end state|^spin: trail ends' || true
}

if [[ -z $errors ]]; then
  echo "model: FAILED: could not read pan's result"; cat pan.log | tail -20; exit 1
fi
if ((expect_error)); then
  if ((errors > 0)); then
    echo "model: PASSED: spin found the expected error in the mutant; its counter-example (last steps):"
    replay
    exit 0
  fi
  echo "model: FAILED: the mutant was expected to fail, but spin found no error$( ((incomplete)) && echo ' (search incomplete)')"
  exit 1
fi
if ((errors > 0)); then
  echo "model: FAILED: spin found an error; counter-example (last steps):"
  replay
  exit 1
fi
if ((incomplete)); then
  echo "model: FAILED: the search did not complete (memory or depth bound): raise SPIN_MEMLIM/SPIN_DEPTH or shrink the configuration"
  exit 1
fi
echo "model: PASSED: exhaustive search, no error"
