"""One forest plot per table: a row per benchmark x variant, its speed against the reference as a
point with its confidence interval on a log axis, 1.0 marked, the verdict as the colour, rows
without a verdict (not enough runs, host unsteady) hollow. Sized for a screen: 1200 px wide, the
height by the number of rows. Also a self-contained HTML page (the table, the plot inline as
base64, the environment lines). matplotlib (Debian's python3-matplotlib, scripts/setup.sh) as
`lockswap report/compare --png` use it; its absence is reported, not fatal.
"""

import base64
import html
import math

from .common import import_pyplot
from .steady import is_unsteady

WIDTH_PX, DPI = 1200, 100
COLOURS = {"faster": "#1a9641", "slower": "#d7191c", "no significant difference": "#4d4d4d",
           "not enough runs": "#7b7b7b", "unsteady": "#e66101", "none": "#7b7b7b"}
TICKS = [0.1, 0.2, 0.25, 0.33, 0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2, 3, 4, 5, 10, 20]


def kind(word):
    if is_unsteady(word):
        return "unsteady"
    return word if word in COLOURS else "none"


def forest_rows(rows):
    """rows: dicts with label (benchmark, may be ''), variant, speed, lo, hi, word. Drops the
    reference rows (1 by definition); keeps rows without a figure (drawn as text)."""
    return [r for r in rows if r.get("word") not in ("reference",)]


def _limits(rows):
    vals = [x for r in rows for x in (r.get("lo"), r.get("hi"), r.get("speed")) if x and x > 0]
    lo, hi = min(vals + [1.0]), max(vals + [1.0])
    lo, hi = min(lo, 0.8), max(hi, 1.25)
    pad = (math.log(hi) - math.log(lo)) * 0.08
    return math.exp(math.log(lo) - pad), math.exp(math.log(hi) + pad)


def write_png(path, rows, title, reference, level=0.95, subtitle=""):
    """Writes the forest plot; returns None, or why it was not written."""
    plt, why = import_pyplot()
    if plt is None:
        return why
    rows = forest_rows(rows)
    if not rows:
        return "no row to plot (only the reference)"
    from matplotlib.lines import Line2D
    from matplotlib.transforms import blended_transform_factory
    n = len(rows)
    labels, last = [], None
    for r in rows:
        bench = r.get("label") or ""
        labels.append(f"{bench}  {r['variant']}" if bench != last else r["variant"])
        last = bench
    # Columns, in pixels of the 1200: labels | plot | speed [interval] | verdict.
    label_px = min(460, 30 + 8.0 * max(len(x) for x in labels))  # DejaVu Sans 10 pt: about 8 px a character
    words_px = 20 + 6.6 * max(len(str(r.get("word") or "")) for r in rows)
    numbers_px = 200
    plot_px = WIDTH_PX - label_px - numbers_px - words_px - 20
    height_in = 2.1 + 0.34 * n
    fig = plt.figure(figsize=(WIDTH_PX / DPI, height_in), dpi=DPI)
    top_in, bottom_in = 1.15 if subtitle else 0.95, 0.95
    ax = fig.add_axes([label_px / WIDTH_PX, bottom_in / height_in, plot_px / WIDTH_PX,
                       1 - (top_in + bottom_in) / height_in])
    x_numbers = (label_px + plot_px + 14) / WIDTH_PX
    x_words = x_numbers + numbers_px / WIDTH_PX
    row_at = blended_transform_factory(fig.transFigure, ax.transData)
    head_at = blended_transform_factory(fig.transFigure, ax.transAxes)
    xmin, xmax = _limits(rows)
    ax.set_xscale("log")
    ax.set_xlim(xmin, xmax)
    ax.set_ylim(n - 0.4, -0.6)
    ax.axvline(1.0, color="#000000", linewidth=1.2, zorder=1)
    ticks = [t for t in TICKS if xmin <= t <= xmax]
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:g}" for t in ticks])
    ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.grid(True, axis="x", color="#dddddd", linewidth=0.8, zorder=0)
    ax.set_yticks(range(n))
    for i in range(1, n):
        if (rows[i].get("label") or "") != (rows[i - 1].get("label") or ""):
            ax.axhline(i - 0.5, color="#bbbbbb", linewidth=0.8)
    ax.set_yticklabels(labels, fontsize=10)
    ax.tick_params(axis="y", length=0)
    for i, r in enumerate(rows):
        k = kind(r.get("word"))
        colour = COLOURS[k]
        hollow = k in ("unsteady", "not enough runs", "none")
        if r.get("speed"):
            if r.get("lo") and r.get("hi"):
                ax.hlines(i, r["lo"], r["hi"], color=colour, linewidth=2.6, zorder=2)
            ax.plot([r["speed"]], [i], marker="o" if k != "unsteady" else "D", markersize=7, zorder=3,
                    markeredgewidth=1.8, markeredgecolor=colour, markerfacecolor="white" if hollow else colour)
            text = f"{r['speed']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}]" if r.get("lo") else f"{r['speed']:.3f}"
        else:
            text = "-"
        ax.text(x_numbers, i, text, transform=row_at, va="center", fontsize=9, family="monospace")
        ax.text(x_words, i, r.get("word") or "", transform=row_at, va="center", fontsize=9,
                color=colour, fontweight="bold" if k in ("faster", "slower") else "normal")
    ax.text(x_numbers, 1.01, f"speed [{level:.0%} interval]", transform=head_at, va="bottom", fontsize=8.5,
            color="#555555")
    ax.text(x_words, 1.01, "verdict", transform=head_at, va="bottom", fontsize=8.5, color="#555555")
    ax.set_xlabel(f"speed against {reference}, log scale (>1: faster; 1 = {reference}). Point: median of the "
                  f"per-round ratios; line: its {level:.0%} sign-test interval", fontsize=9)
    fig.text(0.01, 1 - 0.28 / height_in, title, fontsize=13, fontweight="bold", va="center")
    if subtitle:
        fig.text(0.01, 1 - 0.60 / height_in, subtitle, fontsize=8.5, color="#444444", va="center")
    legend = [Line2D([], [], marker="o", linestyle="", markersize=7, color=COLOURS["faster"], label="faster"),
              Line2D([], [], marker="o", linestyle="", markersize=7, color=COLOURS["slower"], label="slower"),
              Line2D([], [], marker="o", linestyle="", markersize=7, color=COLOURS["no significant difference"],
                     label="no significant difference"),
              Line2D([], [], marker="o", linestyle="", markersize=7, markerfacecolor="white",
                     markeredgecolor=COLOURS["not enough runs"], label="not enough runs (hollow)"),
              Line2D([], [], marker="D", linestyle="", markersize=7, markerfacecolor="white",
                     markeredgecolor=COLOURS["unsteady"], label="host unsteady: all rounds (hollow)")]
    fig.legend(handles=legend, loc="lower center", ncol=5, fontsize=8.5, frameon=False,
               bbox_to_anchor=(0.5, 0.0))
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return None


def write_html(path, title, env_lines, table_text, png_path=None, notes=()):
    """A page that stands alone: the environment lines, the plot (inline), the table and its notes."""
    img = ""
    if png_path:
        try:
            with open(png_path, "rb") as fh:
                data = base64.b64encode(fh.read()).decode("ascii")
            img = f'<p><img alt="forest plot" style="max-width:100%" src="data:image/png;base64,{data}"></p>\n'
        except OSError:
            img = "<p>(no plot)</p>\n"
    esc = html.escape
    page = ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" + esc(title) + "</title>\n"
            "<style>body{font-family:sans-serif;margin:1.5em;max-width:1250px}"
            "pre{background:#f6f6f6;padding:.6em;overflow-x:auto;font-size:12px}</style></head><body>\n"
            f"<h1>{esc(title)}</h1>\n<pre>{esc(chr(10).join(env_lines))}</pre>\n{img}"
            f"<pre>{esc(table_text)}</pre>\n"
            + "".join(f"<p>{esc(n)}</p>\n" for n in notes if n.strip())
            + "</body></html>\n")
    with open(path, "w") as fh:
        fh.write(page)
