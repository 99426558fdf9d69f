"""One small descriptor per benchmarked operation (nccl-tests' ``struct testColl``).

A descriptor says how to run the operation on a neuron_mpi communicator, how to run
the native MPI twin on the same buffers, and what this rank must hold afterwards.
Names, aliases, bus factors and buffer shapes live in ``neuron_mpi.model.workload``
(the model prices the same shapes). Everything here acts on a ``Case``: one rank's
buffers for one size.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..model import workload as W
from ..schedule import offsets
from ..vocab import DTYPE_NAMES, SMALL_FLOAT_NAMES
from . import data


@dataclass
class Case:
    """One rank's part of one row: the workload, its buffers and the settings."""

    wl: W.Workload
    me: int  # group index
    dtype: np.dtype
    redop: str
    mode: str  # data mode: "random" or "all_ones"
    comm: object = None  # neuron_mpi group communicator
    mpi: object = None  # the matching mpi4py communicator
    algorithm: str | None = None
    x: np.ndarray = None
    out: np.ndarray = None
    mpi_out: np.ndarray = None
    seed: int = data.SEED
    aux: dict = field(default_factory=dict)

    @property
    def r(self) -> int:
        return self.wl.r

    def input_of(self, g: int) -> np.ndarray:
        return data.values(self.mode, self.dtype, self._data_op(), g, self.r, 0,
                           self.wl.in_elems(g), self.seed)

    def _data_op(self):
        return self.redop if W.reduces(self.wl.op) else None


def make_case(wl: W.Workload, me: int, dtype, redop: str, mode: str, **kw) -> Case:
    c = Case(wl, me, np.dtype(dtype), redop, mode, **kw)
    c.x = c.input_of(me)
    c.out = np.empty(wl.out_elems(me), c.dtype)
    c.mpi_out = np.empty(wl.out_elems(me), c.dtype)
    return c


# --- expected results ----------------------------------------------------------------
def _reduced(c: Case, start: int, n: int) -> np.ndarray:
    return data.reduced(c.mode, c.dtype, c.redop, c.r, start, n, c.seed)


def _vals(c: Case, g: int, start: int, n: int) -> np.ndarray:
    return data.values(c.mode, c.dtype, c._data_op(), g, c.r, start, n, c.seed)


def expect_all_reduce(c: Case):
    return _reduced(c, 0, c.wl.count)


def expect_all_gather(c: Case):
    parts = [_vals(c, g, 0, n) for g, n in enumerate(c.wl.counts)]
    return np.concatenate(parts) if parts else np.empty(0, c.dtype)


def expect_reduce_scatter(c: Case):
    offs = offsets(c.wl.counts)
    return _reduced(c, offs[c.me], c.wl.counts[c.me])


def expect_alltoall(c: Case):
    m = c.wl.matrix
    parts = [_vals(c, i, offsets(m[i])[c.me], m[i][c.me]) for i in range(c.r)]
    return np.concatenate(parts) if parts else np.empty(0, c.dtype)


def _sender_to(c: Case):
    for s, d in c.wl.extra:
        if d == c.me:
            return s
    return None


def expect_permute(c: Case):
    s = _sender_to(c)
    if s is None:
        return np.zeros(c.wl.count, c.dtype)
    return _vals(c, s, 0, c.wl.count)


# --- runs on neuron_mpi ------------------------------------------------------------------
def run_all_reduce(c: Case):
    c.comm.all_reduce(c.x, c.redop, out=c.out, algorithm=c.algorithm)


def run_all_gather(c: Case):
    c.comm.all_gather(c.x, out=c.out, algorithm=c.algorithm)


def run_reduce_scatter(c: Case):
    c.comm.reduce_scatter(c.x, c.redop, out=c.out, algorithm=c.algorithm)


def run_alltoall(c: Case):
    c.comm.all_to_all(c.x, out=c.out, algorithm=c.algorithm)


def run_permute(c: Case):
    c.comm.permute(c.x, c.wl.extra, out=c.out, algorithm=c.algorithm)


def run_sendrecv(c: Case):
    c.comm.sendrecv(c.x, (c.me + 1) % c.r, c.out, (c.me - 1) % c.r)


def run_all_gather_v(c: Case):
    c.comm.all_gather_v(c.x, c.wl.counts, out=c.out, algorithm=c.algorithm)


def run_reduce_scatter_v(c: Case):
    c.comm.reduce_scatter_v(c.x, c.wl.counts, c.redop, out=c.out, algorithm=c.algorithm)


def run_alltoallv(c: Case):
    m = c.wl.matrix
    c.comm.all_to_all_v(c.x, m[c.me], [row[c.me] for row in m], out=c.out,
                        algorithm=c.algorithm)


# --- the native MPI twins ------------------------------------------------------------------
def mpi_reduce_op(redop: str):
    from mpi4py import MPI

    return {"sum": MPI.SUM, "avg": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX,
            "min": MPI.MIN}[redop]


_MPI_REDUCIBLE = tuple(n for n in DTYPE_NAMES if n not in SMALL_FLOAT_NAMES)


def native_reduces(dtype) -> bool:
    """MPI reduces only the standard types (no fp16 / bf16 / fp8 in MPI-3)."""
    from ..kernels import dtype_name

    return dtype_name(dtype) in _MPI_REDUCIBLE


def _b(a):
    return a.reshape(-1).view(np.uint8)


def mpi_all_reduce(c: Case):
    c.mpi.Allreduce(c.x, c.mpi_out, op=mpi_reduce_op(c.redop))


def mpi_all_gather(c: Case):
    c.mpi.Allgather(_b(c.x), _b(c.mpi_out))


def mpi_reduce_scatter(c: Case):
    c.mpi.Reduce_scatter_block(c.x, c.mpi_out, op=mpi_reduce_op(c.redop))


def mpi_alltoall(c: Case):
    c.mpi.Alltoall(_b(c.x), _b(c.mpi_out))


def _ring_peers(c: Case):
    s = _sender_to(c)
    d = next(d for s_, d in c.wl.extra if s_ == c.me)
    return d, s


def mpi_permute(c: Case):
    from mpi4py import MPI

    dst, src = _ring_peers(c)
    c.mpi.Sendrecv(_b(c.x), dest=dst, recvbuf=_b(c.mpi_out),
                   source=MPI.PROC_NULL if src is None else src)


def mpi_sendrecv(c: Case):
    c.mpi.Sendrecv(_b(c.x), dest=(c.me + 1) % c.r, recvbuf=_b(c.mpi_out),
                   source=(c.me - 1) % c.r)


def mpi_all_gather_v(c: Case):
    from mpi4py import MPI

    w = c.dtype.itemsize
    cnt = [n * w for n in c.wl.counts]
    c.mpi.Allgatherv(_b(c.x), [_b(c.mpi_out), cnt, offsets(cnt), MPI.BYTE])


def mpi_reduce_scatter_v(c: Case):
    c.mpi.Reduce_scatter(c.x, c.mpi_out, recvcounts=list(c.wl.counts),
                         op=mpi_reduce_op(c.redop))


def mpi_alltoallv(c: Case):
    from mpi4py import MPI

    w = c.dtype.itemsize
    m = c.wl.matrix
    sc = [n * w for n in m[c.me]]
    rc = [row[c.me] * w for row in m]
    c.mpi.Alltoallv([_b(c.x), sc, offsets(sc), MPI.BYTE],
                    [_b(c.mpi_out), rc, offsets(rc), MPI.BYTE])


# --- the descriptors ---------------------------------------------------------------------
@dataclass(frozen=True)
class Collective:
    name: str
    run: Callable[[Case], None]
    native: Callable[[Case], None]
    expected: Callable[[Case], np.ndarray]
    mpi_name: str  # the mpi4py call of the native twin

    @property
    def aliases(self) -> tuple[str, ...]:
        return tuple(a for a, n in W.ALIASES.items() if n == self.name)

    @property
    def reduces(self) -> bool:
        return W.reduces(self.name)

    @property
    def sched_op(self) -> str:
        return W.schedule_op(self.name)

    def bus_factor(self, r: int) -> float:
        return W.bus_factor(self.name, r)

    def workload(self, nbytes: int, r: int, itemsize: int, ring=None) -> W.Workload:
        return W.workload(self.name, nbytes, r, itemsize, ring)

    def has_native(self, dtype) -> bool:
        return not self.reduces or native_reduces(dtype)


COLLECTIVES: dict[str, Collective] = {c.name: c for c in (
    Collective("all_reduce", run_all_reduce, mpi_all_reduce, expect_all_reduce,
               "Allreduce"),
    Collective("all_gather", run_all_gather, mpi_all_gather, expect_all_gather,
               "Allgather"),
    Collective("reduce_scatter", run_reduce_scatter, mpi_reduce_scatter,
               expect_reduce_scatter, "Reduce_scatter_block"),
    Collective("alltoall", run_alltoall, mpi_alltoall, expect_alltoall, "Alltoall"),
    Collective("permute", run_permute, mpi_permute, expect_permute, "Sendrecv"),
    Collective("sendrecv", run_sendrecv, mpi_sendrecv, expect_permute, "Sendrecv"),
    Collective("all_gather_v", run_all_gather_v, mpi_all_gather_v, expect_all_gather,
               "Allgatherv"),
    Collective("reduce_scatter_v", run_reduce_scatter_v, mpi_reduce_scatter_v,
               expect_reduce_scatter, "Reduce_scatter"),
    Collective("alltoallv", run_alltoallv, mpi_alltoallv, expect_alltoall, "Alltoallv"),
)}
assert tuple(COLLECTIVES) == W.OPS


def get(name: str) -> Collective:
    """The descriptor for any accepted spelling; ValueError otherwise."""
    return COLLECTIVES[W.canonical_op(name)]
