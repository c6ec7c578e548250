"""bench/compare's picture, readable without its table.

Per workload, two panels side by side with the policies as rows (their names written out, never
rotated over each other):
  - mean time to first token in simulated seconds, each bar labelled with its value, on a log
    axis when one bar is over 10x another (so a 41 s outlier does not flatten the rest);
  - prompt tokens served from cache, as one bar split into GPU hits and tokens loaded from a
    kvgate-store, on a fixed 0-100% axis.
A caption says what "better" means and what the seconds are.

Used by bench/compare (rows it just measured) and by `bench/compare --replot SECTION`, which
reads a section's tables back from docs/benchmarks.md to redraw a committed picture.
"""
import re
import textwrap

GPU_COLOUR, STORE_COLOUR, TTFT_COLOUR = "#4477aa", "#ee8866", "#666666"
CAPTION = ("Better = shorter TTFT bars (left) and longer cached bars (right). Times are simulated "
           "seconds (kvgate-sim runs faster than real time); cached = share of prompt tokens "
           "not recomputed: GPU prefix-cache hits, plus KV loaded from a kvgate-store.")


def _num(cell):
    """'1.234' -> 1.234, '83.7%' -> 0.837, 'n/a' or '-' -> None."""
    cell = cell.strip()
    m = re.fullmatch(r"(-?[0-9][0-9,]*\.?[0-9]*)(%?)", cell)
    if not m:
        return None
    v = float(m.group(1).replace(",", ""))
    return v / 100 if m.group(2) else v


def rows_from_markdown(text):
    """{workload: [row]} from the `### workload` tables of one bench/compare section."""
    results, workload, header = {}, None, None
    for line in text.splitlines():
        if line.startswith("### "):
            workload, header = line[4:].strip(), None
            continue
        if workload is None or not line.startswith("|"):
            continue
        # Split on unescaped pipes: a header may hold "\|err\|".
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if header is None:
            header = cells
            continue
        if set(cells[0]) <= set("-: "):
            continue
        r = dict(zip(header, cells))
        gpu = _num(r.get("cached in GPU", r.get("cached tokens", "n/a")))
        x = {
            "policy": r["policy"],
            "ttft_mean": _num(r.get("TTFT mean s", "n/a")),
            "gpu_cached": gpu,
            "store_cached": _num(r.get("loaded from store", "n/a")),
        }
        # Columns of newer tables; absent from older ones.
        for key, column in (("ttft_mean_above_floor", "mean above floor s"),
                            ("ttft_p99_above_floor", "p99 above floor s")):
            if column in r:
                x[key] = _num(r[column])
        results.setdefault(workload, []).append(x)
    return results


def plot(results, path, title=None):
    """Writes the picture to `path`; False when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    n_rows = sum(len(rows) for rows in results.values())
    fig, axes = plt.subplots(
        len(results), 2, squeeze=False, figsize=(13, 1.6 + 0.42 * n_rows + 0.9 * len(results)),
        gridspec_kw={"height_ratios": [max(1, len(r)) for r in results.values()]})
    for (ax_t, ax_c), (workload, rows) in zip(axes, results.items()):
        _ttft_panel(ax_t, workload, rows)
        _cache_panel(ax_c, workload, rows)
    if title:
        fig.suptitle(title, fontsize=12)
    fig.text(0.01, 0.005, "\n".join(textwrap.wrap(CAPTION, 150)), fontsize=8.5, va="bottom")
    fig.tight_layout(rect=(0, 0.06, 1, 0.97 if title else 1))
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def _ttft_panel(ax, workload, rows):
    ys = list(range(len(rows)))
    values = [r.get("ttft_mean") for r in rows]
    known = [v for v in values if v]
    ax.barh(ys, [v or 0 for v in values], color=TTFT_COLOUR, height=0.6)
    ax.set_yticks(ys, [r["policy"] for r in rows], fontsize=9)
    ax.invert_yaxis()
    log = bool(known) and max(known) > 10 * min(known)
    if log:
        ax.set_xscale("log")
    top = max(known) if known else 1
    ax.set_xlim((min(known) / 3 if log else 0) if known else 0, top * (4 if log else 1.25))
    for y, v in zip(ys, values):
        ax.text(v if v else ax.get_xlim()[0], y, f" {v:.2f} s" if v else " n/a",
                va="center", fontsize=8.5)
    ax.set_title(f"{workload}: mean time to first token", fontsize=10)
    ax.set_xlabel("simulated seconds" + (" (log scale)" if log else "") + "; shorter is better",
                  fontsize=9)
    ax.grid(axis="x", alpha=0.3)


def _cache_panel(ax, workload, rows):
    ys = list(range(len(rows)))
    gpu = [(r.get("gpu_cached") if r.get("gpu_cached") is not None else r.get("cached"))
           for r in rows]
    if all(g is None for g in gpu):  # a table without cache columns (P/D rows)
        ax.axis("off")
        ax.text(0.02, 0.5, f"{workload}: the cache shares of these rows are not in the table\n"
                "they were drawn from; their P/D columns are in the table beside this picture.",
                transform=ax.transAxes, fontsize=9, va="center")
        return
    store = [r.get("store_cached") or 0 for r in rows]
    ax.barh(ys, [(g or 0) * 100 for g in gpu], color=GPU_COLOUR, height=0.6,
            label="hit in the GPU prefix cache")
    if any(store):
        ax.barh(ys, [s * 100 for s in store], left=[(g or 0) * 100 for g in gpu],
                color=STORE_COLOUR, height=0.6, hatch="//", label="loaded from kvgate-store")
    ax.set_yticks(ys, [r["policy"] for r in rows], fontsize=9)
    ax.invert_yaxis()
    ax.set_xlim(0, 112)
    ax.set_xticks([0, 20, 40, 60, 80, 100])
    for y, g, s in zip(ys, gpu, store):
        if g is None:
            ax.text(1, y, " n/a", va="center", fontsize=8.5)
        else:
            ax.text((g + s) * 100, y, f" {(g + s) * 100:.1f}%", va="center", fontsize=8.5)
    ax.set_title(f"{workload}: prompt tokens served from cache", fontsize=10, pad=20)
    ax.set_xlabel("% of prompt tokens; longer is better", fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, fontsize=8, frameon=False)
