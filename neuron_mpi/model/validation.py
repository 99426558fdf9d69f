"""The model against every published nccom-test example row (docs/model.md).

``python -m neuron_mpi.model.validation`` prints the markdown table that
docs/model.md carries between its ``validation`` markers; tests/test_model.py
regenerates it and fails if the page differs or a target is missed.

Error of a row: modeled / published - 1. Geometric-mean error of a set of rows:
exp(mean |ln(modeled / published)|) - 1 (a row 2x too slow and one 2x too fast
both count as 100%).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .published import BLOCKS, LARGE, Block

#: the issue's targets (issue 9, "Done when")
LARGE_ROW_MAX = 0.25
LARGE_GM_MAX = 0.20
SMALL_RECENT_GM_MAX = 0.50
RECENT_FROM = 2025


@dataclass
class Row:
    block: Block
    size: int
    published_us: float
    modeled_us: float
    algorithm: str

    @property
    def error(self) -> float:
        return self.modeled_us / self.published_us - 1.0

    @property
    def large(self) -> bool:
        return self.size >= LARGE


def model_block(b: Block) -> list[Row]:
    from ..algorithms.select import ALGORITHMS
    from .predict import predict

    out = []
    algos = b.extra.get("algorithms", ())
    for i, (size, t) in enumerate(b.rows):
        kw = dict(instance=b.instance, lnc=b.lnc, nodes=b.nodes, dtype=b.dtype,
                  runtime=b.runtime)
        algo = algos[i] if algos else b.algorithm
        if algo and algo in ALGORITHMS:
            kw["algorithm"] = algo
        if b.groups:
            kw["groups"] = [list(g) for g in b.groups]
        else:
            kw["ranks"] = b.ranks
        if b.pairs:
            kw["pairs"] = [list(p) for p in b.pairs]
        if b.send_counts:
            kw["send_counts"] = list(b.send_counts)
        p = predict(b.op, size, **kw)
        out.append(Row(b, size, t, p.time_us, p.algorithm))
    return out


def all_rows() -> list[Row]:
    return [r for b in BLOCKS for r in model_block(b)]


def gm_error(rows) -> float:
    rows = list(rows)
    if not rows:
        return 0.0
    return math.exp(sum(abs(math.log(r.modeled_us / r.published_us)) for r in rows)
                    / len(rows)) - 1.0


def summary(rows) -> dict:
    large = [r for r in rows if r.large]
    small = [r for r in rows if not r.large]
    recent = [r for r in small if r.block.year >= RECENT_FROM]
    return {"large_rows": len(large), "large_gm": gm_error(large),
            "large_worst": max((abs(r.error) for r in large), default=0.0),
            "small_rows": len(small), "small_gm": gm_error(small),
            "small_recent_rows": len(recent), "small_recent_gm": gm_error(recent)}


def misses(rows) -> list[str]:
    """The targets the rows miss (empty when all are met)."""
    s = summary(rows)
    out = []
    for r in rows:
        if r.large and abs(r.error) > LARGE_ROW_MAX:
            out.append(f"{r.block.key} {r.size} B: {r.error:+.1%} (limit 25%)")
    if s["large_gm"] > LARGE_GM_MAX:
        out.append(f"large rows gm {s['large_gm']:.1%} > 20%")
    if s["small_recent_gm"] > SMALL_RECENT_GM_MAX:
        out.append(f"small 2025-2026 rows gm {s['small_recent_gm']:.1%} > 50%")
    return out


def _size(b: int) -> str:
    for unit, k in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << k and b % (1 << k) == 0:
            return f"{b >> k} {unit}"
    return f"{b} B"


def table(rows=None) -> str:
    """The markdown of docs/model.md's validation section (between its markers)."""
    rows = all_rows() if rows is None else rows
    lines = []
    lines.append("Blocks (the page's example outputs), the instance we infer and why:")
    lines.append("")
    lines.append("| block | first on the page | command | instance (inferred) | why |")
    lines.append("|---|---|---|---|---|")
    for b in BLOCKS:
        inst = f"{b.instance} LNC={b.lnc}" + (f" x {b.nodes}" if b.nodes > 1 else "")
        lines.append(f"| {b.key} | {b.commit} {b.date} | `{b.command}` | {inst} | {b.why} |")
    lines.append("")
    lines.append("| block | ranks | op | type | size | published us | modeled us | error "
                 "| algorithm (page / model) |")
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        b = r.block
        pub_algo = ""
        if "algorithms" in b.extra:
            pub_algo = b.extra["algorithms"][[s for s, _ in b.rows].index(r.size)]
        ranks = (f"{len(b.groups)} x {len(b.groups[0])}" if b.groups else str(b.ranks))
        lines.append(f"| {b.key} | {ranks} | {b.op} | {b.dtype} | {_size(r.size)} | "
                     f"{r.published_us:g} | {r.modeled_us:.2f} | {r.error:+.1%} | "
                     f"{pub_algo + ' / ' if pub_algo else ''}{r.algorithm} |")
    s = summary(rows)
    lines.append("")
    lines.append(f"* Rows >= 32 MiB: {s['large_rows']}, geometric-mean error "
                 f"{s['large_gm']:.1%}, worst {s['large_worst']:.1%} "
                 "(targets: each within 25%, gm <= 20%).")
    lines.append(f"* Rows below 32 MiB first printed in 2025-2026: "
                 f"{s['small_recent_rows']}, geometric-mean error "
                 f"{s['small_recent_gm']:.1%} (target <= 50%).")
    lines.append(f"* All rows below 32 MiB (with the 2023 ones): {s['small_rows']}, "
                 f"geometric-mean error {s['small_gm']:.1%}.")
    miss = misses(rows)
    lines.append("* Targets missed: " + ("; ".join(miss) if miss else "none") + ".")
    lines.append("")
    lines.append("The runtime's figures (``neuron_mpi/model/params.py``; the link figures "
                 "are in the next section):")
    lines.append("")
    lines.append("| parameter | value | source |")
    lines.append("|---|---|---|")
    from .params import all_params

    for q in all_params():
        lines.append(f"| {q.name} | {q.value:g} {q.unit} | {q.source} |")
    return "\n".join(lines) + "\n"


BEGIN = "<!-- validation: generated by python -m neuron_mpi.model.validation -->"
END = "<!-- end of validation -->"


def main() -> int:
    import sys

    sys.stdout.write(table())
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
