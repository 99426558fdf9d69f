"""Process topologies of the mpi4py facade: Cartesian grids (MPI_Cart_create: a
grid laid over a communicator's ranks in row-major order, its coordinates, shifts
and sub-grids), graphs (MPI_Graph_create: every node's neighbours) and
distributed graphs (MPI_Dist_graph_create[_adjacent]: each rank's sources and
destinations), and the neighbourhood collectives over any of them (one
all-to-all-v of the communicator).

A topology keeps the parent's rank order (``reorder`` is accepted and changes
nothing, which MPI allows); ranks beyond a grid's or graph's size get
MPI.COMM_NULL.
"""
from __future__ import annotations

import math

import numpy as np
from mpi4py import MPI as _MPI

from ..errors import InvalidArgumentError
from .buffers import Msg, WSpec, as_bytes
from .objects import loads, split_pickles
from .persistent import NEIGHBOURHOOD, add_persistent
from .requests import not_emulated, started

# the byte arrays kept for blocking neighbourhood calls (_Neighbourhood._layout), at
# most this many bytes a communicator: a larger call's are made for it alone
KEEP_BYTES = 32 << 20


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


class _Neighbourhood:
    """What every topology has: its in- and out-neighbours (``_inout``: sources,
    destinations, in the order their blocks take), their counts and lists, and the
    neighbourhood collectives over them (one all-to-all-v of the communicator)."""

    is_topo = True

    @staticmethod
    def _sent_as(j: int) -> int:
        """The place, among the blocks a source sends here, of the block for this
        rank's in-slot ``j``: the k-th slot from a source takes its k-th block."""
        return j

    @property
    def inedges(self) -> list:
        return list(self._inout()[0])

    @property
    def outedges(self) -> list:
        return list(self._inout()[1])

    @property
    def inoutedges(self) -> tuple:
        sources, dests = self._inout()
        return list(sources), list(dests)

    @property
    def indegree(self) -> int:
        return len(self._inout()[0])

    @property
    def outdegree(self) -> int:
        return len(self._inout()[1])

    @property
    def degrees(self) -> tuple:
        return self.indegree, self.outdegree

    # Each neighbourhood collective on buffers is one all-to-all-v of the
    # communicator: its _x form returns (the call's result, or its Handle in flight;
    # what places the bytes received in recvbuf). The blocking form places them at
    # once, the I form at Wait (and the persistent form, whose Start is the I form).
    def Neighbor_allgather(self, sendbuf, recvbuf) -> None:
        """Every in-neighbour's ``sendbuf`` into ``recvbuf``, block k from in-neighbour
        k (``recvbuf``'s count is per neighbour, as mpi4py reads it); a block of
        MPI.PROC_NULL is left as it was."""
        _now(*self._allgather_n(sendbuf, recvbuf, False))

    def _allgather_n(self, sendbuf, recvbuf, async_op):
        sources, dests = self._inout()
        x = Msg(sendbuf, "sendbuf").elems()
        r = Msg(recvbuf, "recvbuf")
        return self._exchange([x] * len(dests), x, r, r.block(len(sources)) if sources else 0,
                              async_op)

    def Neighbor_alltoall(self, sendbuf, recvbuf) -> None:
        """Block k of ``sendbuf`` to out-neighbour k, block k of ``recvbuf`` from
        in-neighbour k (counts per neighbour, as mpi4py reads them); a block of
        MPI.PROC_NULL is left as it was."""
        _now(*self._alltoall_n(sendbuf, recvbuf, False))

    def _alltoall_n(self, sendbuf, recvbuf, async_op):
        sources, dests = self._inout()
        s = Msg(sendbuf, "sendbuf")
        r = Msg(recvbuf, "recvbuf")
        b = s.block(len(dests)) if dests else 0
        return self._exchange([s.a[j * b:(j + 1) * b] for j in range(len(dests))], s.a[:b],
                              r, r.block(len(sources)) if sources else 0, async_op)

    def _exchange(self, blocks, sent, r, slot, async_op):
        """Send ``blocks[k]`` to out-neighbour k and receive in-neighbour j's into
        block j (``slot`` elements each) of ``r`` (a Msg), through _swap; ``sent`` is
        a block as sent (its datatype and size checked against ``r``)."""
        out = r.a
        sources, dests = self._inout()
        _receivable(sent, out)
        if sources and dests and sent.size > slot:
            raise InvalidArgumentError(
                f"recvbuf: {slot} elements per neighbour, fewer than the {sent.size} sent "
                "(MPI_ERR_TRUNCATE)")
        if out.size < slot * len(sources):
            raise InvalidArgumentError(
                f"recvbuf: {out.size} elements, fewer than {len(sources)} blocks of {slot}")
        # each source sends its blocks as large as this rank's (no out-neighbours:
        # as the receive's blocks)
        m = sent.size if dests else slot
        return self._swap([as_bytes(b) for b in blocks], out, [m] * len(sources),
                          [j * slot for j in range(len(sources))], async_op)

    def _swap(self, parts, out, counts, displs, async_op):
        """Send ``parts[k]`` (bytes) to out-neighbour k and receive ``counts[j]``
        elements from in-neighbour j into ``out[displs[j]:]``: one all-to-all-v of
        the communicator (every member calls it, with or without neighbours), each
        destination's blocks in the order of their k; nothing from MPI.PROC_NULL.
        Returns (the all-to-all-v's result or Handle, what places it in ``out``)."""
        order, send_counts, recv_counts, spans, bufs = self._layout(
            tuple(p.nbytes for p in parts), tuple(counts), tuple(displs), out.itemsize)
        if async_op or bufs is None:  # (in flight, or too large to keep: its own)
            x = np.concatenate([parts[k] for k in order]) if order else \
                np.empty(0, np.uint8)
            got = None
        else:
            # a blocking call's arrays, kept with its layout: a loop's calls pass
            # the communicator the same two arrays, which it repeats without
            # checking them again ("A call that repeats", docs/architecture.md)
            x, got = bufs
            if order:
                np.concatenate([parts[k] for k in order], out=x)

        def place(got):
            got = got.view(out.dtype)
            for at, d, c in spans:
                out[d:d + c] = got[at:at + c]
        return self._c.all_to_all_v(x, send_counts, recv_counts, out=got,
                                    async_op=async_op), place

    @property
    def _kept_bytes(self) -> int:
        """The bytes of the arrays kept with the layouts (_layout: at most
        KEEP_BYTES)."""
        return sum(b[0].nbytes + b[1].nbytes
                   for *_, b in self.__dict__.get("_layouts", {}).values() if b is not None)

    def _layout(self, sizes, counts, displs, itemsize):
        """_swap's layout for blocks of ``sizes`` bytes out and ``counts`` elements
        (of ``itemsize`` bytes) in at ``displs``: the parts in the order they are
        sent, the all-to-all-v's send and receive counts, and (offset in what came,
        displacement in ``out``, count) per block received, and the two byte
        arrays a blocking call sends from and receives into (None: larger than
        KEEP_BYTES). Kept per communicator (its neighbours never change), the last
        few shapes of call, their arrays KEEP_BYTES in all at most."""
        key = (sizes, counts, displs, itemsize)
        kept = self.__dict__.setdefault("_layouts", {})  # (no __getattr__: not emulated)
        got = kept.get(key)
        if got is not None:
            return got
        sources, dests = self._inout()
        n = self.Get_size()
        send_counts = [0] * n
        order = []
        for d in range(n):  # (each destination's blocks, in the order of k)
            for k, dst in enumerate(dests):
                if dst == d:
                    order.append(k)
                    send_counts[d] += sizes[k]
        recv_counts = [0] * n
        by_source: dict = {}
        for j, src in enumerate(sources):
            if src != _MPI.PROC_NULL:
                by_source.setdefault(src, []).append((self._sent_as(j), j))
                recv_counts[src] += counts[j] * itemsize
        spans, at = [], 0
        for src in range(n):
            for _, j in sorted(by_source.get(src, ())):
                spans.append((at, displs[j], counts[j]))
                at += counts[j]
        nbytes = sum(send_counts) + sum(recv_counts)
        keep = nbytes <= KEEP_BYTES
        if len(kept) >= 16 or keep and self._kept_bytes + nbytes > KEEP_BYTES:
            kept.clear()
        bufs = None
        if keep:
            bufs = np.empty(sum(send_counts), np.uint8), np.empty(sum(recv_counts), np.uint8)
        got = order, send_counts, recv_counts, tuple(spans), bufs
        kept[key] = got
        return got

    def Neighbor_allgatherv(self, sendbuf, recvbuf) -> None:
        """Every in-neighbour's ``sendbuf`` into ``recvbuf``'s block j (a -v spec:
        count and displacement per in-neighbour, as mpi4py reads them); a block of
        MPI.PROC_NULL is left as it was."""
        _now(*self._allgatherv_n(sendbuf, recvbuf, False))

    def _allgatherv_n(self, sendbuf, recvbuf, async_op):
        sources, dests = self._inout()
        x = Msg(sendbuf, "sendbuf").elems()
        r = Msg(recvbuf, "recvbuf", vector=True)
        counts, displs = _per_neighbour(r, len(sources))
        _receivable(x, r.a)
        return self._swap([as_bytes(x)] * len(dests), r.a, counts, displs, async_op)

    def Neighbor_alltoallv(self, sendbuf, recvbuf) -> None:
        """``sendbuf``'s block k to out-neighbour k, in-neighbour j's into
        ``recvbuf``'s block j (-v specs: count and displacement per neighbour); a
        block of MPI.PROC_NULL is left as it was."""
        _now(*self._alltoallv_n(sendbuf, recvbuf, False))

    def _alltoallv_n(self, sendbuf, recvbuf, async_op):
        sources, dests = self._inout()
        s = Msg(sendbuf, "sendbuf", vector=True)
        sc, sd = _per_neighbour(s, len(dests))
        r = Msg(recvbuf, "recvbuf", vector=True)
        rc, rd = _per_neighbour(r, len(sources))
        _receivable(s.a, r.a)
        return self._swap([as_bytes(s.a[d:d + k]) for k, d in zip(sc, sd)], r.a, rc, rd,
                          async_op)

    def Neighbor_alltoallw(self, sendbuf, recvbuf) -> None:
        """Neighbor_alltoallv with a datatype per neighbour and displacements in
        bytes (mpi4py's -w specs, buffers.WSpec); a block of MPI.PROC_NULL is left
        as it was."""
        _now(*self._alltoallw_n(sendbuf, recvbuf, False))

    def _alltoallw_n(self, sendbuf, recvbuf, async_op):
        sources, dests = self._inout()
        s = WSpec(sendbuf, "sendbuf", len(dests))
        r = WSpec(recvbuf, "recvbuf", len(sources), writeable=True)
        if not r.derived:  # (straight into the buffer)
            return self._swap(s.parts(), r.whole, r.sizes, [d for *_, d, _ in r.blocks],
                              async_op)
        got = np.empty(sum(r.sizes), np.uint8)  # (the blocks packed, in order)
        h, place = self._swap(s.parts(), got, r.sizes,
                              [int(v) for v in np.cumsum([0] + r.sizes[:-1])], async_op)
        nulls = {j for j, src in enumerate(sources) if src == _MPI.PROC_NULL}

        def unpack(res):
            place(res)
            r.place(got, skip=nulls)  # (a block of MPI.PROC_NULL is left as it was)
        return h, unpack

    def neighbor_allgather(self, sendobj) -> list:
        """Every in-neighbour's ``sendobj`` (pickled, as mpi4py's), a list in
        in-neighbour order; None from MPI.PROC_NULL."""
        return self._objects([sendobj] * len(self._inout()[1]))

    def neighbor_alltoall(self, sendobj) -> list:
        """Item k of ``sendobj`` (a sequence of one object per out-neighbour) to
        out-neighbour k; what each in-neighbour sent here, a list in in-neighbour
        order (None from MPI.PROC_NULL)."""
        n = len(self._inout()[1])
        return self._objects(self._sequence(sendobj, n, "out-neighbour", "all_to_all"))

    def _objects(self, items) -> list:
        """Send ``items[k]`` to out-neighbour k; the objects of the in-neighbours,
        in-slot j from in-neighbour j. Each destination gets one pickle, the list of
        its items' own pickles in the order of their k (a neighbour twice gets two
        objects, as from mpi4py); an all-to-all of the sizes, then an all-to-all-v
        of the bytes, over the whole communicator."""
        sources, dests = self._inout()
        n = self.Get_size()
        per: list = [[] for _ in range(n)]
        for k, d in enumerate(dests):
            if d != _MPI.PROC_NULL:
                per[d].append(items[k])
        parts = [self._dumped(p, "sendobj", "all_to_all", apart=True) if p else
                 np.empty(0, np.uint8) for p in per]
        sent = np.array([p.size for p in parts], np.int64)
        sizes = self._c.all_to_all(sent)
        lists = split_pickles(self._c.all_to_all_v(np.concatenate(parts), sent.tolist(),
                                                   sizes.tolist()), sizes)
        order: dict = {}
        for j, src in enumerate(sources):
            if src != _MPI.PROC_NULL:
                order.setdefault(src, []).append((self._sent_as(j), j))
        got = [None] * len(sources)
        for src, slots in order.items():
            for (_, j), one in zip(sorted(slots), lists[src] or ()):
                got[j] = loads(one)
        return got

    def Ineighbor_allgather(self, sendbuf, recvbuf):
        """Neighbor_allgather in flight (its recvbuf written at Wait)."""
        return started(*self._allgather_n(sendbuf, recvbuf, True))

    def Ineighbor_alltoall(self, sendbuf, recvbuf):
        """Neighbor_alltoall in flight (its recvbuf written at Wait)."""
        return started(*self._alltoall_n(sendbuf, recvbuf, True))

    def Ineighbor_allgatherv(self, sendbuf, recvbuf):
        """Neighbor_allgatherv in flight (its recvbuf written at Wait)."""
        return started(*self._allgatherv_n(sendbuf, recvbuf, True))

    def Ineighbor_alltoallv(self, sendbuf, recvbuf):
        """Neighbor_alltoallv in flight (its recvbuf written at Wait)."""
        return started(*self._alltoallv_n(sendbuf, recvbuf, True))

    def Ineighbor_alltoallw(self, sendbuf, recvbuf):
        """Neighbor_alltoallw in flight (its recvbuf written at Wait)."""
        return started(*self._alltoallw_n(sendbuf, recvbuf, True))


add_persistent(_Neighbourhood, NEIGHBOURHOOD)


def _now(result, place) -> None:
    """A blocking neighbourhood collective's end: its bytes placed."""
    place(result)


def _per_neighbour(m: Msg, n: int) -> tuple:
    """(counts, displacements) of a neighbourhood -v buffer over ``n`` neighbours."""
    return ([], []) if n == 0 else m.v(n)


def _receivable(sent: np.ndarray, out: np.ndarray) -> None:
    """A -v neighbour collective's receive buffer, checked against what is sent."""
    if sent.dtype != out.dtype:
        raise InvalidArgumentError(
            f"recvbuf: datatype {out.dtype} differs from the send buffer's {sent.dtype}")
    if not out.flags.writeable:
        raise InvalidArgumentError("recvbuf: expected a writeable buffer, got a read-only one")


class Cartcomm(_Neighbourhood):
    """The Cartcomm methods, mixed into the facade's Comm (comm.Cartcomm)."""

    _dims: list
    _periods: list

    @classmethod
    def _with_grid(cls, nc, dims, periods):
        c = cls(nc)
        c._dims, c._periods = list(dims), list(periods)
        c._nb = c._neighbours()  # (the grid never changes)
        return c

    def Dup(self, info=None):
        return type(self)._with_grid(super().Dup()._c, self._dims, self._periods)

    Clone = Dup

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

    def _inout(self) -> tuple:
        return self._nb, self._nb

    @staticmethod
    def _sent_as(j: int) -> int:
        # the neighbour reached in direction (i, -1) sent this block as its (i, +1)
        # one, and the reverse (the two are one rank in a periodic dimension of 2)
        return j ^ 1

    def __getattr__(self, name):
        not_emulated(self, name, _MPI.Cartcomm)


def _ints(values, name) -> list:
    try:
        return [int(v) for v in values]
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{name}: expected a list of integers, got {values!r}") \
            from None


def graph_args(index, edges, size: int) -> tuple:
    """MPI_Graph_create's ``index`` and ``edges`` checked against a communicator of
    ``size`` ranks: (index, edges), ``index`` without a leading 0 (mpi4py's
    extension: an index that starts at 0 and ends at len(edges) is read as the
    standard adjacency array of nnodes + 1 entries). Raised alike on every rank
    (every rank passes the same arguments), before anything is made."""
    index, edges = _ints(index, "index"), _ints(edges, "edges")
    if index and index[0] == 0 and index[-1] == len(edges):
        index = index[1:]
    if len(index) > size:
        raise InvalidArgumentError(
            f"index: a graph of {len(index)} nodes does not fit in the communicator's "
            f"{size} (MPI_ERR_ARG)")
    if any(b < a for a, b in zip([0] + index, index)):
        raise InvalidArgumentError(f"index: expected non-decreasing offsets, got {index}")
    nedges = index[-1] if index else 0
    if len(edges) < nedges:
        raise InvalidArgumentError(
            f"edges: {len(edges)} edges, fewer than the {nedges} that index counts")
    edges = edges[:nedges]
    bad = [e for e in edges if not 0 <= e < len(index)]
    if bad:
        raise InvalidArgumentError(
            f"edges: {bad[0]} is not a node of the graph's {len(index)} (MPI_ERR_ARG)")
    return index, edges


class Graphcomm(_Neighbourhood):
    """The Graphcomm methods (MPI_Graph_create's topology: every node's neighbours,
    which it sends to and receives from), mixed into the facade's Comm
    (comm.Graphcomm)."""

    _index: list
    _edges: list
    topology = _MPI.GRAPH

    @classmethod
    def _with_graph(cls, nc, index, edges):
        c = cls(nc)
        c._index, c._edges = list(index), list(edges)
        c._nb = c.Get_neighbors(c.Get_rank())  # (the graph never changes)
        return c

    def Dup(self, info=None):
        return type(self)._with_graph(super().Dup()._c, self._index, self._edges)

    Clone = Dup

    def Get_topology(self):
        return _MPI.GRAPH

    def Get_dims(self) -> tuple:
        return len(self._index), len(self._edges)

    dims = property(Get_dims)

    @property
    def nnodes(self) -> int:
        return len(self._index)

    @property
    def nedges(self) -> int:
        return len(self._edges)

    def Get_topo(self) -> tuple:
        return list(self._index), list(self._edges)

    topo = property(Get_topo)

    @property
    def index(self) -> list:
        return list(self._index)

    @property
    def edges(self) -> list:
        return list(self._edges)

    def _rank(self, rank) -> int:
        if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or \
                not 0 <= rank < len(self._index):
            raise InvalidArgumentError(
                f"rank: expected a node in [0, {len(self._index)}), got {rank!r}")
        return int(rank)

    def Get_neighbors_count(self, rank) -> int:
        rank = self._rank(rank)
        return self._index[rank] - (self._index[rank - 1] if rank else 0)

    def Get_neighbors(self, rank) -> list:
        rank = self._rank(rank)
        return self._edges[self._index[rank - 1] if rank else 0:self._index[rank]]

    @property
    def nneighbors(self) -> int:
        return self.Get_neighbors_count(self.Get_rank())

    @property
    def neighbors(self) -> list:
        return self.Get_neighbors(self.Get_rank())

    def _inout(self) -> tuple:
        return self._nb, self._nb

    def __getattr__(self, name):
        not_emulated(self, name, _MPI.Graphcomm)


def _in_comm(size: int, **ranks) -> None:
    """Refuse, naming its argument, a rank outside a communicator of ``size``."""
    for name, given in ranks.items():
        bad = [r for r in given if not 0 <= r < size]
        if bad:
            raise InvalidArgumentError(
                f"{name}: rank {bad[0]} is not in the communicator of {size} (MPI_ERR_ARG)")


def _weights(weights, degree: int, name: str):
    """mpi4py's reading of a distributed graph's weights: None or MPI.UNWEIGHTED,
    no weights (None); MPI.WEIGHTS_EMPTY, an empty list (a degree of 0 only);
    else ``degree`` integers."""
    if weights is None or weights is _MPI.UNWEIGHTED:
        return None
    if weights is _MPI.WEIGHTS_EMPTY:
        if degree:
            raise ValueError("empty weights but nonzero degree")
        return []
    w = _ints(weights, name)
    if len(w) != degree:
        raise ValueError(f"{name}: expecting {degree} items, got {len(w)}")
    return w


def dist_graph_adjacent_args(sources, destinations, sourceweights, destweights,
                             size: int) -> tuple:
    """MPI_Dist_graph_create_adjacent's arguments of this rank, checked: (sources,
    destinations, weights: (source weights, destination weights) or None)."""
    src = [] if sources is None else _ints(sources, "sources")
    dst = [] if destinations is None else _ints(destinations, "destinations")
    _in_comm(size, sources=src, destinations=dst)
    sw = _weights(sourceweights, len(src), "sourceweights")
    dw = _weights(destweights, len(dst), "destweights")
    weighted = sw is not None or dw is not None
    return src, dst, ((sw or [1] * len(src), dw or [1] * len(dst)) if weighted else None)


def dist_graph_edges(sources, degrees, destinations, weights, size: int) -> tuple:
    """MPI_Dist_graph_create's edges given by this rank, checked: (an int64 array of
    (source, destination, weight) rows, weighted)."""
    src = _ints(sources, "sources")
    deg = _ints(degrees, "degrees")
    if len(deg) != len(src):
        raise ValueError(f"degrees: expecting {len(src)} items, got {len(deg)}")
    if any(d < 0 for d in deg):
        raise InvalidArgumentError(f"degrees: expected non-negative degrees, got {deg}")
    dst = _ints(destinations, "destinations")
    if len(dst) != sum(deg):
        raise ValueError(f"destinations: expecting {sum(deg)} items, got {len(dst)}")
    w = _weights(weights, len(dst), "weights")
    _in_comm(size, sources=src, destinations=dst)
    rows = [(s, dst[k], 1 if w is None else w[k])
            for k, s in enumerate(s for s, d in zip(src, deg) for _ in range(d))]
    return np.array(rows, np.int64).reshape(-1, 3), w is not None


class Distgraphcomm(_Neighbourhood):
    """The Distgraphcomm methods (MPI_Dist_graph_create[_adjacent]'s topology: each
    rank's sources and destinations, with weights or none), mixed into the
    facade's Comm (comm.Distgraphcomm)."""

    _sources: list
    _dests: list
    _w: tuple | None
    topology = _MPI.DIST_GRAPH

    @classmethod
    def _with_edges(cls, nc, sources, dests, weights):
        c = cls(nc)
        c._sources, c._dests, c._w = list(sources), list(dests), weights
        return c

    def Dup(self, info=None):
        return type(self)._with_edges(super().Dup()._c, self._sources, self._dests, self._w)

    Clone = Dup

    def Get_topology(self):
        return _MPI.DIST_GRAPH

    def Get_dist_neighbors_count(self) -> tuple:
        return len(self._sources), len(self._dests), self._w is not None

    def Get_dist_neighbors(self) -> tuple:
        w = None if self._w is None else (list(self._w[0]), list(self._w[1]))
        return list(self._sources), list(self._dests), w

    def _inout(self) -> tuple:
        return self._sources, self._dests

    def __getattr__(self, name):
        not_emulated(self, name, _MPI.Distgraphcomm)
