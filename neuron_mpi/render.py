"""A terminal picture of a Topology: chips, their ranks, links and rings.

``render_text(topo)`` is a pure function (a Topology in, a string out) used by
``neuron-mpi topo``. Every line stays within 100 columns.

Layouts:
  2-D torus (trn1, trn2)   one grid of chip boxes per node; ``..`` and ``:`` mark the
                           wrap-around links of each row and column
  1-D ring (inf2)          the ring folded into two rows, so the wrap link closes
                           the loop on the left
  3-D torus (UltraServer)  one grid per Z layer (server), and a line for the Z rings
  single chip              the chip with its logical cores and their ranks
"""
from __future__ import annotations

from . import catalog as cat

WIDTH = 100
_GAP = 3  # columns between boxes: "---" for a link, blanks otherwise


# --- small helpers -----------------------------------------------------------------
def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _span(ranks: list[int]) -> str:
    if not ranks:
        return "idle"
    return f"[{ranks[0]}]" if len(ranks) == 1 else f"[{ranks[0]}-{ranks[-1]}]"


def _label(topo, node: int, chip: int) -> str:
    if chip >= topo.chips_used:
        return f"c{chip} idle"
    return f"c{chip} {_span(topo.ranks_on_chip(node * topo.chips_per_node + chip))}"


def _linked(topo, node: int, a, b) -> bool:
    """True if local chips a and b (on ``node``) are joined by a chip-to-chip link."""
    if a is None or b is None or a == b:
        return False
    if a >= topo.chips_used or b >= topo.chips_used:
        return False
    base = node * topo.chips_per_node
    return topo.link_between_chips(base + a, base + b) is not None


def _chip_name(topo, gchip: int) -> str:
    if topo.nodes == 1:
        return f"c{gchip}"
    node, chip = divmod(gchip, topo.chips_per_node)
    return f"n{node}.c{chip}"


def _wrap_words(pieces: list[tuple[str, str]], first: str, indent: int) -> list[str]:
    """Join (separator, word) pieces, breaking lines before WIDTH; continuation lines
    are indented and start with the separator."""
    lines, cur = [], first
    for sep, w in pieces:
        if len(cur) + len(sep) + len(w) > WIDTH and cur.strip():
            lines.append(cur.rstrip())
            cur = " " * indent + sep.lstrip() + w
        else:
            cur += sep + w
    lines.append(cur)
    return lines


# --- the chip grid -----------------------------------------------------------------
def _grid(topo, node: int, rows: list[list], cell: int, pad: int,
          hwrap: bool, vwrap: bool) -> list[str]:
    """Boxes for a grid of local chip ids (None: an empty slot).

    Horizontal links are drawn as ``---`` between neighbours in a row, vertical ones
    as ``|`` between rows; hwrap/vwrap add ``..`` / ``:`` marks where the first and
    last chip of a row / column are linked (a torus wrap-around link).
    """
    box = cell + 2 + 2 * pad
    ncols = max(len(r) for r in rows)
    rows = [r + [None] * (ncols - len(r)) for r in rows]
    lead = "  "

    def centre(col: int) -> int:
        return 2 + col * (box + _GAP) + box // 2

    def marks(pairs, ch: str) -> str:
        line = [" "] * (2 + ncols * (box + _GAP))
        for col, (a, b) in enumerate(pairs):
            if _linked(topo, node, a, b):
                line[centre(col)] = ch
        return lead + "".join(line).rstrip()

    out = []
    wraps = marks([(rows[0][c], rows[-1][c]) for c in range(ncols)], ":")
    vwrap = vwrap and len(rows) > 2 and bool(wraps.strip())
    if vwrap:
        out.append(wraps)
    for i, row in enumerate(rows):
        wrap = hwrap and ncols > 2 and _linked(topo, node, row[0], row[-1])
        edge = ".." if wrap else "  "
        top, mid = [], []
        for c, chip in enumerate(row):
            if chip is None:
                top.append(" " * box)
                mid.append(" " * box)
            else:
                top.append("+" + "-" * (box - 2) + "+")
                text = _label(topo, node, chip)
                mid.append("|" + " " * pad + text.ljust(cell) + " " * pad + "|")
            if c < ncols - 1:
                top.append(" " * _GAP)
                mid.append("-" * _GAP if _linked(topo, node, chip, row[c + 1]) else " " * _GAP)
        border = lead + "  " + "".join(top)
        out.append(border.rstrip())
        out.append((lead + edge + "".join(mid) + edge).rstrip())
        out.append(border.rstrip())
        if i < len(rows) - 1:
            out.append(marks([(row[c], rows[i + 1][c]) for c in range(ncols)], "|"))
    if vwrap:
        out.append(wraps)
    return out


def _fit(topo, ncols: int) -> tuple[int, int]:
    """Cell width (longest label) and inner padding that keep ncols boxes in WIDTH."""
    cell = max(len(_label(topo, n, c)) for n in range(topo.nodes)
               for c in range(topo.chips_per_node))
    for pad in (1, 0):
        if 4 + ncols * (cell + 2 + 2 * pad) + (ncols - 1) * _GAP <= WIDTH:
            return cell, pad
    return cell, 0


def _node_title(topo, node: int) -> str:
    if topo.nodes == 1:
        return ""
    first = node * topo.ranks_per_node
    last = min(first + topo.ranks_per_node, topo.size) - 1
    g0 = node * topo.chips_per_node
    return (f"node {node}: ranks {first}-{last}, global chips {g0}-"
            f"{g0 + topo.chips_per_node - 1} (shown by their local ids c0..)")


def _torus2d(topo) -> list[str]:
    ydim, xdim = topo.spec.dims
    cell, pad = _fit(topo, xdim.size)
    rows = [[y * xdim.size + x for x in range(xdim.size)] for y in range(ydim.size)]
    out = [f"{ydim.size}x{xdim.size} NeuronLink torus: y = row, x = column; '---' and '|' "
           "are links,", "'..' and ':' mark wrap-around links (every row and every column "
           "is a ring)"]
    for node in range(topo.nodes):
        out.append("")
        if topo.nodes > 1:
            out.append(_node_title(topo, node))
        out += _grid(topo, node, rows, cell, pad, xdim.wrap, ydim.wrap)
    return out


def _torus3d(topo) -> list[str]:
    zdim, ydim, xdim = topo.spec.dims
    layer = ydim.size * xdim.size
    cell, pad = _fit(topo, xdim.size)
    out = [f"{zdim.size}x{ydim.size}x{xdim.size} 3-D torus: one {ydim.size}x{xdim.size} "
           f"NeuronLink torus per server (Z layer);",
           "'---' and '|' are links, '..' and ':' mark wrap-around links of rows and "
           "columns"]
    for node in range(topo.nodes):
        if topo.nodes > 1:
            out += ["", _node_title(topo, node)]
        for z in range(zdim.size):
            base = z * layer
            out += ["", f"server z={z}: chips c{base}-c{base + layer - 1}"]
            rows = [[base + y * xdim.size + x for x in range(xdim.size)]
                    for y in range(ydim.size)]
            out += _grid(topo, node, rows, cell, pad, xdim.wrap, ydim.wrap)
    ring = " -> ".join(f"z{z}" for z in range(zdim.size)) + " -> z0"
    out += ["", f"Z links ({cat.NEURONLINK_Z}) join the chips with equal (y,x) across the "
            f"{zdim.size} layers in a ring:", f"  c{{z*{layer} + y*{xdim.size} + x}}: {ring}"]
    return out


def _ring1d(topo) -> list[str]:
    (xdim,) = topo.spec.dims
    n = xdim.size
    half = -(-n // 2)
    top = list(range(half))
    bottom = list(range(n - 1, half - 1, -1))  # walked backwards: the loop closes left
    cell, pad = _fit(topo, half)
    out = [f"{n} chips in a NeuronLink ring, folded in two rows: c0 -> c{half - 1} along "
           "the top,", f"c{half} -> c{n - 1} back along the bottom; the link c{n - 1} -- c0 "
           "on the left closes the ring"]
    for node in range(topo.nodes):
        out.append("")
        if topo.nodes > 1:
            out.append(_node_title(topo, node))
        out += _grid(topo, node, [top, bottom], cell, pad, False, False)
    return out


def _single_chip(topo) -> list[str]:
    out = []
    phys = topo.lnc
    for node in range(topo.nodes):
        if topo.nodes > 1:
            out += ["", _node_title(topo, node)]
        ranks = topo.ranks_on_chip(node * topo.chips_per_node)
        lines = [f"c0: one chip, {topo.spec.cores_per_chip} physical NeuronCores, "
                 "no NeuronLink"]
        for core in range(topo.ranks_per_chip):
            p0 = core * phys
            cores = f"physical core {p0}" if phys == 1 else f"physical cores {p0}-{p0 + phys - 1}"
            who = f"rank {ranks[core]}" if core < len(ranks) else "idle"
            lines.append(f"  logical core {core} ({cores}): {who}")
        w = max(map(len, lines))
        out.append("  +" + "-" * (w + 2) + "+")
        out += [f"  | {ln.ljust(w)} |" for ln in lines]
        out.append("  +" + "-" * (w + 2) + "+")
    return out


# --- summaries ---------------------------------------------------------------------
def _links_summary(topo) -> list[str]:
    groups: dict[tuple, int] = {}
    for lk in topo.links:
        key = (lk.kind, round(lk.bandwidth_GBps, 3), lk.latency_us)
        groups[key] = groups.get(key, 0) + 1
    order = {k: i for i, k in enumerate(cat.LINK_KINDS)}
    out = [f"links ({len(topo.links)}; bandwidth per direction, full duplex):"]
    for (kind, bw, lat), count in sorted(groups.items(), key=lambda kv: order.get(kv[0][0], 9)):
        what = {cat.INTRA_CHIP: "one per chip: copies between ranks on the chip",
                cat.NEURONLINK: "chip-to-chip in a server",
                cat.NEURONLINK_Z: "between servers of the UltraServer",
                cat.EFA: "rail-aligned: chip c to chip c of each other node",
                }.get(kind, "")
        out.append(f"  {kind:<13} {count:>5} x {bw:>8.2f} GB/s  {lat:>5.1f} us   {what}")
    return out


def _ring_lines(topo) -> list[str]:
    out = []
    rings = topo.rings
    kind = "edge-disjoint rings" if len(rings) > 1 else "ring"
    out.append(f"{kind} (chip order; each chip's ranks are consecutive in the rank ring):")
    routed = False
    for i, ring in enumerate(rings):
        chips: list[int] = []
        for r in ring:
            g = topo.global_chip(r)
            if not chips or chips[-1] != g:
                chips.append(g)
        if len(chips) > 1 and chips[-1] == chips[0]:
            chips.pop()
        pieces = [("", _chip_name(topo, chips[0]))]
        for a, b in zip(chips, chips[1:] + chips[:1]):
            linked = a == b or topo.link_between_chips(a, b) is not None
            routed = routed or not linked
            pieces.append((" -> " if linked else " ~> ", _chip_name(topo, b)))
        first = f"ring {i}: "
        out += _wrap_words(pieces, first, len(first))
    if routed:
        out.append("(~> joins chips that are not neighbours: that step is routed through "
                   "other chips)")
    return out


def render_text(topo) -> str:
    """The whole picture: header, chip layout, links summary and ring orders."""
    spec = topo.spec
    used, total = topo.chips_used * topo.nodes, topo.chips_per_node * topo.nodes
    chips = _plural(total, "chip") if used == total else f"{used} of {total} chips in use"
    head = (f"{topo.instance}: LNC={topo.lnc}, {_plural(topo.nodes, 'node')}, "
            f"{_plural(topo.size, 'rank')}, {chips}, {topo.ranks_per_chip} ranks per chip")
    lines = [head]
    if topo.size < topo.ranks_per_node:
        lines.append(f"(a world of {topo.size} ranks occupies the first "
                     f"{_plural(topo.chips_used, 'chip')})")
    lines.append("")
    if spec.chips == 1:
        lines += _single_chip(topo)
    elif len(spec.dims) == 1:
        lines += _ring1d(topo)
    elif len(spec.dims) == 2:
        lines += _torus2d(topo)
    else:
        lines += _torus3d(topo)
    if topo.nodes > 1:
        lines += ["", f"{topo.nodes} nodes joined by EFA ({spec.efa_total_Gbps:g} Gbps per "
                  "node): chip c of each node links to chip c of every other node"]
    lines.append("")
    lines += _links_summary(topo)
    lines.append("")
    lines += _ring_lines(topo)
    return "\n".join(ln.rstrip() for ln in lines) + "\n"
