#!/usr/bin/env python3
"""examples/bench/cid_churn.py — the mm_cid regression experiment: cid_churn
under every LOCKSWAP_CID, for growing processes x threads, in ONE run.

Each measurement is one cid_churn run (a parent forking --procs children of
--threads threads; each thread alternates read locks with short sleeps) under
LD_PRELOAD=liblockswap.so, LOCKSWAP_MUTEX=rwsem (so the sleeps are lockswap
condition waits) and LOCKSWAP_RWLOCK=percid with one LOCKSWAP_CID, plus
LOCKSWAP_RWLOCK=rwsem as the no-concurrency-id baseline. Every process writes
its lock events to a stats file; the driver sums them. Variants are
interleaved within each cell and the order rotates between repeats; medians
are reported.

Reported per cell and variant:
  kops      read lock/unlock pairs per second, all processes together
  alloc %   cid_slow_ns / (duration x CPUs): share of the machine's CPU time
            spent in concurrency-id allocator slow paths (the seed measured
            43% of all cycles in the v6.3 cid_lock)
  ns/op     cid_slow_ns per read lock pair
  contended cid_lock_contended per second (the allocator lock found busy)

Outputs (in --out, default BUILD/bench-results/cid-churn/): raw.csv, results.md
(also printed), alloc.png (allocator CPU share vs processes x threads).
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from bench_common import matrix_columns, write_report  # noqa: E402  (same directory)
from run_matrix import md_table, run_gnuplot, write_csv  # same directory: the tables and plots look alike

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))

# name -> LOCKSWAP_* settings: the baseline `rwsem` column and one entry per
# concurrency-id allocator, named by its LOCKSWAP_CID value, from the percid
# columns of preload/config/variant_columns.def (not a tag: every allocator the
# matrix has a column for is what this experiment compares).
_COLUMNS = matrix_columns(None)
VARIANTS = {"rwsem": _COLUMNS["rwsem"]}
VARIANTS.update({s["LOCKSWAP_CID"]: s for s in _COLUMNS.values()
                 if s.get("LOCKSWAP_RWLOCK") == "percid" and "LOCKSWAP_CID" in s})
EVENTS = ["cid_alloc", "cid_free", "cid_lock_contended", "cid_slow_ns", "cid_reclaim", "cid_fallback"]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"), help="build tree (default: %(default)s)")
    p.add_argument("--out", help="output directory (default BUILD/bench-results/cid-churn)")
    p.add_argument("--cells", default="1x4,2x4,4x4,4x16,8x16,16x16",
                   help="PROCSxTHREADS list (default %(default)s)")
    p.add_argument("--variants", default=",".join(VARIANTS), help="default %(default)s")
    p.add_argument("--duration", type=float, default=1.0, help="seconds per run (default 1)")
    p.add_argument("--repeat", type=int, default=3, help="runs per cell and variant, median reported (default 3)")
    p.add_argument("--reads", type=int, default=20, help="read pairs between two sleeps (default 20)")
    p.add_argument("--sleep-us", type=int, default=50, help="sleep timeout in us (default 50)")
    p.add_argument("--no-plot", action="store_true")
    a = p.parse_args()
    a.lib = os.path.join(a.build, "preload", "liblockswap.so")
    a.bench = os.path.join(a.build, "examples", "bench", "cid_churn")
    a.out = os.path.abspath(a.out or os.path.join(a.build, "bench-results", "cid-churn"))
    a.cells = [tuple(int(x) for x in c.split("x")) for c in a.cells.split(",") if c]
    a.variants = [v for v in a.variants.split(",") if v]
    for v in a.variants:
        if v not in VARIANTS:
            p.error(f"unknown variant {v}: known {', '.join(VARIANTS)}")
    return a


def sum_events(path):
    """Sums every process's 'lockswap: <event> <count> ...' lines."""
    tot = {e: 0 for e in EVENTS}
    procs = 0
    if not os.path.exists(path):
        return tot, procs
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and parts[0] == "lockswap:" and parts[1] == "pid":
                procs += 1
            elif len(parts) >= 3 and parts[0] == "lockswap:" and parts[1] in tot:
                tot[parts[1]] += int(parts[2])
    return tot, procs


def run_one(a, variant, procs, threads):
    fd, stats = tempfile.mkstemp(prefix="cid-churn-", suffix=".txt")
    os.close(fd)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSWAP_")}
    env.update(VARIANTS[variant])
    env.update({"LD_PRELOAD": a.lib, "LOCKSWAP_STATS_FILE": stats})
    cmd = [a.bench, "--procs", str(procs), "--threads", str(threads), "--reads", str(a.reads),
           "--sleep-us", str(a.sleep_us), "--duration", f"{a.duration:g}"]
    try:
        pr = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60 + 10 * a.duration)
    except subprocess.TimeoutExpired:
        os.unlink(stats)
        return {"status": "TIMEOUT"}
    line = next((l for l in pr.stdout.splitlines() if l.startswith("cid-churn ")), None)
    ev, nprocs = sum_events(stats)
    os.unlink(stats)
    if pr.returncode != 0 or line is None:
        return {"status": f"rc={pr.returncode}", "detail": pr.stderr.strip()[:200]}
    r = dict(kv.split("=", 1) for kv in line.split()[1:])
    r.update(ev)
    r["stat_procs"] = nprocs
    r["status"] = "ok"
    secs = float(r["duration_s"])
    ops = int(r["ops"])
    r["alloc_pct"] = 100.0 * ev["cid_slow_ns"] / (secs * 1e9 * (os.cpu_count() or 1))
    r["ns_per_op"] = ev["cid_slow_ns"] / ops if ops else 0.0
    r["contended_per_s"] = ev["cid_lock_contended"] / secs
    r["allocs_per_s"] = ev["cid_alloc"] / secs
    return r


def med(rs, key):
    xs = [float(r[key]) for r in rs if r.get("status") == "ok"]
    return statistics.median(xs) if xs else None


def fmt(x, spec):
    return "-" if x is None else spec.format(x)


def main():
    a = parse_args()
    for path in (a.lib, a.bench):
        if not os.path.exists(path):
            sys.exit(f"cid_churn.py: {path} not found (build the `bench` target)")
    os.makedirs(a.out, exist_ok=True)
    total = len(a.cells) * len(a.variants) * a.repeat
    print(f"cid_churn.py: {len(a.cells)} cells x {len(a.variants)} variants x {a.repeat} = {total} runs "
          f"of {a.duration:g} s; {os.cpu_count()} CPUs", file=sys.stderr)
    raw, res = [], {}
    n, t0 = 0, time.time()
    for (procs, threads) in a.cells:
        runs = {v: [] for v in a.variants}
        for rep in range(a.repeat):
            k = rep % len(a.variants)
            for v in a.variants[k:] + a.variants[:k]:
                n += 1
                r = run_one(a, v, procs, threads)
                r.update(variant=v, procs=procs, threads=threads, rep=rep)
                raw.append(r)
                runs[v].append(r)
                print(f"[{n}/{total}] {procs}x{threads} {v}: "
                      + (f"{float(r['kops']):.0f} kops/s, allocator {r['alloc_pct']:.2f}% CPU, "
                         f"{r['cid_lock_contended']} contended" if r["status"] == "ok" else r["status"]),
                      file=sys.stderr)
        for v in a.variants:
            res[(procs, threads, v)] = {k: med(runs[v], k) for k in
                                        ("kops", "alloc_pct", "ns_per_op", "contended_per_s", "allocs_per_s")}
    write_raw(a, raw)
    report = make_report(a, res, time.time() - t0)
    write_report(a.out, report)
    if not a.no_plot:
        plot(a, res)
    bad = [r for r in raw if r["status"] != "ok"]
    for r in bad:
        print(f"cid_churn.py: {r['procs']}x{r['threads']} {r['variant']}: {r['status']} {r.get('detail', '')}",
              file=sys.stderr)
    return 1 if bad else 0


def write_raw(a, raw):
    write_csv(os.path.join(a.out, "raw.csv"), raw,
              ["procs", "threads", "variant", "rep", "status", "kops", "ops", "sleeps", "duration_s", "alloc_pct",
               "ns_per_op", "contended_per_s", "allocs_per_s", "stat_procs"] + EVENTS)


def make_report(a, res, elapsed):
    base = "rwsem" if "rwsem" in a.variants else a.variants[0]
    cids = [v for v in a.variants if v != "rwsem"]
    s = [f"# cid_churn: concurrency-id allocators under process churn\n\n"
         f"{a.duration:g} s per run, median of {a.repeat}; each thread: {a.reads} read lock pairs, then a "
         f"{a.sleep_us} us condition-wait sleep. {os.cpu_count()} CPUs. Wall time {elapsed:.0f} s.\n",
         f"\n## Throughput: kops/s (ratio to {base})\n\n"]
    rows = []
    for (p, t) in a.cells:
        row = [f"{p} x {t}"]
        for v in a.variants:
            r, b = res[(p, t, v)], res[(p, t, base)]
            ratio = r["kops"] / b["kops"] if r["kops"] and b["kops"] else None
            row.append(fmt(r["kops"], "{:.0f}") + ("" if v == base else f" ({fmt(ratio, '{:.2f}')})"))
        rows.append(row)
    s.append(md_table(["procs x threads"] + a.variants, rows))
    for title, key, spec in (("Time in the allocator: % of all CPU time (cid_slow_ns, sampled)", "alloc_pct", "{:.2f}"),
                             ("Allocator ns per read lock pair", "ns_per_op", "{:.1f}"),
                             ("Allocator lock found busy (cid_lock_contended) per second", "contended_per_s", "{:.0f}"),
                             ("Ids taken from a bitmap (cid_alloc) per second", "allocs_per_s", "{:.0f}")):
        s.append(f"\n## {title}\n\n")
        s.append(md_table(["procs x threads"] + cids,
                          [[f"{p} x {t}"] + [fmt(res[(p, t, v)][key], spec) for v in cids] for (p, t) in a.cells]))
    return "".join(s)


def plot(a, res):
    if shutil.which("gnuplot") is None:
        print("cid_churn.py: gnuplot not found, no plot", file=sys.stderr)
        return
    cids = [v for v in a.variants if v != "rwsem"]
    data = []
    for i, v in enumerate(cids):
        pts = sorted((p * t, res[(p, t, v)]["alloc_pct"] or 0.0) for (p, t) in a.cells)
        data.append(f"$d{i} << EOD\n" + "\n".join(f"{x} {y:.4f}" for x, y in pts) + "\nEOD\n")
    g = ["".join(data), "set terminal pngcairo size 800,500 font 'DejaVu Sans,11'",
         f"set output '{os.path.join(a.out, 'alloc.png')}'", "set logscale x 2", "set grid",
         "set xlabel 'processes x threads'", "set ylabel '% of CPU time in the allocator'",
         f"set title 'cid_churn: allocator cost ({os.cpu_count()} CPUs, {a.duration:g} s runs)'",
         "plot " + ", ".join(f"$d{i} using 1:2 with linespoints lw 2 title '{v}'" for i, v in enumerate(cids))]
    run_gnuplot(os.path.join(a.out, "alloc.gp"), g, "cid_churn.py")


if __name__ == "__main__":
    sys.exit(main())
