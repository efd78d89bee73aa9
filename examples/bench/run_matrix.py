#!/usr/bin/env python3
"""examples/bench/run_matrix.py — Waiman Long's lock microbenchmark matrix,
every lockswap variant side by side with glibc in ONE run.

Each measurement is a child process: rwlock_bench under
LD_PRELOAD=liblockswap.so with LOCKSWAP_RWLOCK / LOCKSWAP_MUTEX set, or with
no LD_PRELOAD at all for the `none` row. The method is docs/measuring.md's:
per cell, interleaved rounds (every variant once, the order rotated from
round to round), each round guarded by `lockswap-probe c2c` before and after
(a round across which the core-to-core round trip moved is dropped, and the
table says how many were kept); per variant the median of its per-round
ratios to the baseline (`none`, no preload, unless --baseline says otherwise)
with the sign-test 95% interval and a verdict (tools/lockswap_cli/stats.py).
Measured runs never have LOCKSWAP_STATS set; --stats / --profile add one
separate, untimed run per cell and variant for the statistics. Nothing here is
a timed pass/fail. A lock that breaks mutual exclusion, loses updates or hangs
is reported as BROKEN / HANG and makes the exit status 1.

Outputs (in --out, default build/bench-results/):
  raw.csv         every timed run (round, kept or dropped)
  results.csv     per cell and variant: median kops, speed vs the baseline with its interval, verdict
  results.json    the same for programs (scripts/speedcheck.sh), with the env: line
  results.md      the tables printed on stdout
  throughput.png  kops/s vs threads, one panel per (mode/read fraction, CS load), a line per variant
  ratio.png       the same as ratio to the baseline
"""
import csv
import os
import shutil
import subprocess
import sys
import json
import time

from bench_common import (Rounds, add_mode_option, add_steady_option, baseline_first, check_mode_option, csv_list,
                          driver_parser, env_summary, fmt, geomean, host_summary, lockswap_stats, matrix_columns,
                          md_table, tagged_columns, median, parse_define, probe_binary, run_child, steadiness, verdict_text,
                          write_report)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))

# name -> (base variant or None for no preload, extra env, applies to mutex?).
# The columns of the library's matrix (bench_common.matrix_columns) are taken
# as they are; these are the benchmark's own names beside them.
CEILING = "ceiling"
BENCH_ONLY = {
    "none": (None, {}, True),  # no LD_PRELOAD at all: glibc without the forwarding layer
    "rwsem+dropbias": ("rwsem", {"LOCKSWAP_RWSEM_DROP_BIAS": "1"}, False),
    "percid": ("percid", {}, False),  # per-CID sharded readers, the default id allocator (rseq)
    # No lock at all, every op a read (rwlock_bench --no-lock): the same work with nothing
    # shared written, so no correct lock can exceed it. A target above its speed is out of reach.
    CEILING: (None, {}, True),
}


def column_definition(settings):
    """A matrix column as (base, extra env, applies to mutex?): its rwlock variant is the base,
    the mutex mode runs it only where the column's mutex is that same variant (not rwsem-rspin,
    lockref, percid-*: rwlock-only names)."""
    base = settings["LOCKSWAP_RWLOCK"]
    extra = {k: v for k, v in settings.items() if k not in ("LOCKSWAP_MUTEX", "LOCKSWAP_RWLOCK", "LOCKSWAP_SEM")}
    return base, extra, settings.get("LOCKSWAP_MUTEX") == base


def default_variants(lib):
    """(rwlock, mutex) default variant lists: none, the `control` column (glibc) and the columns
    tagged `microbench` in preload/config/variant_columns.def; the mutex list only those whose mutex is
    the column's rwlock variant (the others are rwlock-only names)."""
    columns = {**tagged_columns("control", lib), **tagged_columns("microbench", lib)}
    rwlock = ["none"] + list(columns)
    mutex = ["none"] + [n for n, s in columns.items() if column_definition(s)[2]]
    return rwlock, mutex


def known_variants(lib):
    defs = {name: column_definition(s) for name, s in matrix_columns(lib).items()}
    # percid+ALLOCATOR: this driver's spelling before it took the library's columns
    defs.update({n.replace("percid-", "percid+"): d for n, d in defs.items() if n.startswith("percid-")})
    defs.update(BENCH_ONLY)
    return defs


FIELDS = ["kops", "fairness", "cpus", "min_ops", "mean_ops", "max_ops", "max_rd_wait_us",
          "max_wr_wait_us", "p99_rd_wait_us", "p99_wr_wait_us"]


def pct(s):
    s = s.strip().rstrip("%")
    v = float(s)
    return v * 100 if v <= 1 and "." in s else v


def parse_args():
    p = driver_parser(__doc__, "preload/ and examples/bench/", "rwlock_bench", "")
    p.add_argument("--probe", help="lockswap-probe binary (default BUILD/bin/lockswap-probe); missing: rounds unguarded")
    p.add_argument("--duration", type=float, help="seconds per run (default 0.5, --quick 0.2)")
    p.add_argument("--quick", action="store_true",
                   help="a few cells at 0.2 s, 2 rounds (too few for a verdict: a check that it runs): "
                        "threads 4,64 x loads 1,100 x reads 50,90; mutex threads 4,64 x loads 1,100")
    p.add_argument("--read-mostly", action="store_true",
                   help="the read-mostly matrix: reads 100,99,90 x threads 2..64 x load 1, variants "
                        "none,glibc,rwsem,percid,ceiling, no mutex matrix; other options still apply")
    p.add_argument("--threads", help="comma list (default 2,4,8,16,32,64)")
    p.add_argument("--loads", help="CS load in pause instructions, comma list (default 1,20,100)")
    p.add_argument("--reads", help="read percentages, comma list (default 50,90)")
    p.add_argument("--variants", help="rwlock variants (default none, the columns tagged control and microbench in "
                   "preload/config/variant_columns.def: none,glibc,futex,rwsem,rwsem-rspin; "
                   "also: every column of `lockswap --list` (lockref, percid-percpu, rwsem-oncpu-off, ...; "
                   "percid+percpu etc. as before), rwsem+dropbias, percid, ceiling (no lock, every op a read: "
                   "the most any lock could reach), or names from --define)")
    p.add_argument("--mutex-variants", help="mutex variants (default: those of the rwlock default whose mutex is their rwlock "
                   "variant: none,glibc,futex,rwsem)")
    p.add_argument("--print-variants", action="store_true",
                   help="print the rwlock and the mutex variant lists this run would use, and exit")
    p.add_argument("--define", action="append", default=[], metavar="NAME=BASE[:ENV=VAL...]",
                   help="an extra variant, e.g. nospin=rwsem:LOCKSWAP_RWSEM_SPIN=0 (usable in both lists); "
                        "old=rwsem:LD_PRELOAD=/path/to/old/liblockswap.so runs rwsem from another build (A/B)")
    p.add_argument("--baseline", default="none",
                   help="variant the ratios are taken against (default none: no LD_PRELOAD)")
    p.add_argument("--repeat", type=int, help="steady rounds to keep per cell (default 6, the fewest that give a "
                   "95%% interval; --quick 2)")
    p.add_argument("--max-rounds", type=int, help="rounds to try per cell before giving up on --repeat steady "
                   "ones (default 2 x --repeat)")
    add_mode_option(p)
    add_steady_option(p)
    p.add_argument("--work", type=int, default=10, help="pause instructions between ops (default 10)")
    p.add_argument("--no-rwlock", action="store_true", help="skip the rwlock matrix")
    p.add_argument("--no-mutex", action="store_true", help="skip the mutex matrix")
    p.add_argument("--no-plot", action="store_true", help="do not run gnuplot")
    p.add_argument("--stats", action="store_true",
                   help="after the timed rounds, one separate untimed run per cell and preloaded variant with "
                        "LOCKSWAP_STATS=counts; the lock event counts go to OUT/stats/*-counts.txt")
    p.add_argument("--profile", action="store_true",
                   help="the same with LOCKSWAP_STATS=profile (per-lock/per-site profiler): OUT/stats/*-profile.txt")
    p.add_argument("--prefer-writer", action="store_true",
                   help="init the rwlock PREFER_WRITER_NONRECURSIVE_NP (default: default attributes)")
    a = p.parse_args()
    if a.read_mostly:
        a.reads = a.reads or "100,99,90"
        a.loads = a.loads or "1"
        # A fixed comparison (percid's readers against rwsem's and the no-lock ceiling), not
        # a default list of variants: it stays as written.
        a.variants = a.variants or f"none,glibc,rwsem,percid,{CEILING}"
        a.no_mutex = True
    if a.quick:
        a.repeat = a.repeat or 2
    a.repeat = a.repeat or lockswap_stats.runs_needed()
    a.max_rounds = a.max_rounds or 2 * a.repeat
    a.lib = os.path.abspath(a.lib or os.path.join(a.build, "preload", "liblockswap.so"))
    a.bench = os.path.abspath(a.bench or os.path.join(a.build, "examples", "bench", "rwlock_bench"))
    a.out = os.path.abspath(a.out or os.path.join(a.build, "bench-results"))
    a.probe = a.probe or probe_binary(a.build)
    if a.quick:
        a.duration = a.duration or 0.2
        a.threads = a.threads or "4,64"
        a.loads = a.loads or "1,100"
        a.reads = a.reads or "50,90"
    a.duration = a.duration or 0.5
    a.threads = csv_list(a.threads or "2,4,8,16,32,64", int)
    a.loads = csv_list(a.loads or "1,20,100", int)
    a.reads = csv_list(a.reads or "50,90", pct)
    default_rwlock, default_mutex = default_variants(a.lib)
    a.variants = csv_list(a.variants or ",".join(default_rwlock))
    a.mutex_variants = csv_list(a.mutex_variants or ",".join(default_mutex))
    if a.print_variants:
        print("variants: " + ",".join(a.variants))
        print("mutex-variants: " + ",".join(a.mutex_variants))
        sys.exit(0)
    a.defs = known_variants(a.lib)
    for d in a.define:
        name, base, env = parse_define(p, d)
        a.defs[name] = (base, env, True)
    for v in a.variants + a.mutex_variants:
        if v not in a.defs:
            p.error(f"unknown variant {v}: known {', '.join(a.defs)} (add more with --define)")
    a.variants = baseline_first(a.variants, a.baseline)
    a.mutex_variants = baseline_first(a.mutex_variants, a.baseline)
    if a.repeat < 1 or a.max_rounds < a.repeat:
        p.error("--repeat must be >= 1 and --max-rounds >= --repeat")
    check_mode_option(p, a, a.probe)
    return a


def child_env(args, mode, variant, stats=None):
    base, extra, _ = args.defs[variant]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSWAP_") and k != "LD_PRELOAD"}
    if base is None:
        return env
    env["LD_PRELOAD"] = args.lib
    if os.environ.get("LOCKSWAP_ONCPU_FD"):  # the map handed down by `lockswap-oncpu exec`
        env["LOCKSWAP_ONCPU_FD"] = os.environ["LOCKSWAP_ONCPU_FD"]
    if mode == "mutex":
        env["LOCKSWAP_MUTEX"], env["LOCKSWAP_RWLOCK"] = base, "glibc"
    else:
        env["LOCKSWAP_MUTEX"], env["LOCKSWAP_RWLOCK"] = "glibc", base
    env.update(extra)
    if stats:  # (mode, file): only ever a separate, untimed run
        env["LOCKSWAP_STATS"], env["LOCKSWAP_STATS_FILE"] = stats
    return env


def run_one(args, mode, variant, threads, load, read_pct, duration, stats_mode=None):
    cmd = [args.bench, "--threads", str(threads), "--load", str(load), "--work", str(args.work),
           "--duration", f"{duration:g}", "--label", variant]
    if mode == "mutex":
        cmd.append("--mutex")
    else:
        cmd += ["--reads", f"{read_pct:g}%"]
        if args.prefer_writer:
            cmd.append("--prefer-writer")
    if variant == CEILING:
        cmd.append("--no-lock")
    stats = None
    if stats_mode:
        os.makedirs(os.path.join(args.out, "stats"), exist_ok=True)
        stats = (stats_mode, os.path.join(args.out, "stats",
                                          f"{mode}-r{read_pct:g}-l{load}-t{threads}-{variant}-{stats_mode}.txt"))
    env = child_env(args, mode, variant, stats)
    # The owner-on-CPU map descriptor (lockswap-oncpu exec) must survive
    # subprocess's close_fds.
    fds = (int(env["LOCKSWAP_ONCPU_FD"]),) if env.get("LOCKSWAP_ONCPU_FD", "").isdigit() else ()
    return run_child(cmd, env, "lockswap-bench", 60 + 15 * duration, pass_fds=fds)


def available(args, mode, variants):
    """Drops variants the library does not offer (rwsem may not exist yet)."""
    ok = []
    for v in variants:
        r = run_one(args, mode, v, 2, 1, 50, 0.02)
        base, extra, _ = args.defs[v]
        want = "libc.so.6" if base is None else os.path.basename(extra.get("LD_PRELOAD", args.lib))
        if r["status"] == "UNAVAILABLE":
            print(f"note: {mode} variant {v} unavailable in {args.lib}, skipped: {r['detail']}", file=sys.stderr)
        elif r["status"] != "ok":
            # A lock that breaks or hangs stays in the matrix: it is reported, never hidden.
            print(f"WARNING: {mode} variant {v} failed its probe run: {r['status']} {r['detail']}", file=sys.stderr)
            ok.append(v)
        elif r.get("impl") != want:
            print(f"note: {mode} variant {v}: lock calls resolve to {r.get('impl')}, not {want}; skipped",
                  file=sys.stderr)
        else:
            ok.append(v)
    if args.baseline not in ok and variants:
        sys.exit(f"run_matrix: the baseline {args.baseline} does not run in {mode} mode; nothing to compare")
    return ok


def main():
    args = parse_args()
    for path, what in ((args.bench, "rwlock_bench"), (args.lib, "liblockswap.so")):
        if not os.path.exists(path):
            sys.exit(f"run_matrix: {what} not found at {path} (build the `bench` target, or pass --build/--lib/--bench)")
    os.makedirs(args.out, exist_ok=True)
    args.env_line = env_summary(args.probe)
    if not os.access(args.probe, os.X_OK):
        print(f"run_matrix: {args.probe} missing: rounds are not guarded by the c2c probe", file=sys.stderr)

    groups = []  # (mode, read_pct, variants)
    if not args.no_rwlock:
        rv = available(args, "rwlock", args.variants)
        groups += [("rwlock", r, rv) for r in args.reads]
    if not args.no_mutex:
        for v in args.mutex_variants:
            if not args.defs[v][2]:
                print(f"note: {v} is rwlock-only, not run in the mutex matrix", file=sys.stderr)
        mv = available(args, "mutex", [v for v in args.mutex_variants if args.defs[v][2]])
        groups.append(("mutex", 0, mv))
    cells = [(m, t, l, r, vs) for (m, r, vs) in groups for l in args.loads for t in args.threads]
    total_runs = sum(len(vs) for *_, vs in cells) * args.repeat
    print(f"{args.env_line}\nrun_matrix: {len(cells)} cells, at least {total_runs} runs of {args.duration:g} s "
          f"(~{total_runs * (args.duration + 0.1) / 60:.1f} min, more if rounds are dropped); lib={args.lib}",
          file=sys.stderr)

    raw = []
    results = {}  # (mode, read, load, threads, variant) -> summary of the kept rounds
    t0 = time.time()
    for ci, cell in enumerate(cells):
        rounds = run_cell(args, ci, cell, raw)
        summarize(args, cell, rounds, results)
        if args.stats or args.profile:
            statistics_runs(args, cell)
    elapsed = time.time() - t0

    write_raw(args, raw)
    write_results(args, groups, results)
    report = make_report(args, groups, results, elapsed)
    write_report(args.out, report)
    if not args.no_plot:
        plot(args, groups, results)
    failures = [r for r in raw if r["status"] != "ok"]
    if failures:
        print(f"run_matrix: {len(failures)} run(s) did not complete normally:", file=sys.stderr)
        for r in failures:
            print(f"  {r['mode']} reads={r['read_pct']:g}% load={r['load']} threads={r['threads']} "
                  f"{r['variant']}: {r['status']} {r['detail']}", file=sys.stderr)
    print(f"run_matrix: wrote {args.out}/{{raw.csv,results.csv,results.json,results.md}}"
          + ("" if args.no_plot else ",throughput.png,ratio.png") + f" in {elapsed:.0f} s", file=sys.stderr)
    return 1 if failures else 0


def run_cell(args, ci, cell, raw):
    """The interleaved, probe-guarded rounds of one cell; every run goes to raw."""
    mode, threads, load, read, vs = cell
    rounds = Rounds(vs)
    first = len(raw)

    def run_variant(v):
        r = run_one(args, mode, v, threads, load, read, args.duration)
        r.update(mode=mode, variant=v, threads=threads, load=load, read_pct=read, round=rounds.started)
        raw.append(r)
        print(f"[{len(raw)}] {mode} reads={read:g}% load={load} threads={threads} round {rounds.started + 1} {v}: "
              + (f"{float(r['kops']):.1f} kops/s" if r["status"] == "ok" else f"{r['status']} {r['detail']}"),
              file=sys.stderr)
        return r

    rounds.run(run_variant, args.probe, args.repeat, args.max_rounds, offset=ci, mode=args.placement)
    for r in raw[first:]:
        r["kept"] = int(rounds.steady[r["round"]])
    return rounds


def kops_of(r):
    return float(r["kops"]) if r.get("status") == "ok" else None


def summarize(args, cell, rounds, results):
    mode, threads, load, read, vs = cell
    for v in vs:
        runs = [rnd[v] for rnd in rounds.figure_rounds(args.strict_steady)]
        okr = [r for r in runs if r["status"] == "ok"]
        bad = [r["status"] for r in runs if r["status"] != "ok"]
        res = {"status": bad[0] if bad else "ok", "reps": len(okr), "kept": len(rounds.kept), "run": rounds.started,
               "placement": rounds.placement()}
        for f in FIELDS:
            res[f] = median([float(r[f]) for r in okr if f in r])  # an older --bench lacks cpus
        res["verdict"] = (None if v == args.baseline else
                          rounds.verdict(kops_of, v, args.baseline, True, strict=args.strict_steady))
        res["ratio"] = 1.0 if v == args.baseline else res["verdict"].speed
        results[(mode, read, load, threads, v)] = res


def statistics_runs(args, cell):
    """One separate, untimed run per preloaded variant and statistics mode:
    its throughput is never reported (docs/measuring.md: profiler-free timing)."""
    mode, threads, load, read, vs = cell
    for stats_mode in [m for m, on in (("counts", args.stats), ("profile", args.profile)) if on]:
        for v in vs:
            if args.defs[v][0] is None:
                continue
            r = run_one(args, mode, v, threads, load, read, args.duration, stats_mode=stats_mode)
            if r["status"] != "ok":
                print(f"run_matrix: {stats_mode} statistics run of {v} ({mode} reads={read:g}% load={load} "
                      f"threads={threads}): {r['status']} {r['detail']}", file=sys.stderr)


def write_raw(args, raw):
    write_csv(os.path.join(args.out, "raw.csv"), raw,
              ["mode", "read_pct", "load", "threads", "variant", "round", "kept", "status", "detail", "impl", "kops",
               "ops", "reads", "writes", "min_ops", "mean_ops", "max_ops", "fairness", "cpus", "max_rd_wait_us",
               "max_wr_wait_us", "p99_rd_wait_us", "p99_wr_wait_us", "duration_s", "work"])


def write_csv(path, rows, cols):
    """One row per dict, the listed columns only."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r)


def result_rows(args, groups, results):
    """One flat dict per (cell, variant): what results.csv and results.json hold."""
    for (mode, read, vs) in groups:
        for load in args.loads:
            for t in args.threads:
                for v in vs:
                    r = results[(mode, read, load, t, v)]
                    vd = r["verdict"]
                    row = {"mode": mode, "read_pct": read, "load": load, "threads": t, "variant": v,
                           "status": r["status"], "rounds_kept": r["kept"], "rounds_run": r["run"],
                           "kops": r["kops"], "speed": r["ratio"],
                           "lo": vd.lo if vd else None, "hi": vd.hi if vd else None,
                           "verdict": vd.word if vd else "reference",
                           "coverage": vd.coverage if vd else None, "placement": r["placement"]}
                    row.update({k: r[k] for k in FIELDS[1:]})
                    yield row


def write_results(args, groups, results):
    rows = list(result_rows(args, groups, results))
    cols = ["mode", "read_pct", "load", "threads", "variant", "status", "rounds_kept", "rounds_run", "kops",
            "speed", "lo", "hi", "verdict"] + FIELDS[1:]
    with open(os.path.join(args.out, "results.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols[:9] + [f"speed_vs_{args.baseline}"] + cols[10:])
        for r in rows:
            w.writerow([fmt(r[c], "{:.3f}") if isinstance(r[c], float) else r[c] for c in cols])
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"env": args.env_line, "baseline": args.baseline, "duration_s": args.duration,
                   "cells": rows}, f, indent=1)


def group_title(mode, read):
    return "mutex" if mode == "mutex" else f"rwlock, {read:g}% reads"


def make_report(args, groups, results, elapsed):
    b = args.baseline
    tmax = max(args.threads)
    s = []
    s.append(f"# lockswap lock microbenchmark\n\n`{args.env_line}`\n\n`{host_summary()}`\n\n"
             f"{args.duration:g} s per run, {args.work} pause of non-critical work per op, CS load = pause "
             f"instructions. Per cell, rounds run every variant once in a rotated order; a round across which "
             f"`lockswap-probe c2c` moved by more than {lockswap_stats.PROBE_TOLERANCE:g}x is dropped "
             f"(`rounds` = kept/run; {args.repeat} wanted; then the placement mode most kept rounds ran in: "
             f"fast when the round trip was under {lockswap_stats.FAST_C2C_NS} ns, slow above; the two modes "
             f"give different ratios, so compare cells of one mode"
             + (f"; --mode {args.placement}: only {args.placement}-mode rounds were kept" if args.placement else "")
             + "). `speed` = median of the per-round kops ratios to "
             f"`{b}`{' (no LD_PRELOAD)' if b == 'none' else ''}, >1 faster, with the sign-test 95% interval "
             f"and verdict (docs/measuring.md). No LOCKSWAP_STATS in timed runs. Fairness = per-thread "
             f"min ops / mean ops. CPUs = CPU time the process used per second of the run (all threads): below the "
             f"usable CPUs, a CPU sat idle (docs/measuring.md, \"CPUs used\"). Wall time {elapsed:.0f} s.\n")
    if any(CEILING in vs for (_, _, vs) in groups):
        s.append(f"\n`{CEILING}` takes no lock and makes every op a read (`rwlock_bench --no-lock`): the same work "
                 f"with nothing shared written, so no correct lock can be faster; a speed above the ceiling's "
                 f"is out of reach in that cell.\n")
    for (mode, read, vs) in groups:
        s.append(f"\n## {group_title(mode, read)}\n\n")
        rows = []
        for load in args.loads:
            for t in args.threads:
                for v in vs:
                    r = results[(mode, read, load, t, v)]
                    speed = "reference" if v == b else verdict_text(r["verdict"])
                    rows.append([str(t), str(load), v, fmt(r["kops"]) + ("" if r["status"] == "ok" else f" {r['status']}"),
                                 speed, fmt(r["fairness"], "{:.3f}"), fmt(r["cpus"], "{:.2f}"),
                                 f"{r['kept']}/{r['run']}" + (f" {r['placement']}" if r["placement"] else "")])
        s.append(md_table(["threads", "load", "variant", "kops/s", f"speed vs {b} [95%] verdict", "fairness",
                           "CPUs", "rounds"], rows))

    s.append(f"\n## Geometric mean of the speeds vs {b} (over the cells above)\n\n")
    allv = []
    for (_, _, vs) in groups:
        allv += [v for v in vs if v not in allv]
    rows = []
    for (mode, read, vs) in groups:
        row = [group_title(mode, read)]
        for v in allv:
            if v not in vs:
                row.append("n/a")
                continue
            g = geomean([results[(mode, read, l, t, v)]["ratio"] for l in args.loads for t in args.threads])
            row.append(fmt(g, "{:.3f}"))
        rows.append(row)
    rw_groups = [(m, r, vs) for (m, r, vs) in groups if m == "rwlock"]
    if len(rw_groups) > 1:
        row = ["rwlock, all"]
        for v in allv:
            xs = [results[(m, r, l, t, v)]["ratio"] for (m, r, vs) in rw_groups if v in vs
                  for l in args.loads for t in args.threads]
            row.append(fmt(geomean(xs), "{:.3f}") if xs else "n/a")
        rows.append(row)
    s.append(md_table(["matrix"] + allv, rows))

    s.append(f"\n## Fairness at {tmax} threads: per-thread min/mean ops (1.0 = perfectly even)\n\n")
    rows = []
    for (mode, read, vs) in groups:
        for load in args.loads:
            rows.append([group_title(mode, read), str(load)] +
                        [fmt(results[(mode, read, load, tmax, v)]["fairness"], "{:.3f}") if v in vs else "n/a"
                         for v in allv])
    s.append(md_table(["matrix", "load"] + allv, rows))

    s.append(f"\n## Worst acquire wait (µs): writer / reader, at {tmax} threads and the maximum over all cells\n\n")
    rows = []
    for (mode, read, vs) in groups:
        for load in args.loads:
            row = [group_title(mode, read), str(load)]
            for v in allv:
                if v not in vs:
                    row.append("n/a")
                    continue
                r = results[(mode, read, load, tmax, v)]
                row.append(fmt(r["max_wr_wait_us"], "{:.0f}") if mode == "mutex"
                           else f"{fmt(r['max_wr_wait_us'], '{:.0f}')} / {fmt(r['max_rd_wait_us'], '{:.0f}')}")
            rows.append(row)
        row = [group_title(mode, read), "max, all cells"]
        for v in allv:
            if v not in vs:
                row.append("n/a")
                continue
            cells = [results[(mode, read, l, t, v)] for l in args.loads for t in args.threads]
            mw = max((c["max_wr_wait_us"] or 0) for c in cells)
            mr = max((c["max_rd_wait_us"] or 0) for c in cells)
            row.append(f"{mw:.0f}" if mode == "mutex" else f"{mw:.0f} / {mr:.0f}")
        rows.append(row)
    s.append(md_table(["matrix", "load"] + allv, rows))
    s.append("\nWorst waits on an oversubscribed machine are dominated by preemption (a lock holder or a "
             "woken waiter descheduled); p99 waits are in results.csv.\n")
    if any(r.get("verdict") and steadiness.is_unsteady(r["verdict"].word) for r in results.values()):
        s.append("\nNote: " + steadiness.note("--repeat") + "\n")
    return "".join(s)


def plot(args, groups, results):
    if shutil.which("gnuplot") is None:
        print("run_matrix: gnuplot not found, no plots", file=sys.stderr)
        return
    b = args.baseline
    nrows, ncols = len(groups), len(args.loads)
    blocks, idx = [], {}
    for (mode, read, vs) in groups:
        for load in args.loads:
            for v in vs:
                name = f"$d{len(blocks)}"
                idx[(mode, read, load, v)] = name
                lines = [f"{t} {fmt(results[(mode, read, load, t, v)]['kops'], '{:.3f}').replace('-', 'NaN')} "
                         f"{fmt(results[(mode, read, load, t, v)]['ratio'], '{:.4f}').replace('-', 'NaN')}"
                         for t in args.threads]
                blocks.append(f"{name} << EOD\n" + "\n".join(lines) + "\nEOD\n")
    allv = []
    for (_, _, vs) in groups:
        allv += [v for v in vs if v not in allv]
    colors = ["#000000", "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2"]
    style = {v: f"lc rgb '{colors[i % len(colors)]}' lw 2 pt {5 + i} ps 1.2" for i, v in enumerate(allv)}
    for what, col, fname, ylabel in (("throughput", 2, "throughput.png", "kops/s"),
                                     ("ratio", 3, "ratio.png", f"ratio to {b}")):
        g = ["".join(blocks),
             f"set terminal pngcairo size {max(700, 660 * ncols)},{max(420, 380 * nrows + 40)} font 'DejaVu Sans,11'",
             f"set output '{os.path.join(args.out, fname)}'",
             "set logscale x 2", f"set xrange [{min(args.threads) / 1.3}:{max(args.threads) * 1.3}]",
             "set xtics (" + ", ".join(f"'{t}' {t}" for t in args.threads) + ")",
             "set grid", "set key outside right top vertical font ',10' samplen 2", "set xlabel 'threads'",
             f"set ylabel '{ylabel}'", "set yrange [0:*]",
             f"set multiplot layout {nrows},{ncols} title 'lockswap microbenchmark: {what} "
             f"({args.duration:g} s/run, {os.cpu_count()} CPUs)' font ',13'"]
        for (mode, read, vs) in groups:
            for load in args.loads:
                g.append(f"set title '{group_title(mode, read)}, CS load {load}'")
                plots = [f"{idx[(mode, read, load, v)]} using 1:{col} with linespoints {style[v]} title '{v}'"
                         for v in vs]
                if what == "ratio":
                    plots.append("1 with lines lc rgb '#888888' dt 2 notitle")
                g.append("plot " + ", ".join(plots))
        g.append("unset multiplot")
        run_gnuplot(os.path.join(args.out, f"{what}.gp"), g, "run_matrix")


def run_gnuplot(script, lines, who):
    """Writes the gnuplot script (kept next to the PNG for re-plotting) and runs it."""
    with open(script, "w") as f:
        f.write("\n".join(lines) + "\n")
    pr = subprocess.run(["gnuplot", script], capture_output=True, text=True)
    if pr.returncode != 0:
        print(f"{who}: gnuplot failed for {script}: {pr.stderr.strip()}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
