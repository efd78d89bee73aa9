#!/usr/bin/env python3
"""examples/servers/report.py — the comparison table of one or more runs.tsv
files written by the runners in examples/servers/ (server_lib.sh) and by
scripts/demo.sh.

    report.py [--title T] [--md F] [--csv F] [--png F] [--html F] [--header F] [--events]
              [--event-detail] [--reference none] [--repeat N] [--strict-steady] runs.tsv...

One row per benchmark x variant, in the order the runs file(s) name them:
median throughput over the rounds, the speed against the reference (`none`,
the program without any preload, unless --reference names another variant)
as the median of the per-round ratios with its 95% sign-test interval and a
verdict (tools/lockswap_cli/stats.py: faster / slower / no significant
difference / not enough runs), the rounds kept, the spread of the runs
((max - min) / median), the median latency (p95 where the program reports
one) and its ratio of medians, errors and status. A round is every variant
once (runs.tsv's extra round=N; the repetition in older files); rounds.tsv
next to runs.tsv holds each round's core-to-core probe before and after, and
a round whose probes disagree (lockswap_stats.steady_round) is dropped.
When fewer rounds than asked (--repeat; without it, fewer than a verdict
needs) are steady, a row's figures are over every completed round and its
verdict reads `host unsteady (k of n rounds steady)` (tools/lockswap_cli/
steady.py; the note under the table says how far to trust it);
--strict-steady keeps the steady rounds only (a row may then be blank).
--png: a forest plot (a row per benchmark x variant, the speed with its
interval on a log axis; tools/lockswap_cli/forest.py, matplotlib; gnuplot's
bars when matplotlib is missing). --html: one page with the header, the plot
and the table.
profile.tsv next to runs.tsv (runners' --profile: LOCKSWAP_STATS=profile)
is listed apart, never compared.
--events adds a column of lock events per run (LOCKSWAP_STATS_FILE, summed
over the processes of a run, median over the runs); --event-detail the top
events of each row (and, where a run names an activity file, by process kind).
A `reach` column (the share of the lock waiting the variant swaps, from the
measured runs' counts-only dumps, summed over the row's runs: docs/reach.md)
appears when the library wrote wait records, with a warning under the table
for each row whose reach is below 50%."""
import argparse
import csv
import os
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
# lockswap_cli: tools/ on PYTHONPATH (scripts/lib.sh, which server_lib.sh sources)
from lockswap_cli import forest, reach as reach_model, stats as lockswap_stats, steady as steadiness  # noqa: E402
from lockswap_cli.symbolize import Symbolizer  # noqa: E402
from lockswap_cli.stats import median  # noqa: E402
from lockswap_cli.tables import GNUPLOT_COLORS, fmt, gnuplot, gp_quote, md_table  # noqa: E402


def num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def fnum(x):
    if x is None:
        return "-"
    return f"{x:.0f}" if abs(x) >= 1000 else f"{x:.1f}" if abs(x) >= 10 else f"{x:.2f}"


def is_count(event):
    """A lock event that counts occurrences; *_ns events are durations (the wait accounting,
    cid_slow_ns), shown by the reach column, never summed with counts."""
    return not event.endswith("_ns")


def parse_stats(path):
    """[(pid, {event: count}, [lines])], one block per process."""
    blocks = []
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return blocks
    for line in lines:
        m = re.match(r"lockswap: pid (\d+)", line)
        if m:
            blocks.append((int(m.group(1)), {}, [line]))
            continue
        m = re.match(r"lockswap: (\S+)\s+(\d+)", line)
        if m:
            if not blocks:
                blocks.append((0, {}, []))
            ev = blocks[-1][1]
            ev[m.group(1)] = ev.get(m.group(1), 0) + int(m.group(2))
            blocks[-1][2].append(line)
    return blocks


REACH_SYMBOL_BUDGET_S = 10.0   # addr2line per row, for the spin-delay sites of its dumps
REACH_SYMBOLIZER = Symbolizer(REACH_SYMBOL_BUDGET_S)   # shared by the rows: the same binaries


def row_reach(rs):
    """The reach of one row: reach.compute over the statistics files of its runs (each run's
    processes are apart: their start times differ), None without wait data."""
    files = [r["stats"] for r in rs if r.get("stats") and r["stats"] != "-" and os.path.isfile(r["stats"])]
    return reach_model.of_files(files, REACH_SYMBOLIZER)


def reach_notes(rows):
    """Under the table: what reach is, and a warning per row whose reach is low."""
    have = [r for r in rows if r.get("reach")]
    if not have:
        return ""
    out = ("\nReach: the share of the lock waiting the row's variants swap (lockswap's mutex, rwlock and "
           "semaphore waits over every lock wait its counts-only dumps saw: the program's own futex locks, "
           "spin-delay sleeps, lockswap's internal locks; glibc's internal locks only with `lockswap attribute`); "
           "`n/a`: a glibc column, whose waits are glibc's and invisible unprivileged (docs/reach.md).\n")
    for r in have:
        if r["reach"]["warning"]:
            out += f"WARNING {r['label']} {r['variant']}: {r['reach']['warning']}.\n"
    return out


def extra(r):
    return dict(kv.split("=", 1) for kv in (r.get("extra") or "").split(";") if "=" in kv)


def load(files):
    runs = []
    for i, f in enumerate(files):
        with open(f) as fh:
            for r in csv.DictReader(fh, delimiter="\t"):
                r["_file"] = i
                runs.append(r)
    return runs


def sibling(runs_file, name):
    return os.path.join(os.path.dirname(os.path.abspath(runs_file)), name)


def sibling_rows(files, name):
    """(file index, row) of the tab-separated file `name` beside each runs file, where there is one."""
    for i, f in enumerate(files):
        try:
            fh = open(sibling(f, name))
        except OSError:
            continue
        with fh:
            for r in csv.DictReader(fh, delimiter="\t"):
                yield i, r


def load_rounds(files):
    """{(file index, round): steady} from the rounds.tsv beside each runs file,
    and whether any round had probe readings at all."""
    steady, probed = {}, False
    for i, r in sibling_rows(files, "rounds.tsv"):
        before, after = num(r.get("c2c_before_ns")), num(r.get("c2c_after_ns"))
        probed = probed or bool(before and after)
        steady[(i, r["round"])] = lockswap_stats.steady_round(before, after)
    return steady, probed


def round_of(r):
    return extra(r).get("round") or r["rep"]


def summarise(runs, base, steady, wanted=None, strict=False, level=lockswap_stats.DEFAULT_LEVEL):
    benches, order = {}, []
    for r in runs:
        key = (r["_file"], r["bench"])
        if key not in benches:
            benches[key] = {"label": r["label"] or r["bench"], "unit": r["unit"], "lat_kind": r["lat_kind"],
                            "variants": {}}
            order.append(key)
        benches[key]["variants"].setdefault(r["variant"], []).append(r)
    rows = []
    for key in order:
        b = benches[key]
        ref = base if base in b["variants"] else "glibc" if "glibc" in b["variants"] else None
        rounds, kept = {}, {}
        for v, rs in b["variants"].items():
            for r in rs:
                if r["status"] == "ok" and num(r["value"]) is not None:
                    rounds.setdefault(round_of(r), {})[v] = num(r["value"])
        for rid, rd in rounds.items():
            if steady.get((key[0], rid), True):
                kept[rid] = rd
        # Medians and spreads from the rounds the ratios are over: the kept (steady) ones, or every
        # completed one when too few are steady (steadiness.row_verdict: "host unsteady").
        bench_basis = ("steady" if strict or steadiness.enough_steady(len(kept), len(rounds), wanted, level)
                       else "all")

        def over(v, field, basis):
            return [num(r[field]) for r in b["variants"][v] if r["status"] == "ok" and num(r[field]) is not None
                    and (basis == "all" or steady.get((key[0], round_of(r)), True))]
        blat = median(over(ref, "lat", bench_basis)) if ref else None
        for v, rs in b["variants"].items():
            verdict, basis = None, bench_basis
            if ref and v != ref:
                verdict, basis = steadiness.row_verdict(list(kept.values()), list(rounds.values()), v, ref, True,
                                                        level, wanted, strict)
            vs, ls = over(v, "value", basis), over(v, "lat", basis)
            m, lm = median(vs), median(ls)
            lratio = lm / blat if lm is not None and blat else None
            bad = [r for r in rs if r["status"] != "ok"]
            errs = [int(r["errors"]) for r in rs if (r["errors"] or "").isdigit()]
            shut = sorted({r["shutdown"] for r in rs if r["shutdown"] and r["shutdown"] != "-"})
            events = []
            for r in rs:
                tot = 0
                for _, ev, _ in parse_stats(r["stats"]) if r["stats"] and r["stats"] != "-" else []:
                    tot += sum(c for e, c in ev.items() if is_count(e))
                events.append(tot)
            rows.append({
                "bench": key[1], "label": b["label"], "variant": v, "runs": len(rs), "ok": len(rs) - len(bad),
                "unit": b["unit"], "median": m, "ref": ref, "verdict": verdict,
                "ratio": verdict.speed if verdict else None,
                "rounds_kept": len(kept), "rounds_total": len(rounds), "basis": basis,
                "spread": (max(vs) - min(vs)) / m if len(vs) >= 2 and m else None,
                "min": min(vs) if vs else None, "max": max(vs) if vs else None,
                "lat_kind": b["lat_kind"], "lat": lm, "lat_ratio": lratio,
                "errors": sum(errs) if errs else None, "shutdown": ",".join(shut),
                "status": "ok" if not bad else f"{len(bad)} FAIL",
                "events": median(events) if any(events) else None,
                "reach": row_reach(rs) if v != "none" else None,
                "each": [num(r["value"]) for r in rs], "_runs": rs,
            })
    return rows


def lat_label(kind):
    if not kind or kind == "-":
        return "latency"
    name, _, unit = kind.rpartition("_")
    return f"{name} {unit}" if name else kind


def verdict_cells(r, reference):
    """The speed against the reference with its interval, and the verdict."""
    if r["variant"] == r["ref"]:
        return "1 (reference)", "-"
    v = r["verdict"]
    if v is None:
        return f"- (no {reference} runs)", "-"
    text = v.interval_text()
    if v.speed is not None and v.coverage < v.level:  # too few rounds: say what the interval covers
        text += f" ({v.coverage:.0%})"
    return text, v.word


def profile_section(files):
    """The --profile runs beside each runs file: listed, never compared."""
    rows = [[r["label"] or r["bench"], r["variant"], f"{r['value'] or '-'} {r['unit']}", r["status"], r["stats"] or "-"]
            for _, r in sibling_rows(files, "profile.tsv")]
    if not rows:
        return ""
    return ("\nProfiled runs (LOCKSWAP_STATS=profile, one per variant after the rounds; the profiler's cost is in "
            "their numbers, so they are never compared; read a statistics file with `lockswap report FILE`):\n\n"
            + md_table(["benchmark", "variant", "throughput (profiled)", "status", "statistics file"], rows,
                       ["---", "---", "---:", "---", "---"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--title", default="")
    ap.add_argument("--reference", "--baseline", dest="reference", default="none")
    ap.add_argument("--md")
    ap.add_argument("--csv")
    ap.add_argument("--png")
    ap.add_argument("--html")
    ap.add_argument("--repeat", type=int, help="the rounds asked for (the runners' --repeat): fewer steady ones "
                                               "put a row on every round, marked host unsteady")
    ap.add_argument("--strict-steady", action="store_true", help="figures from steady rounds only")
    ap.add_argument("--header")
    ap.add_argument("--events", action="store_true")
    ap.add_argument("--event-detail", action="store_true")
    a = ap.parse_args()
    runs = load(a.runs)
    if not runs:
        print("(no runs)")
        return 0
    steady, probed = load_rounds(a.runs)
    level = lockswap_stats.DEFAULT_LEVEL
    rows = summarise(runs, a.reference, steady, a.repeat, a.strict_steady, level)

    out = []
    if a.title:
        out.append(f"## {a.title}\n\n")
    if a.header and os.path.exists(a.header):
        out.append("```\n" + open(a.header).read().rstrip() + "\n```\n\n")
    table = []
    with_reach = any(r["reach"] for r in rows)
    for r in rows:
        speed, word = verdict_cells(r, a.reference)
        lat = "-" if r["lat"] is None else f"{fnum(r['lat'])} {lat_label(r['lat_kind'])}"
        table.append([r["label"], r["variant"], f"{r['ok']}/{r['runs']}", f"{fnum(r['median'])} {r['unit']}",
                      speed, word, f"{r['rounds_kept']}/{r['rounds_total']}",
                      fmt(r["spread"] and r["spread"] * 100, "{:.1f}%") if r["spread"] is not None else "-",
                      lat, fmt(r["lat_ratio"], "{:.3f}") if r["variant"] != r["ref"] else "1",
                      "-" if r["errors"] is None else str(r["errors"]),
                      r["shutdown"] or "-", r["status"]]
                     + ([f"{r['events']:.0f}" if r["events"] is not None else "-"] if a.events else [])
                     + ([reach_model.cell(r["reach"])] if with_reach else []))
    header = ["benchmark", "variant", "runs ok", "throughput (median)",
              f"speed vs {a.reference} [{level:.0%} CI]", "verdict", "rounds kept", "spread",
              "latency (median)", "latency ratio", "errors", "shutdown", "status"] + (
                  ["lock events/run"] if a.events else []) + (["reach"] if with_reach else [])
    out.append(md_table(header, table, ["---", "---"] + ["---:"] * 3 + ["---"] + ["---:"] * (len(header) - 6)))
    out.append(reach_notes(rows))
    kept = {(r["bench"], r["rounds_kept"], r["rounds_total"]) for r in rows}
    kept_all, total_all = sum(k for _, k, _ in kept), sum(t for _, _, t in kept)
    fallback = sorted({r["label"] for r in rows if r["ref"] != a.reference})
    out.append(
        f"\nReference: `{a.reference}` (the program with no LD_PRELOAD and no LOCKSWAP_* setting); `glibc` is "
        f"lockswap loaded with glibc's own locks, its own row. A round runs every variant once, in an order "
        f"rotated from round to round; speed = median of the per-round ratios variant/{a.reference} of "
        f"throughput (>1: faster), with the {level:.0%} sign-test interval; a verdict needs at least "
        f"{lockswap_stats.runs_needed(level)} kept rounds (else `not enough runs`). Measured runs count lock "
        f"events only (LOCKSWAP_STATS=counts, no profiler). Spread = (max - min) / median of the runs.\n")
    if probed:
        out.append(f"Rounds kept: {kept_all} of {total_all} (a round is dropped when `lockswap-probe c2c` before "
                   f"and after it differ by more than x{lockswap_stats.PROBE_TOLERANCE}: the host moved the "
                   f"vCPUs).\n")
    else:
        out.append(f"Rounds kept: {kept_all} of {total_all} (probe unavailable: no round could be checked for "
                   f"steadiness, every round counts).\n")
    if fallback:
        out.append(f"No `{a.reference}` runs for: {', '.join(fallback)}; their ratios are against glibc.\n")
    unsteady = [r for r in rows if r["basis"] == "all"]
    if unsteady:
        out.append("Over every completed round: " + ", ".join(sorted({r['label'] for r in unsteady})) + ". "
                   + steadiness.note("--repeat") + "\n")
    elif a.strict_steady and any(r["rounds_kept"] < r["rounds_total"] for r in rows):
        out.append("--strict-steady: figures from steady rounds only; a row without one reads `no runs`.\n")
    called = [r for r in rows if r["verdict"] and r["verdict"].word in ("faster", "slower")]
    if called:
        out.append("Significant at " + f"{level:.0%}: " + "; ".join(
            f"{r['label']} {r['variant']} {r['verdict'].speed:.3f} ({r['verdict'].word})" for r in called) + ".\n")
    loads = [num(extra(r).get("loadavg")) for r in runs]
    loads = [x for x in loads if x is not None]
    if loads:
        out.append(f"1-minute load average at the end of the runs: {min(loads):.1f} to {max(loads):.1f} "
                   f"(median {median(loads):.1f}) on {os.cpu_count()} CPUs. It counts the benchmark's own "
                   f"runnable threads (a 16-client run alone keeps it near 16), so it shows competing work only "
                   f"where it exceeds what the benchmark itself runs.\n")
    fails = [r for r in rows if r["status"] != "ok"]
    if fails:
        out.append("FAILED runs: " + "; ".join(f"{r['label']} {r['variant']}: {r['status']}" for r in fails) + "\n")

    if a.event_detail:
        out.append(events_section(rows, a.reference))
    out.append(profile_section(a.runs))
    text = "".join(out)
    print(text)
    if a.md:
        with open(a.md, "w") as f:
            f.write(text)
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["bench", "label", "variant", "runs", "ok", "unit", "median", "reference", "speed", "speed_lo",
                        "speed_hi", "coverage", "verdict", "rounds_kept", "rounds_total", "spread", "min", "max",
                        "lat_kind", "lat_median", "lat_ratio", "errors", "shutdown", "status",
                        "lock_events_per_run", "each_run", "figure_over", "reach_pct", "reach_algorithm_pct"])
            for r in rows:
                v = r["verdict"]
                w.writerow([r["bench"], r["label"], r["variant"], r["runs"], r["ok"], r["unit"], r["median"], r["ref"],
                            v and v.speed, v and v.lo, v and v.hi, v and v.coverage, v.word if v else "",
                            r["rounds_kept"], r["rounds_total"], r["spread"], r["min"], r["max"], r["lat_kind"],
                            r["lat"], r["lat_ratio"], r["errors"], r["shutdown"], r["status"], r["events"],
                            " ".join(fnum(x) for x in r["each"]),
                            "every round" if r["basis"] == "all" else "steady rounds",
                            *((r["reach"]["reach_pct"], r["reach"]["reach_algorithm_pct"]) if r["reach"] else ("", ""))])
    header = open(a.header).read().splitlines() if a.header and os.path.exists(a.header) else []
    png = a.png or (os.path.splitext(a.html)[0] + ".png" if a.html else None)
    drawn = False
    if png:
        drawn = forest_plot(rows, png, a.title, a.reference, level, header)
    if a.html:
        forest.write_html(a.html, a.title or "lockswap results", header, text, png if drawn else None)
        print(f"report: wrote {a.html}", file=sys.stderr)
    return 0


def forest_plot(rows, png, title, reference, level, header):
    """The forest plot (tools/lockswap_cli/forest.py); gnuplot's bars when matplotlib is missing."""
    data = [{"label": r["label"], "variant": r["variant"],
             "word": "reference" if r["variant"] == r["ref"] else (r["verdict"].word if r["verdict"] else "-"),
             "speed": r["verdict"] and r["verdict"].speed, "lo": r["verdict"] and r["verdict"].lo,
             "hi": r["verdict"] and r["verdict"].hi} for r in rows]
    env = " ".join(line for line in header if line.startswith("env:"))
    kept = {(r["bench"], r["rounds_kept"], r["rounds_total"]) for r in rows}
    sub = (f"rounds steady: {sum(k for _, k, _ in kept)} of {sum(t for _, _, t in kept)}; {env}")[:210]
    why = forest.write_png(png, data, f"{title + ': ' if title else ''}speed against {reference}", reference,
                           level, sub)
    if why is None:
        return True
    print(f"report: forest plot skipped ({why}); gnuplot's bar chart instead", file=sys.stderr)
    plot(rows, png, title, reference)
    return os.path.exists(png)


def events_section(rows, base):
    s = []
    for r in rows:
        if r["variant"] in (base, "none"):
            continue
        per_run = []
        for run in r["_runs"]:
            tot = {}
            blocks = parse_stats(run["stats"]) if run["stats"] and run["stats"] != "-" else []
            for _, ev, _ in blocks:
                for k, c in ev.items():
                    tot[k] = tot.get(k, 0) + c
            per_run.append((len(blocks), tot))
        names = {k for _, t in per_run for k in t}
        if not names:
            continue
        med = {k: median([t.get(k, 0) for _, t in per_run]) for k in names}
        top = sorted(((k, v) for k, v in med.items() if v and is_count(k)), key=lambda kv: -kv[1])[:6]
        s.append([r["label"], r["variant"], f"{median([n for n, _ in per_run]):.0f}",
                  ", ".join(f"{k} {v:.0f}" for k, v in top)])
    if not s:
        return ""
    text = ("\nLock events (LOCKSWAP_STATS_FILE; slow-path events, summed over the processes of a run, whole "
            "server lifetime, median over runs; top 6; the *_ns durations are in the reach column):\n\n"
            + md_table(["benchmark", "variant", "processes", "events"], s, ["---", "---", "---:", "---"]))
    return text + process_kinds(rows, base)


def process_kinds(rows, base):
    """For a run whose extra names an activity file (pid<TAB>kind, e.g. PostgreSQL's pg_stat_activity):
    its processes' events by kind, for the last run of the last non-baseline variant per benchmark."""
    out = []
    done = set()
    for r in reversed(rows):
        if r["variant"] in (base, "none") or r["bench"] in done:
            continue
        run = next((x for x in reversed(r["_runs"]) if extra(x).get("activity")), None)
        if not run:
            continue
        act = {}
        try:
            for line in open(extra(run)["activity"]):
                p = line.rstrip("\n").split("\t")
                if len(p) == 2 and p[0].isdigit():
                    act[int(p[0])] = p[1]
        except OSError:
            continue
        kinds = {}
        for pid, ev, _ in parse_stats(run["stats"]):
            k = kinds.setdefault(act.get(pid, "exited before the snapshot"), [0, {}])
            k[0] += 1
            for e, c in ev.items():
                k[1][e] = k[1].get(e, 0) + c
        if not kinds:
            continue
        done.add(r["bench"])
        tab = [[kind, str(n), ", ".join(f"{e} {c}" for e, c in sorted(((e, c) for e, c in ev.items() if is_count(e)),
                                                                        key=lambda kv: -kv[1])[:6])
                or "(no events)"] for kind, (n, ev) in sorted(kinds.items())]
        out.append(f"\n{r['label']}, variant {r['variant']}, run {run['rep']}: processes by kind "
                   f"(from a mid-run snapshot):\n\n" + md_table(["process kind", "processes", "events (top 6)"], tab,
                                                             ["---", "---:", "---"]))
    return "".join(reversed(out))


def plot(rows, png, title, reference):
    """Speed against the reference per benchmark (x) and variant (bars); error bars: the interval."""
    shown = [r for r in rows if r["variant"] != r["ref"]]
    variants, benches = [], []
    for r in shown:
        if r["variant"] not in variants:
            variants.append(r["variant"])
        if r["label"] not in benches:
            benches.append(r["label"])
    if not variants or not benches:
        return
    data = png[:-4] + ".dat" if png.endswith(".png") else png + ".dat"
    by = {(r["label"], r["variant"]): r for r in shown}
    with open(data, "w") as f:
        for b in benches:
            cells = []
            for v in variants:
                r = by.get((b, v))
                ver = r and r["verdict"]
                if ver and ver.speed:
                    cells += [f"{ver.speed:.4f}", f"{ver.lo:.4f}", f"{ver.hi:.4f}"]
                else:
                    cells += ["NaN", "NaN", "NaN"]
            f.write('"' + b.replace('"', "'") + '" ' + " ".join(cells) + "\n")
    plots = ", ".join(
        f"{gp_quote(data)} using {2 + 3 * i}:{3 + 3 * i}:{4 + 3 * i}{':xtic(1)' if i == 0 else ''} "
        f"title {gp_quote(v)} lc rgb {gp_quote(GNUPLOT_COLORS[(i + 1) % len(GNUPLOT_COLORS)])}"
        for i, v in enumerate(variants))
    width = max(900, 110 * len(benches) * max(1, len(variants)) // 2 + 200)
    gnuplot(png[:-4] + ".gp" if png.endswith(".png") else png + ".gp", f"""
set terminal pngcairo size {width},600 noenhanced font ',10'
set output {gp_quote(png)}
set title {gp_quote((title + ': ' if title else '') + 'speed against ' + reference
                    + ' (median of per-round ratios; bars: 95% interval)')}
set style data histogram
set style histogram errorbars gap 2 lw 1
set style fill solid 0.8 border -1
set ylabel 'speed vs {reference}'
set yrange [0:*]
set grid ytics
set key outside right top
set xtics rotate by -30
set arrow from graph 0, first 1 to graph 1, first 1 nohead dt 2 lc rgb '#000000'
plot {plots}
""")


if __name__ == "__main__":
    sys.exit(main())
