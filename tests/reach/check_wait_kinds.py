#!/usr/bin/env python3
"""tests/reach/check_wait_kinds.py — reads the statistics dump of wait_kinds
(LOCKSWAP_STATS=counts) and checks that each phase's wait landed where
docs/statistics.md says: the program's futex lock as one `futex` site, the
epoll_wait loop as `idle`, the select(0,...) backoff as `delay` with its
callers, the condition wait as `cond`, and the contended pthread mutex as
wait_mutex_ns under a native mutex variant, and nowhere under glibc's (its
futex is not syscall(): it must not show up as a futex site).

Bounds are generous (a loaded machine oversleeps); the split is printed
either way. usage: check_wait_kinds.py <program output> <stats file>"""
import sys

MS = 1_000_000


def parse(path):
    begin, events, waits, maps = {}, {}, [], []
    for line in open(path, encoding="utf-8", errors="replace"):
        f = line.split()
        if len(f) < 2 or f[0] != "lockswap-v1":
            continue
        kv = dict(x.split("=", 1) for x in f[2:] if "=" in x)
        if f[1] == "begin":
            begin = kv
        elif f[1] == "event":
            events[kv["name"]] = int(kv["count"])
        elif f[1] == "wait":
            waits.append(kv)
        elif f[1] == "map":
            maps.append((int(kv["start"], 16), int(kv["end"], 16), kv["path"]))
    return begin, events, waits, maps


def main():
    expected = {}
    for line in open(sys.argv[1]):
        f = line.split()
        if len(f) == 3 and f[0] == "phase":
            expected[f[1]] = int(f[2].split("=")[1])
    begin, events, waits, maps = parse(sys.argv[2])
    failures = []

    def check(what, ok, detail):
        print(f"  {'ok  ' if ok else 'FAIL'} {what}: {detail}")
        if not ok:
            failures.append(what)

    def sites(kind, call):
        return [w for w in waits if w["kind"] == kind and w["call"] == call]

    def total(ws, key="ns"):
        return sum(int(w[key]) for w in ws)

    native_mutex = begin.get("mutex", "glibc") != "glibc"
    exe = begin.get("exe", "")
    print(f"variant mutex={begin.get('mutex')} exe={exe}")
    print("expected and observed split (ms):")
    futex = sites("futex", "syscall")
    idle = sites("idle", "epoll_wait")
    delay = sites("delay", "select")
    cond = [w for w in waits if w["kind"] == "cond"]
    mutex_ns = events.get("wait_mutex_ns", 0) + events.get("spin_mutex_ns", 0)
    rows = [("mutex (lockswap: wait_mutex_ns + spin_mutex_ns)", expected.get("mutex", 0) if native_mutex else 0,
             mutex_ns),
            ("futex (syscall futex sites)", expected.get("futex", 0), total(futex)),
            ("idle (epoll_wait)", expected.get("idle", 0), total(idle)),
            ("delay (select, no descriptors)", expected.get("delay", 0), total(delay)),
            ("cond (condition waits)", expected.get("cond", 0), total(cond))]
    for name, exp, obs in rows:
        print(f"  {name:<50} expected {exp / MS:8.1f}  observed {obs / MS:8.1f}")
    for kind in ("futex", "cond", "idle", "delay"):
        ws = [w for w in waits if w["kind"] == kind]
        print(f"  all {kind} sites: {len(ws)} sites, n={total(ws, 'n')}, {total(ws) / MS:.1f} ms")

    def within(obs, exp, lo, hi):
        return lo * exp <= obs <= hi * exp

    check("one futex site (the program's futex lock)", len(futex) == 1, f"{len(futex)} site(s)")
    check("futex wait time", within(total(futex), expected["futex"], 0.5, 6.0),
          f"{total(futex) / MS:.1f} ms, n={total(futex, 'n')}")
    check("futex waits per contended round", 10 <= total(futex, "n") <= 40, f"n={total(futex, 'n')}")
    if native_mutex:
        check("wait_mutex_ns + spin_mutex_ns", within(mutex_ns, expected["mutex"], 0.5, 6.0), f"{mutex_ns / MS:.1f} ms")
        check("wait_mutex_n", events.get("wait_mutex_n", 0) >= 1, f"{events.get('wait_mutex_n', 0)}")
    else:
        check("glibc's mutex wait is not seen (no wait_mutex_* event)",
              "wait_mutex_ns" not in events and "wait_mutex_n" not in events, f"{events.get('wait_mutex_ns', 0)}")
    check("idle: one epoll_wait site, 10 waits", len(idle) == 1 and total(idle, "n") == 10,
          f"{len(idle)} site(s), n={total(idle, 'n')}")
    check("idle wait time", within(total(idle), expected["idle"], 0.8, 6.0), f"{total(idle) / MS:.1f} ms")
    check("delay: one select site, 10 waits", len(delay) == 1 and total(delay, "n") == 10,
          f"{len(delay)} site(s), n={total(delay, 'n')}")
    check("delay wait time", within(total(delay), expected["delay"], 0.8, 6.0), f"{total(delay) / MS:.1f} ms")
    check("delay site has a backtrace", bool(delay) and "bt" in delay[0], delay[0].get("bt", "-") if delay else "-")
    check("cond: one site", len(cond) == 1, f"{len(cond)} site(s)")
    check("cond wait time", within(total(cond), expected["cond"], 0.5, 6.0), f"{total(cond) / MS:.1f} ms")
    check("no misfiled waits", all(w["kind"] in ("futex", "cond", "idle", "delay") for w in waits), "kinds")

    # Every site is the program's own call: its ip lies in a mapping of the
    # executable (the map records come with the wait records in counts mode).
    def in_exe(ip):
        return any(s <= ip < e and p == exe for s, e, p in maps)
    check("map records written", bool(maps), f"{len(maps)} map records")
    for group, ws in (("futex", futex), ("idle", idle), ("delay", delay), ("cond", cond)):
        for w in ws:
            check(f"{group} site ip in the executable", in_exe(int(w["ip"], 16)), w["ip"])
    if failures:
        print(f"FAILED: {', '.join(failures)}")
        return 1
    print("wait kinds OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
