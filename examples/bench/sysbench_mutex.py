#!/usr/bin/env python3
"""examples/bench/sysbench_mutex.py — `sysbench mutex` (one mutex, a fixed
number of lock pairs split over the threads) under each variant, in
interleaved rounds guarded by lockswap-probe c2c, with the speed of every
variant against `none` (no LD_PRELOAD) and its sign-test interval
(docs/measuring.md). Used by scripts/speedcheck.sh and oversub.sh; runnable
alone:

  sysbench_mutex.py [--threads 2,16,64] [--variants none,glibc,futex,rwsem]
                    [--define NAME=BASE[:LOCKSWAP_X=V...]] [--baseline none] [--total 2000000]
                    [--repeat 6] [--build DIR] [--json FILE]

Measured runs never have LOCKSWAP_STATS set. The metric is sysbench's
"total time" for the fixed work: lower is better, speed = none's time / the
variant's time (>1 faster).
"""
import argparse
import json
import os
import re
import subprocess
import sys

from bench_common import (ROOT, Rounds, add_mode_option, add_steady_option, baseline_first, check_mode_option,
                          clean_env, csv_list, env_summary, host_summary, lockswap_stats, median, parse_define, probe_binary,
                          steadiness, verdict_text)

LOOPS = 100  # sysbench's --mutex-loops: the work inside the critical section


def variant_env(lib, defs, name):
    """The child environment of a mutex variant; None base: no LD_PRELOAD."""
    base, extra = defs[name]
    env = clean_env()
    if base is not None:
        env["LD_PRELOAD"] = lib
        env["LOCKSWAP_MUTEX"] = base
        env.update(extra)
    return env


def builtin_defs():
    return {"none": (None, {}), "glibc": ("glibc", {}), "futex": ("futex", {}), "rwsem": ("rwsem", {})}


def run_sysbench(env, threads, total):
    cmd = ["sysbench", "mutex", f"--threads={threads}", "--mutex-num=1", f"--mutex-locks={total // threads}",
           f"--mutex-loops={LOOPS}", "run"]
    try:
        pr = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return None
    m = re.search(r"total time:\s*([0-9.]+)s", pr.stdout)
    return float(m.group(1)) if pr.returncode == 0 and m else None


def measure(lib, probe, defs, variants, threads_list, total, repeat, max_rounds, log=sys.stderr, reference="none",
            mode=None, strict=True):
    """{threads: {variant: {seconds, speed, lo, hi, word, kept, placement}}}, speed against `reference`;
    mode: keep only rounds of that placement mode (None: either); strict=False: a cell with too few
    steady rounds is figured over every round, its word `host unsteady (k of n rounds steady)`."""
    out = {}
    for ci, threads in enumerate(threads_list):
        def one(v):
            secs = run_sysbench(variant_env(lib, defs, v), threads, total)
            print(f"  sysbench mutex {threads} threads {v}: {secs if secs is not None else 'FAILED'} s", file=log)
            return secs
        rounds = Rounds(variants).run(one, probe, repeat, max_rounds, offset=ci, mode=mode)
        cell = {}
        for v in variants:
            vd = rounds.verdict(lambda x: x, v, reference, higher_is_better=False, strict=strict)
            cell[v] = {"seconds": median([r[v] for r in rounds.figure_rounds(strict) if r[v] is not None]),
                       "speed": 1.0 if v == reference else vd.speed, "lo": vd.lo, "hi": vd.hi,
                       "word": "reference" if v == reference else vd.word, "text": verdict_text(vd),
                       "kept": rounds.kept_text(), "failed": sum(r[v] is None for r in rounds.kept),
                       "placement": rounds.placement()}
        out[threads] = cell
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--lib")
    p.add_argument("--threads", default="2,16,64")
    p.add_argument("--variants", default="none,glibc,futex,rwsem")
    p.add_argument("--define", action="append", default=[], metavar="NAME=BASE[:ENV=VAL...]")
    p.add_argument("--baseline", default="none",
                   help="the variant every speed is against (default none: no LD_PRELOAD); another, "
                        "e.g. one --define'd from an older build, gives an A/B in the same rounds")
    p.add_argument("--total", type=int, default=2_000_000, help="lock pairs in all, split over the threads")
    p.add_argument("--repeat", type=int, default=lockswap_stats.runs_needed(), help="steady rounds to keep")
    p.add_argument("--max-rounds", type=int)
    add_mode_option(p)
    add_steady_option(p)
    p.add_argument("--json", help="also write the results here")
    a = p.parse_args()
    defs = builtin_defs()
    for d in a.define:
        name, base, env = parse_define(p, d)
        defs[name] = (base, env)
    variants = baseline_first(csv_list(a.variants), a.baseline, also="none")
    for v in variants:
        if v not in defs:
            p.error(f"unknown variant {v} (known: {', '.join(defs)}; add more with --define)")
    lib = os.path.abspath(a.lib or os.path.join(a.build, "preload", "liblockswap.so"))
    probe = probe_binary(a.build)
    check_mode_option(p, a, probe)
    env_line = env_summary(probe)
    res = measure(lib, probe, defs, variants, csv_list(a.threads, int), a.total, a.repeat,
                  a.max_rounds or 2 * a.repeat, reference=a.baseline, mode=a.placement, strict=a.strict_steady)
    print(env_line)
    print(host_summary())
    against = "none (no LD_PRELOAD)" if a.baseline == "none" else a.baseline
    print(f"sysbench mutex: one mutex, {a.total} lock pairs in all, --mutex-loops={LOOPS}; speed vs {against} "
          f"= time ratio, >1 faster, sign-test 95% interval")
    for t, cell in res.items():
        for v, r in cell.items():
            print(f"  {t:>3} threads {v:<14} {r['seconds'] or 0:.4f} s  "
                  f"{'reference' if v == a.baseline else r['text']}  rounds {r['kept']} {r['placement'] or ''}")
    if any(steadiness.is_unsteady(r["word"]) for c in res.values() for r in c.values()):
        print(steadiness.note("--repeat"))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"env": env_line, "total": a.total, "cells": res}, f, indent=1)
    return 1 if any(r["failed"] for c in res.values() for r in c.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
