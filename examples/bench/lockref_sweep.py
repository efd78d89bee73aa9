#!/usr/bin/env python3
"""examples/bench/lockref_sweep.py — the lockref retry-bound sweep (the
open/close analog of the kernel's measurement, docs/seeds.md §3).

For every cell (threads x objects) it runs lockref_bench once per variant:
lockref with each retry bound (0 = unbounded, the kernel before 893a7d32e8e0;
100 = the kernel's bound), a plain std::atomic fetch_add/fetch_sub (the floor)
and a std::mutex-protected count. Each run is a child process; the variants
are interleaved inside each cell and the order rotates between repeats; the
median of --repeat runs is reported. Ratios are taken in the same run: every
retry bound against the unbounded loop, and everything against the atomic.
A count that does not return to its base reference (BROKEN) or a hang is
reported and makes the exit status 1.

Outputs (in --out, default BUILD/bench-results/lockref/):
  raw.csv       every run
  results.csv   medians per cell and variant, ratios, lock events per update
  results.md    the tables printed on stdout
  lockref.png   throughput and ratio to unbounded vs the retry bound, a line per thread count,
                a panel per object count
"""
import csv
import os
import sys
import time

from bench_common import (GNUPLOT_COLORS, NOISY, NOISY_MARK, csv_list, fmt, geomean, gnuplot, gp_quote,
                          driver_parser, md_table, median, run_child, spread, write_report)

FIELDS = ["kops", "fairness", "cas_fail_per_update", "fallback_per_kupdate", "lock_sleep", "cas_fail", "fallback",
          "lockless", "put_locked"]


def rname(r):
    return "unb" if r == 0 else str(r)


def parse_args():
    p = driver_parser(__doc__, "examples/bench/lockref_bench", "lockref_bench", "lockref")
    p.add_argument("--threads", default="2,4,8,16,32,64", help="comma list (default %(default)s)")
    p.add_argument("--objects", default="1,4", help="shared objects per cell, comma list (default %(default)s)")
    p.add_argument("--retries", default="0,1,15,50,100,200,500",
                   help="lockref retry bounds, 0 = unbounded (default %(default)s)")
    p.add_argument("--baselines", default="atomic,mutex",
                   help="non-lockref counts run in every cell: atomic, mutex, pthread (default %(default)s)")
    p.add_argument("--repeat", type=int, default=3, help="runs per cell and variant; the median is reported")
    p.add_argument("--duration", type=float, help="seconds per run (default 0.5, --quick 0.1)")
    p.add_argument("--quick", action="store_true", help="0.1 s per run, threads 4,64, objects 1, 1 repeat")
    p.add_argument("--hold", type=int, default=0, help="pause instructions holding the reference (default 0)")
    p.add_argument("--work", type=int, default=0, help="pause instructions between ops (default 0)")
    p.add_argument("--pick", default="rr", choices=["rr", "random"], help="object choice (default rr)")
    p.add_argument("--put", default="or_lock", choices=["or_lock", "return"],
                   help="lockref put: put_or_lock (default) or put_return + locked fallback (fast_dput)")
    p.add_argument("--no-plot", action="store_true", help="do not run gnuplot")
    a = p.parse_args()
    a.bench = os.path.abspath(a.bench or os.path.join(a.build, "examples", "bench", "lockref_bench"))
    a.out = os.path.abspath(a.out or os.path.join(a.build, "bench-results", "lockref"))
    if a.quick:
        a.duration = a.duration or 0.1
        if "--threads" not in sys.argv:
            a.threads = "4,64"
        if "--objects" not in sys.argv:
            a.objects = "1"
        if "--repeat" not in sys.argv:
            a.repeat = 1
    a.duration = a.duration or 0.5
    a.threads = csv_list(a.threads, int)
    a.objects = csv_list(a.objects, int)
    a.retries = csv_list(a.retries, int)
    a.baselines = csv_list(a.baselines)
    for b in a.baselines:
        if b not in ("atomic", "mutex", "pthread"):
            p.error(f"--baselines: unknown {b}")
    if 0 not in a.retries:
        a.retries.insert(0, 0)  # the ratios need the unbounded loop
    if "atomic" not in a.baselines:
        a.baselines.insert(0, "atomic")
    if a.repeat < 1:
        p.error("--repeat must be >= 1")
    # variant name -> extra arguments
    a.variants = [(b, ["--impl", b]) for b in a.baselines]
    a.variants += [(f"lockref/{rname(r)}", ["--impl", "lockref", "--retries", str(r)]) for r in a.retries]
    return a


def run_one(args, threads, objects, vargs, label):
    cmd = [args.bench, "--threads", str(threads), "--objects", str(objects), "--pick", args.pick, "--put", args.put,
           "--hold", str(args.hold), "--work", str(args.work), "--duration", f"{args.duration:g}",
           "--label", label] + vargs
    return run_child(cmd, dict(os.environ), "lockswap-lockref-bench", 60 + 15 * args.duration)


def main():
    args = parse_args()
    if not os.path.exists(args.bench):
        sys.exit(f"lockref_sweep: lockref_bench not found at {args.bench} (build the `bench` target, or pass "
                 f"--build/--bench)")
    os.makedirs(args.out, exist_ok=True)
    names = [n for n, _ in args.variants]
    cells = [(o, t) for o in args.objects for t in args.threads]
    total = len(cells) * len(names) * args.repeat
    print(f"lockref_sweep: {len(cells)} cells x {len(names)} variants x {args.repeat} = {total} runs of "
          f"{args.duration:g} s (~{total * (args.duration + 0.05) / 60:.1f} min)", file=sys.stderr)
    raw, res, n, t0 = [], {}, 0, time.time()
    for (objects, threads) in cells:
        runs = {v: [] for v in names}
        for rep in range(args.repeat):
            k = rep % len(args.variants)
            for (v, vargs) in args.variants[k:] + args.variants[:k]:
                n += 1
                r = run_one(args, threads, objects, vargs, v)
                r.update(variant=v, threads=threads, objects=objects, rep=rep)
                raw.append(r)
                runs[v].append(r)
                print(f"[{n}/{total}] objects={objects} threads={threads} {v}: "
                      + (f"{float(r['kops']) / 1000:.2f} Mops/s" if r["status"] == "ok"
                         else f"{r['status']} {r['detail']}"), file=sys.stderr)
        for v in names:
            okr = [r for r in runs[v] if r["status"] == "ok"]
            bad = [r["status"] for r in runs[v] if r["status"] != "ok"]
            m = {"status": bad[0] if bad else "ok", "reps": len(okr)}
            for f in FIELDS:
                m[f] = median([float(r[f]) for r in okr if f in r])
            m["spread"] = spread([float(r["kops"]) for r in okr])
            res[(objects, threads, v)] = m
        unb = res[(objects, threads, "lockref/unb")]["kops"]
        at = res[(objects, threads, "atomic")]["kops"]
        for v in names:
            m = res[(objects, threads, v)]
            m["vs_unb"] = m["kops"] / unb if m["kops"] and unb else None
            m["vs_atomic"] = m["kops"] / at if m["kops"] and at else None
    elapsed = time.time() - t0

    with open(os.path.join(args.out, "raw.csv"), "w", newline="") as f:
        cols = ["objects", "threads", "variant", "rep", "status", "detail", "impl", "retries", "put", "pick", "hold",
                "work", "duration_s", "ops", "kops", "min_ops", "max_ops", "fairness", "lockless", "cas_fail",
                "fallback", "lock_sleep", "put_locked", "cas_fail_per_update", "fallback_per_kupdate", "events"]
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for r in raw:
            w.writerow(r)
    with open(os.path.join(args.out, "results.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["objects", "threads", "variant", "status", "reps", "mops", "ratio_vs_unbounded", "ratio_vs_atomic",
                    "mops_max_over_min"] + FIELDS[1:])
        for (objects, threads) in cells:
            for v in names:
                m = res[(objects, threads, v)]
                w.writerow([objects, threads, v, m["status"], m["reps"],
                            fmt(m["kops"] / 1000 if m["kops"] else None, "{:.3f}"), fmt(m["vs_unb"], "{:.3f}"),
                            fmt(m["vs_atomic"], "{:.3f}"), fmt(m["spread"], "{:.2f}")]
                           + [fmt(m[k], "{:.4f}") for k in FIELDS[1:]])

    report = make_report(args, cells, names, res, elapsed)
    write_report(args.out, report)
    if not args.no_plot:
        plot(args, res)
    fails = [r for r in raw if r["status"] != "ok"]
    for r in fails:
        print(f"FAILED: objects={r['objects']} threads={r['threads']} {r['variant']} rep {r['rep']}: "
              f"{r['status']} {r['detail']}", file=sys.stderr)
    print(f"lockref_sweep: wrote {args.out}/{{raw.csv,results.csv,results.md"
          + ("" if args.no_plot else ",lockref.png") + f"}} in {elapsed:.0f} s", file=sys.stderr)
    return 1 if fails else 0


def make_report(args, cells, names, res, elapsed):
    lr = [f"lockref/{rname(r)}" for r in args.retries]
    base = [b for b in args.baselines]
    s = [f"# lockref retry sweep (open/close analog)\n\n"
         f"{args.duration:g} s per run, median of {args.repeat} interleaved run(s); {os.cpu_count()} CPUs; "
         f"one op = get_not_zero + {'put_or_lock' if args.put == 'or_lock' else 'put_return (+ locked fallback)'} "
         f"on one of K objects ({args.pick}), hold {args.hold}, work {args.work} pause(s). "
         f"`unb` = unbounded loop (retries 0); the kernel's bound is 100. Wall time {elapsed:.0f} s.\n"]
    for objects in args.objects:
        s.append(f"\n## {objects} object{'s' if objects > 1 else ''}: Mops/s "
                 f"(ratio to the unbounded lockref loop, same run)\n\n")
        rows = []
        for t in args.threads:
            row = [str(t)]
            u = res[(objects, t, "lockref/unb")]
            for v in base + lr:
                m = res[(objects, t, v)]
                mark = NOISY_MARK if (m["spread"] or 0) > NOISY else ""
                if m["kops"] is None:
                    row.append(m["status"])
                    continue
                val = f"{m['kops'] / 1000:.2f}{mark}"
                row.append(val if v == "lockref/unb" else f"{val} ({fmt(m['vs_unb'], '{:.2f}')})")
            rows.append(row)
        row = ["geomean"] + [fmt(geomean([res[(objects, t, v)]["vs_unb"] for t in args.threads]), "{:.3f}")
                             for v in base + lr]
        rows.append(row)
        s.append(md_table(["threads"] + base + [v.replace("lockref/", "lr ") for v in lr], rows))

        s.append(f"\nRatio to the plain atomic (same run), {objects} object(s):\n\n")
        rows = [[str(t)] + [fmt(res[(objects, t, v)]["vs_atomic"], "{:.2f}") for v in base[1:] + lr]
                for t in args.threads]
        s.append(md_table(["threads"] + base[1:] + [v.replace("lockref/", "lr ") for v in lr], rows))

        s.append(f"\nLock events per lockref update, {objects} object(s): failed CAS per update / "
                 f"fallbacks to the lock per 1000 updates / lock-half sleeps per run:\n\n")
        rows = []
        for t in args.threads:
            row = [str(t)]
            for v in lr:
                m = res[(objects, t, v)]
                row.append(f"{fmt(m['cas_fail_per_update'], '{:.3f}')} / {fmt(m['fallback_per_kupdate'], '{:.2f}')}"
                           f" / {fmt(m['lock_sleep'], '{:.0f}')}")
            rows.append(row)
        s.append(md_table(["threads"] + [v.replace("lockref/", "lr ") for v in lr], rows))
    if args.repeat > 1:
        s.append(f"\n{NOISY_MARK} Mops/s varied more than {NOISY:g}x between the {args.repeat} runs of that cell.\n")
    return "".join(s)


def plot(args, res):
    xs = list(range(len(args.retries)))
    xt = ", ".join(f"'{'unbounded' if r == 0 else r}' {i}" for i, r in enumerate(args.retries))
    blocks = []
    for objects in args.objects:
        for t in args.threads:
            lines = []
            for i, r in enumerate(args.retries):
                m = res[(objects, t, f"lockref/{rname(r)}")]
                lines.append(f"{i} {fmt(m['kops'] / 1000 if m['kops'] else None, '{:.4f}').replace('-', 'NaN')} "
                             f"{fmt(m['vs_unb'], '{:.4f}').replace('-', 'NaN')} "
                             f"{fmt(m['vs_atomic'], '{:.4f}').replace('-', 'NaN')}")
            blocks.append(f"$o{objects}t{t} << EOD\n" + "\n".join(lines) + "\nEOD")
    ncols = len(args.objects)
    g = ["\n".join(blocks),
         f"set terminal pngcairo noenhanced size {max(700, 640 * ncols)},1100 font 'DejaVu Sans,11'",
         f"set output {gp_quote(os.path.join(args.out, 'lockref.png'))}",
         f"set xtics ({xt})", f"set xrange [-0.3:{len(xs) - 0.7}]", "set grid",
         "set key outside right top vertical font ',10' samplen 2", "set xlabel 'retry bound (LOCKSWAP_LOCKREF_RETRIES)'",
         f"set multiplot layout 3,{ncols} title 'lockref open/close analog: {args.duration:g} s/run, median of "
         f"{args.repeat}, {os.cpu_count()} CPUs' font ',13'"]
    for (col, ylabel, what, logy) in ((2, "Mops/s", "throughput", True), (3, "ratio to unbounded", "ratio to unbounded", False),
                                      (4, "ratio to atomic", "ratio to plain atomic", False)):
        for objects in args.objects:
            g.append(f"set title '{what}, {objects} object(s)'")
            g.append(f"set ylabel '{ylabel}'")
            g.append("set logscale y" if logy else "unset logscale y")
            g.append("set yrange [*:*]" if logy else "set yrange [0:*]")
            plots = [f"$o{objects}t{t} using 1:{col} with linespoints lc rgb '{GNUPLOT_COLORS[i % 10]}' lw 2 "
                     f"pt {5 + i} title '{t} threads'" for i, t in enumerate(args.threads)]
            if col == 3:
                plots.append("1 with lines lc rgb '#888888' dt 2 notitle")
            g.append("plot " + ", ".join(plots))
    g += ["unset multiplot", ""]
    gnuplot(os.path.join(args.out, "lockref.gp"), "\n".join(g))


if __name__ == "__main__":
    sys.exit(main())
