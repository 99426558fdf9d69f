"""Cartesian topologies of the mpi4py facade (MPI_Cart_create and the calls on a
Cartcomm): a process grid laid over a communicator's ranks in row-major order,
its coordinates, shifts and sub-grids, and the neighbourhood collectives over it.

The grid keeps the parent's rank order (``reorder`` is accepted and changes
nothing, which MPI allows); ranks beyond the grid's size get MPI.COMM_NULL.
"""
from __future__ import annotations

import math

import numpy as np
from mpi4py import MPI as _MPI

from ..errors import InvalidArgumentError
from .buffers import Msg, as_bytes
from .requests import done, not_emulated


def grid_args(dims, periods, size: int) -> tuple:
    """``dims`` and ``periods`` of MPI_Cart_create checked against a communicator of
    ``size`` ranks: (dims, periods as 0/1). Raised the same on every rank (every
    rank passes the same arguments), before anything is made."""
    try:
        dims = [int(d) for d in dims]
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"dims: expected a list of integers, got {dims!r}") from None
    if any(d <= 0 for d in dims):
        raise InvalidArgumentError(f"dims: every dimension must be positive, got {dims}")
    if periods is None:
        periods = [False] * len(dims)
    elif isinstance(periods, (bool, int, np.integer)):
        periods = [bool(periods)] * len(dims)
    else:
        periods = list(periods)
    if len(periods) != len(dims):
        # (mpi4py raises ValueError here too)
        raise ValueError(f"periods: expecting {len(dims)} items, got {len(periods)}")
    if math.prod(dims) > size:
        raise InvalidArgumentError(
            f"dims: a grid of {math.prod(dims)} processes ({dims}) does not fit in the "
            f"communicator's {size} (MPI_ERR_ARG)")
    return dims, [1 if p else 0 for p in periods]


class Cartcomm:
    """The Cartcomm methods, mixed into the facade's Comm (comm.Cartcomm)."""

    _dims: list
    _periods: list

    @classmethod
    def _with_grid(cls, nc, dims, periods):
        c = cls(nc)
        c._dims, c._periods = list(dims), list(periods)
        return c

    def Dup(self, info=None):
        return type(self)._with_grid(super().Dup()._c, self._dims, self._periods)

    Clone = Dup

    is_topo = True
    topology = _MPI.CART

    def Get_topology(self):
        return _MPI.CART

    def Get_dim(self) -> int:
        return len(self._dims)

    dim = ndim = property(Get_dim)

    @property
    def dims(self) -> list:
        return list(self._dims)

    @property
    def periods(self) -> list:
        return list(self._periods)

    @property
    def coords(self) -> list:
        return self.Get_coords(self.Get_rank())

    def Get_topo(self) -> tuple:
        return self.dims, self.periods, self.coords

    topo = property(Get_topo)

    def Get_coords(self, rank) -> list:
        """The grid coordinates of ``rank`` (row-major: the last dimension varies
        fastest)."""
        if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or \
                not 0 <= rank < self.Get_size():
            raise InvalidArgumentError(
                f"rank: expected a rank in [0, {self.Get_size()}), got {rank!r}")
        out = []
        for d in reversed(self._dims):
            out.append(int(rank) % d)
            rank = int(rank) // d
        return out[::-1]

    def Get_cart_rank(self, coords) -> int:
        """The rank at ``coords``; a periodic dimension wraps, a coordinate outside a
        non-periodic one is refused."""
        coords = [int(c) for c in coords]
        if len(coords) != len(self._dims):
            raise InvalidArgumentError(
                f"coords: expected {len(self._dims)} coordinates, got {len(coords)}")
        rank = 0
        for i, (c, d, p) in enumerate(zip(coords, self._dims, self._periods)):
            if p:
                c %= d
            elif not 0 <= c < d:
                raise InvalidArgumentError(
                    f"coords: coordinate {c} of dimension {i} is outside [0, {d}) and the "
                    "dimension is not periodic (MPI_ERR_ARG)")
            rank = rank * d + c
        return rank

    def _neighbour(self, coords, i, disp) -> int:
        c = list(coords)
        c[i] += disp
        if not self._periods[i] and not 0 <= c[i] < self._dims[i]:
            return _MPI.PROC_NULL
        return self.Get_cart_rank(c)

    def Shift(self, direction, disp) -> tuple:
        """(source, dest): the ranks ``disp`` steps back and forward along dimension
        ``direction``; MPI.PROC_NULL past the edge of a non-periodic one."""
        if not 0 <= int(direction) < len(self._dims):
            raise InvalidArgumentError(
                f"direction: expected a dimension in [0, {len(self._dims)}), got {direction!r}")
        me = self.coords
        return (self._neighbour(me, int(direction), -int(disp)),
                self._neighbour(me, int(direction), int(disp)))

    def Sub(self, remain_dims):
        """The sub-grid of the dimensions kept (``remain_dims`` true) through this
        rank (MPI_Cart_sub; collective)."""
        keep = [bool(k) for k in remain_dims]
        if len(keep) != len(self._dims):
            raise InvalidArgumentError(
                f"remain_dims: expected {len(self._dims)} flags, got {len(keep)}")
        me = self.coords
        color = 0
        for c, d, k in zip(me, self._dims, keep):
            if not k:
                color = color * d + c
        sub = self.Split(color, self.Get_rank())
        return type(self)._with_grid(sub._c, [d for d, k in zip(self._dims, keep) if k],
                                     [p for p, k in zip(self._periods, keep) if k])

    # neighbours: per dimension, the one behind (-1) then the one ahead (+1)
    def _neighbours(self) -> list:
        me = self.coords
        return [self._neighbour(me, i, d) for i in range(len(self._dims)) for d in (-1, 1)]

    @property
    def inedges(self) -> list:
        return self._neighbours()

    outedges = inedges

    @property
    def inoutedges(self) -> tuple:
        n = self._neighbours()
        return n, list(n)

    @property
    def indegree(self) -> int:
        return 2 * len(self._dims)

    outdegree = indegree

    @property
    def degrees(self) -> tuple:
        return self.indegree, self.outdegree

    def Neighbor_allgather(self, sendbuf, recvbuf) -> None:
        """Every neighbour's ``sendbuf`` into ``recvbuf``, block k from neighbour k
        (per dimension, behind then ahead; ``recvbuf``'s count is per neighbour,
        as mpi4py reads it); a block of MPI.PROC_NULL is left as it was."""
        k = 2 * len(self._dims)
        x = Msg(sendbuf, "sendbuf").elems()
        r = Msg(recvbuf, "recvbuf")
        if k:
            self._exchange([x] * k, r, r.block(k))

    def Neighbor_alltoall(self, sendbuf, recvbuf) -> None:
        """Block k of ``sendbuf`` to neighbour k, block k of ``recvbuf`` from it
        (per dimension, behind then ahead; counts per neighbour, as mpi4py reads
        them); a block of MPI.PROC_NULL is left as it was."""
        k = 2 * len(self._dims)
        s = Msg(sendbuf, "sendbuf")
        r = Msg(recvbuf, "recvbuf")
        if k:
            b = s.block(k)
            self._exchange([s.a[j * b:(j + 1) * b] for j in range(k)], r, r.block(k))

    def _exchange(self, blocks, r, slot) -> None:
        """Send ``blocks[k]`` to neighbour k and receive neighbour k's into block k
        (``slot`` elements each) of ``r`` (a Msg): one all-to-all-v of the
        communicator, each destination's blocks in the order of their k; a
        neighbour reached in direction (i, -1) finds the block in its slot (i, +1)
        and the reverse."""
        out = r.a
        x0 = blocks[0]
        if x0.dtype != out.dtype:
            raise InvalidArgumentError(
                f"recvbuf: datatype {out.dtype} differs from the send buffer's {x0.dtype}")
        if x0.size > slot:
            raise InvalidArgumentError(
                f"recvbuf: {slot} elements per neighbour, fewer than the {x0.size} sent "
                "(MPI_ERR_TRUNCATE)")
        if not out.flags.writeable:
            raise InvalidArgumentError("recvbuf: expected a writeable buffer, got a read-only one")
        nb = self._neighbours()
        if out.size < slot * len(nb):
            raise InvalidArgumentError(
                f"recvbuf: {out.size} elements, fewer than {len(nb)} blocks of {slot}")
        nbytes = x0.nbytes
        n = self.Get_size()
        send_counts = [0] * n
        parts = []
        for d in range(n):  # (each destination's blocks, in the order of k)
            for k, dst in enumerate(nb):
                if dst == d:
                    parts.append(as_bytes(blocks[k]))
                    send_counts[d] += nbytes
        # a block for my slot j came from neighbour nb[j], who sent it as its block
        # j ^ 1 (the opposite direction of dimension j // 2)
        recv_counts = [0] * n
        order: dict = {}
        for j, src in enumerate(nb):
            if src != _MPI.PROC_NULL:
                order.setdefault(src, []).append((j ^ 1, j))
                recv_counts[src] += nbytes
        x = np.concatenate(parts) if parts else np.empty(0, np.uint8)
        got = self._c.all_to_all_v(x, send_counts, recv_counts).view(out.dtype)
        m, offset = x0.size, 0
        for src in range(n):
            for _, j in sorted(order.get(src, ())):
                out[j * slot:j * slot + m] = got[offset:offset + m]
                offset += m

    def Ineighbor_allgather(self, sendbuf, recvbuf):
        """Neighbor_allgather, completed at the call; returns a done Request."""
        self.Neighbor_allgather(sendbuf, recvbuf)
        return done()

    def Ineighbor_alltoall(self, sendbuf, recvbuf):
        """Neighbor_alltoall, completed at the call; returns a done Request."""
        self.Neighbor_alltoall(sendbuf, recvbuf)
        return done()

    def __getattr__(self, name):
        not_emulated(self, name, _MPI.Cartcomm)
