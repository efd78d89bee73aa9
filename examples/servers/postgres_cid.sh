#!/usr/bin/env bash
# examples/servers/postgres_cid.sh — the concurrency-id seed's experiment on
# PostgreSQL itself: sysbench oltp_read_only (16 tables x 10,000 rows,
# shared_buffers=80MB, max_connections=250: the reproducer's shape) swept over
# client connections, under
#   none           no preload
#   glibc          the preload, switch model off (LOCKSWAP_CID_SWITCH=0)
#   switch-global  LOCKSWAP_CID_SWITCH=1 LOCKSWAP_CID=global   (v6.3: one cid_lock
#                  for the postmaster and every backend it forks)
#   switch-percpu  ... LOCKSWAP_CID=percpu   (v6.4 per-CPU cache, per process)
#   switch-rseq    ... LOCKSWAP_CID=rseq     (the kernel's own mm_cid)
#   switch-thread  ... LOCKSWAP_CID=thread   (per-thread id)
# With the model on, every backend gives up or parks its concurrency id each
# time it blocks (between queries, in epoll_wait on its client socket) and
# takes one when it resumes, as the kernel did at every context switch
# (docs/cid-switch.md). Each connection count is one examples/servers/postgres.sh
# run (its rounds, checks and results); then one table: tps (median and its
# 95% interval, lockswap_stats.median_ci), and from the event counters,
# summed over every process of a run: allocator calls (switch-in + switch-out)
# per transaction, the allocator's lock acquisitions (cid_alloc + cid_free:
# global's shared cid_lock, percpu's private bitmap), per transaction too, how
# many found the lock busy (cid_lock_contended) and that per 1,000,
# and the allocator's CPU share (cid_slow_ns / cid_switch_cpu_ns), with the
# seed's figures beside it.
#
#   postgres_cid.sh [--connections LIST] [--repeat N] [--time S] [--warmup S]
#                   [--dir D] [--table] [postgres.sh options...]
# --table: no runs, only the table (and plot) of the runs already in --dir D
# (the same --connections, --time and --warmup).
# defaults: --connections 16,64,128 --repeat 3 --time 20 --warmup 3
# OUTPUT: progress on stderr, the table on stdout and in D/cid_table.md;
# D/c<N>/ holds postgres.sh's results for N connections.
# EXIT STATUS: postgres.sh's (0: every run completed), 2 for bad arguments.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
source "$ROOT/scripts/lib.sh"   # PYTHONPATH: the lockswap_cli package for the table below
CONNECTIONS=16,64,128 REPEAT=3 TIME=20 WARMUP=3 DIR='' PASS=() TABLE_ONLY=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --connections) CONNECTIONS=${2:?}; shift 2 ;;
    --repeat) REPEAT=${2:?}; shift 2 ;;
    --time) TIME=${2:?}; shift 2 ;;
    --warmup) WARMUP=${2:?}; shift 2 ;;
    --dir) DIR=${2:?}; shift 2 ;;
    --table) TABLE_ONLY=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    --variants|--threads|--workload) echo "error: $1 is set by postgres_cid.sh" >&2; exit 2 ;;
    *) PASS+=("$1"); shift ;;
  esac
done
IFS=', ' read -r -a CONNS <<<"$CONNECTIONS"
for c in "${CONNS[@]}"; do
  [[ "$c" =~ ^[0-9]+$ ]] && ((c >= 1 && c <= 240)) || { echo "error: --connections: $c is not 1..240" >&2; exit 2; }
done
DIR=${DIR:-$ROOT/build/servers/postgres_cid/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)

SWITCH=LOCKSWAP_CID_SWITCH=1
VARIANTS="LOCKSWAP_CID=global:$SWITCH,LOCKSWAP_CID=percpu:$SWITCH,LOCKSWAP_CID=rseq:$SWITCH,LOCKSWAP_CID=thread:$SWITCH"
status=0
for c in "${CONNS[@]}"; do
  ((TABLE_ONLY)) && break
  echo "postgres_cid: $c connections" >&2
  "$HERE/postgres.sh" --workload read_only --threads "$c" --variants "$VARIANTS" --repeat "$REPEAT" \
    --time "$TIME" --warmup "$WARMUP" --dir "$DIR/c$c" ${PASS[@]+"${PASS[@]}"} >"$DIR/c$c.out" || status=$?
done

LOCKSWAP_ROOT=$ROOT python3 - "$DIR" "$TIME" "$WARMUP" "${CONNS[@]}" <<'PY' | tee "$DIR/cid_table.md"
import csv, os, re, sys
sys.dont_write_bytecode = True
ROOT = os.environ["LOCKSWAP_ROOT"]
from lockswap_cli import stats as lockswap_stats
from lockswap_cli.tables import GNUPLOT_COLORS, gnuplot, gp_quote

# The statistics of a run cover its warm-up too (same server): transactions
# are estimated as the measured tps over both.
out_dir, seconds, conns = sys.argv[1], float(sys.argv[2]) + float(sys.argv[3]), [int(c) for c in sys.argv[4:]]
EVENTS = ("cid_switch_in", "cid_switch_out", "cid_alloc", "cid_free", "cid_lock_contended",
          "cid_slow_ns", "cid_switch_cpu_ns")


def name(variant):
    m = re.search(r"LOCKSWAP_CID=(\w+)", variant)
    return "switch-" + m.group(1) if m else ("model off" if variant == "glibc" else variant)


def events(path):
    total = dict.fromkeys(EVENTS, 0)
    if path and os.path.isfile(path):
        for line in open(path, errors="replace"):
            m = re.match(r"lockswap-v1 event name=(\w+) count=(\d+)$", line.strip())
            if m and m.group(1) in total:
                total[m.group(1)] += int(m.group(2))
    return total


def fmt(x, spec, suffix=""):
    return "-" if x is None else format(x, spec) + suffix


def row(c, variant, runs):
    tps = [float(r["value"]) for r in runs if r["value"]]
    med, lo, hi, _ = lockswap_stats.median_ci(tps)
    ev = [events(r["stats"]) for r in runs]

    def per_run(f):
        vals = [v for v in (f(e, t) for e, t in zip(ev, tps)) if v is not None]
        return lockswap_stats.median(vals) if vals else None

    acquisitions = lambda e: e["cid_alloc"] + e["cid_free"]
    on = "switch" in name(variant)
    return {
        "c": c, "variant": name(variant), "tps": med, "lo": lo, "hi": hi, "runs": len(tps),
        "calls": per_run(lambda e, t: (e["cid_switch_in"] + e["cid_switch_out"]) / (t * seconds) if t else None) if on else None,
        "acq": per_run(lambda e, t: acquisitions(e)) if on else None,
        "acq_txn": per_run(lambda e, t: acquisitions(e) / (t * seconds) if t else None) if on else None,
        "busy": per_run(lambda e, t: e["cid_lock_contended"]) if on else None,
        "rate": per_run(lambda e, t: 1000 * e["cid_lock_contended"] / acquisitions(e) if acquisitions(e) else None) if on else None,
        "share": per_run(lambda e, t: 100 * e["cid_slow_ns"] / e["cid_switch_cpu_ns"] if e["cid_switch_cpu_ns"] else None) if on else None,
    }


rows = []
for c in conns:
    tsv = os.path.join(out_dir, f"c{c}", "runs.tsv")
    if not os.path.isfile(tsv):
        continue
    ok = [r for r in csv.DictReader(open(tsv), delimiter="\t") if r["status"] == "ok"]
    for variant in dict.fromkeys(r["variant"] for r in ok):
        rows.append(row(c, variant, [r for r in ok if r["variant"] == variant]))

print("| connections | variant | tps median [95% CI] | runs | allocator calls / txn | lock acquisitions "
      "| acquisitions / txn | busy | busy per 1000 acquisitions | allocator CPU share |")
print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    print(f"| {r['c']} | {r['variant']} | {fmt(r['tps'], '.0f')} [{fmt(r['lo'], '.0f')}, {fmt(r['hi'], '.0f')}] "
          f"| {r['runs']} | {fmt(r['calls'], '.2f')} | {fmt(r['acq'], '.0f')} | {fmt(r['acq_txn'], '.3f')} | {fmt(r['busy'], '.0f')} "
          f"| {fmt(r['rate'], '.2f')} | {fmt(r['share'], '.3f', '%')} |")
print()
print("Seed (Aaron Lu, v6.3-rc4, 2-socket 224-CPU Sapphire Rapids, the same sysbench shape): native_queued_spin_lock_slowpath")
print("(the global cid_lock) 0.03% of cycles before mm_cid, 43.20% with it at 56 client threads, 71-77% at 224;")
print("0.07-0.3% with SCHED_MM_CID off (a few profiles up to 4%, an unrelated thermal notifier); the per-runqueue")
print("cid cache (the percpu idea): gone at 56 threads, 75% -> 27% at 224.")

# One plot: tps, and the allocator lock found busy per 1000 acquisitions, against connections.
variants = list(dict.fromkeys(r["variant"] for r in rows))
with open(os.path.join(out_dir, "cid_table.dat"), "w") as f:
    for v in variants:
        f.write(f"# {v}\n")
        for r in rows:
            if r["variant"] == v:
                f.write(f"{r['c']} {fmt(r['tps'], '.1f').replace('-', 'NaN')} {fmt(r['rate'], '.3f').replace('-', 'NaN')}\n")
        f.write("\n\n")
dat = gp_quote(os.path.join(out_dir, "cid_table.dat"))
lines = lambda col: ", ".join(f"{dat} index {i} using 1:{col} with linespoints lc rgb '{GNUPLOT_COLORS[i % len(GNUPLOT_COLORS)]}' title {gp_quote(v)}"
                              for i, v in enumerate(variants))
gnuplot(os.path.join(out_dir, "cid_table.gp"), f"""set terminal pngcairo size 1200,450 noenhanced
set output {gp_quote(os.path.join(out_dir, 'cid_table.png'))}
set multiplot layout 1,2 title 'PostgreSQL oltp_read_only, concurrency-id switch model'
set xlabel 'client connections'; set logscale x 2; set key left bottom
set ylabel 'tps (median)'; plot {lines(2)}
set ylabel 'allocator lock busy per 1000 acquisitions'; set key left top; plot {lines(3)}
unset multiplot
""")
PY
exit "$status"
