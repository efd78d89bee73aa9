"""Merging the dumps of many processes into per-lock and per-site statistics."""

import math
import os
from .statsfile import COUNTERS, FAMILIES, HIST_BUCKETS, MAX_LOCKS_PER_SITE
from .symbolize import locate


HIDDEN_FRAME_PREFIX = "liblockswap"   # the library's own frames say nothing about the program


def new_side():
    return {"total_ns": 0, "max_ns": 0, "hist": [0] * HIST_BUCKETS}


def add_side(side, rec):
    side["total_ns"] += rec["total_ns"]
    side["max_ns"] = max(side["max_ns"], rec["max_ns"])
    for i, n in enumerate(rec["hist"]):
        side["hist"][i] += n


def percentile(hist, q, max_ns):
    total = sum(hist)
    if total == 0:
        return 0
    rank, seen = max(1, math.ceil(q * total)), 0
    for i, n in enumerate(hist):
        seen += n
        if seen >= rank:
            upper = (1 << (i + 1)) - 1
            return min(upper, max_ns) if max_ns else upper
    return max_ns


def finish_side(side, fallback_count):
    count = sum(side["hist"]) or fallback_count
    side["count"] = count
    side["avg_ns"] = side["total_ns"] // count if count else 0
    side["p50_ns"] = percentile(side["hist"], 0.50, side["max_ns"])
    side["p99_ns"] = percentile(side["hist"], 0.99, side["max_ns"])
    return side


def new_stat(**ident):
    stat = dict(ident)
    stat.update({k: 0 for k in COUNTERS})
    stat.update({"pids": [], "_pids": set(), "wait": new_side(), "hold": new_side()})
    return stat


def add_stat(stat, rec, pid):
    for k in COUNTERS:
        stat[k] += rec[k]
    add_side(stat["wait"], rec["wait"])
    add_side(stat["hold"], rec["hold"])
    if pid not in stat["_pids"]:      # a set beside the list: many processes stay linear
        stat["_pids"].add(pid)
        stat["pids"].append(pid)


def finish_stat(stat):
    del stat["_pids"]
    stat["contended_pct"] = round(100.0 * stat["contended"] / stat["acq"], 2) if stat["acq"] else 0.0
    finish_side(stat["wait"], stat["contended"])
    finish_side(stat["hold"], 0)
    return stat


def merge(dumps):
    """Processes' snapshots -> totals, locks and sites. Locks at the same address in processes of
    the same executable are summed (forked workers inherit their parent's objects); sites are
    summed by (file, offset, op), i.e. by code location, across processes. A total is summed
    over the dumps that hold it, and None when none does (counts-only dumps: never zeros)."""
    totals = {"calls": None, "events": {}, "dropped": None}
    locks, sites = {}, {}
    for d in dumps:
        missing = d.not_collected()
        if "calls" not in missing:
            totals["calls"] = totals["calls"] or {f: 0 for f in FAMILIES}
            for fam, n in d.calls.items():
                totals["calls"][fam] = totals["calls"].get(fam, 0) + n
        for name, n in d.events.items():
            totals["events"][name] = totals["events"].get(name, 0) + n
        if "dropped" not in missing:
            totals["dropped"] = totals["dropped"] or {"locks": 0, "sites": 0}
            for k, n in d.dropped.items():
                totals["dropped"][k] += n
        for rec in d.locks.values():
            key = (d.exe, rec["addr"], rec["kind"])
            if key not in locks:
                locks[key] = new_stat(addr=rec["addr"], kind=rec["kind"], exe=d.exe, variant=None,
                                      first_module=None, first_offset=None)
            note_first_sight(locks[key], d, rec)
            add_stat(locks[key], rec, d.pid)
        for rec in d.sites:
            merge_site(sites, d, rec)
    for stat in list(locks.values()) + list(sites.values()):
        finish_stat(stat)
    return totals, list(locks.values()), list(sites.values())


def note_first_sight(stat, d, lock):
    """The variant the lock ran and the site that initialised it (or first took it), as
    (file, offset): what a LOCKSWAP_SELECT site:/func: rule matches."""
    stat["variant"] = stat["variant"] or lock["variant"]
    if stat["first_module"] is None and lock["first_ip"] is not None:
        stat["first_module"], stat["first_offset"] = locate(d.maps, lock["first_ip"])


def merge_site(sites, d, rec):
    ip, op = rec["ip"], rec["op"]
    module, offset = locate(d.maps, ip)
    key = (module or d.exe, offset, op) if module else (d.exe, ip, op, "unmapped")
    if key not in sites:
        sites[key] = new_stat(ip=ip, op=op, module=module, offset=offset, lock_addrs=[],
                              lock_kind=None, bt=[], bt_pid=None, variant=None,
                              first_module=None, first_offset=None)
    s = sites[key]
    add_stat(s, rec, d.pid)
    lock = d.locks.get(rec["lock"])
    if lock is not None:
        s["lock_kind"] = s["lock_kind"] or lock["kind"]
        note_first_sight(s, d, lock)
        if len(s["lock_addrs"]) < MAX_LOCKS_PER_SITE and lock["addr"] not in s["lock_addrs"]:
            s["lock_addrs"].append(lock["addr"])
    if rec["bt"] and not s["bt"]:
        s["bt"] = [(ip_, *locate(d.maps, ip_)) for ip_ in rec["bt"]]
        s["bt_pid"] = d.pid


def sort_key(name):
    return {"wait": lambda s: (s["wait"]["total_ns"], s["contended"]),
            "contended": lambda s: (s["contended"], s["wait"]["total_ns"]),
            "hold": lambda s: (s["hold"]["total_ns"], s["acq"]),
            "acq": lambda s: (s["acq"], s["contended"])}[name]


def site_frames(site, symbolizer):
    """The site's location, then its sampled backtrace (library frames dropped)."""
    where = symbolizer.get(site["module"], site["offset"])
    where["addr"] = site["ip"]
    frames = []
    for ip, mod, off in site["bt"]:
        if mod and os.path.basename(mod).startswith(HIDDEN_FRAME_PREFIX):
            continue
        fr = dict(symbolizer.get(mod, off))
        fr["addr"] = ip
        frames.append(fr)
    return where, frames
