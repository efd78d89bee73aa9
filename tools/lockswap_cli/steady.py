"""What a table shows when the core-to-core guard dropped rounds: never blank, never silent.

A round is steady when `lockswap-probe c2c` before and after it agree
(stats.steady_round). A row's figure is over its steady rounds when
there are enough of them: as many as were asked (--repeat), or at least the
fewest that can give a verdict (stats.runs_needed). Otherwise the
figure is over every completed round, steady or not, and the verdict says so:
`host unsteady (k of n rounds steady)` -- a rough indication, never a call.
With strict=True (--strict-steady) only steady rounds ever count (a row may
then read `no runs`).

Used by `lockswap compare`, examples/servers/report.py (the runners and
scripts/demo.sh) and examples/bench/bench_common.py. Standard library only.
"""

from . import stats

UNSTEADY_PREFIX = "host unsteady"


def unsteady_word(steady, total):
    return f"{UNSTEADY_PREFIX} ({steady} of {total} rounds steady)"


def is_unsteady(word):
    return bool(word) and word.startswith(UNSTEADY_PREFIX)


def enough_steady(steady, total, wanted=None, level=stats.DEFAULT_LEVEL):
    """True when the steady rounds alone make the row's figure: none was dropped, or at
    least min(wanted, runs_needed(level)) are steady (wanted None: runs_needed alone)."""
    if steady >= total:
        return True
    need = stats.runs_needed(level)
    return steady >= (need if wanted is None else min(wanted, need))


def row_verdict(steady_rounds, all_rounds, variant, reference, higher, level=stats.DEFAULT_LEVEL,
                wanted=None, strict=False):
    """(Verdict, basis): basis "steady" (the figure is over the steady rounds) or "all" (over
    every completed round; the verdict's word is then unsteady_word). Rounds: [{variant: value}]."""
    k, n = len(steady_rounds), len(all_rounds)
    v = stats.Verdict(stats.paired_ratios(steady_rounds, variant, reference), higher, level)
    if strict or enough_steady(k, n, wanted, level):
        return v, "steady"
    every = stats.Verdict(stats.paired_ratios(all_rounds, variant, reference), higher, level)
    if every.n == 0:           # no pair of values in any round: nothing to show either way
        return v, "steady"
    every.word = unsteady_word(k, n)
    return every, "all"


def sentence(v, name, reference):
    """Verdict.sentence, or for a figure over every round one that says what it is."""
    if not is_unsteady(v.word):
        return v.sentence(name, reference)
    return (f"{name} vs {reference}: {v.interval_text()} over all {v.n} completed rounds "
            f"({v.word}: an indication, not a verdict; {v.coverage * 100:.1f}% interval)")


def note(tool_hint="--repeat"):
    """The table's note on `host unsteady` rows: what it means and how far to trust it."""
    return (f"`{UNSTEADY_PREFIX} (k of n rounds steady)`: fewer rounds than asked passed the core-to-core "
            f"check (`lockswap-probe c2c` before and after a round within x{stats.PROBE_TOLERANCE:g}), "
            f"too few for a figure of steady rounds alone, so the row's figure and interval are over all n "
            f"completed rounds. In the n - k others the host moved the vCPUs mid-round, which can shift every "
            f"lock's speed by more than the differences between locks. Trust only the direction, and only when "
            f"the interval is far from 1; no difference is called. For a verdict, rerun on a quieter host or "
            f"with a larger {tool_hint}; --strict-steady shows the steady rounds only.")
