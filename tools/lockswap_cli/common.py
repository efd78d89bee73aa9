"""What every part of the command shares: its name and how it prints untrusted text."""

import sys


PROG = "lockswap"


def shown(text):
    """TEXT for a terminal: control characters and undecodable bytes (surrogate-escaped) as
    backslash escapes, so a file name with a newline cannot break a table or forge a line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def warn(msg):
    print(shown(f"{PROG}: {msg}"), file=sys.stderr)


def table(rows, right_from=0):
    rows = [[shown(c) for c in r] for r in rows]
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for r in rows:
        cells = [c.rjust(w) if i >= right_from else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
        lines.append("  " + "  ".join(cells).rstrip())
    return lines


def import_pyplot():
    """matplotlib's pyplot with a file-only backend, or (None, reason)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        return plt, None
    except ImportError as e:
        return None, f"matplotlib is not available for {sys.executable} ({e}); " \
                     "install python3-matplotlib (scripts/setup.sh does)"


def fmt_ns(ns):
    """A duration in ns, short: 950ns, 12.3us, 4.56ms, 789ms, 1.23s; '-' for None."""
    if ns is None:
        return "-"
    if ns < 1000:
        return f"{ns}ns"
    for unit, scale in (("us", 1e3), ("ms", 1e6), ("s", 1e9)):
        v = ns / scale
        if v < 1000 or unit == "s":
            return f"{v:.3g}{unit}" if v < 100 else f"{v:.0f}{unit}"
    return f"{ns}ns"
