"""Replica-group rules of the real hardware, as a strict check. Every rule names its
source (SOURCES); docs/api.md lists them and where the sources disagree.

Two limits that are easy to confuse:
* the job: how many cores one job's collectives span. On trn1 the runtime says
  "Unsupported topology. Supported number of Neuron Cores is 1, 2, 8, 16 or a
  multiple of 32" [job-trn1]. Checked for the world (``init``) only.
* a replica group inside the job: which sets of ranks may run a collective. The
  runtime's refusal reads "CC not permitted on this group" [cc-trn1].

trn1.32xlarge / trn1n.32xlarge (local indices on a node, 2 per chip, chips row-major
on the 4x4 torus):
  - a block of 2, 8, 16 or 32 consecutive ranks starting at a multiple of its size
    (one chip, one torus row, two rows, the node) [seed-trn1, job-trn1];
  - one rank on each chip of a torus column, the data-parallel group of the 8 x 4
    layout ([i, i+8, i+16, i+24], i < 8) [seed-trn1, nxd-trn1-tp4], or two of them
    on neighbouring chips of a column ([i, i+8], the DP group of 8 TP x 2 DP x 2 PP)
    [nxd-neighbours];
  - anything else, e.g. one rank on each of 8 chips [1, 3, ..., 15], is refused
    [cc-trn1].
trn1.2xlarge: 1 or 2 [seed-trn1].
inf2: an even number of ranks on consecutive devices [seed-inf2].
trn2 (trn2.48xlarge, trn2u, the UltraServer), LNC=1 or 2:
  - a power of two ranks per node [facts-trn2];
  - every chip the group touches holds the same cores, and the chips are evenly
    spaced (ids in arithmetic progression with a power-of-two step: TP blocks and
    the DP groups across them [facts-trn2, nxd-trn2]), or two whole rows that are
    neighbours on the torus (neuronx-distributed's second layout, TP=32 at LNC=2,
    TP=64 at LNC=1) [nxd-trn2];
  - a group on exactly two chips needs the chips linked ("0 and 32 cant communicate
    directly" at LNC=2), and two linked chips will do, also through the torus's
    wrap-around (rows 0 and 3 are neighbours in the TP=32 layout) [nxd-neighbours].
Across nodes: every node holds the same local indices [internode], and that
per-node set follows the rules above.

strict=False skips all of this and accepts any group.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import UnsupportedGroupError

SOURCES = {
    "job-trn1": "optimum-neuron issue 619 (runtime error quoted: 'Unsupported topology. "
                "Supported number of Neuron Cores is 1, 2, 8, 16 or a multiple of 32')",
    "cc-trn1": "optimum-neuron issue 761 (trn1 group [1, 3, 5, ..., 15]: runtime error "
               "'CC not permitted on this group')",
    "seed-trn1": "aws-neuron-sdk general/arch/neuron-features/collective-communication.rst "
                 "(seed 001): trn1.32xlarge sets of 2, 8 and 32 ranks; 8 TP x 4 DP; "
                 "trn1.2xlarge 2 ranks only",
    "nxd-trn1-tp4": "neuronx-distributed parallel_layers/parallel_state.py: trn1 TP=4 "
                    "groups [0, 8, 16, 24], [1, 9, 17, 25], ...",
    "nxd-trn2": "neuronx-distributed parallel_layers/parallel_state.py get_logic_chosen: "
                "trn2 TP x DP layouts (ascending blocks; TP=32 at LNC=2 and TP=64 at LNC=1 "
                "as rows 0+3 and 1+2)",
    "nxd-neighbours": "neuronx-distributed get_logic_chosen docstring: at LNC=2 '0 and 32 "
                      "cant communicate directly' (chips two rows apart)",
    "facts-trn2": "NEURON_FACTS.md (seeds): trn2 TP 4..64 by powers of two with DP across",
    "seed-inf2": "aws-neuron-sdk collective-communication.rst (seed 001): inf2 any even "
                 "number of ranks on consecutive Neuron devices",
    "internode": "aws-neuron-sdk neuron-runtime/explore/internode-collective-comm.rst: "
                 "same number of ranks at the same intra-node indices on every node",
    "single": "a group of one rank moves no data",
    "non-strict": "strict=False: every group accepted",
}

CC_REFUSED = "CC not permitted on this group"
JOB_REFUSED = "Unsupported topology. Supported number of Neuron Cores is"


@dataclass(frozen=True)
class Verdict:
    """What the runtime would say about one replica group."""

    group: tuple
    accepted: bool
    rule: str  # key of SOURCES
    why: str  # the shape found, in words
    message: str  # the runtime-style error ("" when accepted)

    @property
    def source(self) -> str:
        return SOURCES[self.rule]


def _power_of_two(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def _short(group) -> str:
    g = list(group)
    return str(g) if len(g) <= 8 else f"[{g[0]}, {g[1]}, {g[2]}, ..., {g[-1]}]"


def job_sizes(topo) -> str:
    """The job sizes the runtime lists for this instance (its error's wording)."""
    fam = topo.spec.family
    if fam == "trn1" and topo.spec.chips > 1:
        return "1, 2, 8, 16 or a multiple of 32"
    if topo.spec.chips == 1:
        return "1 or 2" if topo.ranks_per_node >= 2 else "1"
    if fam == "inf2":
        return f"1 or an even number up to {topo.ranks_per_node} on consecutive devices"
    rpn = topo.ranks_per_node
    sizes = [1 << k for k in range(rpn.bit_length()) if 1 << k <= rpn]
    return ", ".join(map(str, sizes[:-1])) + f" or a multiple of {sizes[-1]}"


class _Refuse(Exception):
    def __init__(self, rule, why, job=False):
        self.rule, self.why, self.job = rule, why, job


def _trn1_local(topo, local):
    n = len(local)
    a = local[0]
    block = local == list(range(a, a + n))
    if topo.spec.chips == 1:
        return "seed-trn1", f"{n} ranks of the one chip"
    if block and n in (2, 8, 16, 32):
        if a % n:
            raise _Refuse("cc-trn1", f"a block of {n} must start at a multiple of {n}, "
                                     f"it starts at {a}")
        return ("seed-trn1" if n != 16 else "job-trn1"), f"a block of {n} consecutive ranks"
    rpc = topo.ranks_per_chip
    per_row = topo.spec.dims[-1].size * rpc  # 8: the ranks of one torus row
    stride = local[1] - local[0] if n > 1 else 0
    strided = n > 1 and local == [a + k * stride for k in range(n)]
    if strided and stride == per_row and n == 4:
        return "seed-trn1", "one rank on each chip of a torus column (8 TP x 4 DP)"
    if strided and stride == per_row and n == 2:
        return "nxd-neighbours", "one rank on each of two neighbouring chips of a column"
    if strided and stride == rpc:
        raise _Refuse("cc-trn1", f"one rank on each of {n} chips along the rows")
    raise _Refuse("cc-trn1", f"{n} ranks that are neither an aligned block of 2, 8, 16 or "
                             f"32 nor one rank per chip of a torus column")


def _inf2_local(topo, local):
    n = len(local)
    if n % 2:
        raise _Refuse("seed-inf2", "inf2 supports only even group sizes")
    if local != list(range(local[0], local[0] + n)) or local[0] % topo.ranks_per_chip:
        raise _Refuse("seed-inf2", "the ranks must occupy consecutive Neuron devices")
    return "seed-inf2", f"{n} ranks on consecutive devices"


def _trn2_local(topo, local):
    n = len(local)
    rpc = topo.ranks_per_chip
    if not _power_of_two(n):
        raise _Refuse("facts-trn2", f"{n} ranks per node is not a power of two")
    chips: dict[int, list[int]] = {}
    for r in local:
        chips.setdefault(r // rpc, []).append(r % rpc)
    cores = {tuple(v) for v in chips.values()}
    ids = sorted(chips)
    if len(cores) != 1:
        raise _Refuse("nxd-trn2", "the chips it touches do not hold the same cores")
    if len(ids) == 1:
        return "facts-trn2", f"{n} ranks on one chip"
    if len(ids) == 2:
        a, b = ids
        if topo.link_between_chips(a, b) is None:
            raise _Refuse("nxd-neighbours", f"chips {a} and {b} are not linked")
    step = ids[1] - ids[0]
    if ids == [ids[0] + k * step for k in range(len(ids))] and _power_of_two(step):
        kind = "consecutive chips" if step == 1 else f"every {step}th chip"
        return ("facts-trn2" if step > 1 else "nxd-trn2"), f"{n} ranks on {kind}"
    if len(ids) == 2:
        # linked (above) but not evenly spaced: neighbours through the torus's
        # wrap-around, as the TP=32 layout's rows 0 and 3 are
        return "nxd-neighbours", f"{n} ranks on two chips linked through the wrap-around"
    row = topo.spec.dims[-1].size
    rows = sorted({c // row for c in ids})
    n_rows = topo.spec.dims[-2].size if len(topo.spec.dims) >= 2 else 1
    if (len(ids) == 2 * row and len(rows) == 2 and ids == sorted(
            r * row + c for r in rows for c in range(row))
            and (rows[1] - rows[0]) % n_rows in (1, n_rows - 1)):
        return "nxd-trn2", f"two whole neighbouring rows {rows} (TP=32/64 layout)"
    raise _Refuse("nxd-trn2", "its chips are not evenly spaced (nor two neighbouring rows)")


def verdict(topo, group, strict: bool = True, name: str = "replica_groups") -> Verdict:
    """Whether the hardware runs collectives on ``group`` (world ranks), with the rule
    that decided and its source. No exception. ``name``: the argument the message
    starts with ("world" for the job's own ranks)."""
    group = tuple(int(r) for r in group)
    if not strict:
        return Verdict(group, True, "non-strict", "strict=False", "")
    if len(group) <= 1:
        return Verdict(group, True, "single", "one rank", "")
    fam = topo.spec.family
    try:
        if group == tuple(range(topo.size)) and fam == "trn1" and topo.spec.chips > 1:
            n = len(group)
            if n not in (1, 2, 8, 16) and n % 32:
                raise _Refuse("job-trn1", f"a job of {n} cores", job=True)
        per_node: dict[int, list[int]] = {}
        for r in group:
            p = topo.placement(r)
            per_node.setdefault(p.node, []).append(r - p.node * topo.ranks_per_node)
        locs = [sorted(v) for v in per_node.values()]
        if len(locs) > 1 and any(lc != locs[0] for lc in locs):
            raise _Refuse("internode", "every node must hold the same number of members at "
                                       "the same local indices (inter-node symmetry rule)")
        local = locs[0]
        if len(local) == 1:
            rule, why = ("internode", "one rank per node at the same local index")
        elif fam == "trn1":
            rule, why = _trn1_local(topo, local)
        elif fam == "inf2":
            rule, why = _inf2_local(topo, local)
        else:
            rule, why = _trn2_local(topo, local)
        if len(locs) > 1:
            why += f", on each of {len(locs)} nodes"
        return Verdict(group, True, rule, why, "")
    except _Refuse as e:
        where = f"on {topo.instance} (LNC={topo.lnc})"
        if e.job:
            msg = (f"{name}: {JOB_REFUSED} {job_sizes(topo)} {where}; "
                   f"{e.why}")
        else:
            msg = (f"{name}: {CC_REFUSED}: group {_short(group)} of {len(group)} "
                   f"ranks {where}: {e.why}")
        return Verdict(group, False, e.rule, e.why, msg)


def check_group(topo, group, strict: bool = True, name: str = "replica_groups") -> None:
    """Raise UnsupportedGroupError if the hardware refuses this group of world ranks."""
    v = verdict(topo, group, strict, name)
    if not v.accepted:
        raise UnsupportedGroupError(f"{v.message} [{v.source}]")
