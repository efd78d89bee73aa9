"""lockswap_cli.stats — the one place that turns interleaved benchmark rounds into
verdicts. Used by `lockswap compare`, the server runners' report, the
benchmark matrices and the speed regression check (standard library only).

Method (docs/measuring.md explains why):
- A *round* runs every variant once, back to back, in a rotated order; the
  unit of comparison is the per-round ratio variant/reference, so slow drifts
  of the machine cancel within a round.
- The estimate is the median of those ratios; its confidence interval is the
  distribution-free one of the sign test: with n ratios sorted, [r_(k), r_(n-k+1)]
  covers the true median with probability 1 - 2·P(Binomial(n, 1/2) < k). The
  largest k whose coverage reaches the asked level is chosen; when even
  [min, max] does not reach it (n < 6 for 95%), the achieved coverage is
  reported and the verdict is "not enough runs".
- A difference is called only when the interval excludes 1.0.
- Rounds whose core-to-core probe moved between before and after (the host
  migrated the vCPUs) are dropped before any of this (`steady_round`).
"""

import math
import statistics
import time

DEFAULT_LEVEL = 0.95
PROBE_TOLERANCE = 1.5   # before/after core-to-core round trips within this factor: a steady round
# A round trip below this is the fast placement mode of a moving VM (~60-100
# ns), at or above it the slow one (~400-1000 ns): docs/measuring.md.
FAST_C2C_NS = 200
# With one placement mode asked for, a round starts only once the probe reads
# it: polled every MODE_POLL_S for up to MODE_WAIT_S (then the round runs
# anyway and is dropped unless the mode came). The fast mode comes in
# stretches of seconds to a minute: a round started blindly mostly misses it.
MODE_POLL_S = 0.5
MODE_WAIT_S = 120


def median(xs):
    """The median of the values that are there (None: a missing one, skipped); None when none is."""
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def geomean(xs):
    """None unless every value is there: a mean over the cells that happened to
    run (a failed variant, rounds dropped by --mode) would pass for the whole."""
    xs = list(xs)
    if not xs or any(x is None or x <= 0 for x in xs):
        return None
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def _binom_cdf_below(n, k):
    """P(Binomial(n, 1/2) < k)."""
    return sum(math.comb(n, i) for i in range(k)) / 2 ** n


def median_ci(xs, level=DEFAULT_LEVEL):
    """(median, lo, hi, coverage) of the sign-test interval; coverage is what
    the returned interval achieves (>= level when enough values exist)."""
    xs = sorted(x for x in xs if x is not None)
    n = len(xs)
    if n == 0:
        return None, None, None, 0.0
    best_k, best_cov = 1, 1 - 2 * _binom_cdf_below(n, 1)
    for k in range(2, n // 2 + 1):
        cov = 1 - 2 * _binom_cdf_below(n, k)
        if cov < level:
            break
        best_k, best_cov = k, cov
    return statistics.median(xs), xs[best_k - 1], xs[n - best_k], best_cov


def runs_needed(level=DEFAULT_LEVEL):
    """Fewest values whose [min, max] reaches `level` (6 for 95%, 5 for 90%)."""
    n = 1
    while 1 - 2 * _binom_cdf_below(n, 1) < level:
        n += 1
    return n


def steady_round(before_ns, after_ns, tolerance=PROBE_TOLERANCE):
    """True when a round's core-to-core probes agree: no placement change
    across it. A missing probe (single CPU, probe unavailable) counts as steady."""
    if not before_ns or not after_ns:
        return True
    return max(before_ns, after_ns) / min(before_ns, after_ns) <= tolerance


def rotated(items, i):
    """items rotated left by i: round i's order, so every variant takes every position."""
    i %= len(items)
    return items[i:] + items[:i]


class RoundSlot:
    """One round of interleaved_rounds(): its number (1-based), the order to
    run the variants in, and, once the caller ran them, the probes and verdict."""

    def __init__(self, number, order, missing):
        self.number = number
        self.order = order
        self.missing = missing          # rounds still to keep, this one included
        self.probe_before = self.probe_after = None
        self.steady = self.kept = False


def in_mode(before_ns, after_ns, mode):
    """True when `mode` is None or both probes of a round read that placement mode."""
    return mode is None or placement_mode(before_ns) == placement_mode(after_ns) == mode


def wait_for_mode(probe, mode):
    """The core-to-core probe's reading once it reads `mode` ('fast'/'slow'),
    polled every MODE_POLL_S for up to MODE_WAIT_S; the last reading when the
    mode did not come, the first one without a mode or probe."""
    deadline = time.monotonic() + MODE_WAIT_S
    c2c = probe_c2c(probe)
    while mode and c2c and placement_mode(c2c) != mode and time.monotonic() < deadline:
        time.sleep(MODE_POLL_S)
        c2c = probe_c2c(probe)
    return c2c


def interleaved_rounds(variants, probe, want, max_rounds, keep_unsteady=False, offset=0, mode=None):
    """The one round loop of every measuring driver. Yields a RoundSlot per
    round, the core-to-core probe taken just before; the caller runs every
    variant of slot.order; then the probe after decides whether the round is
    steady (kept; every round with keep_unsteady). With `mode` ('fast' or
    'slow') a round starts once the probe reads that placement mode
    (wait_for_mode), and a steady round is kept only when both probes read
    it. Rounds run until `want` are kept or `max_rounds` ran: a dropped
    round is run again."""
    kept = started = 0
    while kept < want and started < max_rounds:
        slot = RoundSlot(started + 1, rotated(list(variants), offset + started), want - kept)
        slot.probe_before = wait_for_mode(probe, mode)
        yield slot
        slot.probe_after = probe_c2c(probe)
        slot.steady = steady_round(slot.probe_before, slot.probe_after) and \
            in_mode(slot.probe_before, slot.probe_after, mode)
        slot.kept = slot.steady or keep_unsteady
        kept += slot.kept
        started += 1


def placement_mode(c2c_ns):
    """'fast' or 'slow' for a core-to-core round trip in ns (FAST_C2C_NS);
    None when there was no probe."""
    if not c2c_ns:
        return None
    return "fast" if c2c_ns < FAST_C2C_NS else "slow"


def rounds_mode(c2c_per_round):
    """The placement mode most rounds ran in (ties: slow), or None without probes."""
    modes = [m for m in map(placement_mode, c2c_per_round) if m]
    if not modes:
        return None
    return "fast" if modes.count("fast") > modes.count("slow") else "slow"


def paired_ratios(rounds, variant, reference):
    """rounds: list of {variant: value}; the per-round ratio variant/reference
    of every round that has both."""
    out = []
    for r in rounds:
        a, b = r.get(variant), r.get(reference)
        if a is not None and b:
            out.append(a / b)
    return out


class Verdict:
    """One variant against the reference: speed = how many times faster the
    variant is (>1 faster), with its interval, as hyperfine states it."""

    def __init__(self, ratios, higher_is_better, level=DEFAULT_LEVEL):
        self.n = len(ratios)
        # Work in "speed-up" space: for a time metric, reference/variant.
        speed = [r if higher_is_better else 1 / r for r in ratios if r]
        self.speed, self.lo, self.hi, self.coverage = median_ci(speed, level)
        self.level = level
        if self.n == 0:
            self.word = "no runs"
        elif self.coverage < level:
            self.word = "not enough runs"
        elif self.lo > 1.0:
            self.word = "faster"
        elif self.hi < 1.0:
            self.word = "slower"
        else:
            self.word = "no significant difference"

    def interval_text(self):
        if self.speed is None:
            return "-"
        return f"{self.speed:.3f} [{self.lo:.3f}, {self.hi:.3f}]"

    def sentence(self, name, reference):
        """hyperfine's shape: 'rwsem is 1.23 [1.19, 1.27] times faster than none'."""
        if self.speed is None:
            return f"{name}: no runs"
        pct = f"{self.coverage * 100:.1f}%"
        if self.word in ("faster", "slower"):
            how = self.speed if self.word == "faster" else 1 / self.speed
            lo, hi = (self.lo, self.hi) if self.word == "faster" else (1 / self.hi, 1 / self.lo)
            return (f"{name} is {how:.3f} [{lo:.3f}, {hi:.3f}] times {self.word} than {reference} "
                    f"({pct} interval, {self.n} rounds)")
        return (f"{name} vs {reference}: {self.interval_text()} ({self.word}; {pct} interval, "
                f"{self.n} rounds)")


def _run_probe(probe, what, timeout):
    """stdout of `lockswap-probe WHAT`, or None when the probe is missing or fails."""
    import os
    import subprocess
    if not probe or not os.access(probe, os.X_OK):
        return None
    try:
        return subprocess.run([probe, what], capture_output=True, text=True, timeout=timeout).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def c2c_in(text):
    """The `c2c_ns=N` of a probe line (`lockswap-probe c2c`, or the `env:`
    line of `summary`) in ns, or None when it has none."""
    for word in (text or "").split():
        if word.startswith("c2c_ns="):
            try:
                return float(word[len("c2c_ns="):]) or None
            except ValueError:
                return None
    return None


def probe_c2c(probe):
    """Core-to-core round trip in ns from `lockswap-probe c2c` (contract: one
    line `c2c_ns=N cpus=A,B`), or None when the probe is missing or fails."""
    return c2c_in(_run_probe(probe, "c2c", 10))


def probe_summary(probe):
    """The `env:` line of `lockswap-probe summary` (contract B) for table
    headers and results files, or None when the probe is missing or fails."""
    out = _run_probe(probe, "summary", 30) or ""
    return next((line for line in out.splitlines() if line.startswith("env:")), None)
