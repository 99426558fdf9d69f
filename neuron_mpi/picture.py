"""PNG pictures of a topology: the chips in their torus or ring, their links, and
(with a merged link-stats file) the bytes each link carried (``neuron-mpi topo
--png out.png [--heat STATS.json]``; needs matplotlib, the ``plot`` extra).

Layout: a 2-D torus as its grid (row y, column x), wrap-around links as arcs
outside it; a 1-D ring on a circle; the UltraServer's 3-D torus as its Z layers
side by side (Z links as arcs between them); nodes side by side, EFA rail links as
dashed arcs between them. A chip box lists its ranks. In a heat map each direction
of a link is its own arrow, coloured (log scale) and labelled with its bytes; a
chip box is coloured by its intra-chip copies.
"""
from __future__ import annotations

import math

from . import catalog as cat
from .timeline import human

SCALE = 1.9  # layout units between neighbouring chips (a chip box is 0.56 wide)
_COLORS = {cat.NEURONLINK: "#4c72b0", cat.NEURONLINK_Z: "#8172b2", cat.EFA: "#c44e52"}


def _positions(topo) -> dict[int, tuple[float, float]]:
    dims = topo.spec.dims
    pos = {}
    for node in range(topo.nodes):
        for c in range(topo.chips_used):
            g = node * topo.chips_per_node + c
            co = topo.chip_coords(c)
            if topo.spec.chips == 1:
                x, y = 0.0, 0.0
                width = 1.0
            elif len(dims) == 1:
                n = dims[0].size
                r = max(1.0, n / (2 * math.pi) * 1.1)
                a = math.pi / 2 - 2 * math.pi * co[0] / n
                x, y = r + r * math.cos(a), r * math.sin(a)
                width = 2 * r + 1.5
            elif len(dims) == 2:
                x, y = float(co[1]), -float(co[0])
                width = dims[1].size + 0.8
            else:
                x, y = float(co[2] + co[0] * (dims[2].size + 0.9)), -float(co[1])
                width = dims[0].size * (dims[2].size + 0.9)
            pos[g] = ((x + node * (width + 1.2)) * SCALE, y * SCALE)
    return pos


def _rad(topo, ga, gb, pos) -> float:
    """Curvature of the arc between two chips: 0 for layout neighbours, more for
    wrap-around and Z links (which would cross other chips if straight)."""
    (xa, ya), (xb, yb) = pos[ga], pos[gb]
    d = math.hypot(xa - xb, ya - yb)
    if topo.spec.chips > 1 and len(topo.spec.dims) == 1:
        return 0.0 if d < 2.5 * SCALE else 0.3
    return 0.0 if d <= 1.01 * SCALE else 0.25


def draw(topo, path, traffic: dict | None = None, title: str | None = None) -> dict:
    """Write the picture of ``topo`` to ``path`` (PNG); ``traffic`` from
    linkstats.chip_traffic makes it a heat map. Returns what it drew: ``links``,
    [(chip a, chip b, label)] per link (heat map: per direction that carried bytes,
    labelled with them) and ``chips``, {chip: label}."""
    drawn: dict = {"links": [], "chips": {}}
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import cm, colors
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    pos = _positions(topo)
    xs = [p[0] for p in pos.values()]
    ys = [p[1] for p in pos.values()]
    w = (max(xs) - min(xs)) / SCALE + 2
    h = (max(ys) - min(ys)) / SCALE + 2
    fig, ax = plt.subplots(figsize=(min(40.0, max(6.0, 1.7 * w)), max(4.5, 1.7 * h + 1)))
    ax.set_aspect("equal")
    ax.axis("off")
    heat = traffic is not None
    if heat:
        vals = [b for b in traffic.values() if b > 0]
        lo, hi = (min(vals), max(vals)) if vals else (1, 2)
        norm = colors.LogNorm(vmin=max(1, lo), vmax=max(hi, lo + 1))
        cmap = plt.get_cmap("plasma")
    box = 0.46 * SCALE
    chip_links = [lk for lk in topo.links if lk.a != lk.b]
    sag = max([abs(_rad(topo, lk.a, lk.b, pos)) * math.dist(pos[lk.a], pos[lk.b]) / 2
               for lk in chip_links if lk.a in pos and lk.b in pos] + [0.0])
    m = box + (sag if len(topo.spec.dims) != 1 else 0.0)
    ax.set_xlim(min(xs) - m, max(xs) + m)
    ax.set_ylim(min(ys) - m, max(ys) + m)
    fig.canvas.draw()  # fixes the data -> points scale the arrows' ends need
    o, one = ax.transData.transform((0, 0)), ax.transData.transform((1, 0))
    shrink = (one[0] - o[0]) * 72.0 / fig.dpi * box * 0.55  # points: to the box's edge
    for lk in chip_links:
        if lk.a not in pos or lk.b not in pos:
            continue
        rad = _rad(topo, lk.a, lk.b, pos)
        style = "--" if lk.kind == cat.EFA else "-"
        if not heat:
            ax.add_patch(FancyArrowPatch(pos[lk.a], pos[lk.b], arrowstyle="-",
                                         connectionstyle=f"arc3,rad={rad}",
                                         color=_COLORS.get(lk.kind, "k"), lw=2.2,
                                         linestyle=style, shrinkA=shrink, shrinkB=shrink, zorder=1))
            drawn["links"].append((lk.a, lk.b, lk.kind))
            continue
        for a, b in ((lk.a, lk.b), (lk.b, lk.a)):
            nb = traffic.get((a, b), 0)
            # the two directions bow to opposite sides of the link
            r = rad + 0.2 if rad >= 0 else rad - 0.2
            color = cmap(norm(nb)) if nb > 0 else "#d0d0d0"
            arrow = FancyArrowPatch(pos[a], pos[b], arrowstyle="-|>", mutation_scale=9,
                                    connectionstyle=f"arc3,rad={r}", color=color,
                                    lw=2.4 if nb else 0.8, linestyle=style, shrinkA=shrink,
                                    shrinkB=shrink, zorder=2 if nb else 1)
            ax.add_patch(arrow)
            if nb:
                (xa, ya), (xb, yb) = pos[a], pos[b]
                mx, my = (xa + xb) / 2, (ya + yb) / 2
                dx, dy = xb - xa, yb - ya
                # the arc's midpoint: offset perpendicular to the chord by rad * length / 2
                ox, oy = dy * r / 2, -dx * r / 2
                drawn["links"].append((a, b, human(nb)))
                angle = math.degrees(math.atan2(dy, dx))  # along the link, upright
                angle = angle - 180 if angle > 90 else angle + 180 if angle <= -90 else angle
                ax.text(mx + ox, my + oy, human(nb), fontsize=6, ha="center", va="center",
                        rotation=angle, rotation_mode="anchor",
                        zorder=4, bbox=dict(boxstyle="round,pad=0.15", fc="white",
                                            ec="none", alpha=0.85))
    for g, (x, y) in pos.items():
        node, c = divmod(g, topo.chips_per_node)
        ranks = topo.ranks_on_chip(g)
        span = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks[0]}-{ranks[-1]}"
        label = f"chip {c}" + (f" (node {node})" if topo.nodes > 1 else "") + f"\n{span}"
        face = "#f2f2f2"
        if heat:
            intra = traffic.get((g, g), 0)
            if intra:
                face = cmap(norm(intra))
                label += f"\nintra {human(intra)}"
        drawn["chips"][g] = label
        ax.add_patch(FancyBboxPatch((x - box / 2, y - box / 2), box, box,
                                    boxstyle="round,pad=0.04", fc=face, ec="#333333",
                                    lw=1.0, zorder=3))
        txt_color = "white" if heat and traffic.get((g, g), 0) and \
            norm(traffic[(g, g)]) < 0.5 else "black"
        ax.text(x, y, label, ha="center", va="center", fontsize=6.5, zorder=5,
                color=txt_color)
    if title is None:
        title = (f"{topo.instance} LNC={topo.lnc}, {topo.nodes} node(s), {topo.size} ranks"
                 + (":\nbytes sent per link and direction" if heat else ""))
    ax.set_title(title, fontsize=10)
    if heat:
        sm = cm.ScalarMappable(norm=norm, cmap=cmap)
        fig.colorbar(sm, ax=ax, shrink=0.6, label="bytes (log scale)")
    else:
        from matplotlib.lines import Line2D

        kinds = sorted({lk.kind for lk in chip_links})
        handles = [Line2D([], [], color=_COLORS.get(k, "k"), lw=2.2,
                          linestyle="--" if k == cat.EFA else "-", label=k) for k in kinds]
        if handles:
            ax.legend(handles=handles, loc="upper center", fontsize=8, frameon=False,
                      bbox_to_anchor=(0.5, 0.0), ncol=len(handles))
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return drawn
