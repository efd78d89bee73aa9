"""examples/bench/bench_common.py — small helpers shared by the benchmark drivers
(options, child runs, interleaved rounds). Not a program. The statistics (median,
geomean, verdicts), tables and plots come from the lockswap_cli package in tools/,
found on PYTHONPATH (scripts/lib.sh, or PYTHONPATH=tools when run by hand); they
are re-exported here for the drivers."""
import argparse
import os
import re
import subprocess

from lockswap_cli import stats as lockswap_stats  # the one statistics implementation; contract B
from lockswap_cli import steady as steadiness  # host unsteady: figures over every round
from lockswap_cli.stats import geomean, median  # noqa: F401  (re-exported)
from lockswap_cli.tables import GNUPLOT_COLORS, fmt, gnuplot, gp_quote, md_table  # noqa: F401  (re-exported)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))

NOISY, NOISY_MARK = 1.5, "†"  # max/min over the repeats of a cell above which it is flagged


def csv_list(s, conv=str):
    return [conv(x) for x in s.split(",") if x.strip()]


def spread(xs):
    return (max(xs) / min(xs)) if len(xs) >= 2 and min(xs) > 0 else None


def baseline_first(variants, baseline, also=None):
    """The variants with the baseline run first in every round (and `also`,
    the unpreloaded reference, kept in the table), each once."""
    firsts = [baseline] + ([also] if also and also != baseline else [])
    return firsts + [v for v in variants if v not in firsts]


def driver_parser(doc, holds, bench, out):
    """The options every driver starts with: --build (holding `holds`), --bench (BUILD/examples/bench/`bench`)
    and --out (default BUILD/bench-results/`out`)."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"),
                   help=f"build tree holding {holds} (default: %(default)s)")
    if "preload/" in holds:
        p.add_argument("--lib", help="liblockswap.so (default BUILD/preload/liblockswap.so)")
    p.add_argument("--bench", help=f"{bench} binary (default BUILD/examples/bench/{bench})")
    p.add_argument("--out", help=f"output directory (default BUILD/bench-results{'/' + out if out else ''})")
    return p


def write_report(out_dir, report):
    """The report on stdout and in OUT/results.md."""
    print(report)
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write(report)


def parse_define(p, d):
    """NAME=BASE[:ENV=VAL...] -> (name, base, env); p is the argparse parser for errors.
    Besides LOCKSWAP_* variables, LD_PRELOAD=PATH runs the variant from another build of the
    library: an A/B of two builds in the same interleaved rounds."""
    name, _, rest = d.partition("=")
    parts = rest.split(":")
    if not name or not parts[0]:
        p.error(f"--define {d}: expected NAME=BASE[:ENV=VAL...]")
    env = {}
    for kv in parts[1:]:
        k, _, v = kv.partition("=")
        if not k.startswith("LOCKSWAP_") and k != "LD_PRELOAD":
            p.error(f"--define {d}: {k} is neither a LOCKSWAP_ variable nor LD_PRELOAD")
        if k == "LD_PRELOAD" and not os.path.isfile(v):
            p.error(f"--define {d}: no library at {v}")
        env[k] = v
    return name, parts[0], env


def clean_env():
    """The caller's environment without any LOCKSWAP_* setting or LD_PRELOAD."""
    return {k: v for k, v in os.environ.items() if not k.startswith("LOCKSWAP_") and k != "LD_PRELOAD"}


def run_child(cmd, env, prefix, timeout, pass_fds=()):
    """Runs one benchmark child; returns a dict with status ok|BROKEN|HANG|UNAVAILABLE|rc=N|TIMEOUT
    and, when ok, the key=value pairs of its line starting with `prefix`."""
    try:
        pr = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, pass_fds=pass_fds)
    except subprocess.TimeoutExpired:
        return {"status": "TIMEOUT", "detail": "no result within the driver's timeout"}
    line = next((l for l in pr.stdout.splitlines() if l.startswith(prefix + " ")), None)
    if pr.returncode != 0 or line is None:
        err = pr.stderr.strip().splitlines()
        detail = next((l for l in err if "BROKEN" in l or "HANG" in l), err[0] if err else "")
        status = ("BROKEN" if "BROKEN" in pr.stderr else "HANG" if pr.returncode == 3
                  else f"rc={pr.returncode}")
        # exit 2 with lockswap's list of valid settings: the library does not offer this variant
        if pr.returncode == 2 and "lockswap: valid settings" in pr.stderr:
            status = "UNAVAILABLE"
        return {"status": status, "detail": detail}
    r = dict(kv.split("=", 1) for kv in line.split()[1:])
    r["status"] = "ok"
    return r


# ---- interleaved rounds guarded by the core-to-core probe (docs/measuring.md) ----

def column_lines(lib):
    """[(name, {SETTING: value}, [tag, ...])]: the columns of the test matrix, in their order, as the
    library lists them (LOCKSWAP_LIST=columns: `NAME SETTINGS TAGS`), or else as
    preload/config/variant_columns.def (the one list) holds them, for a library without the list."""
    out = []
    if lib and os.path.isfile(lib):
        env = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": lib, "LOCKSWAP_LIST": "columns"}
        p = subprocess.run(["/bin/true"], env=env, capture_output=True, text=True)
        if p.returncode == 0:
            for line in p.stderr.splitlines():
                f = line.split(" ")
                if len(f) != 3 or "=" not in f[1]:
                    out = []  # a library from before the tags: the .def instead
                    break
                out.append((f[0], f[1], f[2]))
    if not out:
        pattern = re.compile(r'^LOCKSWAP_COLUMN\("([^"]+)", "([^"]*)", "[^"]*", "([^"]*)"\)')
        with open(os.path.join(ROOT, "preload", "config", "variant_columns.def")) as f:
            out = [m.groups() for m in map(pattern.match, f) if m]
    return [(name, dict(kv.split("=", 1) for kv in settings.split(",") if "=" in kv),
             [t for t in tags.split(",") if t and t != "-"]) for name, settings, tags in out]


def matrix_columns(lib):
    """{column name: {SETTING: value}}: the columns of the test matrix (column_lines)."""
    return {name: settings for name, settings, _ in column_lines(lib)}


def tagged_columns(tag, lib=None):
    """{column name: {SETTING: value}} of the columns carrying TAG in preload/config/variant_columns.def
    (bench, microbench, speed, speedcheck, control, compare, ...), in the .def's order."""
    return {name: settings for name, settings, tags in column_lines(lib) if tag in tags}


def tagged_family_variants(tag, family, lib=None):
    """The FAMILY variants (LOCKSWAP_MUTEX/RWLOCK/SEM values, e.g. percid for the column percid-rseq)
    of the columns carrying TAG, each once, in the .def's order; a column without that
    setting leaves the family to glibc and adds nothing."""
    out = []
    for settings in tagged_columns(tag, lib).values():
        v = settings.get(family)
        if v and v not in out:
            out.append(v)
    return out


def probe_binary(build):
    return os.path.join(build, "bin", "lockswap-probe")


def env_summary(probe):
    """The `env:` line of lockswap-probe summary, for headers and results files."""
    return (lockswap_stats.probe_summary(probe)
            or f"env: unknown ({probe} not built: cmake --build BUILD --target lockswap-probe)")


def host_summary():
    """lockswap doctor's one-line `host checks:` summary (governor, turbo, SMT, virtualisation, ...)."""
    try:
        from lockswap_cli import doctor
        return doctor.summary_line()
    except Exception as e:  # a header line must never stop a benchmark
        return f"host checks: unavailable ({type(e).__name__}: {e})"


class Rounds:
    """One cell's interleaved rounds (lockswap_stats.interleaved_rounds): every
    variant once per round, in an order rotated from round to round; a round
    counts only when the core-to-core probe before and after it agree."""

    def __init__(self, variants):
        self.variants = list(variants)
        self.kept = []      # [{variant: result}], steady rounds only
        self.every = []     # [{variant: result}], every completed round, steady or not
        self.want = None    # the steady rounds asked for
        self.dropped = 0
        self.started = 0
        self.steady = []    # per round run: kept or not
        self.c2c = []       # per kept round: its core-to-core round trip (ns), None without a probe

    def run(self, run_variant, probe, want, max_rounds, offset=0, mode=None):
        """Runs rounds until `want` are kept or `max_rounds` ran. run_variant(v) returns any result.
        mode: keep only rounds run in that placement mode ('fast'/'slow'; None: either)."""
        ran = []
        self.want = want if self.want is None else self.want
        for slot in lockswap_stats.interleaved_rounds(self.variants, probe, want - len(self.kept),
                                                      max_rounds - self.started, offset=offset + self.started,
                                                      mode=mode):
            ran.append((slot, {v: run_variant(v) for v in slot.order}))
            self.started += 1
        for slot, results in ran:  # a slot's verdict is known once the loop moved past it
            self.steady.append(slot.steady)
            self.every.append(results)
            if slot.steady:
                self.kept.append(results)
                self.c2c.append(lockswap_stats.median([slot.probe_before, slot.probe_after]))
            else:
                self.dropped += 1
        return self

    def values(self, metric):
        """[{variant: number}] of the kept rounds; metric(result) -> number or None."""
        return [{v: metric(r) for v, r in rnd.items()} for rnd in self.kept]

    def verdict(self, metric, variant, reference, higher_is_better, strict=True):
        """The verdict of the steady rounds; with strict=False, when fewer than asked are steady
        and too few for a verdict, the figure over every completed round, its word
        `host unsteady (k of n rounds steady)` (lockswap_cli/steady.py)."""
        kept = self.values(metric)
        every = [{v: metric(r) for v, r in rnd.items()} for rnd in self.every]
        return steadiness.row_verdict(kept, every, variant, reference, higher_is_better, wanted=self.want,
                                      strict=strict)[0]

    def figure_rounds(self, strict=True):
        """The rounds a row's figures are over: the steady ones, or every one (see verdict)."""
        if strict or steadiness.enough_steady(len(self.kept), len(self.every), self.want):
            return self.kept
        return self.every

    def kept_text(self):
        return f"{len(self.kept)}/{self.started}"

    def placement(self):
        """The placement mode ('fast'/'slow', lockswap_stats.placement_mode)
        most kept rounds ran in; None without a probe."""
        return lockswap_stats.rounds_mode(self.c2c)


def add_mode_option(p):
    """--mode fast|slow (dest `placement`): Rounds.run's `mode`, for every driver alike."""
    p.add_argument("--mode", dest="placement", choices=("fast", "slow"),
                   help="keep only rounds whose core-to-core probes both read this placement mode (fast: under "
                        f"{lockswap_stats.FAST_C2C_NS} ns); a round starts once the probe reads it (polled for up "
                        f"to {lockswap_stats.MODE_WAIT_S} s), others are dropped and run again up to --max-rounds, "
                        "so every cell is of one mode (default: either)")


def add_steady_option(p):
    p.add_argument("--strict-steady", action="store_true",
                   help="figures from steady rounds only (default: when fewer rounds than asked are steady and "
                        "too few for a verdict, over every completed round, marked 'host unsteady (k of n rounds "
                        "steady)')")


def check_mode_option(p, a, probe):
    if a.placement and not os.access(probe, os.X_OK):
        p.error(f"--mode needs the core-to-core probe ({probe})")


def verdict_text(v):
    """'1.023 [0.981, 1.070] no significant difference' — speed against the reference (>1 faster)."""
    return "-" if v.speed is None else f"{v.interval_text()} {v.word}"
