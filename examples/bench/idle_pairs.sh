#!/usr/bin/env bash
# examples/bench/idle_pairs.sh — instructions per idle (uncontended) lock
# pair for every family lockswap runs, counted by callgrind (repeatable
# counts, not times), one library at a time or two side by side:
#
#   pthread     fastpath_callgrind.sh: mutex, rdlock, wrlock and sem pairs
#               under none, glibc and each native variant
#   wtlock      tests/wtlock/idle_pair.c: read and write pairs of one
#               WT_RWLOCK under each LOCKSWAP_WTLOCK value, statistics off
#               and counts (the method of docs/results/idle-pairs.md)
#   lwlock      `postgres --single` running four statements, every LWLock
#               uncontended, under each LOCKSWAP_LWLOCK value: the calls
#               and inclusive cost of LWLockAcquire and LWLockRelease
#               (docs/results/idle-pairs.md, "Cost: idle pairs"); needs
#               PostgreSQL 15 and a `postgres` user, else skipped
#
#   idle_pairs.sh [--build DIR] [--lib PATH[,PATH2]] [--families LIST] [--out DIR]
#
# With two libraries (a behaviour-neutral change: before,after) every row
# has both counts and a last column `same` or `DIFFERS`; the exit status is
# 1 when any row differs. percid runs with LOCKSWAP_CID=thread (valgrind
# offers no rseq; docs/results/idle-pairs.md says why).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="$root/build" libs="" families="pthread,wtlock,lwlock" out=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --lib) libs=$2; shift 2 ;;
    --families) families=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "idle_pairs.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
command -v valgrind >/dev/null || { echo "idle_pairs.sh: valgrind not found" >&2; exit 77; }
libs=${libs:-$build/preload/liblockswap.so}
IFS=, read -r -a lib_list <<<"$libs"
out=${out:-$(mktemp -d)}
mkdir -p "$out"
chmod 755 "$out"
rows="$out/rows.tsv"  # family op variant lib_index count
: >"$rows"

# --- pthread: the fastpath program, through fastpath_callgrind.sh
pthread_pairs() {
  local i=0 lib
  for lib in "${lib_list[@]}"; do
    bash "$here/fastpath_callgrind.sh" --lib "$lib" --bin "$build/examples/bench/fastpath" --out "$out/pthread.$i" \
      --variants none,glibc,futex,rwsem,rwsem-rspin,lockref,percid+thread --ops mutex,rdlock,wrlock,sem >/dev/null
    awk -F, -v i="$i" 'NR > 1 && $3 ~ /^[0-9.]+$/ { printf "pthread\t%s\t%s\t%d\t%s\n", $1, $2, i, $3 }' \
      "$out/pthread.$i/fastpath.csv" >>"$rows"
    i=$((i + 1))
  done
}

# Inclusive instructions of the function FN in a callgrind output file.
inclusive_of() {  # FILE FN
  callgrind_annotate --inclusive=yes "$1" >"$1.txt" 2>/dev/null
  awk -v fn="$2" 'index($0, fn) && !found { gsub(",", "", $1); print $1; found = 1 }' "$1.txt"
}

# --- wtlock: N idle pairs, at two N
wtlock_pairs() {
  local bin="$build/tests/wtlock/wtlock_idle_pair" i=0 lib v op stats n
  [[ -x "$bin" ]] || { echo "idle_pairs.sh: $bin not built: wtlock skipped" >&2; return 0; }
  for lib in "${lib_list[@]}"; do
    for v in off wt rwsem rwsem-rspin percid; do
      for op in read write; do
        for stats in 0 counts; do
          local c=()
          for n in 1000 11000; do
            env LD_PRELOAD="$lib" LOCKSWAP_WTLOCK="$v" LOCKSWAP_STATS="$stats" LOCKSWAP_CID=thread \
              valgrind --tool=callgrind --toggle-collect=pairs --callgrind-out-file="$out/wt.cg" \
              "$bin" "$op" "$n" >/dev/null 2>&1
            c+=("$(inclusive_of "$out/wt.cg" pairs)")
          done
          awk -v a="${c[0]}" -v b="${c[1]}" -v v="$v" -v op="$op" -v s="$stats" -v i="$i" \
            'BEGIN { printf "wtlock\t%s%s\t%s\t%d\t%.2f\n", op, (s == "0" ? "" : "+counts"), v, i, (b - a) / 10000 }' >>"$rows"
        done
      done
    done
    i=$((i + 1))
  done
}

# --- lwlock: postgres --single, four statements
lwlock_pairs() {
  local bin=/usr/lib/postgresql/15/bin i=0 lib v
  [[ -x "$bin/postgres" ]] && id postgres >/dev/null 2>&1 || { echo "idle_pairs.sh: no PostgreSQL 15: lwlock skipped" >&2; return 0; }
  local pg="$out/pg"
  rm -rf "$pg" && mkdir -p "$pg/bin" && chown postgres "$pg"
  # A copy of the binary (same build-id): a uprobe left on the installed one traps under valgrind.
  # Its share and library directories are found at the compiled-in paths (the copy's
  # own path does not end like the installed one's).
  cp "$bin/postgres" "$pg/bin/postgres"
  runuser -u postgres -- "$bin/initdb" --no-locale -E UTF8 -D "$pg/data" >/dev/null
  printf '%s\n' "CREATE TABLE t (a int PRIMARY KEY, b int, c text);" \
    "INSERT INTO t SELECT g, g, 'row ' || g FROM generate_series(1, 20000) g;" "VACUUM ANALYZE t;" |
    runuser -u postgres -- "$bin/postgres" --single -D "$pg/data" postgres >/dev/null
  printf '%s\n' "UPDATE t SET b = b + 1;" "CREATE INDEX t_b ON t (b);" "CHECKPOINT;" \
    "SELECT count(*), sum(b) FROM t WHERE c LIKE 'row 1%';" >"$pg/four.sql"
  for lib in "${lib_list[@]}"; do
    for v in none pg futex rwsem rwsem-rspin percid; do
      rm -rf "$pg/run" && cp -a "$pg/data" "$pg/run"
      local pre=() cg="$pg/cg.$v.$i"
      [[ $v == none ]] || pre=(LD_PRELOAD="$lib" LOCKSWAP_LWLOCK="$v" LOCKSWAP_CID=thread)
      runuser -u postgres -- env "${pre[@]}" valgrind --tool=callgrind --callgrind-out-file="$cg" \
        "$pg/bin/postgres" --single -D "$pg/run" postgres <"$pg/four.sql" >/dev/null 2>&1
      python3 - "$cg" "$v" "$i" >>"$rows" <<'EOF'
import re, sys
# Sums the calls to, and the inclusive cost of, each named function from the
# calls= lines of a callgrind file (names may be compressed to "(id)").
path, variant, index = sys.argv[1:]
names, calls, cost = {}, {}, {}
want = ("LWLockAcquire", "LWLockRelease")
cfn, pending = None, None
for line in open(path, errors="replace"):
    m = re.match(r"(c?)fn=\((\d+)\)(?: (.*))?", line)  # ids name functions in fn= and cfn= lines alike
    if m:
        if m.group(3): names[m.group(2)] = m.group(3).strip()
        if m.group(1): cfn = names.get(m.group(2))
        continue
    if line.startswith("calls="):
        pending = int(line.split()[0][6:]) if cfn in want else None
        continue
    if pending is not None:
        fields = line.split()
        calls[cfn] = calls.get(cfn, 0) + pending
        cost[cfn] = cost.get(cfn, 0) + int(fields[1])
        pending = None
for fn in want:
    if calls.get(fn):
        print(f"lwlock\t{fn}\t{variant}\t{index}\t{cost[fn] / calls[fn]:.2f}")
EOF
    done
    i=$((i + 1))
  done
}

for f in ${families//,/ }; do
  case $f in
    pthread) pthread_pairs ;;
    wtlock) wtlock_pairs ;;
    lwlock) lwlock_pairs ;;
    *) echo "idle_pairs.sh: unknown family $f (pthread, wtlock, lwlock)" >&2; exit 2 ;;
  esac
done

# One row per (family, op, variant): each library's count, and with two, whether they agree.
python3 - "$rows" "${#lib_list[@]}" <<'EOF'
import sys
path, n = sys.argv[1], int(sys.argv[2])
table = {}
for line in open(path):
    fam, op, var, i, count = line.rstrip("\n").split("\t")
    table.setdefault((fam, op, var), [None] * n)[int(i)] = count
head = ["family", "op", "variant"] + [f"lib{i + 1}" for i in range(n)] + ([""] if n == 2 else [])
print("\t".join(head))
differ = False
for key, counts in table.items():
    row = list(key) + [c or "-" for c in counts]
    if n == 2:
        same = counts[0] == counts[1]
        differ |= not same
        row.append("same" if same else "DIFFERS")
    print("\t".join(row))
sys.exit(1 if differ else 0)
EOF
