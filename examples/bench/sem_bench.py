#!/usr/bin/env python3
"""examples/bench/sem_bench.py — POSIX semaphores under every LOCKSWAP_SEM
variant, side by side with glibc in ONE run.

Each measurement is a child process: sem_bench under LD_PRELOAD=liblockswap.so
with LOCKSWAP_SEM=<variant>. Variants are interleaved inside each cell and the
order rotates between repeats; the median of --repeat runs is reported, and
every ratio is taken against glibc's median from the same run. Nothing here
is a timed pass/fail; a semaphore that loses or duplicates a unit (SEM BROKEN)
or loses a wake-up (HANG) is reported and makes the exit status 1.

Cells (--cells, comma list):
  pp-threads      ping-pong between two threads (round trips/s)
  pp-procs        ping-pong between two processes on a pshared pair in MAP_SHARED memory
  mpmc:PxW        P posters, W waiters on a bounded buffer of 16 slots (items/s)
  hot:N           N threads doing sem_wait+sem_post on one semaphore of value N (never blocks:
                  pure compare-and-swap contention on one word)
  hot:N/V         the same with initial value V < N (waits block too; V=1: a semaphore as a mutex)

Outputs (in --out, default BUILD/bench-results/sem/):
  raw.csv, results.csv, results.md, sem.png (kops/s and ratio to glibc per cell)
"""
import csv
import os
import sys
import time

from bench_common import (GNUPLOT_COLORS, NOISY, NOISY_MARK, clean_env, csv_list, fmt, geomean,
                          driver_parser, gnuplot, gp_quote, md_table, median, parse_define, run_child,
                          spread, write_report)

DEFAULT_CELLS = "pp-threads,pp-procs,mpmc:8x8,mpmc:32x32,hot:8,hot:64,hot:8/1"
# name -> (LOCKSWAP_SEM value or None for no preload, extra env)
BUILTIN = {
    "none": (None, {}),
    "glibc": ("glibc", {}),
    "futex": ("futex", {}),
    "lockref": ("lockref", {}),
    "lockref-unbounded": ("lockref", {"LOCKSWAP_LOCKREF_RETRIES": "0"}),
}


def parse_cell(p, c):
    if c == "pp-threads":
        return {"name": c, "args": ["--mode", "pingpong-threads"]}
    if c == "pp-procs":
        return {"name": c, "args": ["--mode", "pingpong-procs"]}
    kind, _, spec = c.partition(":")
    try:
        if kind == "mpmc":
            pp, _, ww = spec.partition("x")
            return {"name": c, "args": ["--mode", "mpmc", "--posters", str(int(pp)), "--waiters", str(int(ww)),
                                        "--capacity", "16"]}
        if kind == "hot":
            n, _, v = spec.partition("/")
            a = ["--mode", "hot", "--threads", str(int(n))]
            if v:
                a += ["--value", str(int(v))]
            return {"name": c, "args": a}
    except ValueError:
        pass
    p.error(f"unknown cell {c!r} (pp-threads, pp-procs, mpmc:PxW, hot:N, hot:N/V)")


def parse_args():
    p = driver_parser(__doc__, "preload/ and examples/bench/", "sem_bench", "sem")
    p.add_argument("--cells", default=DEFAULT_CELLS, help="comma list (default %(default)s)")
    p.add_argument("--variants", default="glibc,futex,lockref",
                   help="LOCKSWAP_SEM variants (default %(default)s; also none = no preload, "
                        "lockref-unbounded = lockref with LOCKSWAP_LOCKREF_RETRIES=0, or --define names)")
    p.add_argument("--define", action="append", default=[], metavar="NAME=BASE[:ENV=VAL...]",
                   help="an extra variant, e.g. lr15=lockref:LOCKSWAP_LOCKREF_RETRIES=15")
    p.add_argument("--baseline", default="glibc", help="variant the ratios are taken against (default glibc)")
    p.add_argument("--repeat", type=int, default=3, help="runs per cell and variant; the median is reported")
    p.add_argument("--duration", type=float, help="seconds per run (default 1, --quick 0.2)")
    p.add_argument("--quick", action="store_true", help="0.2 s per run, 1 repeat unless --repeat is given")
    p.add_argument("--stats", action="store_true",
                   help="LOCKSWAP_STATS=1 for every preloaded run; event counts go to OUT/stats/*.txt")
    p.add_argument("--no-plot", action="store_true", help="do not run gnuplot")
    a = p.parse_args()
    a.lib = os.path.abspath(a.lib or os.path.join(a.build, "preload", "liblockswap.so"))
    a.bench = os.path.abspath(a.bench or os.path.join(a.build, "examples", "bench", "sem_bench"))
    a.out = os.path.abspath(a.out or os.path.join(a.build, "bench-results", "sem"))
    if a.quick:
        a.duration = a.duration or 0.2
        if "--repeat" not in sys.argv:
            a.repeat = 1
    a.duration = a.duration or 1.0
    a.cells = [parse_cell(p, c) for c in csv_list(a.cells)]
    a.variants = csv_list(a.variants)
    a.defs = dict(BUILTIN)
    for d in a.define:
        name, base, env = parse_define(p, d)
        a.defs[name] = (base, env)
    for v in a.variants:
        if v not in a.defs:
            p.error(f"unknown variant {v}: known {', '.join(a.defs)} (add more with --define)")
    if a.baseline in a.variants:
        a.variants.remove(a.baseline)
    a.variants.insert(0, a.baseline)
    if a.repeat < 1:
        p.error("--repeat must be >= 1")
    return a


def child_env(args, variant, stats_file=None):
    base, extra = args.defs[variant]
    env = clean_env()
    if base is None:
        return env
    env["LD_PRELOAD"] = args.lib
    env["LOCKSWAP_SEM"] = base
    env.update(extra)
    if stats_file:
        env["LOCKSWAP_STATS"], env["LOCKSWAP_STATS_FILE"] = "1", stats_file
    return env


def run_one(args, cell, variant, duration, tag=None):
    cmd = [args.bench] + cell["args"] + ["--duration", f"{duration:g}", "--label", variant]
    stats_file = None
    if args.stats and tag is not None:
        os.makedirs(os.path.join(args.out, "stats"), exist_ok=True)
        stats_file = os.path.join(args.out, "stats", f"{cell['name'].replace(':', '-').replace('/', 'v')}"
                                                     f"-{variant}-{tag}.txt")
    return run_child(cmd, child_env(args, variant, stats_file), "lockswap-sem-bench", 60 + 15 * duration)


def probe(args):
    ok = []
    for v in args.variants:
        r = run_one(args, {"name": "probe", "args": ["--mode", "pingpong-threads"]}, v, 0.02)
        base = args.defs[v][0]
        if r["status"] == "UNAVAILABLE":
            print(f"note: variant {v} unavailable in {args.lib}, skipped: {r['detail']}", file=sys.stderr)
            continue
        if r["status"] != "ok":
            print(f"WARNING: variant {v} failed its probe run: {r['status']} {r['detail']}", file=sys.stderr)
            ok.append(v)
            continue
        want = "libc.so.6" if base is None else os.path.basename(args.lib)
        if r.get("impl") != want:
            if base == "glibc":
                print(f"note: {v}: sem_wait resolves to {r.get('impl')} (the library does not interpose sem_*); "
                      f"kept as the control", file=sys.stderr)
            else:
                print(f"note: {v}: sem_wait resolves to {r.get('impl')}, not {want}; skipped", file=sys.stderr)
                continue
        ok.append(v)
    if args.baseline not in ok:
        sys.exit(f"sem_bench: the baseline {args.baseline} does not run; nothing to compare")
    return ok


def main():
    args = parse_args()
    for path, what in ((args.bench, "sem_bench"), (args.lib, "liblockswap.so")):
        if not os.path.exists(path):
            sys.exit(f"sem_bench: {what} not found at {path} (build the `bench` target, or pass --build/--lib/--bench)")
    os.makedirs(args.out, exist_ok=True)
    vs = probe(args)
    total = len(args.cells) * len(vs) * args.repeat
    print(f"sem_bench: {len(args.cells)} cells x {len(vs)} variants x {args.repeat} = {total} runs of "
          f"{args.duration:g} s (~{total * (args.duration + 0.1) / 60:.1f} min); lib={args.lib}", file=sys.stderr)
    raw, results, n, t0 = [], {}, 0, time.time()
    for cell in args.cells:
        runs = {v: [] for v in vs}
        for rep in range(args.repeat):
            order = vs[rep % len(vs):] + vs[:rep % len(vs)]
            for v in order:
                n += 1
                r = run_one(args, cell, v, args.duration, tag=rep)
                r.update(cell=cell["name"], variant=v, rep=rep)
                raw.append(r)
                runs[v].append(r)
                print(f"[{n}/{total}] {cell['name']} {v}: "
                      + (f"{float(r['kops']):.1f} kops/s" if r["status"] == "ok" else f"{r['status']} {r['detail']}"),
                      file=sys.stderr)
        for v in vs:
            okr = [r for r in runs[v] if r["status"] == "ok"]
            bad = [r["status"] for r in runs[v] if r["status"] != "ok"]
            ks = [float(r["kops"]) for r in okr]
            fair = [float(r["min_ops"]) / float(r["max_ops"]) for r in okr if float(r["max_ops"]) > 0]
            results[(cell["name"], v)] = {"status": bad[0] if bad else "ok", "reps": len(okr), "kops": median(ks),
                                          "spread": spread(ks), "minmax": median(fair)}
        b = results[(cell["name"], args.baseline)]["kops"]
        for v in vs:
            r = results[(cell["name"], v)]
            r["ratio"] = r["kops"] / b if r["kops"] and b else None
    elapsed = time.time() - t0

    with open(os.path.join(args.out, "raw.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["cell", "variant", "rep", "status", "detail", "impl", "mode", "threads",
                                          "posters", "waiters", "capacity", "value", "retries", "duration_s", "ops",
                                          "kops", "min_ops", "max_ops"], extrasaction="ignore")
        w.writeheader()
        for r in raw:
            w.writerow(r)
    with open(os.path.join(args.out, "results.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["cell", "variant", "status", "reps", "kops", f"ratio_vs_{args.baseline}", "kops_max_over_min",
                    "thread_min_over_max_ops"])
        for cell in args.cells:
            for v in vs:
                r = results[(cell["name"], v)]
                w.writerow([cell["name"], v, r["status"], r["reps"], fmt(r["kops"], "{:.2f}"),
                            fmt(r["ratio"], "{:.3f}"), fmt(r["spread"], "{:.2f}"), fmt(r["minmax"], "{:.3f}")])

    b = args.baseline
    s = [f"# POSIX semaphore benchmark (sem_bench)\n\n{args.duration:g} s per run, median of {args.repeat} "
         f"interleaved run(s); {os.cpu_count()} CPUs; kops/s (ratio to `{b}` from this run). "
         + ("`glibc` runs under LD_PRELOAD and forwards to glibc; `none` has no preload. " if "glibc" in vs else "")
         + f"Wall time {elapsed:.0f} s.\n\n"]
    rows = []
    for cell in args.cells:
        row = [cell["name"]]
        for v in vs:
            r = results[(cell["name"], v)]
            mark = NOISY_MARK if (r["spread"] or 0) > NOISY else ""
            if r["kops"] is None:
                row.append(r["status"])
            elif v == b:
                row.append(fmt(r["kops"]) + mark)
            else:
                row.append(f"{fmt(r['kops'])}{mark} ({fmt(r['ratio'], '{:.2f}')})"
                           + ("" if r["status"] == "ok" else f" {r['status']}"))
        rows.append(row)
    rows.append(["geomean ratio"] + [fmt(geomean([results[(c["name"], v)]["ratio"] for c in args.cells]), "{:.3f}")
                                     for v in vs])
    s.append(md_table(["cell"] + vs, rows, ["---"] + ["---:"] * len(vs)))
    if args.repeat > 1:
        s.append(f"\n{NOISY_MARK} kops/s varied more than {NOISY:g}x between the {args.repeat} runs of that cell.\n")
    s.append("\nOps: pp-* = round trips; mpmc = items through the buffer; hot = wait+post pairs. "
             "Per-thread min/max ops (fairness) is in results.csv.\n")
    report = "".join(s)
    write_report(args.out, report)
    if not args.no_plot:
        plot(args, vs, results)
    fails = [r for r in raw if r["status"] != "ok"]
    for r in fails:
        print(f"FAILED: {r['cell']} {r['variant']} rep {r['rep']}: {r['status']} {r['detail']}", file=sys.stderr)
    print(f"sem_bench: wrote {args.out}/{{raw.csv,results.csv,results.md"
          + ("" if args.no_plot else ",sem.png") + f"}} in {elapsed:.0f} s", file=sys.stderr)
    return 1 if fails else 0


def plot(args, vs, results):
    data = ["$d << EOD"]
    for cell in args.cells:
        vals = []
        for v in vs:
            r = results[(cell["name"], v)]
            vals += [fmt(r["kops"], "{:.3f}").replace("-", "NaN"), fmt(r["ratio"], "{:.4f}").replace("-", "NaN")]
        data.append(gp_quote(cell["name"]).replace("'", '"') + " " + " ".join(vals))
    data.append("EOD")
    g = ["\n".join(data),
         "set terminal pngcairo noenhanced size 1300,900 font 'DejaVu Sans,11'",
         f"set output {gp_quote(os.path.join(args.out, 'sem.png'))}",
         "set style data histograms", "set style histogram clustered gap 1", "set style fill solid 0.85 border -1",
         "set boxwidth 0.9", "set grid ytics", "set key outside right top", "set xtics rotate by -20",
         f"set multiplot layout 2,1 title 'POSIX semaphores: LOCKSWAP_SEM variants ({args.duration:g} s/run, "
         f"median of {args.repeat}, {os.cpu_count()} CPUs)' font ',13'",
         "set title 'throughput (kops/s, log scale)'", "set logscale y", "set ylabel 'kops/s'",
         "plot " + ", ".join(f"$d using {2 + 2 * i}:xtic(1) title {gp_quote(v)} lc rgb '{GNUPLOT_COLORS[i % 10]}'"
                             for i, v in enumerate(vs)),
         "unset logscale y", f"set title 'ratio to {args.baseline} (same run)'", "set ylabel 'ratio'",
         "set yrange [0:*]",
         "plot " + ", ".join(f"$d using {3 + 2 * i}:xtic(1) title {gp_quote(v)} lc rgb '{GNUPLOT_COLORS[i % 10]}'"
                             for i, v in enumerate(vs)) + ", 1 with lines lc rgb '#888888' dt 2 notitle",
         "unset multiplot", ""]
    gnuplot(os.path.join(args.out, "sem.gp"), "\n".join(g))


if __name__ == "__main__":
    sys.exit(main())
