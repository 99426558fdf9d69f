"""The instance catalog: every Neuron instance the emulator can lay ranks on.

Entries are plain data (no subclasses). Each one gives the chip grid, the physical
cores per chip, the kind and figures of every link, the valid LNC values and the
network. Figures carry their source in a comment; where the public docs give a
per-chip total the per-link figure is derived and marked as such.

Sources:
  [intra]  aws-neuron-sdk neuron-runtime/explore/intranode-collective-comm.rst
  [inter]  aws-neuron-sdk neuron-runtime/explore/internode-collective-comm.rst
  [about]  aws-neuron-sdk neuron-runtime/about/collectives.rst (seed 002): trn2 torus,
           16 x 200 Gbps EFA, 15 us HBM-to-HBM across servers (ib_write_lat)
  [trn1]   aws-neuron-sdk general/arch/neuron-features/collective-communication.rst
           (seeds 000/001) and the trn1 instance pages: 384 GiB/s NeuronLink-v2 per
           chip on trn1.32xlarge, 768 GiB/s on trn1n, 800 / 1600 Gbps EFA
  [inf2]   inf2 architecture page: NeuronLink-v2 ring, 96 GiB/s per link
  [hbm]    AWS chip pages: Trainium2 2.9 TB/s HBM per chip; Trainium / Inferentia2
           820 GB/s HBM per chip
"""
from __future__ import annotations

from dataclasses import dataclass, field

# The words used everywhere a link kind is named (JSON, ledger, model, docs).
INTRA_CHIP = "intra-chip"
NEURONLINK = "neuronlink"
NEURONLINK_Z = "neuronlink-z"
EFA = "efa"
LINK_KINDS = (INTRA_CHIP, NEURONLINK, NEURONLINK_Z, EFA)

GIB = 1024**3 / 1e9  # GiB/s -> GB/s


@dataclass(frozen=True)
class LinkSpec:
    """Figures for one link of a kind: per direction, full duplex."""

    kind: str
    bandwidth_GBps: float
    latency_us: float


@dataclass(frozen=True)
class Dim:
    """One dimension of the chip grid: its size, whether it wraps, its link."""

    name: str
    size: int
    wrap: bool
    link: LinkSpec


@dataclass(frozen=True)
class InstanceSpec:
    name: str
    family: str  # "trn1" | "inf2" | "trn2": selects the group-size rules
    dims: tuple[Dim, ...]  # outermost first; chip id = mixed radix, last dim fastest
    cores_per_chip: int  # physical NeuronCores
    lnc_values: tuple[int, ...]
    default_lnc: int
    intra_chip: LinkSpec
    hbm_GBps: float  # per chip, for reduction work in the time model
    efa: LinkSpec | None  # per chip (rail-aligned NIC share); None: single node only
    efa_total_Gbps: float = 0.0
    notes: str = ""
    aliases: tuple[str, ...] = field(default=())

    @property
    def chips(self) -> int:
        n = 1
        for d in self.dims:
            n *= d.size
        return n


# --- link figures --------------------------------------------------------------
# [intra] example figures: "1-2 us per hop"; we take the midpoint for every
# NeuronLink generation.
_NL_LAT = 1.5
# [trn1] 384 GiB/s per chip over 4 torus links -> 96 GiB/s per link (derived).
_TRN1_NL = LinkSpec(NEURONLINK, 384 * GIB / 4, _NL_LAT)
# [trn1] trn1n doubles NeuronLink: 768 GiB/s per chip -> 192 GiB/s per link (derived).
_TRN1N_NL = LinkSpec(NEURONLINK, 768 * GIB / 4, _NL_LAT)
# [inf2] 96 GiB/s per NeuronLink-v2 link on the inf2 ring.
_INF2_NL = LinkSpec(NEURONLINK, 96 * GIB, _NL_LAT)
# [about] 1024 GB/s NeuronLink-v3 per chip over 4 torus links -> 256 GB/s per link
# (derived).
_TRN2_NL = LinkSpec(NEURONLINK, 1024 / 4, _NL_LAT)
# [about] UltraServer Z: 256 GB/s per chip over its 2 Z neighbours -> 128 GB/s per
# Z link (derived).
_TRN2_Z = LinkSpec(NEURONLINK_Z, 256 / 2, _NL_LAT)
# [about] 15 us HBM-to-HBM across servers (ib_write_lat) for every EFA hop.
_EFA_LAT = 15.0
# [about] trn2: one 200 Gbps EFA NIC per chip = 25 GB/s.
_TRN2_EFA = LinkSpec(EFA, 200 / 8, _EFA_LAT)
# [trn1] 800 Gbps per trn1.32xlarge shared by 16 chips -> 6.25 GB/s per chip (derived).
_TRN1_EFA = LinkSpec(EFA, 800 / 8 / 16, _EFA_LAT)
# [trn1] 1600 Gbps per trn1n.32xlarge over 16 chips -> 12.5 GB/s per chip (derived).
_TRN1N_EFA = LinkSpec(EFA, 1600 / 8 / 16, _EFA_LAT)
# An intra-chip transfer is one rank's DMA into another core's HBM region on the
# same chip; each pair of cores moves its own stream (the model does not share a
# chip-wide path between pairs). trn2: 37.52 GiB/s per pair, the published 8-rank
# permute (nccom-test.rst a0b8b3e7, pairs 0<->1 and 2<->3 on one chip: 32 MiB in
# 894.24 us). trn1 / inf2: 64 GiB/s, fitted to the published 2-rank (one chip)
# all-reduce rows (nccom-test.rst 4f641e78: 1 GiB in 18930 us); see
# neuron_mpi/model/params.py. 0.5 us per DMA descriptor is our assumption.
_TRN2_HBM = 2900.0
_TRN1_HBM = 820.0
_TRN2_INTRA = LinkSpec(INTRA_CHIP, 37.52 * GIB, 0.5)
_TRN1_INTRA = LinkSpec(INTRA_CHIP, 64.0 * GIB, 0.5)


def _torus(link: LinkSpec, *sizes: int, names=("y", "x")) -> tuple[Dim, ...]:
    return tuple(Dim(n, s, s > 2, link) for n, s in zip(names, sizes))


_ONE_CHIP = (Dim("x", 1, False, _TRN1_NL),)


def _trn1(name, nl, efa, efa_gbps, notes):
    return InstanceSpec(
        name=name, family="trn1", dims=_torus(nl, 4, 4), cores_per_chip=2,
        lnc_values=(1,), default_lnc=1, intra_chip=_TRN1_INTRA, hbm_GBps=_TRN1_HBM,
        efa=efa, efa_total_Gbps=efa_gbps, notes=notes)


def _inf2(name, chips, notes):
    dims = _ONE_CHIP if chips == 1 else (Dim("x", chips, True, _INF2_NL),)
    return InstanceSpec(
        name=name, family="inf2", dims=dims, cores_per_chip=2, lnc_values=(1,),
        default_lnc=1, intra_chip=_TRN1_INTRA, hbm_GBps=_TRN1_HBM, efa=None,
        notes=notes)


def _trn2(name, dims, notes):
    return InstanceSpec(
        name=name, family="trn2", dims=dims, cores_per_chip=8, lnc_values=(1, 2),
        default_lnc=2, intra_chip=_TRN2_INTRA, hbm_GBps=_TRN2_HBM, efa=_TRN2_EFA,
        efa_total_Gbps=3200.0 * (len(dims) == 3 and dims[0].size or 1), notes=notes)


CATALOG: dict[str, InstanceSpec] = {
    s.name: s
    for s in (
        InstanceSpec(
            name="trn1.2xlarge", family="trn1", dims=_ONE_CHIP, cores_per_chip=2,
            lnc_values=(1,), default_lnc=1, intra_chip=_TRN1_INTRA,
            hbm_GBps=_TRN1_HBM, efa=None,
            notes="one Trainium chip, two cores; no EFA [trn1]"),
        _trn1("trn1.32xlarge", _TRN1_NL, _TRN1_EFA, 800.0,
              "16 Trainium chips in a 4x4 NeuronLink-v2 torus [trn1]"),
        _trn1("trn1n.32xlarge", _TRN1N_NL, _TRN1N_EFA, 1600.0,
              "trn1.32xlarge with twice the NeuronLink and EFA bandwidth [trn1]"),
        _inf2("inf2.xlarge", 1, "one Inferentia2 chip [inf2]"),
        _inf2("inf2.8xlarge", 1, "one Inferentia2 chip [inf2]"),
        _inf2("inf2.24xlarge", 6,
              "6 Inferentia2 chips, bidirectional NeuronLink; modeled as a ring of 6 "
              "(the docs give inf2.48xlarge-like performance) [inf2]"),
        _inf2("inf2.48xlarge", 12,
              "12 Inferentia2 chips in a NeuronLink ring, chip 11 back to chip 0 [inf2]"),
        _trn2("trn2.48xlarge", _torus(_TRN2_NL, 4, 4),
              "16 Trainium2 chips in a 4x4 NeuronLink-v3 torus [about]"),
        _trn2("trn2u.48xlarge", _torus(_TRN2_NL, 4, 4),
              "one server of a Trn2 UltraServer; alone it is a trn2.48xlarge torus "
              "(its Z links join other servers) [about]"),
        _trn2("trn2-ultraserver",
              (Dim("z", 4, True, _TRN2_Z),) + _torus(_TRN2_NL, 4, 4),
              "4 x trn2u.48xlarge joined by NeuronLink Z rings: a 4x4x4 3D torus "
              "[about]"),
    )
}

DEFAULT_INSTANCE = "trn2.48xlarge"


def instance_spec(name: str) -> InstanceSpec:
    """Look an instance up by its exact name; a clear error otherwise."""
    from .errors import TopologyError

    try:
        return CATALOG[name]
    except KeyError:
        raise TopologyError(
            f"instance: unknown instance {name!r}; known instances: "
            + ", ".join(CATALOG)) from None
