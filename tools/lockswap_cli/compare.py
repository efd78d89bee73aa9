"""`lockswap compare`: a command as it is and under each variant, in rotated rounds."""

import argparse
import csv
import json
import os
import re
import resource
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from . import doctor, forest, reach, steady
from . import stats as ls
from .symbolize import Symbolizer
from .common import PROG, table, warn


REFERENCE = "none"   # the command as it is: no LD_PRELOAD, no LOCKSWAP_* variable

COMPARE_EPILOG = f"""\
Rows: `none` (COMMAND run as it is: no LD_PRELOAD, no LOCKSWAP_* variable; the
reference unless --baseline names another row), `glibc` (through lockswap with
glibc's own locks: what the interposition alone costs), the listed variants and
a row lwlock=V or wtlock=V per server family value (glibc's locks, PostgreSQL's
LWLocks or WiredTiger's rwlocks on V: `{PROG} --variant glibc --lwlock V`), and
one row per --select LABEL=RULES (glibc everywhere but the locks RULES name:
`{PROG} --variant glibc --select RULES`, LOCKSWAP_SELECT, docs/select.md); none
and glibc are added when not listed (--no-glibc leaves glibc out).

Rounds: each repetition is a round that runs every row once, in the listed order
rotated by the round's number, so drift (a warming cache, a noisy neighbour)
does not always hit the same row. Before and after each round the core-to-core
probe (`lockswap-probe c2c`, next to the lockswap command; --probe PATH) is
read; a round whose two readings differ by more than lockswap_stats.PROBE_TOLERANCE
(the host moved the vCPUs) is dropped, unless --keep-unsteady, and run again,
until --repeat rounds are kept or --max-rounds (2 x --repeat) ran; the table
says how many rounds were kept of how many run. Without the probe every round
counts. When fewer rounds than asked are steady and too few for a verdict, a
row's figure is over every completed round and its verdict reads "host
unsteady (k of n rounds steady)": an indication, never a call (the note under
the table says how far to trust it); --strict-steady shows the steady rounds
only, as before.

Verdicts: per kept round the ratio row/reference; a row's ratio is the median of
those, with the sign test's distribution-free confidence interval (--level,
95% by default), stated as hyperfine does: "rwsem is 1.23 [1.19, 1.27] times
faster than none". A difference is called only when the interval excludes 1:
faster, slower, no significant difference, or "not enough runs" when there are
too few rounds for the level at all (fewer than 6 for 95%: the default --repeat).

Every row runs in an environment computed once by the lockswap command
(`{PROG} [--lib L] <variant options> [--set ...] -- env -0`), so every row,
none included, starts COMMAND the same way. LOCKSWAP_* variables of the calling
environment are not passed on: settings come from --set only. Measured runs
never run the profiler: --stats gives them counts-only statistics (contract:
LOCKSWAP_STATS=counts, files in --stats-dir); --profile-run adds one separate
run per row under the profiler, labelled "profile", never in the table, and
prints where its dump is for `{PROG} report`.

Variants: the names of `{PROG} --variant` (glibc, futex, rwsem, rwsem-rspin,
lockref, percid), percid-ALLOCATOR (--variant percid --cid ALLOCATOR), or
MUTEX/RWLOCK (--mutex MUTEX --rwlock RWLOCK).

The metric is the command's wall time in seconds (--time, the default), or with
--metric REGEX the first number in the first group of the first match of REGEX
in the command's stdout+stderr (the whole match if the regex has no group).
Direction: --time is lower-is-better; --metric defaults to higher-is-better
(throughput) -- pass --lower-is-better for latencies.

A run that exits non-zero, times out or prints no metric is reported with its
exit status and the tail of its output, and compare exits 1 at the end.

examples:
  {PROG} compare --variants futex,rwsem --metric 'events per second: *([0-9.]+)' \\
      -- sysbench mutex --threads=16 run
  {PROG} compare --variants rwsem,rwsem-rspin --time --csv t.csv --png t.png -- ./app
  {PROG} compare --variants rwsem --set RWSEM_SPIN=0 --baseline glibc --profile-run -- ./bench
  {PROG} compare --variants rwsem --select tc=mutex=rwsem@site:mariadbd+0x9fd828 \\
      --select 'tc-func=mutex=rwsem@func:tc_acquire_table(THD*, TDC_element*)' --baseline glibc -- ./bench
"""


def compare_parser(make=argparse.ArgumentParser):
    """The options of `lockswap compare`; MAKE builds the parser (main.py: a subparser)."""
    p = make(
        prog=f"{PROG} compare", formatter_class=argparse.RawDescriptionHelpFormatter,
        usage=f"{PROG} compare [options] -- COMMAND [ARGS...]",
        description="Run a command as it is and under several lock variants, in interleaved "
                    "rounds with rotated order, and state per variant how many times faster or "
                    "slower it is, with a confidence interval, or that the runs cannot tell.",
        epilog=COMPARE_EPILOG)
    p.add_argument("--variants", metavar="V1,V2,...",
                   help="comma-separated variants (default: the library's matrix columns tagged "
                        f"{DEFAULT_TAG}, glibc,futex,rwsem as shipped; none is always a row)")
    p.add_argument("--select", action="append", default=[], metavar="LABEL=RULES",
                   help="a row LABEL: glibc, and LOCKSWAP_SELECT=RULES (FAMILY=VARIANT@MATCHER;...) for the "
                        "locks they name (repeatable)")
    p.add_argument("--baseline", default=REFERENCE, metavar="V",
                   help=f"the reference row of the ratios (default: {REFERENCE}, the command without lockswap)")
    p.add_argument("--repeat", type=int, metavar="N",
                   help=f"rounds (default {ls.runs_needed()}: the fewest that can reach 95%%)")
    p.add_argument("--max-rounds", type=int, metavar="N",
                   help="rounds to run at most while dropped ones are run again (default 2 x --repeat)")
    p.add_argument("--level", type=float, default=ls.DEFAULT_LEVEL, metavar="P",
                   help="confidence level of the intervals (default 0.95)")
    m = p.add_mutually_exclusive_group()
    m.add_argument("--metric", metavar="REGEX", help="extract the metric from the output")
    m.add_argument("--time", action="store_true", help="measure wall time (the default)")
    d = p.add_mutually_exclusive_group()
    d.add_argument("--higher-is-better", dest="higher", action="store_true", default=None)
    d.add_argument("--lower-is-better", dest="higher", action="store_false")
    p.add_argument("--no-glibc", action="store_true", help="do not add the glibc row")
    p.add_argument("--probe", metavar="PATH",
                   help="the core-to-core probe (default: lockswap-probe next to the lockswap command)")
    p.add_argument("--keep-unsteady", action="store_true",
                   help="keep rounds whose before/after probes disagree (default: dropped)")
    p.add_argument("--strict-steady", action="store_true",
                   help="figures from steady rounds only, even when too few are steady (default: then over "
                        "every completed round, marked 'host unsteady (k of n rounds steady)')")
    p.add_argument("--stats", action="store_true",
                   help="counts-only statistics of every measured run (never the profiler), in --stats-dir")
    p.add_argument("--profile-run", action="store_true",
                   help="one extra profiled run per row, labelled profile, not in the table")
    p.add_argument("--stats-dir", metavar="DIR", help="where --stats and --profile-run write (default: a new "
                                                      "directory under $TMPDIR)")
    p.add_argument("--csv", metavar="FILE", help="write every run and the summary as CSV")
    p.add_argument("--png", metavar="FILE", help="a forest plot: each row's speed against the reference with "
                                                 "its interval, on a log axis")
    p.add_argument("--html", metavar="FILE", help="one self-contained page: environment, plot and table")
    p.add_argument("--audit", metavar="FILE", help="the run's audit record (JSON: host before and after, the "
                                                   "command, lockswap's version and settings); default: "
                                                   "CSV.audit.json beside --csv")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="a LOCKSWAP_* setting for every run (repeatable), as `lockswap --set`")
    p.add_argument("--lib", metavar="PATH", help="liblockswap.so to use (passed to the wrapper)")
    p.add_argument("--timeout", type=float, metavar="S", help="kill a run after S seconds (a failure)")
    p.add_argument("--tail", type=int, default=15, metavar="LINES",
                   help="output lines shown for a failed run (default 15)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    return p


# Families only some programs have (PostgreSQL's LWLocks, WiredTiger's rwlocks): a row
# FAMILY=V is glibc's locks with that family on V.
SERVER_FAMILIES = ("lwlock", "wtlock")


def variant_options(v):
    """A MUTEX/RWLOCK pair, FAMILY=V of a server family, or a column of the library's matrix
    (the wrapper looks it up)."""
    family, eq, value = v.partition("=")
    if eq and family in SERVER_FAMILIES:
        return ["--variant", "glibc", f"--{family}", value]
    if "/" in v:
        mutex, rwlock = v.split("/", 1)
        return ["--mutex", mutex, "--rwlock", rwlock]
    return ["--variant", v]


def number_in(text):
    m = re.search(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?", text.replace(",", ""))
    return float(m.group(0)) if m else None


def extract_metric(regex, output):
    m = regex.search(output)
    if not m:
        return None
    return number_in(m.group(1) if regex.groups else m.group(0))


class Run:
    def __init__(self, index, round_no, position, variant):
        self.index, self.round, self.position, self.variant = index, round_no, position, variant
        self.rc = None
        self.value = None
        self.csw = None      # (voluntary, involuntary) context switches of the command and its waited children
        self.wall_s = None
        self.error = None
        self.output = ""

    @property
    def ok(self):
        return self.error is None


class Round:
    """A round's runs; its probes and verdict (probe_before, probe_after, steady,
    kept) are its slot's, set once the loop moved past it."""

    def __init__(self, slot):
        self.slot = slot
        self.number = slot.number
        self.runs = []

    def __getattr__(self, name):  # only for what the Round itself lacks
        return getattr(self.slot, name)

    def values(self):
        return {r.variant: r.value for r in self.runs if r.ok}


def execute(run, argv, env, args, regex):
    start = time.monotonic()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as e:
        run.error, run.rc = f"cannot start: {e.strerror}", 127
        return
    try:
        out, _ = proc.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        run.error = f"timed out after {args.timeout:g}s"
    except KeyboardInterrupt:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    run.wall_s = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)   # runs are sequential: the delta is this run's
    run.csw = (after.ru_nvcsw - before.ru_nvcsw, after.ru_nivcsw - before.ru_nivcsw)
    run.rc = proc.returncode
    run.output = out.decode("utf-8", errors="replace")
    if run.error:
        return
    if run.rc != 0:
        run.error = f"exit status {run.rc}" if run.rc > 0 else f"killed by signal {-run.rc}"
        return
    run.value = run.wall_s if regex is None else extract_metric(regex, run.output)
    if run.value is None:
        run.error = f"metric /{regex.pattern}/ not found in the output"


def clean_environ(keep=()):
    """The caller's environment without LD_PRELOAD and LOCKSWAP_* but KEEP: what `none` runs
    in, and (keeping the wrapper's own LOCKSWAP_LIB) what the wrapper starts from."""
    return {k: v for k, v in os.environ.items()
            if k != "LD_PRELOAD" and (not k.startswith("LOCKSWAP_") or k in keep)}


def file_label(v):
    return re.sub(r"[^A-Za-z0-9_.+-]", "+", v)


class Environments:
    """Each row's environment, computed once by the lockswap command (which also checks the
    settings: a bad one stops compare here, before any run)."""

    def __init__(self, wrapper, args, stats_dir, selects):
        self.wrapper, self.args, self.stats_dir, self.selects = wrapper, args, stats_dir, selects
        self.lib = ["--lib", args.lib] if args.lib else []
        self.sets = [x for s in args.set for x in ("--set", s)]

    def measured(self, v):
        if v == REFERENCE:
            return clean_environ()
        if not self.args.stats:
            return self.capture(v, [])
        return self.capture(v, ["--stats"], os.path.join(self.stats_dir, f"{file_label(v)}.%p"))

    def profiled(self, v):
        return self.capture(v, ["--profile"], os.path.join(self.stats_dir, f"{file_label(v)}.profile.%p"))

    def row_options(self, v):
        """The wrapper's options of row V. A --select row is glibc plus its rules, given after
        --set so that its LOCKSWAP_SELECT wins over one for every row."""
        if v not in self.selects:
            return [*variant_options(v), *self.sets]
        return [*variant_options("glibc"), *self.sets, "--select", self.selects[v]]

    def capture(self, v, extra, stats_file=None):
        """The environment COMMAND would get: the wrapper checks the row's settings (its
        pre-flight) and prints LD_PRELOAD and the LOCKSWAP_* variables (`--print-env`); the
        row's statistics file is put in here, so only the measured command writes to it."""
        argv = [self.wrapper, *self.lib, *self.row_options(v), *extra, "--print-env"]
        p = subprocess.run(argv, capture_output=True, env=clean_environ(keep=("LOCKSWAP_LIB",)))
        if p.returncode != 0:
            sys.stderr.write(p.stderr.decode("utf-8", errors="replace"))
            warn(f"compare: row {v} ({self.describe(v)}): the settings were refused; nothing was run")
            raise SystemExit(2)
        env = clean_environ()
        env.update(item.split("=", 1) for item in os.fsdecode(p.stdout).split("\0") if "=" in item)
        if stats_file:
            env["LOCKSWAP_STATS_FILE"] = stats_file
        return env

    def describe(self, v):
        """Row V as the wrapper's options, for the header and errors."""
        return shlex.join([PROG, *self.row_options(v)])


def probe_path(args, wrapper):
    if args.probe is not None:
        return args.probe
    return os.path.join(os.path.dirname(os.path.realpath(wrapper)), "lockswap-probe")


def loadavg_text():
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


# The default rows: the matrix columns the library tags so (preload/config/variant_columns.def, the
# one list of them), read from `lockswap --list`, whose column entries end in `[tags: a,b]`.
DEFAULT_TAG = "compare"
COLUMN_LINE = re.compile(r"^  (\S+) LOCKSWAP_[A-Z_]+=")
TAGS_LINE = re.compile(r"\[tags: ([^\]]*)\]\s*$")


def tagged_columns(wrapper, lib, tag):
    """The names of the library's matrix columns that carry TAG, in the library's order."""
    out = subprocess.run([wrapper, *lib, "--list"], capture_output=True, text=True, check=False).stdout
    names, name = [], None
    for line in out.splitlines():
        column = COLUMN_LINE.match(line)
        if column:
            name = column.group(1)
            continue
        tags = TAGS_LINE.search(line)
        if tags and name:
            if tag in tags.group(1).split(","):
                names.append(name)
            name = None
    return names


def plan_variants(args, parser):
    """The rows in order, and {LABEL: RULES} of the --select rows among them."""
    listed = [v for v in (x.strip() for x in args.variants.split(",")) if v]
    if len(set(listed)) != len(listed):
        parser.error(f"--variants lists a variant twice: {args.variants}")
    rows = [REFERENCE] + ([] if args.no_glibc or "glibc" in listed else ["glibc"])
    rows += [v for v in listed if v != REFERENCE]
    if args.no_glibc and "glibc" in rows:
        rows.remove("glibc")
    selects = plan_selects(args.select, parser, taken=set(listed) | {REFERENCE, "glibc"})
    rows += list(selects)
    if args.baseline not in rows:
        parser.error(f"--baseline {args.baseline} is not one of the rows: {', '.join(rows)}")
    return rows, selects


SELECT_LABEL = re.compile(r"[A-Za-z0-9_.-]+")


def plan_selects(specs, parser, taken):
    """--select LABEL=RULES... -> {LABEL: RULES}. The label names files and table rows: a plain
    name no other row has. The rules are the library's to check (Environments, before any run)."""
    selects = {}
    for spec in specs:
        label, eq, rules = spec.partition("=")
        if not eq or not SELECT_LABEL.fullmatch(label):
            parser.error(f"--select {spec!r}: expected LABEL=RULES, LABEL made of letters, digits, _ . -")
        if not rules.strip():
            parser.error(f"--select {spec!r}: no rules after {label}=")
        if label in taken or label in selects:
            parser.error(f"--select {label}: already the name of a row (none, glibc, --variants, --select)")
        selects[label] = rules
    return selects


def summarize(ls, rounds, variants, baseline, higher, level, wanted=None, strict=False):
    """A row per variant. Its figures are over the kept rounds, or, when fewer than asked are
    steady and too few for a verdict (steady.row_verdict), over every completed round."""
    kept = [rd.values() for rd in rounds if rd.kept]
    every = [rd.values() for rd in rounds]
    basis = "steady" if strict or steady.enough_steady(len(kept), len(every), wanted, level) else "all"
    rows = []
    for v in variants:
        runs = [r for rd in rounds for r in rd.runs if r.variant == v]
        row = {"variant": v, "failed": sum(1 for r in runs if not r.ok), "basis": "steady"}
        if v == baseline:
            row["verdict"] = "reference"
            row["basis"] = basis
        else:
            row["result"], row["basis"] = steady.row_verdict(kept, every, v, baseline, higher, level, wanted, strict)
            row["verdict"] = row["result"].word
        over = every if row["basis"] == "all" else kept
        vals = sorted(values[v] for values in over if v in values)
        row["n"] = len(vals)
        if vals:
            row.update(median=statistics.median(vals), min=vals[0], max=vals[-1])
        csw = [r.csw for rd in rounds for r in rd.runs if r.variant == v and r.csw]
        if csw:
            row["csw"] = (statistics.median(c[0] for c in csw), statistics.median(c[1] for c in csw))
        rows.append(row)
    return rows


def csw_lines(rows):
    """The measured command's context switches per run (getrusage of the children compare waited
    for): many involuntary ones mean it was preempted (other work, or more threads than CPUs)."""
    have = [r for r in rows if "csw" in r]
    if not have:
        return []
    return ["", "context switches per run (median over every run; voluntary / involuntary; the command and "
                "the children it waited for):",
            "  " + "; ".join(f"{r['variant']} {r['csw'][0]:.0f} / {r['csw'][1]:.0f}" for r in have)]


def fmt_val(x):
    if x is None:
        return "-"
    return f"{x:.4g}" if abs(x) < 1e5 else f"{x:.0f}"


def fmt_ratio(x):
    return "-" if x is None else f"{x:.3f}"


REACH_SYMBOL_BUDGET_S = 20.0   # addr2line per row, for the spin-delay sites of its dumps


def row_reach(stats_dir, v, symbolizer=None):
    """The reach (reach.compute) of row V over the counts-only dumps of its measured runs
    (--stats: stats_dir/V.PID; not V.profile.PID), or None when they hold no wait data."""
    if v == REFERENCE or not stats_dir:
        return None
    name = re.compile(re.escape(file_label(v)) + r"\.\d+")
    try:
        files = sorted(os.path.join(stats_dir, f) for f in os.listdir(stats_dir) if name.fullmatch(f))
    except OSError:
        return None
    return reach.of_files(files, symbolizer)


def reach_lines(rows):
    """Under the table: what each measured row's reach is, and the warning where it is low."""
    have = [r for r in rows if r.get("reach")]
    if not have:
        return []
    out = ["", "reach (share of the lock waiting the row's variants swap, from its counts-only dumps; "
               f"docs/reach.md, {PROG} report for the classes): "
           + "; ".join(f"{r['variant']} {reach.cell(r['reach'])}" for r in have)]
    out += [f"  WARNING {r['variant']}: {r['reach']['warning']}" for r in have if r["reach"]["warning"]]
    if any(r["reach"]["column"] == "glibc" for r in have):
        out.append("  n/a: a glibc column; its waits are glibc's, invisible unprivileged")
    return out


def compare_table(rows, baseline, level):
    with_reach = any(r.get("reach") for r in rows)
    head = ["variant", "runs", "median", "min", "max", f"x-vs-{baseline}", f"{level:.0%}.low", f"{level:.0%}.high",
            "failed", "verdict"] + (["reach"] if with_reach else [])
    table_rows = [head]
    for r in rows:
        res = r.get("result")
        speed = (1.0, None, None) if r["variant"] == baseline else (
            (res.speed, res.lo, res.hi) if res else (None, None, None))
        table_rows.append([r["variant"], r["n"], fmt_val(r.get("median")), fmt_val(r.get("min")),
                           fmt_val(r.get("max")), *[fmt_ratio(x) for x in speed], r["failed"] or "",
                           r["verdict"]] + ([reach.cell(r.get("reach"))] if with_reach else []))
    return table(table_rows, right_from=1)


def compare_header(info, args, baseline, level, ls):
    out = [f"{PROG} compare: {shlex.join(info['cmd'])}",
           info["env_line"] or f"env: probe unavailable ({info['probe'] or 'no probe'})",
           info["host_line"],
           f"load average (1/5/15 min): before {info['load_before']}, after {info['load_after']}"]
    total, kept = len(info["rounds"]), sum(1 for rd in info["rounds"] if rd.kept)
    unsteady = sum(1 for rd in info["rounds"] if not rd.steady)
    if not info["probe_ok"]:
        why = ("the probe gave no reading: one CPU?" if os.access(info["probe"] or "", os.X_OK)
               else "probe unavailable")
        out.append(f"rounds: {kept} of {total} kept ({why}: every round counted as steady)")
    elif args.keep_unsteady:
        out.append(f"rounds: {kept} of {total} kept ({unsteady} unsteady kept by --keep-unsteady)")
    else:
        out.append(f"rounds: {kept} of {total} kept" + (
            f" ({unsteady} dropped: the core-to-core probe changed by more than {ls.PROBE_TOLERANCE:g}x "
            "across it, and run again up to --max-rounds; --keep-unsteady keeps them)" if unsteady
            else " (all steady)"))
    ref = f"{baseline} (the command without lockswap)" if baseline == REFERENCE else f"{baseline} (--baseline)"
    out.append(f"metric: {info['metric_name']}, {'higher' if info['higher'] else 'lower'} is better; "
               f"reference: {ref}")
    out.append(f"x-vs-{baseline} = how many times faster than {baseline} (>1 faster): the median of the per-round "
               f"ratios, with its {level:.0%} sign-test interval [low, high]")
    out += [f"select row {label}: {how}" for label, how in info["select_rows"].items()]
    return out


def write_csv(path, rounds, rows, profile_runs, info, baseline):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["record", "variant", "round", "position", "status", "exit_status", "value", "wall_s",
                    "probe_before_ns", "probe_after_ns", "kept", "n", "median", "min", "max", "ratio",
                    "ratio_low", "ratio_high", "verdict", "rounds_kept", "baseline", "metric", "direction",
                    "stats_file", "select", "figure_over", "voluntary_csw", "involuntary_csw", "reach_pct",
                    "reach_algorithm_pct"])
        direction = "higher" if info["higher"] else "lower"
        tail = [baseline, info["metric_name"], direction]
        opt = lambda x: "" if x is None else repr(x)
        rules = lambda v: info["selects"].get(v, "")   # LOCKSWAP_SELECT of a --select row
        for rd in rounds:
            for r in rd.runs:
                w.writerow(["run", r.variant, rd.number, r.position, "ok" if r.ok else r.error,
                            "" if r.rc is None else r.rc, opt(r.value),
                            "" if r.wall_s is None else f"{r.wall_s:.6f}", opt(rd.probe_before),
                            opt(rd.probe_after), int(rd.kept), *[""] * 9, *tail, "", rules(r.variant), "",
                            *(r.csw or ("", ""))])
        kept = sum(1 for rd in rounds if rd.kept)
        for s in rows:
            res = s.get("result")
            ratio = (1.0, None, None) if s["variant"] == baseline else (
                (res.speed, res.lo, res.hi) if res else (None, None, None))
            w.writerow(["summary", s["variant"], "", "", "", "", "", "", "", "", "", s["n"],
                        *[opt(s.get(k)) for k in ("median", "min", "max")], *[opt(x) for x in ratio],
                        s["verdict"], kept, *tail, "", rules(s["variant"]),
                        "every round" if s["basis"] == "all" else "steady rounds", "", "",
                        *[opt(s["reach"][k]) if s.get("reach") else "" for k in ("reach_pct", "reach_algorithm_pct")]])
        for r, dump in profile_runs:
            w.writerow(["profile", r.variant, "", "", "ok" if r.ok else r.error, "" if r.rc is None else r.rc,
                        opt(r.value), "" if r.wall_s is None else f"{r.wall_s:.6f}", *[""] * 11, *tail, dump,
                        rules(r.variant)])


def plot_rows(rows):
    """The table's rows as forest.write_png takes them."""
    out = []
    for s in rows:
        res = s.get("result")
        out.append({"label": "", "variant": s["variant"], "word": s["verdict"],
                    "speed": res.speed if res else None, "lo": res.lo if res else None,
                    "hi": res.hi if res else None})
    return out


def compare_png(path, rows, info, baseline, level):
    cmd = shlex.join(info["cmd"])
    title = f"lockswap compare: {cmd if len(cmd) <= 70 else cmd[:67] + '...'}"
    sub = (f"{info['metric_name']}, {'higher' if info['higher'] else 'lower'} is better; "
           f"rounds {info['kept']} of {info['total']} steady; {info['env_line'] or 'env: probe unavailable'}")
    why = forest.write_png(path, plot_rows(rows), title, baseline, level, sub[:200])
    if why:
        warn(f"compare: PNG {path} skipped: {why}")
        return False
    print(f"{PROG}: compare: wrote {path}", file=sys.stderr)
    return True


def host_line():
    """The doctor's one-line summary of the host checks (governor, turbo, SMT, ...)."""
    try:
        return doctor.summary_line()
    except Exception as e:  # the header must never stop a comparison
        return f"host checks: failed ({type(e).__name__}: {e})"


def write_audit(path, phase, info, args):
    """The audit record (doctor.audit_begin / audit_end): host before the rounds, after, the command."""
    try:
        if phase == "before":
            doctor.audit_begin(path, info["argv"], lib=args.lib or info.get("lib"),
                               settings={"variants": info["variants"], "set": args.set, "select": info["selects"],
                                         "lib": args.lib, "repeat": args.repeat, "max_rounds": args.max_rounds,
                                         "strict_steady": args.strict_steady, "measured_command": info["cmd"]})
        else:
            doctor.audit_end(path)
    except (OSError, ValueError) as e:
        warn(f"compare: audit file {path}: {e}")


def select_notes(rounds, selects):
    """What the library said about a select row's rules in its runs (a rule that matches nothing
    leaves the row plain glibc): each line once."""
    said = {}
    for r in (r for rd in rounds for r in rd.runs if r.variant in selects):
        for line in r.output.splitlines():
            if line.startswith("lockswap: LOCKSWAP_SELECT:"):
                said.setdefault(f"  {r.variant}: {line}", None)
    return ["", "the library on the rules of the select rows:", *said] if said else []


def failure_report(run, tail, label=None):
    lines = run.output.rstrip("\n").splitlines()[-tail:]
    out = [f"FAILED [{run.index}] {run.variant} {label or f'round {run.round}'}: {run.error}"
           + (f" (exit status {run.rc})" if run.rc not in (None, 0) and "exit status" not in run.error else "")]
    out += [f"    | {line}" for line in lines] or ["    (no output)"]
    return out


def run_rounds(ls, variants, envs, cmd, args, regex, probe):
    """The measured rounds (stats.interleaved_rounds): every row once per
    round, order rotated, probes around each; a dropped round is run again until
    --repeat rounds are kept or --max-rounds ran."""
    rounds, index = [], 0
    try:
        for slot in ls.interleaved_rounds(variants, probe, args.repeat, args.max_rounds, args.keep_unsteady):
            total = index + slot.missing * len(variants)
            rd = Round(slot)
            rounds.append(rd)
            for pos, v in enumerate(slot.order, 1):
                index += 1
                run = Run(index, slot.number, pos, v)
                print(f"[{index}/{total}] {v} round {slot.number} ...", end="", file=sys.stderr, flush=True)
                execute(run, cmd, envs[v], args, regex)
                status = fmt_val(run.value) if run.ok else f"FAILED: {run.error}"
                print(f" {status}  ({run.wall_s or 0:.2f}s)", file=sys.stderr, flush=True)
                rd.runs.append(run)
    except KeyboardInterrupt:
        print("\ninterrupted: summary of the completed runs", file=sys.stderr)
        if rounds and rounds[-1].probe_after is None:  # cut short: its finished runs count, unprobed
            rounds[-1].slot.steady = rounds[-1].slot.kept = True
        return rounds, True
    return rounds, False


def profile_runs(variants, env_maker, cmd, args, regex):
    """One run per row under the profiler (none has no library to profile): never in the table."""
    done = []
    for i, v in enumerate(v for v in variants if v != REFERENCE):
        env = env_maker.profiled(v)
        run = Run(i + 1, 0, 0, v)
        print(f"[profile {i + 1}] {v} ...", end="", file=sys.stderr, flush=True)
        execute(run, cmd, env, args, regex)
        print(" done" if run.ok else f" FAILED: {run.error}", file=sys.stderr, flush=True)
        done.append((run, env["LOCKSWAP_STATS_FILE"]))
    return done


def profile_lines(done):
    out = ["", "profile runs (one per row, under the profiler: not timed, not in the table):"]
    for run, dump in done:
        status = "ok" if run.ok else f"FAILED: {run.error}"
        out.append(f"  profile {run.variant}: {status}; {PROG} report {dump.replace('%p', '*')}")
    return out


def cmd_compare(args, argv, wrapper, parser):
    """ARGS parsed from ARGV (the words after `compare`) by PARSER."""
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        parser.error("no command given (put it after --)")
    if not 0.5 <= args.level < 1:
        parser.error("--level must be in [0.5, 1)")
    args.repeat = ls.runs_needed(args.level) if args.repeat is None else args.repeat
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    args.max_rounds = 2 * args.repeat if args.max_rounds is None else args.max_rounds
    if args.max_rounds < args.repeat:
        parser.error("--max-rounds must be at least --repeat")
    if not wrapper:
        parser.error("internal: run through the lockswap command (no --wrapper)")
    regex = None
    if args.metric:
        try:
            regex = re.compile(args.metric, re.M)
        except re.error as e:
            parser.error(f"--metric: bad regular expression: {e}")
    higher = args.higher if args.higher is not None else regex is not None
    if args.variants is None:
        args.variants = ",".join(tagged_columns(wrapper, ["--lib", args.lib] if args.lib else [], DEFAULT_TAG))
        if not args.variants:
            parser.error(f"no --variants given, and the library tags no column {DEFAULT_TAG} (lockswap --list)")
    variants, selects = plan_variants(args, parser)
    stats_dir = None
    if args.stats or args.profile_run:
        stats_dir = args.stats_dir or tempfile.mkdtemp(prefix="lockswap-compare-")
        os.makedirs(stats_dir, exist_ok=True)
    env_maker = Environments(wrapper, args, stats_dir, selects)
    envs = {v: env_maker.measured(v) for v in variants}
    if args.profile_run and len(variants) > 1:
        env_maker.profiled(variants[-1])   # the wrapper knows --profile: checked before any run

    probe = probe_path(args, wrapper)
    info = {"cmd": cmd, "probe": probe, "env_line": ls.probe_summary(probe), "higher": higher,
            "metric_name": f"/{args.metric}/" if regex else "wall time (s)", "load_before": loadavg_text(),
            "selects": selects, "select_rows": {label: env_maker.describe(label) for label in selects},
            "host_line": host_line(), "variants": variants, "argv": [PROG, "compare", *argv]}
    info["probe_ok"] = ls.probe_c2c(probe) is not None
    info["lib"] = next((envs[v]["LD_PRELOAD"] for v in variants if envs[v].get("LD_PRELOAD")), None)
    audit = args.audit or (args.csv + ".audit.json" if args.csv else None)
    if audit:
        write_audit(audit, "before", info, args)
    print(f"{PROG} compare: {len(variants)} rows x {args.repeat} rounds = {len(variants) * args.repeat} runs of: "
          f"{shlex.join(cmd)}" + ("" if info["probe_ok"] else " (probe unavailable)"), file=sys.stderr)
    rounds, interrupted = run_rounds(ls, variants, envs, cmd, args, regex, probe if info["probe_ok"] else None)
    profiled = [] if interrupted or not args.profile_run else profile_runs(variants, env_maker, cmd, args, regex)
    info.update(load_after=loadavg_text(), rounds=rounds, total=len(rounds),
                kept=sum(1 for rd in rounds if rd.kept))

    rows = summarize(ls, rounds, variants, args.baseline, higher, args.level, args.repeat, args.strict_steady)
    if args.stats:
        symbolizer = Symbolizer(REACH_SYMBOL_BUDGET_S)   # shared: the rows' dumps map the same files
        for r in rows:
            r["reach"] = row_reach(stats_dir, r["variant"], symbolizer)
    header = compare_header(info, args, args.baseline, args.level, ls)
    tab = compare_table(rows, args.baseline, args.level)
    out = header + tab + reach_lines(rows)
    out += [""] + [steady.sentence(r["result"], r["variant"], args.baseline) for r in rows if "result" in r]
    notes = [steady.note("--repeat")] if any(r["basis"] == "all" for r in rows) else []
    out += [""] + notes if notes else []
    out += csw_lines(rows)
    out += select_notes(rounds, selects)
    if args.stats:
        out.append(f"counts-only statistics of the measured runs: {stats_dir}/ ({PROG} report {stats_dir}/<row>.*)")
    if profiled:
        out += profile_lines(profiled)
    print("\n".join(out))
    if args.csv:
        write_csv(args.csv, rounds, rows, profiled, info, args.baseline)
        print(f"{PROG}: compare: wrote {args.csv}", file=sys.stderr)
    png = args.png
    if args.html and not png:   # the page embeds the plot: draw it beside the page
        png = os.path.splitext(args.html)[0] + ".png"
    drawn = compare_png(png, rows, info, args.baseline, args.level) if png else False
    if args.html:
        forest.write_html(args.html, f"{PROG} compare: {shlex.join(cmd)}", header[1:3], "\n".join(tab),
                          png if drawn else None, [steady.sentence(r["result"], r["variant"], args.baseline)
                                                   for r in rows if "result" in r] + notes)
        print(f"{PROG}: compare: wrote {args.html}", file=sys.stderr)
    if audit:
        write_audit(audit, "after", info, args)
        print(f"{PROG}: compare: wrote {audit}", file=sys.stderr)
    failed = [r for rd in rounds for r in rd.runs if not r.ok] + [r for r, _ in profiled if not r.ok]
    if failed:
        total = sum(len(rd.runs) for rd in rounds) + len(profiled)
        print(f"\n{len(failed)} of {total} runs failed:")
        for f in failed:
            print("\n".join(failure_report(f, args.tail, "profile run" if f.round == 0 else None)))
    return 1 if failed or interrupted else 0
