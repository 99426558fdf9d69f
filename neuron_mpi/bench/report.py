"""The table, the JSON report and the plot of a benchmark (pure, no MPI import).

Rows are plain dicts (``harness.run_size`` makes them); every printer here takes
rows, so the model's command line and the tests use the same formatting.
"""
from __future__ import annotations

import json
import os
import platform
import socket
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    header: str
    key: str
    fmt: str  # format spec for numbers; strings are shown as they are
    width: int = 12


SIZE = Column("size(B)", "size", "d", 12)
COUNT = Column("count(elems)", "count", "d", 12)
TYPE = Column("type", "type", "", 8)
REDOP = Column("redop", "redop", "", 6)
TIME = Column("time(us)", "time_us", ".2f", 11)
ALGBW = Column("algbw(GB/s)", "algbw", ".2f", 11)
BUSBW = Column("busbw(GB/s)", "busbw", ".2f", 11)
MODEL_TIME = Column("model_time(us)", "model_time_us", ".2f", 14)
MODEL_BUSBW = Column("model_busbw(GB/s)", "model_busbw", ".2f", 17)
ALGORITHM = Column("algorithm", "algorithm", "", 12)
WRONG = Column("#wrong", "wrong", "d", 7)
MPI_TIME = Column("mpi_time(us)", "mpi_time_us", ".2f", 12)
RATIO = Column("ratio", "ratio", ".2f", 8)


def time_columns(stats=("avg",)) -> list[Column]:
    """time(us); with several statistics time:STAT(us) for each, as nccom-test's
    --stats (the first is time_us, which algbw and busbw come from)."""
    if len(stats) <= 1:
        return [TIME]
    return [Column(f"time:{s}(us)", "time_us" if k == 0 else f"time:{s}", ".2f",
                   max(11, len(s) + 9)) for k, s in enumerate(stats)]


def bench_columns(show_redop=False, show_algorithm=False, vs_mpi=False,
                  stats=("avg",)) -> list[Column]:
    """size(B) count(elems) type [redop] time(us) algbw(GB/s) busbw(GB/s)
    model_time(us) model_busbw(GB/s) [algorithm] #wrong [mpi_time(us) ratio]"""
    cols = [SIZE, COUNT, TYPE] + ([REDOP] if show_redop else [])
    cols += time_columns(stats) + [ALGBW, BUSBW, MODEL_TIME, MODEL_BUSBW]
    cols += [ALGORITHM] if show_algorithm else []
    cols += [WRONG]
    cols += [MPI_TIME, RATIO] if vs_mpi else []
    return cols


def model_columns(show_redop=False) -> list[Column]:
    """The model's table: nccom-test's columns, always with the algorithm."""
    return [SIZE, COUNT, TYPE] + ([REDOP] if show_redop else []) + [
        TIME, ALGBW, BUSBW, ALGORITHM]


def _cell(col: Column, value) -> str:
    if value is None:
        text = "N/A"
    elif col.fmt and isinstance(value, (int, float)):
        text = format(value, col.fmt)
    else:
        text = str(value)
    return text.rjust(col.width)


def header_line(cols) -> str:
    return "#" + " ".join(c.header.rjust(c.width) for c in cols)[1:]


def row_line(cols, row: dict) -> str:
    return " ".join(_cell(c, row.get(c.key)) for c in cols)


def avg_busbw(rows) -> float:
    vals = [r["busbw"] for r in rows if r.get("busbw") is not None]
    return sum(vals) / len(vals) if vals else 0.0


def footer_lines(rows, wrong_total: int) -> list[str]:
    return [f"# Avg bus bandwidth : {avg_busbw(rows):.4f}",
            f"# Out of bounds values : {wrong_total} {'OK' if wrong_total == 0 else 'FAILED'}"]


def parse_table(text: str) -> tuple[list[str], list[list[str]]]:
    """(headers, rows of cells) of a printed table: for tests and scripts."""
    headers, rows = [], []
    for line in text.splitlines():
        if line.startswith("#") and "size(B)" in line:
            headers = line.lstrip("#").split()
        elif line.strip() and not line.startswith("#") and headers:
            cells = line.split()
            if len(cells) == len(headers):
                rows.append(cells)
    return headers, rows


# --- the JSON report ------------------------------------------------------------------
def machine() -> dict:
    return {"platform": platform.platform(), "cpu_count": os.cpu_count(),
            "hostname": socket.gethostname(), "python_implementation":
            platform.python_implementation()}


def versions(mpi_library: str | None = None) -> dict:
    import numpy

    from .. import __version__

    out = {"python": sys.version.split()[0], "numpy": numpy.__version__,
           "neuron_mpi": __version__}
    for mod in ("numba", "mpi4py", "ml_dtypes"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001 - a missing optional module is reported as such
            out[mod] = None
    out["mpi_library"] = mpi_library
    return out


def topology_info(topo, ranks) -> dict:
    return {"instance": topo.instance, "lnc": topo.lnc, "nodes": topo.nodes,
            "ranks": len(ranks), "world_ranks": topo.size}


REPORT_KEYS = ("schema", "command", "options", "topology", "machine", "versions",
               "groups", "rows", "results", "avg_busbw", "wrong", "ok")


def nccom_results(rows, stats: str = "avg") -> list[dict]:
    """The rows as nccom-test's --report-to-json-file writes its "results": keys
    named as its columns (time:avg(us), or time:pNN(us) for a percentile)."""
    out = []
    for r in rows:
        d = {"size(B)": r["size"], "count(elems)": r["count"], "type": r["type"],
             "algbw(GB/s)": r["algbw"], "busbw(GB/s)": r["busbw"],
             f"time:{r.get('stats', stats)}(us)": r["time_us"]}
        d.update({f"{k}(us)": v for k, v in r.items() if k.startswith("time:")})
        if r.get("algorithm"):
            d["algorithm"] = r["algorithm"]
        out.append(d)
    return out


def build_report(rows, *, command, options, topology, groups=None, mpi_library=None,
                 wrong=0) -> dict:
    return {"schema": "neuron-mpi-bench/1", "command": list(command),
            "options": dict(options), "topology": dict(topology), "machine": machine(),
            "versions": versions(mpi_library), "groups": groups, "rows": list(rows),
            "results": nccom_results(rows, options.get("stats", "avg")),
            "avg_busbw": avg_busbw(rows), "wrong": int(wrong), "ok": int(wrong) == 0}


def write_json(path: str, report: dict) -> None:
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")


# --- the plot ---------------------------------------------------------------------------
PLOT_MISSING = ("--plot needs matplotlib, which is not installed; install it with: "
                "pip install 'neuron-mpi[plot]'")


def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def plot(path: str, rows, title: str = "") -> None:
    """busbw against size: measured, modeled and native MPI (where present), one
    set of lines per (op, redop)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    groups: dict = {}
    for r in rows:
        groups.setdefault((r.get("op"), r.get("redop")), []).append(r)
    many = len(groups) > 1
    for (op, redop), rs in groups.items():
        rs = sorted(rs, key=lambda r: r["size"])
        tag = f"{op}" + (f" {redop}" if redop and redop != "none" else "") if many else ""
        xs = [r["size"] for r in rs]
        for key, label, style in (("busbw", "measured (this machine)", "o-"),
                                  ("model_busbw", "model (hardware)", "s--"),
                                  ("mpi_busbw", "native MPI (this machine)", "^:")):
            ys = [r.get(key) for r in rs]
            if any(y is not None for y in ys):
                pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style,
                        label=(f"{tag}: " if tag else "") + label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


_TIME_LINES = (("time_us", "emulated (this machine)", "o-"),
               ("mpi_time_us", "native MPI (this machine)", "^:"),
               ("model_time_us", "model (the real hardware)", "s--"))


def _time_panel(ax, rows, title: str) -> list[str]:
    rs = sorted(rows, key=lambda r: r["size"])
    xs = [r["size"] for r in rs]
    drawn = []
    for key, label, style in _TIME_LINES:
        pts = [(x, r.get(key)) for x, r in zip(xs, rs) if r.get(key)]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=label)
            drawn.append(label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel("time (us)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    return drawn


def plot_times(path: str, rows, title: str = "") -> list[str]:
    """Time against size for one operation: emulated and native MPI on this machine,
    and the model's time on the real hardware (rows of one op and redop). Returns
    the lines drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    drawn = _time_panel(ax, rows, title)
    ax.legend(fontsize=8)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return drawn


def plot_times_grid(path: str, rows, title: str = "") -> dict:
    """``plot_times`` for every operation in ``rows``, one panel each, in one figure.
    Returns the lines drawn per operation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ops = list(dict.fromkeys(r["op"] for r in rows))
    cols = min(3, len(ops))
    nrows = -(-len(ops) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.6 * cols, 3.4 * nrows + 0.6),
                             squeeze=False)
    drawn = {}
    for ax, op in zip(axes.flat, ops):
        drawn[op] = _time_panel(ax, [r for r in rows if r["op"] == op], op)
    for ax in list(axes.flat)[len(ops):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=9, frameon=False)
    fig.suptitle(title, fontsize=11)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return drawn
