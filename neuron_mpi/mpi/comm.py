"""The mpi4py buffer API over a neuron_mpi Communicator (see the package docstring)."""
from __future__ import annotations

import functools
import math

import numpy as np
from mpi4py import MPI as _MPI

from .. import kernels
from .. import validate as V
from ..comm import Communicator
from ..kernels.reference import UFUNCS as _UFUNC
from ..errors import InvalidArgumentError
from ..tagged import Barrier, Tagged
from .attrs import Attributes
from .buffers import Msg, WSpec, as_bytes, is_in_place, place, real_parts
from .datatypes import derived, is_derived
from .objects import Objects
from .p2p import PointToPoint
from .persistent import COLLECTIVES, NEIGHBOURHOOD, add_persistent
from .requests import MPIError, Request, done, not_emulated, started
from .topo import Cartcomm as _Grid
from .topo import Distgraphcomm as _DistGraph
from .topo import Graphcomm as _Graph
from .topo import dist_graph_adjacent_args, dist_graph_edges, graph_args, grid_args

_OPS = None


def _op_name(op):
    """The kernels' name of MPI.SUM, PROD, MAX and MIN; any other MPI.Op (LAND,
    BOR, MAXLOC, a user's Op.Create) as it is, reduced by the MPI underneath
    (Op.Reduce_local) after an all-gather."""
    global _OPS
    if _OPS is None:
        _OPS = ((_MPI.SUM, "sum"), (_MPI.PROD, "prod"), (_MPI.MAX, "max"), (_MPI.MIN, "min"))
    for k, v in _OPS:
        if op == k:
            return v
    if not isinstance(op, _MPI.Op):
        raise TypeError(f"op: expected an MPI.Op, got {type(op).__name__}")
    if op == _MPI.OP_NULL or op == _MPI.NO_OP:
        raise MPIError(f"op: {'MPI.OP_NULL' if op == _MPI.OP_NULL else 'MPI.NO_OP'} "
                       "reduces nothing", _MPI.ERR_OP)
    return op


def _op_of(op, *specs):
    """_op_name's, and for an MPI.Op of the MPI underneath (op, the datatype the
    buffer specs name, or None): a user's op gets the datatype it was given, as
    mpi4py passes it."""
    got = _op_name(op)
    if isinstance(got, str):
        return got
    for spec in specs:
        if isinstance(spec, (list, tuple)) and spec and isinstance(spec[-1], _MPI.Datatype):
            return got, spec[-1]
    return got, None


_PAIRS = None


def _mpi_type(dt: np.dtype, op):
    """The predefined MPI datatype mpi4py infers for numpy type ``dt`` (from its
    type character, as for a buffer's format), or the pair type of MAXLOC and
    MINLOC it is, for ``op``."""
    global _PAIRS
    from mpi4py.util.dtlib import to_numpy_dtype

    if not dt.isnative:
        raise NotImplementedError(f"op: {op!r} on elements of byte order {dt.byteorder!r} "
                                  "(not this machine's) is not emulated")
    t = None if dt.fields else _MPI._typedict.get(dt.char)
    if t is None and dt.fields:
        if _PAIRS is None:
            _PAIRS = [(to_numpy_dtype(p), p) for p in
                      (_MPI.FLOAT_INT, _MPI.DOUBLE_INT, _MPI.LONG_INT, _MPI.INT_INT,
                       _MPI.SHORT_INT, _MPI.LONG_DOUBLE_INT)]
        t = next((p for d, p in _PAIRS if d == dt), None)
    if t is None:
        raise NotImplementedError(f"op: {op!r} on elements of {dt} (no predefined MPI "
                                  "datatype) is not emulated")
    return t


def _agreed(fn):
    """A collective whose argument errors reach every member: an error raised
    here before the group heard of it (a root's own buffers, a rank's counts) is
    told to the other members, whose calls fail too instead of waiting for this
    rank (as the Communicator's own checks do)."""
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        try:
            return fn(self, *args, **kwargs)
        except (InvalidArgumentError, NotImplementedError) as e:
            if getattr(e, "agreed", False):
                raise
            self._c.refuse(fn.__name__, e)
    return wrapper


def _no_derived(fn):
    """A reduction, whose buffers may not name derived datatypes: with a predefined
    op, MPI.Exception(ERR_OP), as the Open MPI underneath raises (it reduces
    predefined datatypes only, a Dup of one included); with a user's op,
    NotImplementedError (its function would need the type's own layout)."""
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        for v in (*args, *kwargs.values()):
            if isinstance(v, (tuple, list)) and is_derived(v):
                op = kwargs.get("op", next((a for a in args if isinstance(a, _MPI.Op)),
                                           _MPI.SUM))
                if isinstance(op, _MPI.Op) and not op.is_predefined:
                    raise NotImplementedError(
                        "op: a user's op over a derived datatype is not emulated")
                raise MPIError("op: a predefined op over a derived datatype (the MPI "
                               "underneath reduces predefined datatypes only)", _MPI.ERR_OP)
        return fn(self, *args, **kwargs)
    return wrapper


def _carried(dt: np.dtype) -> bool:
    try:
        kernels.canonical_dtype(dt)
        return True
    except ValueError:
        return False


def _reduce_rows(rows: np.ndarray, op) -> np.ndarray:
    """Reduce the rows of ``rows`` in rank order (the fallback for types the
    kernels do not carry, and for ops other than theirs: an MPI.Op folds as MPI
    defines it, row 0 op row 1 op ..., by Op.Reduce_local of the MPI underneath)."""
    if isinstance(op, str):
        f = _UFUNC[op]
        acc = rows[0].copy()
        for r in rows[1:]:
            acc = f(acc, r)
        return acc
    op, t = op
    acc = np.ascontiguousarray(rows[-1]).copy()
    if not acc.size:
        return acc
    t = t or _mpi_type(acc.dtype, op)
    for r in rows[-2::-1]:  # (acc = row_i op acc: associative, in rank order)
        op.Reduce_local([np.ascontiguousarray(r), t], [acc, t])
    return acc


class Intracomm(Objects, PointToPoint, Attributes):
    """An mpi4py-style intracommunicator over a neuron_mpi Communicator (point to
    point: neuron_mpi.mpi.p2p; the lower-case, pickle-based methods:
    neuron_mpi.mpi.objects; attributes: neuron_mpi.mpi.attrs)."""

    def __init__(self, nc=None, name=""):
        if isinstance(nc, Comm) and not nc._null():  # MPI.Comm(comm): another handle
            if type(self) is not Comm and not isinstance(nc, type(self)):
                raise TypeError(f"{type(self).__name__}: expected a communicator of that "
                                f"topology, got a {type(nc).__name__}")
            self.__dict__.update(nc.__dict__)
            return
        if nc is None or isinstance(nc, _MPI.Comm) and nc == _MPI.COMM_NULL or \
                isinstance(nc, Comm) and nc._null():
            nc = _FreedCommunicator()  # MPI.Comm(): a null communicator, as mpi4py's
        elif not isinstance(nc, (Communicator, _FreedCommunicator)):
            raise TypeError(f"comm: expected a communicator, got {type(nc).__name__}")
        self._c = nc
        self._t = Tagged(nc)  # its point to point, matched by tag
        self._name = name

    @property
    def communicator(self):
        """The neuron_mpi Communicator underneath."""
        return self._c

    def Get_rank(self) -> int:
        return self._c.rank

    def Get_size(self) -> int:
        return self._c.size

    rank = property(Get_rank)
    size = property(Get_size)

    def __repr__(self):
        if self._null():
            return f"<neuron_mpi.mpi.{type(self).__name__} null>"
        return f"<neuron_mpi.mpi.{type(self).__name__} rank {self.Get_rank()} of " \
               f"{self.Get_size()}>"

    def _live(self) -> None:
        """MPI.Exception(MPI.ERR_COMM) on a null or freed communicator, as mpi4py's."""
        if self._null():
            raise _comm_null()

    def _null(self) -> bool:
        """Null (MPI.Comm()) or freed: equal to MPI.COMM_NULL, false."""
        return isinstance(self._c, _FreedCommunicator)

    def __bool__(self) -> bool:
        return not self._null()

    def __eq__(self, other):
        if isinstance(other, Comm):
            return other._c is self._c or self._null() and other._null()
        if isinstance(other, _MPI.Comm):  # (mpi4py's MPI.COMM_NULL)
            return self._null() and other == _MPI.COMM_NULL
        return NotImplemented

    def __hash__(self):
        return id(self._c)

    def __reduce__(self):
        """As mpi4py's: COMM_WORLD and COMM_SELF (and other handles of them) and
        null communicators pickle; any other raises ValueError."""
        if self._null():
            return type(self), ()
        from . import _STATE

        for key in ("world", "self"):
            c = _STATE.get(key)
            if c is not None and c._c is self._c:
                return _named, (key, c is self)
        raise ValueError(f"cannot serialize '{type(self).__name__}' instance")

    def Compare(self, comm) -> int:
        """MPI_Comm_compare (also ``MPI.Comm.Compare(a, b)``): MPI.IDENT for the same
        communicator, MPI.CONGRUENT for the same ranks in the same order,
        MPI.SIMILAR in another order, else MPI.UNEQUAL."""
        for c in (self, comm):
            if isinstance(c, _MPI.Comm) and c == _MPI.COMM_NULL:  # (mpi4py's own)
                raise MPIError("comm: MPI.COMM_NULL", _MPI.ERR_COMM)
            if not isinstance(c, Comm):
                raise TypeError(f"comm: expected a communicator, got {type(c).__name__}")
            c._live()
        if comm._c is self._c:
            return _MPI.IDENT
        mine, theirs = list(self._c.ranks), list(comm._c.ranks)
        if mine == theirs:
            return _MPI.CONGRUENT
        return _MPI.SIMILAR if sorted(mine) == sorted(theirs) else _MPI.UNEQUAL

    # --- communicators ---------------------------------------------------------------
    def Dup(self, info=None) -> Comm:
        """A new communicator of the same ranks, with this one's attributes copied
        as their keyvals say."""
        new = Comm(self._c.split([list(range(self._c.size))]))
        self._copy_attrs(new)
        return new

    Clone = Dup

    def Dup_with_info(self, info) -> Comm:
        return self.Dup(info)

    def Idup(self, info=None) -> tuple:
        """Dup, done at the call: (the new communicator, a done Request)."""
        return self.Dup(info), done()

    def Idup_with_info(self, info) -> tuple:
        return self.Idup(info)

    def Get_info(self):
        """An empty MPI.Info (no hints are kept); Set_info takes any."""
        self._live()
        return _MPI.Info.Create()

    def Set_info(self, info) -> None:
        pass

    info = property(Get_info, Set_info)

    @classmethod
    def Get_parent(cls):
        """MPI.COMM_NULL as an Intercomm: no process here was spawned."""
        return _MPI.Intercomm()

    @classmethod
    def Create_from_group(cls, group, stringtag="org.mpi4py", info=None, errhandler=None):
        """MPI_Comm_create_from_group: a communicator of ``group`` (an mpi4py Group
        of world ranks), called by its members only."""
        from . import _world

        if group.Get_size() == 0:
            return _MPI.COMM_NULL
        w = _world()
        return Comm(w._c.group(w._group_ranks(group)))

    def Split(self, color=0, key=0) -> Comm | None:
        c = self._c
        mine = np.array([-1 if color in (None, _MPI.UNDEFINED) else int(color), int(key),
                         c.rank], np.int64)
        table = c.all_gather(mine.reshape(1, 3))
        groups: dict[int, list] = {}
        for col, k, r in table.tolist():
            if col >= 0:
                groups.setdefault(col, []).append((k, r))
        ordered = [[r for _, r in sorted(v)] for _, v in sorted(groups.items())]
        sub = c.split(ordered)
        return Comm(sub) if sub is not None else _MPI.COMM_NULL

    def Split_type(self, split_type, key=0, info=None) -> Comm | None:
        """MPI_Comm_split_type: MPI.COMM_TYPE_SHARED groups the ranks of each
        emulated node (one instance, whose cores share host memory on the
        hardware; NEURON_MPI_NODES), ordered by ``key``; MPI.UNDEFINED gives
        MPI.COMM_NULL."""
        try:
            if split_type in (None, _MPI.UNDEFINED):
                color = _MPI.UNDEFINED
            elif split_type == _MPI.COMM_TYPE_SHARED:
                c = self._c
                color = c.topology.placement(c.ranks[c.rank]).node
            else:
                raise NotImplementedError(
                    f"split_type: MPI.COMM_TYPE_SHARED or MPI.UNDEFINED only, got "
                    f"{split_type!r}")
        except NotImplementedError as e:
            self._c.refuse("all_gather", e)  # (the others are in Split's all-gather)
        return self.Split(color, key)

    def Create_group(self, group, tag=0) -> Comm:
        """``group``: an mpi4py Group of this communicator's ranks (or a list of
        ranks); called by the members only, as MPI_Comm_create_group. The
        attributes are copied as their keyvals say, as Dup does (Open MPI does so
        here too: TAG_UB and a user's keyval with a copy_fn carry over)."""
        new = Comm(self._c.group(self._group_ranks(group)))
        self._copy_attrs(new)
        return new

    def _group_ranks(self, group) -> list:
        """This communicator's ranks of an mpi4py Group (of world ranks) or a list."""
        if isinstance(group, _MPI.Group):
            world = _MPI.COMM_WORLD.Get_group()
            ranks = _MPI.Group.Translate_ranks(group, list(range(group.Get_size())), world)
            return [self._c.ranks.index(r) for r in ranks]
        return list(group)

    def Create(self, group) -> Comm:
        """MPI_Comm_create: called by every rank of this communicator; the members
        of ``group`` get its communicator, the others MPI.COMM_NULL."""
        ranks = self._group_ranks(group)
        if self._c.rank not in ranks:
            return _MPI.COMM_NULL
        return Comm(self._c.group(ranks))

    def Create_cart(self, dims, periods=None, reorder=False):
        """MPI_Cart_create (collective, the same arguments on every rank): a
        Cartcomm over the first prod(dims) ranks in order (``reorder`` changes
        nothing, as MPI allows); the other ranks get MPI.COMM_NULL."""
        dims, periods = grid_args(dims, periods, self._c.size)
        sub = self._c.split([list(range(math.prod(dims)))])
        return _MPI.COMM_NULL if sub is None else Cartcomm._with_grid(sub, dims, periods)

    def Create_graph(self, index, edges, reorder=False):
        """MPI_Graph_create (collective, the same arguments on every rank): a
        Graphcomm over the first nnodes ranks in order (``reorder`` changes
        nothing); the other ranks get MPI.COMM_NULL. ``index`` may start with 0
        (mpi4py's reading of an index of nnodes + 1 entries)."""
        index, edges = graph_args(index, edges, self._c.size)
        if not index:
            return _MPI.COMM_NULL
        sub = self._c.split([list(range(len(index)))])
        return _MPI.COMM_NULL if sub is None else Graphcomm._with_graph(sub, index, edges)

    def Graph_map(self, index, edges) -> int:
        """This rank's rank in Create_graph(index, edges): the same, or
        MPI.UNDEFINED past the graph's nodes."""
        index, _ = graph_args(index, edges, self._c.size)
        return self._c.rank if self._c.rank < len(index) else _MPI.UNDEFINED

    def Create_dist_graph_adjacent(self, sources, destinations, sourceweights=None,
                                   destweights=None, info=None, reorder=False):
        """MPI_Dist_graph_create_adjacent (collective; each rank gives its own
        sources and destinations): a Distgraphcomm over every rank, in order. An
        argument error on one rank fails every rank's call."""
        c = self._c
        try:
            src, dst, w = dist_graph_adjacent_args(sources, destinations, sourceweights,
                                                   destweights, c.size)
        except (InvalidArgumentError, ValueError) as e:
            c.refuse("split", e)  # (the others are in the split below)
        return Distgraphcomm._with_edges(c.split([list(range(c.size))]), src, dst, w)

    def Create_dist_graph(self, sources, degrees, destinations, weights=None, info=None,
                          reorder=False):
        """MPI_Dist_graph_create (collective; any rank may give any edge): a
        Distgraphcomm over every rank, in order; each rank's sources and
        destinations in the order of the ranks that gave them (then of their
        lists). An argument error on one rank fails every rank's call."""
        c = self._c
        try:
            rows, weighted = dist_graph_edges(sources, degrees, destinations, weights, c.size)
        except (InvalidArgumentError, ValueError) as e:
            c.refuse("all_gather", e)  # (the others are in the all-gather below)
        counts = c.all_gather(np.array([[len(rows), int(weighted)]], np.int64))
        table = c.all_gather_v(rows, counts[:, 0].tolist()).tolist()
        me = c.rank
        src = [(s, w) for s, d, w in table if d == me]
        dst = [(d, w) for s, d, w in table if s == me]
        w = ([v for _, v in src], [v for _, v in dst]) if counts[:, 1].any() else None
        return Distgraphcomm._with_edges(c.split([list(range(c.size))]), [s for s, _ in src],
                                         [d for d, _ in dst], w)

    def Cart_map(self, dims, periods=None) -> int:
        """This rank's rank in Create_cart(dims, periods): the same, or
        MPI.UNDEFINED past the grid."""
        dims, _ = grid_args(dims, periods, self._c.size)
        return self._c.rank if self._c.rank < math.prod(dims) else _MPI.UNDEFINED

    def toint(self) -> int:
        """-1: no MPI handle (the facade's communicators are Python objects)."""
        return -1

    py2f = toint

    def Get_topology(self):
        self._live()
        return _MPI.UNDEFINED

    topology = property(Get_topology)
    is_topo = False

    def Get_group(self):
        world = _MPI.COMM_WORLD.Get_group()
        return world.Incl(list(self._c.ranks))

    group = property(Get_group)

    def Free(self) -> None:
        """Free this communicator (MPI.COMM_NULL after); COMM_WORLD, COMM_SELF and
        a null one raise MPI.Exception(MPI.ERR_COMM), as mpi4py's."""
        self._live()
        from . import _STATE

        if any(c is not None and c._c is self._c for c in
               (_STATE.get("world"), _STATE.get("self"))):
            raise _MPI.Exception(_MPI.ERR_COMM)
        self._delete_attrs()
        self._c = _FreedCommunicator()
        self._t = Tagged(self._c)

    def Abort(self, errorcode=0):
        _MPI.COMM_WORLD.Abort(errorcode)

    def Is_inter(self) -> bool:
        self._live()
        return False

    is_inter = property(Is_inter)

    def Is_intra(self) -> bool:
        self._live()
        return True

    is_intra = property(Is_intra)

    def Get_name(self) -> str:
        return "MPI_COMM_NULL" if self._null() else self._name

    def Set_name(self, name) -> None:
        self._live()
        self._name = str(name)

    name = property(Get_name, Set_name)

    def Get_errhandler(self):
        """MPI.ERRORS_RETURN, as a new reference the caller may Free (as mpi4py's:
        MPI_Comm_get_errhandler's handle is the caller's)."""
        self._live()
        return _MPI.COMM_SELF.Get_errhandler()  # (mpi4py sets ERRORS_RETURN there)

    def Set_errhandler(self, errhandler) -> None:
        """MPI.ERRORS_RETURN (mpi4py's default on its communicators: errors raise
        Python exceptions, as here) only."""
        self._live()
        if errhandler == _MPI.ERRHANDLER_NULL:
            raise MPIError("errhandler: MPI.ERRHANDLER_NULL", _MPI.ERR_ARG)
        if errhandler != _MPI.ERRORS_RETURN:
            raise NotImplementedError(
                "errhandler: errors raise Python exceptions here (MPI.ERRORS_RETURN, "
                "mpi4py's default); other error handlers are not emulated")

    def __getattr__(self, name):
        not_emulated(self, name, _MPI.Intracomm)

    # --- collectives ------------------------------------------------------------------
    def Barrier(self) -> None:
        self._c.barrier()

    def Ibarrier(self) -> Request:
        """In flight: done once every member has called Ibarrier. Where the
        communicator's agreements are routed (NEURON_MPI_TRANSPORT=mpi, or members
        on several hosts or shared-memory domains), a barrier of point-to-point
        messages (tagged.Barrier) that this rank's point-to-point calls (Test, Wait,
        Iprobe, receives) move on: an NBX exchange's Ibarrier progresses with its
        Issends there even where MPI gives no thread for the agent (no
        MPI_THREAD_MULTIPLE). (Made when async calls agreed at the call there.)"""
        c = self._c
        if c.size > 1 and not c._control.on_board:
            b = Barrier(self._t, c.rank, c.size)
            r = Request._new(run=b.wait)
            r._poll = b.poll
            return r
        return started(c.barrier(async_op=True))

    @_agreed
    @derived(buf=("bcast", "whole"))
    def Bcast(self, buf, root=0) -> None:
        self._bcast(buf, root, False)

    def _bcast(self, buf, root, async_op):
        m = Msg(buf, "buf")
        b = as_bytes(m.elems())
        # (the root's buffer is only read: it may be read-only, as bytes are)
        out = b if self._c.rank != root or b.flags.writeable else None
        return self._c.broadcast(b, root, out=out, async_op=async_op)

    @_agreed
    @_no_derived
    def Allreduce(self, sendbuf, recvbuf, op=_MPI.SUM) -> None:
        self._allreduce(sendbuf, recvbuf, op, False)

    def _allreduce(self, sendbuf, recvbuf, op, async_op):
        r = Msg(recvbuf, "recvbuf")
        out = r.elems()
        x = out.copy() if is_in_place(sendbuf) else Msg(sendbuf, "sendbuf").elems()
        self._check_same(x, out, "recvbuf")
        return self._reduce_into("all_reduce", x, out, _op_of(op, sendbuf, recvbuf),
                                 async_op=async_op)

    @_agreed
    @_no_derived
    def Reduce(self, sendbuf, recvbuf, op=_MPI.SUM, root=0) -> None:
        self._reduce(sendbuf, recvbuf, op, root, False)

    def _reduce(self, sendbuf, recvbuf, op, root, async_op):
        c = self._c
        mine = c.rank == root
        if mine:
            out = Msg(recvbuf, "recvbuf").elems()
            x = out.copy() if is_in_place(sendbuf) else Msg(sendbuf, "sendbuf").elems()
            self._check_same(x, out, "recvbuf")
        else:
            x = Msg(sendbuf, "sendbuf").elems()
            out = None
        return self._reduce_into("reduce", x, out, _op_of(op, sendbuf, recvbuf), root=root,
                                 async_op=async_op)

    @_agreed
    @_no_derived
    def Reduce_scatter_block(self, sendbuf, recvbuf, op=_MPI.SUM) -> None:
        self._reduce_scatter_block(sendbuf, recvbuf, op, False)

    def _reduce_scatter_block(self, sendbuf, recvbuf, op, async_op):
        n = self._c.size
        r = Msg(recvbuf, "recvbuf")
        if is_in_place(sendbuf):
            blk = r.block(n)
            x = r.a[:blk * n].copy()
            out = r.a[:blk]
        else:
            out = r.elems()
            x = Msg(sendbuf, "sendbuf").a[:out.size * n]
        return self._reduce_into("reduce_scatter", x, out, _op_of(op, sendbuf, recvbuf),
                                 counts=[out.size] * n, async_op=async_op)

    @_agreed
    @_no_derived
    def Reduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op=_MPI.SUM) -> None:
        self._reduce_scatter(sendbuf, recvbuf, recvcounts, op, False)

    def _reduce_scatter(self, sendbuf, recvbuf, recvcounts, op, async_op):
        """Without ``recvcounts``, the members' recvbuf sizes, learnt at the call by
        an all-gather (as mpi4py does, for Ireduce_scatter too)."""
        c = self._c
        r = Msg(recvbuf, "recvbuf")
        if recvcounts is None:
            mine = r.total()
            recvcounts = [int(v) for v in
                          c.all_gather(np.array([mine], np.int64)).tolist()]
        counts = [int(v) for v in recvcounts]
        if len(counts) != c.size:
            raise InvalidArgumentError(f"recvcounts: expected {c.size} counts, got {len(counts)}")
        total = sum(counts)
        if is_in_place(sendbuf):
            x = r.a[:total].copy()
        else:
            x = Msg(sendbuf, "sendbuf").a[:total]
        out = r.a[:counts[c.rank]]
        return self._reduce_into("reduce_scatter", x, out, _op_of(op, sendbuf, recvbuf),
                                 counts=counts, async_op=async_op)

    @_agreed
    @_no_derived
    def Scan(self, sendbuf, recvbuf, op=_MPI.SUM) -> None:
        self._scan(sendbuf, recvbuf, op, False)

    def _scan(self, sendbuf, recvbuf, op, async_op):
        out = Msg(recvbuf, "recvbuf").elems()
        x = out.copy() if is_in_place(sendbuf) else Msg(sendbuf, "sendbuf").elems()
        self._check_same(x, out, "recvbuf")
        return self._reduce_into("scan", x, out, _op_of(op, sendbuf, recvbuf),
                                 async_op=async_op)

    @_agreed
    @_no_derived
    def Exscan(self, sendbuf, recvbuf, op=_MPI.SUM) -> None:
        self._exscan(sendbuf, recvbuf, op, False)

    def _exscan(self, sendbuf, recvbuf, op, async_op):
        out = Msg(recvbuf, "recvbuf").elems()
        x = out.copy() if is_in_place(sendbuf) else Msg(sendbuf, "sendbuf").elems()
        self._check_same(x, out, "recvbuf")
        return self._reduce_into("exscan", x, out, _op_of(op, sendbuf, recvbuf),
                                 async_op=async_op)

    @_agreed
    @derived(sendbuf=("send", "whole"), recvbuf=("recv", "block"))
    def Allgather(self, sendbuf, recvbuf) -> None:
        self._allgather(sendbuf, recvbuf, False)

    def _allgather(self, sendbuf, recvbuf, async_op):
        c = self._c
        r = Msg(recvbuf, "recvbuf")
        blk = r.block(c.size)
        out = r.a[:blk * c.size]
        if is_in_place(sendbuf):
            x = out[c.rank * blk:(c.rank + 1) * blk].copy()
        else:
            x = Msg(sendbuf, "sendbuf").elems()
        self._check_dtype(x, out, "recvbuf")
        return c.all_gather(as_bytes(x), out=as_bytes(out), async_op=async_op)

    @_agreed
    @derived(sendbuf=("send", "whole"), recvbuf=("recv", "v"))
    def Allgatherv(self, sendbuf, recvbuf) -> None:
        h, then = self._allgatherv(sendbuf, recvbuf, False)
        then(h)

    def _allgatherv(self, sendbuf, recvbuf, async_op):
        """(the call's result or Handle, what places its result in recvbuf)"""
        c = self._c
        r = Msg(recvbuf, "recvbuf", vector=True)
        counts, displs = r.v(c.size)
        if is_in_place(sendbuf):
            x = r.a[displs[c.rank]:displs[c.rank] + counts[c.rank]].copy()
        else:
            x = Msg(sendbuf, "sendbuf").elems()
        self._check_dtype(x, r.a, "recvbuf")
        it = x.itemsize
        h = c.all_gather_v(as_bytes(x), [k * it for k in counts], async_op=async_op)
        return h, lambda res: place(r.a, res.view(r.a.dtype), counts, displs)

    @_agreed
    @derived(sendbuf=("send", "whole"), recvbuf=("root-recv", "block"))
    def Gather(self, sendbuf, recvbuf, root=0) -> None:
        self._gather(sendbuf, recvbuf, root, False)

    def _gather(self, sendbuf, recvbuf, root, async_op):
        c = self._c
        if c.rank == root:
            r = Msg(recvbuf, "recvbuf")
            blk = r.block(c.size)
            out = r.a[:blk * c.size]
            x = out[root * blk:(root + 1) * blk].copy() if is_in_place(sendbuf) else \
                Msg(sendbuf, "sendbuf").elems()
            self._check_dtype(x, out, "recvbuf")
            return c.gather(as_bytes(x), root, out=as_bytes(out), async_op=async_op)
        return c.gather(as_bytes(Msg(sendbuf, "sendbuf").elems()), root, async_op=async_op)

    @_agreed
    @derived(sendbuf=("send", "whole"), recvbuf=("root-recv", "v"))
    def Gatherv(self, sendbuf, recvbuf, root=0) -> None:
        c = self._c
        if c.rank == root:
            r = Msg(recvbuf, "recvbuf", vector=True)
            counts, displs = r.v(c.size)
            x = r.a[displs[root]:displs[root] + counts[root]].copy() \
                if is_in_place(sendbuf) else Msg(sendbuf, "sendbuf").elems()
            self._check_dtype(x, r.a, "recvbuf")
            it = x.itemsize
            mine = np.array([x.nbytes], np.int64)
        else:
            x = Msg(sendbuf, "sendbuf").elems()
            mine = np.array([x.nbytes], np.int64)
        nbytes = [int(v) for v in c.all_gather(mine).tolist()]  # every member learns them
        if c.rank == root and nbytes != [k * it for k in counts]:
            raise InvalidArgumentError(
                f"recvbuf: counts {counts} do not match what the ranks send "
                f"({[b // it for b in nbytes]} elements)")
        res = c.gather(as_bytes(x), root, counts=nbytes)
        if c.rank == root:
            place(r.a, res.view(r.a.dtype), counts, displs)

    def _igatherv(self, sendbuf, recvbuf, root):
        """Igatherv in flight: an async all-to-all-v of the counts each member knows
        itself (the root its recvbuf's, a sender its sendbuf's), checked pairwise by
        the call's agreement; (its Handle or result, what places it in recvbuf)."""
        c = self._c
        root = V.rank(root, c.size, "root")
        n = c.size
        send, recv = [0] * n, [0] * n
        if c.rank == root:
            r = Msg(recvbuf, "recvbuf", vector=True)
            counts, displs = r.v(n)
            x = r.a[displs[root]:displs[root] + counts[root]].copy() \
                if is_in_place(sendbuf) else Msg(sendbuf, "sendbuf").elems()
            self._check_dtype(x, r.a, "recvbuf")
            recv = [k * x.itemsize for k in counts]
        else:
            x = Msg(sendbuf, "sendbuf").elems()
        send[root] = x.nbytes
        h = c.all_to_all_v(as_bytes(x), send, recv, async_op=True)
        if c.rank != root:
            return h, None
        return h, lambda res: place(r.a, res.view(r.a.dtype), counts, displs)

    @_agreed
    @derived(sendbuf=("root-send", "block"), recvbuf=("recv", "whole"))
    def Scatter(self, sendbuf, recvbuf, root=0) -> None:
        self._scatter(sendbuf, recvbuf, root, False)

    def _scatter(self, sendbuf, recvbuf, root, async_op):
        c = self._c
        if c.rank == root and is_in_place(recvbuf):
            s = Msg(sendbuf, "sendbuf")
            blk = s.block(c.size)
            out = s.a[root * blk:(root + 1) * blk].copy()  # (its own block stays)
            return c.scatter(as_bytes(s.a[:blk * c.size]), as_bytes(out), root,
                             async_op=async_op)
        out = Msg(recvbuf, "recvbuf").elems()
        x = None
        if c.rank == root:
            s = Msg(sendbuf, "sendbuf")
            x = s.a[:s.block(c.size) * c.size]
            self._check_dtype(x, out, "recvbuf")
        return c.scatter(None if x is None else as_bytes(x), as_bytes(out), root,
                         async_op=async_op)

    @_agreed
    @derived(sendbuf=("root-send", "v"), recvbuf=("recv", "whole"))
    def Scatterv(self, sendbuf, recvbuf, root=0) -> None:
        c = self._c
        mine_in_place = c.rank == root and is_in_place(recvbuf)
        if c.rank == root:
            s = Msg(sendbuf, "sendbuf", vector=True)
            counts, displs = s.v(c.size)
            it = s.a.itemsize
        # (in place, the root's own block stays in sendbuf: its size is its count's)
        out = s.a[displs[root]:displs[root] + counts[root]].copy() if mine_in_place else \
            Msg(recvbuf, "recvbuf").elems()
        if c.rank == root:
            self._check_dtype(s.a, out, "recvbuf")
        nbytes = [int(v) for v in c.all_gather(np.array([out.nbytes], np.int64)).tolist()]
        x = None
        if c.rank == root:
            x = np.concatenate([as_bytes(s.a[d:d + k]) for k, d in zip(counts, displs)])
            if nbytes != [k * it for k in counts]:
                raise InvalidArgumentError(
                    f"sendbuf: counts {counts} do not match the receive buffers "
                    f"({[b // it for b in nbytes]} elements)")
        c.scatter(x, as_bytes(out), root, counts=nbytes)

    def _iscatterv(self, sendbuf, recvbuf, root):
        """Iscatterv in flight: an async all-to-all-v of the counts each member knows
        itself (the root its sendbuf's, a receiver its recvbuf's), checked pairwise
        by the call's agreement; its Handle or result (the bytes land in recvbuf;
        in place, the root's own block stays in sendbuf)."""
        c = self._c
        root = V.rank(root, c.size, "root")
        n = c.size
        send, recv = [0] * n, [0] * n
        if c.rank == root:
            s = Msg(sendbuf, "sendbuf", vector=True)
            counts, displs = s.v(n)
            it = s.a.itemsize
            send = [k * it for k in counts]
            if is_in_place(recvbuf):
                send[root] = 0
                out = np.empty(0, s.a.dtype)
            else:
                out = Msg(recvbuf, "recvbuf").elems()
                self._check_dtype(s.a, out, "recvbuf")
            x = np.concatenate([as_bytes(s.a[d:d + b // it]) for b, d in zip(send, displs)])
        else:
            out = Msg(recvbuf, "recvbuf").elems()
            x = np.empty(0, np.uint8)
        recv[root] = out.nbytes
        return c.all_to_all_v(x, send, recv, out=as_bytes(out), async_op=True)

    @_agreed
    @derived(sendbuf=("send", "block"), recvbuf=("recv", "block"))
    def Alltoall(self, sendbuf, recvbuf) -> None:
        self._alltoall(sendbuf, recvbuf, False)

    def _alltoall(self, sendbuf, recvbuf, async_op):
        c = self._c
        r = Msg(recvbuf, "recvbuf")
        blk = r.block(c.size)
        out = r.a[:blk * c.size]
        if is_in_place(sendbuf):
            x = out.copy()
        else:
            s = Msg(sendbuf, "sendbuf")
            x = s.a[:s.block(c.size) * c.size]
        self._check_dtype(x, out, "recvbuf")
        return c.all_to_all(as_bytes(x), out=as_bytes(out), async_op=async_op)

    @_agreed
    @derived(sendbuf=("send", "v"), recvbuf=("recv", "v"))
    def Alltoallv(self, sendbuf, recvbuf) -> None:
        h, then = self._alltoallv(sendbuf, recvbuf, False)
        then(h)

    def _alltoallv(self, sendbuf, recvbuf, async_op):
        """(the call's result or Handle, what places its result in recvbuf)"""
        c = self._c
        r = Msg(recvbuf, "recvbuf", vector=True)
        rc, rd = r.v(c.size)
        if is_in_place(sendbuf):
            s_a, sc, sd = r.a.copy(), rc, rd
        else:
            s = Msg(sendbuf, "sendbuf", vector=True)
            sc, sd = s.v(c.size)
            s_a = s.a
        self._check_dtype(s_a, r.a, "recvbuf")
        it = r.a.itemsize
        x = np.concatenate([as_bytes(s_a[d:d + k]) for k, d in zip(sc, sd)]) if c.size else \
            np.empty(0, np.uint8)
        h = c.all_to_all_v(x, [k * it for k in sc], [k * it for k in rc], async_op=async_op)
        return h, lambda res: place(r.a, res.view(r.a.dtype), rc, rd)

    @_agreed
    def Alltoallw(self, sendbuf, recvbuf) -> None:
        """Alltoallv with a datatype per process and displacements in bytes
        (mpi4py's -w specs, buffers.WSpec: predefined or derived datatypes, over
        MPI.BOTTOM too): block j of ``sendbuf`` to rank j, rank j's into block j of
        ``recvbuf``."""
        h, then = self._alltoallw(sendbuf, recvbuf, False)
        then(h)

    def _alltoallw(self, sendbuf, recvbuf, async_op):
        c = self._c
        r = WSpec(recvbuf, "recvbuf", c.size, writeable=True)
        s = r if is_in_place(sendbuf) else WSpec(sendbuf, "sendbuf", c.size)
        x = np.concatenate(s.parts()) if c.size else np.empty(0, np.uint8)
        h = c.all_to_all_v(x, s.sizes, r.sizes, async_op=async_op)
        return h, r.place

    # non-blocking collectives that write into recvbuf: in flight (Request)
    @_agreed
    @derived(buf=("bcast", "whole"))
    def Ibcast(self, buf, root=0) -> Request:
        return started(self._bcast(buf, root, True))

    @_agreed
    @_no_derived
    def Iallreduce(self, sendbuf, recvbuf, op=_MPI.SUM) -> Request:
        return started(self._allreduce(sendbuf, recvbuf, op, True))

    @_agreed
    @_no_derived
    def Ireduce(self, sendbuf, recvbuf, op=_MPI.SUM, root=0) -> Request:
        return started(self._reduce(sendbuf, recvbuf, op, root, True))

    @_agreed
    @_no_derived
    def Ireduce_scatter_block(self, sendbuf, recvbuf, op=_MPI.SUM) -> Request:
        return started(self._reduce_scatter_block(sendbuf, recvbuf, op, True))

    @_agreed
    @_no_derived
    def Iscan(self, sendbuf, recvbuf, op=_MPI.SUM) -> Request:
        return started(self._scan(sendbuf, recvbuf, op, True))

    @_agreed
    @_no_derived
    def Iexscan(self, sendbuf, recvbuf, op=_MPI.SUM) -> Request:
        return started(self._exscan(sendbuf, recvbuf, op, True))

    @_agreed
    @derived(sendbuf=("send", "whole"), recvbuf=("recv", "block"))
    def Iallgather(self, sendbuf, recvbuf) -> Request:
        return started(self._allgather(sendbuf, recvbuf, True))

    @_agreed
    @derived(sendbuf=("send", "block"), recvbuf=("recv", "block"))
    def Ialltoall(self, sendbuf, recvbuf) -> Request:
        return started(self._alltoall(sendbuf, recvbuf, True))

    @_agreed
    @derived(sendbuf=("send", "whole"), recvbuf=("root-recv", "block"))
    def Igather(self, sendbuf, recvbuf, root=0) -> Request:
        return started(self._gather(sendbuf, recvbuf, root, True))

    @_agreed
    @derived(sendbuf=("root-send", "block"), recvbuf=("recv", "whole"))
    def Iscatter(self, sendbuf, recvbuf, root=0) -> Request:
        return started(self._scatter(sendbuf, recvbuf, root, True))

    @_agreed
    @derived(sendbuf=("send", "whole"), recvbuf=("recv", "v"))
    def Iallgatherv(self, sendbuf, recvbuf) -> Request:
        return started(*self._allgatherv(sendbuf, recvbuf, True))

    @_agreed
    @derived(sendbuf=("send", "v"), recvbuf=("recv", "v"))
    def Ialltoallv(self, sendbuf, recvbuf) -> Request:
        return started(*self._alltoallv(sendbuf, recvbuf, True))

    @_agreed
    def Ialltoallw(self, sendbuf, recvbuf) -> Request:
        return started(*self._alltoallw(sendbuf, recvbuf, True))

    @_agreed
    @_no_derived
    def Ireduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op=_MPI.SUM) -> Request:
        """In flight; without ``recvcounts``, the members' recvbuf sizes are learnt at
        the call first (as mpi4py does)."""
        return started(self._reduce_scatter(sendbuf, recvbuf, recvcounts, op, True))

    @_agreed
    @derived(sendbuf=("send", "whole"), recvbuf=("root-recv", "v"))
    def Igatherv(self, sendbuf, recvbuf, root=0) -> Request:
        return started(*self._igatherv(sendbuf, recvbuf, root))

    @_agreed
    @derived(sendbuf=("root-send", "v"), recvbuf=("recv", "whole"))
    def Iscatterv(self, sendbuf, recvbuf, root=0) -> Request:
        return started(self._iscatterv(sendbuf, recvbuf, root))

    # --- helpers -------------------------------------------------------------------------
    def _check_dtype(self, x, out, name):
        if x.dtype != out.dtype:
            self._c.refuse("front-end", InvalidArgumentError(
                f"{name}: datatype {out.dtype} differs from the send buffer's {x.dtype}"))

    def _check_same(self, x, out, name):
        self._check_dtype(x, out, name)
        if x.size != out.size:
            self._c.refuse("front-end", InvalidArgumentError(
                f"{name}: {out.size} elements but the send buffer has {x.size}"))

    def _reduce_into(self, which, x, out, op, root=0, counts=None, async_op=False):
        """Reduce ``x`` into ``out`` (None: nothing to write here). ``op``: the
        kernels' name, or (an MPI.Op, its datatype or None) (_op_of). ``async_op``:
        the call's Handle, in flight, where the kernels carry the type and the op
        (else done here)."""
        c = self._c
        dt = x.dtype
        if isinstance(op, str) and op == "sum" and dt in (np.complex64, np.complex128):
            x, out = real_parts(x), None if out is None else real_parts(out)
            dt = x.dtype
            counts = None if counts is None else [k * 2 for k in counts]
        if isinstance(op, str) and _carried(dt):
            if which == "all_reduce":
                return c.all_reduce(x, op, out=out, async_op=async_op)
            if which == "reduce":
                return c.reduce(x, root, op, out=out, async_op=async_op)
            if which == "reduce_scatter":
                return c.reduce_scatter_v(x, counts, op, out=out, async_op=async_op)
            if which == "scan":
                return c.scan(x, op, out=out, async_op=async_op)
            return c.exscan(x, op, out=out, async_op=async_op)
        # types the kernels do not carry, other ops: gather every input, reduce in
        # rank order (an MPI.Op's datatype found first: nothing moves if none is)
        if not isinstance(op, str) and op[1] is None:
            _mpi_type(dt, op[0])
        rows = c.all_gather(as_bytes(np.ascontiguousarray(x))).view(dt).reshape(c.size, -1)
        if which == "all_reduce" or which == "reduce" and out is not None:
            out[...] = _reduce_rows(rows, op)
        elif which == "reduce_scatter":
            o = int(np.sum(counts[:c.rank]))
            out[...] = _reduce_rows(rows[:, o:o + counts[c.rank]], op)
        elif which == "scan":
            out[...] = _reduce_rows(rows[:c.rank + 1], op)
        elif which == "exscan" and c.rank > 0:
            out[...] = _reduce_rows(rows[:c.rank], op)


Comm = Intracomm  # (one class: mpi4py's Comm and Intracomm, named as a communicator's
# type is there)
# (not pickle-based: the same as the buffer methods)
Comm.barrier = Comm.Barrier
Comm.ibarrier = Comm.Ibarrier

add_persistent(Comm, COLLECTIVES)


class Cartcomm(_Grid, Comm):
    """A Cartesian communicator of the facade (Comm.Create_cart; neuron_mpi.mpi.topo)."""


class Graphcomm(_Graph, Comm):
    """A graph communicator of the facade (Comm.Create_graph; neuron_mpi.mpi.topo)."""


class Distgraphcomm(_DistGraph, Comm):
    """A distributed graph communicator of the facade (Comm.Create_dist_graph and
    Create_dist_graph_adjacent; neuron_mpi.mpi.topo)."""


# (a buffer error one rank finds fails the others' all-to-all-v too): the
# neighbourhood collectives on buffers, each I form and its blocking one
# (derived datatypes: blocks per in- or out-neighbour; the -w forms read theirs
# themselves, buffers.WSpec)
_NEIGHBOUR_SPECS = {
    "allgather": dict(sendbuf=("send", "whole"), recvbuf=("recv", "block", "in")),
    "allgatherv": dict(sendbuf=("send", "whole"), recvbuf=("recv", "v", "in")),
    "alltoall": dict(sendbuf=("send", "block", "out"), recvbuf=("recv", "block", "in")),
    "alltoallv": dict(sendbuf=("send", "v", "out"), recvbuf=("recv", "v", "in")),
    "alltoallw": {}}
for _cls, _base in ((Cartcomm, _Grid), (Graphcomm, _Graph), (Distgraphcomm, _DistGraph)):
    for _name in NEIGHBOURHOOD + tuple(n[1].upper() + n[2:] for n in NEIGHBOURHOOD):
        _fn = getattr(_base, _name)
        _specs = _NEIGHBOUR_SPECS[_name.rsplit("_", 1)[1]]
        setattr(_cls, _name, _agreed(derived(**_specs)(_fn) if _specs else _fn))
del _cls, _base, _name, _fn, _specs


def _named(key: str, same: bool) -> Comm:
    """COMM_WORLD or COMM_SELF unpickled: the module's own (``same``) or a new
    handle of it."""
    from . import _STATE, _world

    _world()
    c = _STATE[key]
    return c if same else Comm(c)


def _comm_null() -> MPIError:
    return MPIError("comm: a null or freed communicator (MPI.COMM_NULL)", _MPI.ERR_COMM)


class _FreedCommunicator:
    def __getattr__(self, name):
        raise _comm_null()
