"""Markdown tables and gnuplot plots: what the benchmark drivers (examples/bench/)
and the server runners' report (examples/servers/report.py) print and draw.
Standard library only."""

import shutil
import subprocess
import sys


def fmt(x, spec="{:.1f}"):
    return "-" if x is None else spec.format(x)


def md_table(header, rows, align=None):
    align = align or ["---:"] * len(header)
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out) + "\n"


GNUPLOT_COLORS = ["#000000", "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
                  "#17becf", "#bcbd22"]


def gnuplot(script_path, text):
    """Writes and runs a gnuplot script; returns False (with a note) when gnuplot is missing or fails."""
    if shutil.which("gnuplot") is None:
        print("note: gnuplot not found, no plots", file=sys.stderr)
        return False
    with open(script_path, "w") as f:
        f.write(text)
    pr = subprocess.run(["gnuplot", script_path], capture_output=True, text=True)
    if pr.returncode != 0:
        print(f"note: gnuplot failed for {script_path}: {pr.stderr.strip()}", file=sys.stderr)
        return False
    return True


def gp_quote(s):
    return "'" + str(s).replace("'", "''") + "'"
