"""The benchmark figure: cost against batch size, target size and history length."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.common import fmt_rows

__all__ = ["plot"]

_STYLE = {
    "sink": ("deltasink sink.write", "tab:blue"),
    "bare": ("bare delta-rs MERGE", "tab:orange"),
    "bare_pruned": ("delta-rs MERGE, streamed_exec=False", "tab:green"),
}


def _err(stat: dict[str, Any]) -> tuple[float, float]:
    return stat["median"] - stat["min"], stat["max"] - stat["median"]


def _series(ax: Any, xs: list[int], stats: list[dict[str, Any]], **kwargs: Any) -> None:
    medians = [s["median"] for s in stats]
    low, high = zip(*(_err(s) for s in stats), strict=True)
    ax.errorbar(xs, medians, yerr=[low, high], marker="o", capsize=3, **kwargs)


def _seconds(value: float, _pos: object = None) -> str:
    return f"{value * 1000:g} ms" if value < 1 else f"{value:g} s"


def _ticks(ax: Any, xs: list[int]) -> None:
    """x ticks at the measured points only (10k, 1M); y ticks in ms / s."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticks(xs, [fmt_rows(x) for x in xs])
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(_seconds))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, p: ""))


def _legend(ax: Any) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "not measured in this run", ha="center", transform=ax.transAxes)


def plot(results: dict[str, Any], path: Path) -> None:
    """Draw the figure from a results dict (see :mod:`bench.run`) into ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sections = results["sections"]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    grid = sections.get("grid", [])
    targets = sorted({c["target_rows"] for c in grid})
    # (a) batch size, recent layout, one line style per target size
    ax = axes[0]
    for target, line in zip(targets, ("-", "--", ":"), strict=False):
        cells = sorted(
            (c for c in grid if c["target_rows"] == target and c["layout"] == "recent"),
            key=lambda c: c["batch_rows"],
        )
        for side, (name, color) in _STYLE.items():
            if cells and side in cells[0]["stats"]:
                _series(
                    ax,
                    [c["batch_rows"] for c in cells],
                    [c["stats"][side] for c in cells],
                    color=color,
                    linestyle=line,
                    label=f"{name}, {fmt_rows(target)}-row target",
                )
    ax.set(xscale="log", yscale="log", xlabel="batch rows (half updates, half inserts)")
    _ticks(ax, sorted({c["batch_rows"] for c in grid}))
    ax.set(ylabel="time (median, min-max)", title="Commit cost vs batch size (recent keys)")
    _legend(ax)
    # (b) target size at the P1 batch size, both layouts
    ax = axes[1]
    batch = results["config"]["sizes"]["p1_batch"]
    for layout, line in (("recent", "-"), ("uniform", "--")):
        cells = sorted(
            (c for c in grid if c["batch_rows"] == batch and c["layout"] == layout),
            key=lambda c: c["target_rows"],
        )
        for side, (name, color) in _STYLE.items():
            if cells and side in cells[0]["stats"]:
                _series(
                    ax,
                    [c["target_rows"] for c in cells],
                    [c["stats"][side] for c in cells],
                    color=color,
                    linestyle=line,
                    label=f"{name}, {layout} keys",
                )
    ax.set(xscale="log", yscale="log", xlabel="target rows")
    _ticks(ax, targets)
    ax.set(ylabel="time", title=f"Commit cost vs target size ({batch / 1e3:g}k-row batch)")
    _legend(ax)
    # (c) history length
    ax = axes[2]
    p4 = sections.get("p4", {}).get("sizes", {})
    ns = sorted(int(n) for n in p4)
    if ns:
        series = [
            ("status (new sink)", "planning", "status", "tab:purple"),
            ("recover() with nothing pending", "planning", "recover", "tab:red"),
            ("sink.write of a 10-row batch", "write", "sink", "tab:blue"),
            ("bare MERGE of that batch", "write", "bare", "tab:orange"),
        ]
        for label, group, side, color in series:
            _series(ax, ns, [p4[str(n)][group][side] for n in ns], color=color, label=label)
        ax.axhline(0.2, color="grey", linestyle=":", linewidth=1, label="P4 goal: 200 ms")
    ax.set(xscale="log", yscale="log", xlabel="batches committed before (history)")
    _ticks(ax, ns)
    ax.set(ylabel="time", title="Planning and commit cost vs history")
    _legend(ax)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
