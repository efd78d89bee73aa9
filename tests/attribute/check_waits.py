"""check_waits.py RECORDS MUTEX_KIND — the records of waits.c under `lockswap attribute`:
every kind at the site waits.c waits in, with a plausible count and time (each phase lasts
about 500 ms; a wait is timed in the kernel, so n > 0 and ns within the phase's bounds)."""
import sys

path, mutex_kind = sys.argv[1], sys.argv[2]
recs = []
for line in open(path):
    w = line.split()
    if len(w) < 2 or w[0] != "lockswap-v1":
        continue
    recs.append((w[1], dict(x.split("=", 1) for x in w[2:] if "=" in x)))
waits = [f for r, f in recs if r == "wait" and f.get("src") == "ebpf"]
dropped = [f for r, f in recs if r == "dropped"]
fails = []


def sites(kind, fn):
    return [f for f in waits if f["kind"] == kind and f["site"].endswith(":" + fn)]


def expect(kind, fn, min_n, min_ns, max_ns, why):
    got = sites(kind, fn)
    n, ns = sum(int(f["n"]) for f in got), sum(int(f["ns"]) for f in got)
    where = sorted({(f["kind"], f["n"], f["ns"]) for f in waits if f["site"].endswith(":" + fn)})
    if n < min_n or not (min_ns <= ns <= max_ns):
        fails.append(f"{why}: kind={kind} at {fn}: n={n} ns={ns} (want n>={min_n}, "
                     f"{min_ns}<=ns<={max_ns}); records at {fn}: {where}")
    else:
        print(f"ok: {why}: kind={kind} site ...:{fn} n={n} ns={ns}")


S = 1_000_000_000
# 4 threads for 0.5 s: the waiters' time sums to at most 4 x 0.5 s (plus the phase's edges);
# how much of it is spent waiting depends on the scheduling of a busy machine: at least 1 ms
expect(mutex_kind, "attr_mutex_section", 5, 1_000_000, 4 * S, "contended pthread mutex")
expect("futex", "attr_futex_lock", 5, 1_000_000, 4 * S, "syscall(SYS_futex) lock")
expect("glibc_internal", "attr_malloc_churn", 1, 10_000, 8 * S, "malloc arena lock")
expect("idle", "attr_epoll_idle", 5, 200_000_000, 1 * S, "epoll_wait idle loop")
expect("delay", "attr_select_delay", 50, 100_000_000, 1 * S, "select(0,...) delay loop")
# the mutex waits are never given the other lock class (a stale return address found by the
# stack scan may put a join or a sleep at this site: not checked)
other = {f["kind"] for f in waits if f["site"].endswith(":attr_mutex_section")
         and f["kind"] in ("glibc_lock", "lockswap", "futex", "cond") and f["kind"] != mutex_kind}
if other:
    fails.append(f"mutex waits also classified {sorted(other)}")
if mutex_kind == "lockswap" and not any("liblockswap" in f.get("stack", "") for f in sites("lockswap", "attr_mutex_section")):
    fails.append("lockswap waits without a liblockswap frame in their stack")
if len(dropped) != 1:
    fails.append(f"{len(dropped)} dropped records, want 1")
elif any(dropped[0].get(k, "0") != "0" for k in ("waits", "pids", "regs")):
    fails.append(f"dropped: {dropped[0]}")
# the via key names the API entered (the import the site called, or the library frame)
for kind, fn, via in ((mutex_kind, "attr_mutex_section", "pthread_mutex_lock" if mutex_kind == "glibc_lock" else None),
                      ("futex", "attr_futex_lock", "syscall"), ("idle", "attr_epoll_idle", "epoll_wait")):
    vias = {f.get("via") for f in sites(kind, fn)}
    if via and via not in vias:
        fails.append(f"{kind} at {fn}: via {sorted(vias)}, want {via}")
for f in fails:
    print("FAIL:", f)
sys.exit(1 if fails else 0)
