#!/usr/bin/env python3
"""examples/bench/speedcheck.py — the speed regression check behind
scripts/speedcheck.sh: the key ratios of every variant against `none` (no
LD_PRELOAD), each with its sign-test 95% interval and verdict, beside the
committed reference (examples/bench/speed_reference.json), flagging changes
beyond noise. Method: docs/measuring.md.

Parts (--parts, default all):
  sysbench  `sysbench mutex`, one mutex, 2M lock pairs, at 2/16/64 threads
            (sysbench_mutex.py): none glibc futex rwsem
  rwlock    run_matrix.py: rwlock_bench at 50% and 90% reads x 2/16/64
            threads x CS load 1: none glibc futex rwsem percid
  sem       sem_bench pingpong-threads: none glibc futex (rwsem has no
            semaphore)
  instr     instructions per idle lock+unlock pair (fastpath_callgrind.sh,
            deterministic): mutex rdlock wrlock sem x none glibc futex rwsem

A timed ratio is flagged CHANGED when the reference's ratio lies outside
today's interval (a verdict needs at least 6 steady rounds); an instruction
count when it differs from the reference by more than half an instruction.
The reference keeps one set of timed ratios per placement mode (a moving VM's
fast or slow core-to-core round trip, lockswap_stats.placement_mode): each
cell is compared with the reference of the mode most of its kept rounds ran
in, and --write-reference writes each cell into its own mode.
An A/B of two builds of the library: --define NAME=BASE:LD_PRELOAD=PATH adds
a semaphore row NAME (LOCKSWAP_SEM=BASE under the library at PATH) to the
same interleaved rounds, compared with none like every row and with BASE
(this build) directly; e.g. --parts sem --repeat 12 --define
futex-old=futex:LD_PRELOAD=/tmp/old/build/preload/liblockswap.so.
Exit status: 0, 1 when a run failed, 3 with --fail-on-change and a change.
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import time

from bench_common import (ROOT, Rounds, clean_env, env_summary, lockswap_stats, parse_define, probe_binary,
                          run_child, tagged_columns, tagged_family_variants)
import sysbench_mutex

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.join(HERE, "speed_reference.json")
PARTS = ("sysbench", "rwlock", "sem", "instr")
THREADS = (2, 16, 64)
# The variants measured, per family: none, the `control` column (glibc) and
# the family's variant in each column tagged `speedcheck` in
# preload/config/variant_columns.def (futex, rwsem, percid-rseq: mutex futex rwsem,
# rwlock futex rwsem percid, sem futex). Family variant names, not column
# names: the reference file's keys are these.
_CONTROL = list(tagged_columns("control"))


def _family(setting):
    return ["none"] + _CONTROL + [v for v in tagged_family_variants("speedcheck", setting) if v not in _CONTROL]


MUTEX_VARIANTS = _family("LOCKSWAP_MUTEX")
RWLOCK_VARIANTS = _family("LOCKSWAP_RWLOCK")
SEM_VARIANTS = _family("LOCKSWAP_SEM")
INSTR_OPS = ["mutex", "rdlock", "wrlock", "sem"]
INSTR_TOLERANCE = 0.5  # callgrind counts are exact; this only absorbs the per-pair division's rounding


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--parts", default=",".join(PARTS), help="comma list of %(default)s")
    p.add_argument("--quick", action="store_true",
                   help="2 rounds, shorter runs: checks that everything runs; too few rounds for verdicts")
    p.add_argument("--repeat", type=int, help="steady rounds to keep per cell (default 6)")
    p.add_argument("--reference", default=REFERENCE, help="reference file (default %(default)s)")
    p.add_argument("--write-reference", action="store_true", help="write this run's results as the reference")
    p.add_argument("--fail-on-change", action="store_true", help="exit 3 when something changed beyond noise")
    p.add_argument("--out", help="working directory (default BUILD/speedcheck)")
    p.add_argument("--define", action="append", default=[], metavar="NAME=BASE[:ENV=VAL...]",
                   help="sem part only: an extra row NAME, LOCKSWAP_SEM=BASE with the LOCKSWAP_ variables or "
                        "LD_PRELOAD (another build of the library) given, in the same rounds; also compared with "
                        "BASE directly (never written to the reference)")
    p.add_argument("--print-variants", action="store_true",
                   help="print the variants of each family this check measures, and exit")
    a = p.parse_args()
    if a.print_variants:
        for family, variants in (("mutex", MUTEX_VARIANTS), ("rwlock", RWLOCK_VARIANTS), ("sem", SEM_VARIANTS)):
            print(f"{family}: {','.join(variants)}")
        sys.exit(0)
    a.parts = [x for x in a.parts.split(",") if x]
    for x in a.parts:
        if x not in PARTS:
            p.error(f"unknown part {x} (known: {', '.join(PARTS)})")
    a.sem_defs = {}
    for d in a.define:
        name, base, env = parse_define(p, d)
        if name in SEM_VARIANTS:
            p.error(f"--define {d}: {name} is a row already")
        a.sem_defs[name] = (base, env)
    if a.sem_defs and "sem" not in a.parts:
        p.error("--define adds semaphore rows: --parts must include sem")
    if a.sem_defs and a.write_reference:
        p.error("--define rows are not written to the reference: leave out --write-reference")
    a.repeat = a.repeat or (2 if a.quick else lockswap_stats.runs_needed())
    a.max_rounds = 2 * a.repeat
    a.lib = os.path.join(a.build, "preload", "liblockswap.so")
    a.probe = probe_binary(a.build)
    a.out = a.out or os.path.join(a.build, "speedcheck")
    os.makedirs(a.out, exist_ok=True)
    return a


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def timed_entry(speed, lo, hi, word, kept, placement):
    return {"speed": speed, "lo": lo, "hi": hi, "word": word, "kept": kept, "placement": placement}


def part_sysbench(a):
    total = 200_000 if a.quick else 2_000_000
    res = sysbench_mutex.measure(a.lib, a.probe, sysbench_mutex.builtin_defs(), MUTEX_VARIANTS, THREADS, total,
                                 a.repeat, a.max_rounds)
    return {f"sysbench mutex t{t} {v}": timed_entry(r["speed"], r["lo"], r["hi"], r["word"], r["kept"], r["placement"])
            for t, cell in res.items() for v, r in cell.items() if v != "none"}


def part_rwlock(a):
    out = os.path.join(a.out, "matrix")
    cmd = [sys.executable, os.path.join(HERE, "run_matrix.py"), "--build", a.build, "--out", out, "--no-plot",
           "--no-mutex", "--threads", ",".join(map(str, THREADS)), "--loads", "1", "--reads", "50,90",
           "--variants", ",".join(RWLOCK_VARIANTS), "--duration", "0.1" if a.quick else "0.2",
           "--repeat", str(a.repeat), "--max-rounds", str(a.max_rounds)]
    log("  " + " ".join(cmd[1:]))
    with open(os.path.join(a.out, "matrix.log"), "w") as f:
        rc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=f).returncode
    with open(os.path.join(out, "results.json")) as f:
        cells = json.load(f)["cells"]
    res = {f"rwlock r{c['read_pct']:g} t{c['threads']} {c['variant']}":
           timed_entry(c["speed"], c["lo"], c["hi"], c["verdict"], f"{c['rounds_kept']}/{c['rounds_run']}",
                       c.get("placement"))
           for c in cells if c["variant"] != "none"}
    return res, rc


def part_sem(a):
    bench = os.path.join(a.build, "examples", "bench", "sem_bench")
    duration = "0.1" if a.quick else "0.2"

    variants = SEM_VARIANTS + list(a.sem_defs)

    def one(v):
        env = clean_env()
        if v in a.sem_defs:
            base, extra = a.sem_defs[v]
            env.update(LD_PRELOAD=a.lib, LOCKSWAP_SEM=base)
            env.update(extra)
        elif v != "none":
            env.update(LD_PRELOAD=a.lib, LOCKSWAP_SEM=v)
        r = run_child([bench, "--mode", "pingpong-threads", "--duration", duration, "--label", v], env,
                      "lockswap-sem-bench", 60)
        log(f"  sem pingpong {v}: {r.get('kops', r['status'])} kops/s")
        return float(r["kops"]) if r["status"] == "ok" else None

    rounds = Rounds(variants).run(one, a.probe, a.repeat, a.max_rounds)
    res = {}
    for v in variants[1:]:
        vd = rounds.verdict(lambda x: x, v, "none", higher_is_better=True)
        res[f"sem pingpong {v}"] = timed_entry(vd.speed, vd.lo, vd.hi, vd.word, rounds.kept_text(),
                                               rounds.placement())
    # The A/B itself: this build's BASE against the defined row, per round.
    for name, (base, _) in a.sem_defs.items():
        if base in variants:
            vd = rounds.verdict(lambda x: x, base, name, higher_is_better=True)
            res[f"sem pingpong {base} vs {name}"] = timed_entry(vd.speed, vd.lo, vd.hi, vd.word, rounds.kept_text(),
                                                                rounds.placement())
    failed = any(r[v] is None for r in rounds.kept for v in variants)
    return res, failed


def part_instr(a):
    out = os.path.join(a.out, "fastpath")
    # Not percid: under valgrind there is no rseq, and its fallback's count
    # varies from run to run.
    variants = MUTEX_VARIANTS
    cmd = ["bash", os.path.join(HERE, "fastpath_callgrind.sh"), "--build", a.build, "--out", out,
           "--variants", ",".join(variants), "--ops", ",".join(INSTR_OPS)]
    with open(os.path.join(a.out, "fastpath.log"), "w") as f:
        rc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=f).returncode
    res = {}
    with open(os.path.join(out, "fastpath.csv")) as f:
        for row in csv.DictReader(f):
            try:
                res[f"instr {row['op']} {row['variant']}"] = {"instr": float(row["instr_per_pair"])}
            except ValueError:  # n/a: no such variant for that lock
                pass
    return res, rc


# The reference file: {"instr": {key: entry}, "modes": {mode: {"env", "date",
# "results": {key: entry}}}, "parts", "quick"}; timed entries live under the
# placement mode they were measured in. A file of the older one-mode shape
# ("results" and "env" at the top) reads as its instruction counts plus the
# timed entries of its env line's mode.
def load_reference(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        ref = json.load(f)
    if "results" not in ref:
        return ref
    mode = run_mode(ref.get("env"))
    return {"instr": {k: e for k, e in ref["results"].items() if "instr" in e},
            "modes": {mode: {"env": ref.get("env"), "date": ref.get("date"),
                             "results": {k: e for k, e in ref["results"].items() if "instr" not in e}}},
            "parts": ref.get("parts", []), "quick": ref.get("quick", False)}


def run_mode(env_line):
    """The placement mode of an env: line's c2c_ns (slow when it has none)."""
    return lockswap_stats.placement_mode(lockswap_stats.c2c_in(env_line)) or "slow"


def entry_mode(entry, env_line):
    """The mode a timed entry is compared in: its kept rounds' mode, else the run's."""
    return entry.get("placement") or run_mode(env_line)


def reference_entry(ref, key, entry, env_line):
    if ref is None:
        return None
    if "instr" in entry:
        return ref.get("instr", {}).get(key)
    return ref.get("modes", {}).get(entry_mode(entry, env_line), {}).get("results", {}).get(key)


def flag(entry, ref):
    """'' (consistent), 'CHANGED', or 'new' (no reference)."""
    if ref is None:
        return "new"
    if "instr" in entry:
        return "CHANGED" if abs(entry["instr"] - ref["instr"]) > INSTR_TOLERANCE else ""
    if entry["lo"] is None or entry["word"] == "not enough runs" or ref.get("speed") is None:
        return ""
    return "CHANGED" if not entry["lo"] <= ref["speed"] <= entry["hi"] else ""


def describe(entry):
    if "instr" in entry:
        return f"{entry['instr']:8.2f} instructions/pair"
    if entry["speed"] is None:
        return "no steady rounds"
    return (f"{entry['speed']:.3f} [{entry['lo']:.3f}, {entry['hi']:.3f}] {entry['word']} "
            f"(rounds {entry['kept']}, {entry.get('placement') or '-'})")


def reference_text(ref):
    if ref is None:
        return "-"
    return f"{ref['instr']:.2f}" if "instr" in ref else f"{ref['speed']:.3f}" if ref.get("speed") else "-"


def report(results, ref, env_line, elapsed):
    print(f"speedcheck  {env_line}")
    for mode, r in sorted((ref or {}).get("modes", {}).items()):
        print(f"reference   {mode:<4} {r.get('env', '?')}  ({r.get('date', '?')})")
        if env_field(r.get("env"), "cpus") != env_field(env_line, "cpus"):
            print("note: that reference comes from a machine with another CPU count: timed flags compare "
                  "different machines; write a reference here first (--write-reference)")
    print("speed = how many times faster than none (no LD_PRELOAD), median of per-round ratios "
          "[sign-test 95% interval]; rounds = steady/run, placement mode (fast: c2c < "
          f"{lockswap_stats.FAST_C2C_NS} ns); ref = the reference of that mode")
    changes, unreferenced = 0, {}
    for key, entry in results.items():
        r = reference_entry(ref, key, entry, env_line)
        f = flag(entry, r)
        changes += f == "CHANGED"
        if r is None and "instr" not in entry:
            mode = entry_mode(entry, env_line)
            unreferenced[mode] = unreferenced.get(mode, 0) + 1
        print(f"  {key:<28} {describe(entry):<76} ref {reference_text(r):>7}  {f}")
    for mode, n in sorted(unreferenced.items()):
        print(f"{n} timed line(s) ran in the {mode} placement mode, for which the reference has no value: "
              "nothing to compare (--write-reference in that mode records them)")
    print(f"{changes} change(s) beyond noise against the reference; wall time {elapsed:.0f} s")
    return changes


def write_reference(a, old, results, env_line):
    """This run's entries replace the reference's, each timed one in its own
    placement mode; entries of parts or modes not run stay."""
    ref = old or {"instr": {}, "modes": {}}
    date = time.strftime("%Y-%m-%d")
    for key, entry in results.items():
        if "instr" in entry:
            ref.setdefault("instr", {})[key] = entry
            continue
        mode = ref.setdefault("modes", {}).setdefault(entry_mode(entry, env_line), {"results": {}})
        mode["results"][key] = entry
        mode.update(env=env_line, date=date)
    ref["parts"] = sorted(set(ref.get("parts", [])) | set(a.parts))
    ref["quick"] = a.quick
    with open(a.reference, "w") as f:
        json.dump(ref, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"speedcheck: wrote {a.reference} (parts {','.join(ref['parts'])})")


def env_field(line, key):
    for word in (line or "").split():
        if word.startswith(key + "="):
            return word.split("=", 1)[1]
    return None


def main():
    a = parse_args()
    t0 = time.time()
    env_line = env_summary(a.probe)
    log(f"speedcheck: {env_line}; parts {','.join(a.parts)}; {a.repeat} steady rounds per cell")
    results, failed = {}, False
    if "sysbench" in a.parts:
        log("speedcheck: sysbench mutex")
        r = part_sysbench(a)
        results.update(r)
        failed |= any(e["speed"] is None for e in r.values())
    if "rwlock" in a.parts:
        log("speedcheck: rwlock matrix (run_matrix.py)")
        r, rc = part_rwlock(a)
        results.update(r)
        failed |= rc != 0
    if "sem" in a.parts:
        log("speedcheck: semaphore ping-pong")
        r, bad = part_sem(a)
        results.update(r)
        failed |= bad
    if "instr" in a.parts:
        log("speedcheck: instructions per idle pair (callgrind)")
        r, rc = part_instr(a)
        results.update(r)
        failed |= rc != 0
    ref = load_reference(a.reference)
    changes = report(results, ref, env_line, time.time() - t0)
    if a.write_reference:
        write_reference(a, ref, results, env_line)
    if failed:
        log("speedcheck: some runs failed (see the logs in " + a.out + ")")
        return 1
    return 3 if a.fail_on_change and changes else 0


if __name__ == "__main__":
    sys.exit(main())
