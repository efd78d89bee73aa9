"""`lockswap report`: the table (or JSON, PNG) of the most contended locks and call sites."""

import argparse
import json
import os
import sys
import textwrap
from .common import PROG, fmt_ns, import_pyplot, shown, table, warn
from . import reach as reach_model
from .merge import merge, site_frames, sort_key
from .statsfile import (COUNTERS, FAMILIES, HIST_BUCKETS, LWLOCK_COUNTERS, OPTIONAL_VARIANT_KEYS, WTLOCK_COUNTERS, VARIANT_KEYS, last_dump_per_process,
                        read_dumps_and_loose)
from .symbolize import ADDR2LINE_TIMEOUT_S, MAX_ADDRS_PER_RUN, MAX_SYMBOLIZED_FILES, SYMBOLIZE_BUDGET_S, Symbolizer, frame_text, locate


SORT_KEYS = ("wait", "contended", "hold", "acq")
PERCENTILE_NOTE = ("percentiles (p50, p99) come from log2 histograms: the value shown is the upper "
                   "bound 2^(i+1)-1 ns of the bucket holding that rank, capped at the observed max, "
                   "so it over-states by at most 2x")


REPORT_EPILOG = f"""\
Input: files written by the library with LOCKSWAP_STATS=profile (`{PROG} --profile`)
and LOCKSWAP_STATS_FILE (`%p` in the name gives one file per process), or captured
stderr. Paths are percent-decoded (%XX). Lines that
are not `lockswap-v1` records are skipped, as are unknown record types and keys.
The last dump of each process (pid + start time; a dump on the statistics signal
and another at exit) is used; processes are summed into totals.

Counts-only dumps (LOCKSWAP_STATS=counts, `{PROG} --stats`, the mode of measured
runs; begin record stats=counts) hold the lock events only: the calls per family,
lock objects, call sites, acquisitions and dropped counts are not collected, and
the report says so instead of printing zeros ("-" in the processes table, null
in --json). A total over several processes comes from those that collected it,
and the report names the others.

Times: wait = start of a contended acquisition to success (so its average is
over contended acquisitions); hold = acquisition to release of exclusive holds.
{PERCENTILE_NOTE}.
Backtraces are symbolized with `addr2line -f -C -i` on the files named by the
dump's `map` records; a file without debug info gives a function name only, a
missing file gives file+offset. Input is untrusted: a malformed record is
skipped with a warning naming file:line, a mapped file that is not a complete
ELF file is skipped with a warning, and addr2line is bounded: only the sites
shown, at most {MAX_SYMBOLIZED_FILES} files, {MAX_ADDRS_PER_RUN} addresses a run,
{ADDR2LINE_TIMEOUT_S:g} s a run and --symbol-budget in all.

Reach (first, when the dumps carry wait records; docs/reach.md): the lock
waiting by class (algorithm swapped, sleep primitive swapped, lockswap's own
locks, own futex locks, spin-delay sleeps, glibc internal and glibc's locks
with `{PROG} attribute`'s eBPF records only), reach = swapped / total, a
warning below 50%; condition, idle and other timed waits apart.

--json schema ("schema": "lockswap-report-v1"): reach (null without wait records:
{{processes, column, ebpf, lock_wait_ns, classes[{{class, label, swapped, seen, ns, n,
share, note}}], reach_pct, reach_algorithm_pct, reach_why, warning, futex_sites[],
spin_delay_sites[], cond_sites[], probes[], apart{{cond, idle, sleep}}, ...}}); files; percentile_method;
profiled (false: counts-only dumps, no per-lock data);
wtlocks[] (WiredTiger's rwlocks counted in the counts mode, wtlock records) {{addr, kind (wtlock),
variant, pid, first_module, first_offset, first, acq, rd_acq, contended, rd_contended, wait_ns,
wait_max_ns, hold_samples, hold_ns}};
processes[] {{pid, start_ns, seq, complete, file, exe, variants{{mutex,rwlock,sem,cid}},
stats (counts|profile), calls{{family: n}}, events{{name: n}}, dropped{{locks, sites}}, acq, contended,
  selected[{{addr, family, variant, rule, rule_text, events{{name: n}}}}: LOCKSWAP_SELECT's locks],
  not_collected[] (what its dump does not hold: calls, acq, contended and dropped, then
  null, and locks and sites, the profiler's tables)}};
totals {{processes, calls, events, dropped, acq, contended (each summed over the processes
that collected it, null when none did), not_collected{{figure: [pid...]}}}};
locks_total, sites_total (before --top); sort;
locks[] {{addr, kind, variant, first_module, first_offset, exe, pids[], acq, contended,
contended_pct, rd_acq, rd_contended, wait, hold}}; sites[] {{rank, op, addr, module, offset,
lock_addrs[], lock_kind, variant, select[], pids[], acq, contended, contended_pct, wait, hold,
where, backtrace[], backtrace_pid}}; cond_locks[], cond_sites[] (same shapes: condition
variables and their wait sites, ranked apart because a condition wait is idle
time, not contention), cond_locks_total, cond_sites_total; the four lists and their
totals are null when no dump was profiled. wait/hold = {{count, total_ns, avg_ns, p50_ns, p99_ns, max_ns,
hist[48]}} with hist[i] = samples in [2^i, 2^(i+1)) ns (bucket 0 also holds 0).
A frame (where, backtrace[]) = {{addr, module, offset, function, source,
inlined[]}}; function/source are null when unknown. variant: the variant the lock ran
(LOCKSWAP_SELECT or its family's setting; null in older dumps); first_*: where it was
initialised (or, never initialised, first taken); select[]: LOCKSWAP_SELECT matchers that
pick the site's lock (site:MODULE+0xOFF, then func:NAME when debug info names the function).

examples:
  {PROG} --stats-file /tmp/st.%p -- ./server ...; {PROG} report /tmp/st.*
  {PROG} report --top 5 --sort contended --png waits.png /tmp/st.*
  {PROG} report --json /tmp/st.* | jq '.sites[0].where'
"""


def report_parser(make=argparse.ArgumentParser):
    """The options of `lockswap report`; MAKE builds the parser (main.py: a subparser)."""
    p = make(
        prog=f"{PROG} report", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Merge lockswap statistics files (one per process) into a table of the "
                    "most contended locks and call sites, in the spirit of mutrace and "
                    "/proc/lock_stat.", epilog=REPORT_EPILOG)
    p.add_argument("files", nargs="+", metavar="FILE", help="statistics file(s)")
    p.add_argument("--top", type=int, default=10, metavar="N",
                   help="locks and sites to show (default 10; 0 = all)")
    p.add_argument("--sort", choices=SORT_KEYS, default="wait",
                   help="rank by total wait time (default), contended acquisitions, "
                        "total hold time or acquisitions")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    p.add_argument("--png", metavar="FILE", help="plot the wait-time histograms of the top sites")
    p.add_argument("--per-process", action="store_true",
                   help="list every process (default: only when there are at most 16)")
    p.add_argument("--symbol-budget", type=float, default=SYMBOLIZE_BUDGET_S, metavar="S",
                   help=f"seconds addr2line may take in all (default {SYMBOLIZE_BUDGET_S:g}; 0: no symbols)")
    return p




def variant_text(v):
    return " ".join(f"{k}={v[k]}" for k in (*VARIANT_KEYS, *OPTIONAL_VARIANT_KEYS) if k in v)


def build_report(args):
    every, loose = read_dumps_and_loose(args.files)
    every = last_dump_per_process(every)
    # the reach model first: it reads lockswap attribute's eBPF blocks too, the rest does not
    reach = reach_model.safe_compute(every, loose, symbol_budget=args.symbol_budget)
    dumps = [d for d in every if not d.ebpf]
    totals, locks, sites = merge(dumps)
    key = sort_key(args.sort)
    locks.sort(key=key, reverse=True)
    sites.sort(key=key, reverse=True)
    top = args.top if args.top > 0 else None
    # A condition wait is idle time, not contention: ranked on its own.
    cond_locks = [s for s in locks if s["kind"] == "cond"]
    locks = [s for s in locks if s["kind"] != "cond"]
    cond_sites = [s for s in sites if is_cond_site(s)]
    sites = [s for s in sites if not is_cond_site(s)]
    symbolizer = Symbolizer(args.symbol_budget)
    for s in sites[:top] + cond_sites[:top]:   # only what is shown: addr2line is the slow part
        symbolizer.want(s["module"], s["offset"])
        for _, mod, off in s["bt"]:
            symbolizer.want(mod, off)
        symbolizer.want(s["first_module"], s["first_offset"])
    wtlocks = wtlock_rows(dumps)
    for r in wtlocks[:20]:
        symbolizer.want(r["first_module"], r["first_offset"])
    symbolizer.resolve()
    for r in wtlocks:
        r["first"] = frame_text(symbolizer.get(r["first_module"], r["first_offset"])) \
            if r["first_module"] is not None and (r["first_module"], r["first_offset"]) in symbolizer.done else None
    procs = [process_entry(d) for d in dumps]
    totals.update(processes=len(procs), acq=collected_sum(procs, "acq"),
                  contended=collected_sum(procs, "contended"), not_collected=lacking_pids(procs))
    # counts-only dumps (LOCKSWAP_STATS=counts) carry lock events only, no per-lock records
    profiled = any(d.profiled for d in dumps)
    counted = lambda items: len(items) if profiled else None   # no tables: no count of entries
    lwlocks = merge_lwlocks(dumps)
    return {"schema": "lockswap-report-v1", "reach": reach, "lwlocks": lwlocks, "wtlocks": wtlocks, "files": args.files, "percentile_method": PERCENTILE_NOTE,
            "sort": args.sort, "profiled": profiled, "processes": procs, "totals": totals,
            "locks_total": counted(locks), "sites_total": counted(sites),
            "cond_locks_total": counted(cond_locks), "cond_sites_total": counted(cond_sites),
            "locks": shown_if(profiled, locks[:top]), "sites": shown_if(profiled, out_sites(sites[:top], symbolizer)),
            "cond_locks": shown_if(profiled, cond_locks[:top]),
            "cond_sites": shown_if(profiled, out_sites(cond_sites[:top], symbolizer))}


def merge_lwlocks(dumps):
    """PostgreSQL LWLock tranches (LOCKSWAP_LWLOCK): every process's counters summed per
    tranche and variant, most waiting first; [] when no dump carries any."""
    rows = {}
    for d in dumps:
        for r in d.lwlocks:
            row = rows.setdefault((r["tranche"], r["variant"]), {"tranche": r["tranche"], "variant": r["variant"],
                                                                 **{k: 0 for k in LWLOCK_COUNTERS}})
            for k in LWLOCK_COUNTERS:
                row[k] += r[k]
    return sorted(rows.values(), key=lambda r: (-r["wait_ns"], -r["acq"], r["tranche"]))


def lwlock_lines(rep, top):
    rows = rep.get("lwlocks") or []
    if not rows:
        return []
    body = []
    for r in rows[:top]:
        hold = fmt_ns(r["hold_ns"] // r["hold_samples"]) if r["hold_samples"] else "-"
        avg_wait = fmt_ns(r["wait_ns"] // r["waits"]) if r["waits"] else "-"
        body.append([r["tranche"], r["variant"], r["acq"], r["waits"], f"{100 * r['waits'] / max(r['acq'] + r['missed'], 1):.2f}%",
                     fmt_ns(r["wait_ns"]), avg_wait, hold])
    head = [["tranche", "variant", "acq", "waited", "share", "wait total", "wait avg", "hold avg"]]
    more = [f"  ... {len(rows) - top} more tranches (--top)"] if top and len(rows) > top else []
    return ["", "PostgreSQL LWLock tranches (LOCKSWAP_LWLOCK; every process, most waiting first; hold: 1 in 64 sampled):"] + \
        table(head + body, right_from=2) + more


def wtlock_rows(dumps):
    """WiredTiger's rwlocks counted in the counts mode (wtlock records), one row per process and
    lock, most waiting first; [] when no dump carries any. first_*: where the lock was
    initialised (else first taken), as (file, offset) of ip-1."""
    rows = []
    for d in dumps:
        for r in d.wtlocks:
            module, offset = locate(d.maps, r["first_ip"] - 1) if r["first_ip"] else (None, None)
            rows.append({"addr": r["addr"], "kind": "wtlock", "variant": r["variant"], "pid": d.pid,
                         "first_module": module, "first_offset": offset,
                         **{k: r[k] for k in WTLOCK_COUNTERS}})
    return sorted(rows, key=lambda r: (-r["wait_ns"], -r["contended"], -r["acq"], r["pid"], r["addr"]))


def wtlock_lines(rep, top):
    rows = rep.get("wtlocks") or []
    if not rows:
        return []
    body = []
    for r in rows[:top]:
        first = r.get("first") or (f"{os.path.basename(r['first_module'])}+{r['first_offset']:#x}"
                                   if r["first_module"] else "?")
        body.append([f"{r['addr']:#x}", "wtlock", r["variant"], r["pid"], r["acq"], r["rd_acq"], r["contended"],
                     f"{100 * r['contended'] / max(r['acq'], 1):.2f}%", fmt_ns(r["wait_ns"]),
                     fmt_ns(r["wait_ns"] // r["contended"]) if r["contended"] else "-", fmt_ns(r["wait_max_ns"]),
                     fmt_ns(r["hold_ns"] // r["hold_samples"]) if r["hold_samples"] else "-", first[:60]])
    head = [["addr", "kind", "variant", "pid", "acq", "rd_acq", "contended", "%cont", "wait total", "wait avg",
             "wait max", "hold avg", "initialised at"]]
    more = [f"  ... {len(rows) - top} more locks (--top)"] if top and len(rows) > top else []
    return ["", "WiredTiger rwlocks (LOCKSWAP_WTLOCK, counts mode; most waiting first; hold: write holds, "
                "1 in 64 sampled):"] + table(head + body, right_from=3) + more


def shown_if(profiled, items):
    """A table, or None without the profiler: an empty list would say there were no locks."""
    return items if profiled else None


def process_entry(d):
    """One process's figures. Those its dump does not hold are None, never 0 (a counts-only
    dump has no calls or lock records), and named in not_collected."""
    missing = d.not_collected()
    known = lambda figure, value: None if figure in missing else value
    lock_vals = d.locks.values()
    return {"pid": d.pid, "start_ns": d.start_ns, "seq": d.seq, "complete": d.complete,
            "file": d.path, "exe": d.exe, "variants": d.variants,
            "calls": known("calls", {f: d.calls.get(f, 0) for f in sorted(set(FAMILIES) | set(d.calls))}),
            "events": d.events, "dropped": known("dropped", d.dropped),
            "selected": selected_locks(d),
            "stats": d.stats,
            "acq": known("acq", sum(rec["acq"] for rec in lock_vals)),
            "contended": known("contended", sum(rec["contended"] for rec in lock_vals)),
            "not_collected": missing}


def collected_sum(procs, figure):
    """FIGURE summed over the processes that collected it; None when none did."""
    values = [p[figure] for p in procs if p[figure] is not None]
    return sum(values) if values else None


def lacking_pids(procs):
    """{figure: [pid, ...]} of the processes whose dumps do not hold it."""
    out = {}
    for p in procs:
        for figure in p["not_collected"]:
            out.setdefault(figure, []).append(p["pid"])
    return out


def is_cond_site(site):
    return site["lock_kind"] == "cond" or (site["lock_kind"] is None and site["op"] == "wait")


SELECTABLE_KINDS = ("mutex", "rwlock", "sem")


def selectors(s, symbolizer):
    """LOCKSWAP_SELECT matchers that pick the site's lock: the exact site that initialised it
    (or, never initialised, first took it) and, when known from debug info, that site's
    function (which picks every lock initialised in it). [] when the dump does not say."""
    if s["lock_kind"] not in SELECTABLE_KINDS or s["first_offset"] is None or s["first_module"] is None:
        return []
    out = [f"site:{os.path.basename(s['first_module'])}+{s['first_offset']:#x}"]
    fr = symbolizer.get(s["first_module"], s["first_offset"])
    if fr["function"] and fr["source"]:
        name = fr["function"].split("(")[0]
        if name and not any(c in name for c in " ;<"):   # templates and operators: the site alone
            out.append(f"func:{name}")
    return out


def out_sites(sites, symbolizer):
    result = []
    for rank, s in enumerate(sites, 1):
        where, frames = site_frames(s, symbolizer)
        result.append({"rank": rank, "op": s["op"], "addr": s["ip"], "module": s["module"],
                       "offset": s["offset"], "lock_addrs": s["lock_addrs"],
                       "lock_kind": s["lock_kind"], "pids": s["pids"],
                       **{k: s[k] for k in COUNTERS}, "contended_pct": s["contended_pct"],
                       "wait": s["wait"], "hold": s["hold"], "where": where,
                       "backtrace": frames, "backtrace_pid": s["bt_pid"],
                       "variant": s["variant"], "select": selectors(s, symbolizer)})
    return result


def side_cols(side):
    return [fmt_ns(side["total_ns"]), fmt_ns(side["avg_ns"]), fmt_ns(side["p50_ns"]),
            fmt_ns(side["p99_ns"]), fmt_ns(side["max_ns"])]


def pid_list(pids):
    return (f"pid {pids[0]}" if len(pids) == 1 else
            f"pids {', '.join(str(p) for p in pids[:12])}" + (", ..." if len(pids) > 12 else ""))


def counts_only(rep, pids):
    """Whether the processes PIDS all ran counts-only: else a figure is missing because their
    dumps lack its records (truncated, or written by another version)."""
    return all(p["stats"] == "counts" for p in rep["processes"] if p["pid"] in pids)


def lacking_note(rep, figure):
    """'' when every process collected FIGURE, else which processes a total of it leaves out."""
    pids = rep["totals"]["not_collected"].get(figure, [])
    if not pids:
        return ""
    n = len(rep["processes"])
    return (f" ({n - len(pids)} of {n} processes; not collected for {pid_list(pids)}, "
            f"{'counts-only' if counts_only(rep, pids) else 'not in the dump'})")


# Events counted on a lock's own slow paths: any of them shows the program took locks, even
# where nobody counted its calls (cid_* count concurrency ids, registry_* thread slots and
# stats_* the profiler's tables, none of them a lock being taken).
LOCK_PATH_EVENT_PREFIXES = ("rwsem_", "futex_", "cond_", "percid_", "lockref_", "sem_", "delegated_to_glibc")
COLLECT_HINT = f"run with {PROG} --profile / LOCKSWAP_STATS=profile to collect them"


def calls_lines(rep):
    """The calls per family, and what they show. A conclusion such as "no lock calls at all" is
    drawn only when every process's calls were counted: counts-only dumps never count them."""
    calls = rep["totals"]["calls"]
    if calls is None:
        out = [f"  calls: not collected in the counts-only mode ({COLLECT_HINT})"
               if counts_only(rep, rep["totals"]["not_collected"]["calls"]) else
               "  calls: not collected (the dumps have no calls records)"]
        events = rep["totals"]["events"]
        taken = sum(n for name, n in events.items() if name.startswith(LOCK_PATH_EVENT_PREFIXES))
        if taken:
            out.append(f"  the lock events show that locks were taken ({taken} slow-path lock events below); "
                       "how many calls were made was not counted")
        return out
    partial = lacking_note(rep, "calls")
    out = [f"  calls{partial}: " + shown(", ".join(f"{f} {calls.get(f, 0)}" for f in calls))]
    if partial:
        return out
    if all(calls.get(f, 0) == 0 for f in ("mutex", "rwlock", "cond")):
        out.append("  no pthread/C11 lock calls at all (mutex, rwlock, cond = 0): "
                   "the mutex and rwlock variants cannot change this program")
    else:
        idle = [f for f in FAMILIES if calls.get(f, 0) == 0]
        if idle:
            out.append(f"  no calls of: {', '.join(idle)}")
    return out


def tables_lines(rep):
    """The per-lock tables' size and acquisitions, from the profiler alone."""
    totals = rep["totals"]
    if not rep["profiled"]:
        return ["  lock objects, call sites, acquisitions: not collected in the counts-only mode "
                "(the profiler was off)"]
    out = [f"  lock objects: {rep['locks_total']} (+{rep['cond_locks_total']} condition variables), "
           f"call sites: {rep['sites_total']} (+{rep['cond_sites_total']} condition waits), "
           f"acquisitions {totals['acq']}, contended {totals['contended']}" + lacking_note(rep, "acq")]
    dropped = totals["dropped"]
    if dropped and (dropped["locks"] or dropped["sites"]):
        out.append(f"  DROPPED (tables full, not in this report): {dropped['locks']} locks, "
                   f"{dropped['sites']} sites")
    return out


def header_lines(rep):
    procs = rep["processes"]
    out = [f"lockswap report: {len(rep['files'])} file(s), {len(procs)} process(es)"
           + (f" (pids {', '.join(str(p['pid']) for p in procs[:12])}"
              + (", ..." if len(procs) > 12 else "") + ")" if procs else "")]
    variants = {}
    for p in procs:
        variants.setdefault(variant_text(p["variants"]), []).append(p["pid"])
    for text, pids in variants.items():
        out.append(f"  variants: {shown(text)}  ({len(pids)} process(es))")
    out += calls_lines(rep) + tables_lines(rep)
    incomplete = [p["pid"] for p in procs if not p["complete"]]
    if incomplete:
        out.append(f"  truncated dumps (no end record) used for pids {incomplete}")
    if rep["profiled"]:   # about the per-lock tables' times: nothing to qualify without them
        out += textwrap.wrap(PERCENTILE_NOTE, width=100, initial_indent="  ", subsequent_indent="    ")
    return out


NOT_COLLECTED_CELL = "-"


def process_lines(rep):
    rows = [["pid", "exe", "variants", *FAMILIES, "acq", "contended", "file"]]
    cell = lambda v: NOT_COLLECTED_CELL if v is None else v
    for p in rep["processes"]:
        calls = [None] * len(FAMILIES) if p["calls"] is None else [p["calls"].get(f, 0) for f in FAMILIES]
        rows.append([p["pid"], os.path.basename(p["exe"]), variant_text(p["variants"]),
                     *map(cell, calls), cell(p["acq"]), cell(p["contended"]), p["file"]])
    out = ["", "processes:"] + table(rows, right_from=3)
    if any(p["not_collected"] for p in rep["processes"]):
        out.append(f"  {NOT_COLLECTED_CELL}: not collected (counts-only dump)")
    return out


def selected_locks(d):
    """The locks LOCKSWAP_SELECT's rules chose in one process, each with its rule's text and
    the lock events of its own calls (the process's event totals include them)."""
    return [{**sel, "rule_text": d.rules.get(sel["rule"], {}).get("text", "?")} for sel in d.selected] + \
        [{"addr": None, "rule": i, "rule_text": r["text"], "unattributed_locks": r["unattributed"]}
         for i, r in sorted(d.rules.items()) if r["unattributed"]]


def selected_lines(rep):
    out = []
    for p in rep["processes"]:
        for sel in p["selected"]:
            if sel["addr"] is None:
                out.append(f"  pid {p['pid']}: {sel['unattributed_locks']} more locks chosen by "
                           f"'{sel['rule_text']}' (no counters left: their events are in the totals only)")
                continue
            out.append(f"  pid {p['pid']} {sel['family']} {hex(sel['addr'])} ran {sel['variant']}, "
                       f"chosen by '{sel['rule_text']}':")
            rows = [[name, n] for name, n in sorted(sel["events"].items(), key=lambda kv: -kv[1])]
            out += ["    " + line for line in table(rows, right_from=1)] if rows else ["    no lock events"]
    return ["", "lock events of the selected locks (LOCKSWAP_SELECT):"] + out if out else []


def event_lines(rep):
    events = rep["totals"]["events"]
    if not events:
        return ["", "lock events: none (only slow-path events are counted; glibc counts none)"]
    # counts first, then the durations (*_ns: the wait accounting, cid_slow_ns), each by size
    rows = [[name, n] for name, n in sorted(events.items(), key=lambda kv: (kv[0].endswith("_ns"), -kv[1]))]
    return ["", "lock events (all processes):"] + table(rows, right_from=1)


TIME_HEAD = ["total", "avg", "p50", "p99", "max"]


def lock_lines(rep):
    if not rep["locks"]:
        return ["", "locks: none recorded"]
    rows = [["addr", "kind", "variant", "procs", "acq", "contended", "%cont", *[f"wait.{h}" for h in TIME_HEAD],
             *[f"hold.{h}" for h in TIME_HEAD]]]
    for s in rep["locks"]:
        rows.append([f"{s['addr']:#x}", s["kind"], shown(s.get("variant") or "?"), len(s["pids"]), s["acq"], s["contended"],
                     f"{s['contended_pct']:.1f}", *side_cols(s["wait"]), *side_cols(s["hold"])])
    return ["", f"top {len(rep['locks'])} of {rep['locks_total']} locks by {rep['sort']}:"] + \
        table(rows, right_from=3)


def cond_lines(rep):
    """Condition waits are idle time (a thread waiting for work), so they are not ranked with
    contention; shown with their wait-time columns only."""
    if not rep["cond_sites"]:
        return []
    rows = [["#", "site", "cond", "waits", *[f"wait.{h}" for h in TIME_HEAD]]]
    for s in rep["cond_sites"]:
        lock = ",".join(f"{a:#x}" for a in s["lock_addrs"][:2])
        rows.append([s["rank"], site_name(s), lock or "?", s["acq"], *side_cols(s["wait"])])
    return ["", f"condition waits (idle time, not contention; top {len(rep['cond_sites'])} of "
                f"{rep['cond_sites_total']} by {rep['sort']}):"] + table(rows, right_from=3)


def site_name(s):
    fr = s["where"]
    nearest = fr["function"] and not fr["source"]  # no debug info: the nearest (exported) symbol
    return ((("~" if nearest else "") + fr["function"] if fr["function"] else None) or
            (f"{os.path.basename(fr['module'])}+{fr['offset']:#x}"
                               if fr["module"] else f"{s['addr']:#x}"))[:48]


def site_lines(rep):
    if not rep["sites"]:
        return ["", "call sites: none recorded"]
    out = ["", f"top {len(rep['sites'])} of {rep['sites_total']} call sites by {rep['sort']}:"]
    rows = [["#", "site", "op", "lock", "acq", "contended", "%cont",
             *[f"wait.{h}" for h in TIME_HEAD], *[f"hold.{h}" for h in TIME_HEAD]]]
    for s in rep["sites"]:
        name = site_name(s)
        lock = ",".join(f"{a:#x}" for a in s["lock_addrs"][:2]) + ("..." if len(s["lock_addrs"]) > 2 else "")
        rows.append([s["rank"], name, s["op"], lock or "?", s["acq"], s["contended"],
                     f"{s['contended_pct']:.1f}", *side_cols(s["wait"]), *side_cols(s["hold"])])
    out += table(rows, right_from=4)
    out += ["", "call sites with backtraces (innermost first; ~name: no debug info there, the nearest "
            "symbol, which may not be the real function):"]
    for s in rep["sites"]:
        out.append(f"  #{s['rank']} {shown(s['op'])} at {frame_text(s['where'], s['addr'])}  "
                   f"[{s['addr']:#x}]")
        if s["select"]:
            family = s["lock_kind"]
            out.append(f"     lock variant {shown(s['variant'] or '?')}; to swap this lock alone: "
                       f"--select '{family}=VARIANT@{shown(s['select'][0])}'"
                       + (f" (or @{shown(s['select'][1])}: every {family} initialised there)"
                          if len(s["select"]) > 1 else ""))
        if s["backtrace"]:
            out.append(f"     sampled backtrace (pid {s['backtrace_pid']}):")
            for fr in s["backtrace"]:
                out.append(f"       {fr['addr']:#014x} {frame_text(fr, fr['addr'])}")
        else:
            out.append("     (no backtrace sampled: backtraces are taken on contended acquisitions)")
    return out


NO_PROFILE_LINE = ("no per-lock data: the profiler was off (run with LOCKSWAP_STATS=profile / "
                   f"{PROG} --profile)")


def text_report(rep, per_process):
    reach = reach_model.text_lines(rep["reach"], table, shown)
    if not rep["processes"]:   # lockswap attribute's records alone: no dump of the library
        return "\n".join(reach + ["", f"lockswap report: {len(rep['files'])} file(s), no dump of the library "
                                       "(only lockswap attribute's eBPF records)"])
    out = reach + [""] + header_lines(rep) if reach else header_lines(rep)
    if per_process or len(rep["processes"]) <= 16:
        out += process_lines(rep)
    out += lwlock_lines(rep, 20) + wtlock_lines(rep, 20) + event_lines(rep) + selected_lines(rep)
    if rep["profiled"]:
        out += lock_lines(rep) + site_lines(rep) + cond_lines(rep)
    else:
        out += ["", NO_PROFILE_LINE]
    return "\n".join(out)


def report_png(rep, path):
    plt, why = import_pyplot()
    if plt is None:
        warn(f"report: PNG {path} skipped: {why}")
        return
    sites = [s for s in rep["sites"] or [] if sum(s["wait"]["hist"])][:8]
    fig, ax = plt.subplots(figsize=(10, 5.5))
    if not sites:   # counts-only dumps recorded no acquisitions at all, contended or not
        ax.text(0.5, 0.5, "no contended acquisitions recorded" if rep["profiled"] else
                "no per-lock data: counts-only dumps (the profiler was off)", ha="center", va="center")
    for s in sites:
        hist = s["wait"]["hist"]
        total = sum(hist)
        xs = [1 << i for i in range(HIST_BUCKETS)]
        name = site_name(s)
        ax.step(xs, [100.0 * n / total for n in hist], where="post",
                label=f"#{s['rank']} {name[:40]} {s['op']} (n={total}, total {fmt_ns(s['wait']['total_ns'])})")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("wait time, ns (log2 buckets: [2^i, 2^(i+1)))")
    ax.set_ylabel("% of the site's contended acquisitions")
    ax.set_title(f"lockswap: wait-time distribution of the top call sites ({len(rep['processes'])} processes)")
    if sites:
        lo = min(min(i for i, n in enumerate(s["wait"]["hist"]) if n) for s in sites)
        hi = max(max(i for i, n in enumerate(s["wait"]["hist"]) if n) for s in sites)
        ax.set_xlim(1 << max(lo - 1, 0), 1 << min(hi + 2, HIST_BUCKETS))
        ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"{PROG}: report: wrote {path}", file=sys.stderr)


def write_json(rep, out):
    """REP as JSON: one top-level key a line, a list's items one a line. Each value goes through
    the C encoder (json's indent= runs the pure-Python one: minutes for 100k sites). ASCII only:
    undecodable bytes of names come out as \\udcXX."""
    out.write("{\n")
    for i, (key, value) in enumerate(rep.items()):
        sep = "," if i + 1 < len(rep) else ""
        if isinstance(value, list) and value:
            items = ",\n  ".join(json.dumps(v) for v in value)
            out.write(f" {json.dumps(key)}: [\n  {items}\n ]{sep}\n")
        else:
            out.write(f" {json.dumps(key)}: {json.dumps(value)}{sep}\n")
    out.write("}\n")


def cmd_report(args):
    rep = build_report(args)
    if not rep["processes"] and rep["reach"] is None:
        raise SystemExit(shown(f"{PROG} report: no lockswap-v1 statistics found in {', '.join(args.files)} "
                               "(run with --stats and --stats-file)"))
    if args.json:
        write_json(rep, sys.stdout)
    else:
        # surrogate-escaped bytes of file names left in the text: as \xNN, never an encoding error
        print(text_report(rep, args.per_process).encode("utf-8", "backslashreplace").decode("utf-8"))
    if args.png:
        report_png(rep, args.png)
    return 0
