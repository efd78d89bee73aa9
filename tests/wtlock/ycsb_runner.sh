#!/usr/bin/env bash
# tests/wtlock/ycsb_runner.sh OUTDIR — examples/servers/wiredtiger.sh with
# --wtlock off,wt,rwsem,rwsem-rspin,percid for one short round (YCSB-A, 5000
# records, 1 s per variant, --check): passes when the runner exits 0 and
# every run, none and glibc included, verified every record (verify=ok in
# runs.tsv: WT_SESSION::verify and a full scan of the table). About 30 s.
# BUILD_DIR and LIBLOCKSWAP come from ctest's environment.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:?usage: ycsb_runner.sh OUTDIR}
values=(off wt rwsem rwsem-rspin percid)
rm -rf "$out"
rc=0
bash "$here/../../examples/servers/wiredtiger.sh" --variants glibc --wtlock "$(IFS=,; echo "${values[*]}")" \
  --repeat 1 --time 1 --warmup 0 --records 5000 --value-bytes 100 --threads 4 --check --no-plot --quiet \
  --dir "$out" >"$out.log" 2>&1 || rc=$?
if ((rc != 0)); then
  echo "FAIL: wiredtiger.sh exited $rc"; tail -30 "$out.log"; exit 1
fi
want=$((2 + ${#values[@]}))  # none, glibc and one per value, per round
# A round the core-to-core probe drops is run again (server_lib.sh --repeat),
# so there may be 2 rounds: every run of every round must have verified.
runs=$(($(wc -l <"$out/runs.tsv") - 1))
ok=$(grep -c 'verify=ok' "$out/runs.tsv" || true)
for v in "${values[@]}"; do
  grep -q "	glibc:LOCKSWAP_WTLOCK=$v	" "$out/runs.tsv" || { echo "FAIL: no run of LOCKSWAP_WTLOCK=$v"; exit 1; }
done
if ((runs < want || runs % want != 0 || ok != runs)); then
  echo "FAIL: $ok of $runs runs verified every record ($want a round)"; cut -f3,11,13 "$out/runs.tsv"; exit 1
fi
echo "ok: $runs runs, every record verified (LOCKSWAP_WTLOCK=${values[*]})"
