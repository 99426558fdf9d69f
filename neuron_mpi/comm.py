"""The Communicator: the API users code against.

Validate at the boundary, pick the algorithm, fetch the cached schedule and this
rank's plan, run it on the engine. Collectives return their result: a new array,
or ``out`` when given (``out`` may be ``x`` where the shapes allow).
"""
from __future__ import annotations

import atexit
import hashlib

import numpy as np
from mpi4py import MPI

from . import groups as G
from . import validate as V
from .algorithms.group import GroupView
from .algorithms.select import choose, schedule_for
from .engine import Engine
from .errors import InvalidArgumentError
from .executor import Execution, Plan, make_buffers
from .topology import topology as make_topology

SUM, PROD, MAX, MIN, AVG = "sum", "prod", "max", "min", "avg"


class Handle:
    """An async collective: ``test()`` progresses and says whether it is done;
    ``wait()`` finishes it and returns the result."""

    def __init__(self, comm, ex, finish):
        self._comm = comm
        self._ex = ex
        self._finish = finish
        self._result = None
        self._finished = False

    def test(self) -> bool:
        eng = self._comm._engine
        eng.poll()
        eng._advance_active()
        return self._ex.done

    def is_completed(self) -> bool:
        return self.test()

    def wait(self):
        if not self._finished:
            self._comm._engine.wait_until(lambda: self._ex.done)
            self._result = self._finish()
            self._finished = True
        return self._result


def _child_id(parent: int, nsplit: int, index: int) -> int:
    h = hashlib.blake2b(f"{parent}/{nsplit}/{index}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") & ((1 << 62) - 1)


class Communicator:
    def __init__(self, engine: Engine, topo, ranks, comm_id: int, strict: bool):
        self._engine = engine
        self.topology = topo
        self._ranks = tuple(ranks)  # world ranks of the members
        self._view = GroupView(topo, self._ranks)
        self._id = comm_id
        self.strict = strict
        self.size = len(self._ranks)
        self.rank = self._ranks.index(engine.rank)
        self.world_rank = engine.rank
        self.placement = topo.placement(engine.rank)
        self._seq = 0
        self._nsplit = 0
        self._p2p_sent: dict[int, int] = {}
        self._p2p_recv: dict[int, int] = {}
        self._plans: dict = {}

    @property
    def ranks(self) -> tuple[int, ...]:
        """World ranks of the members, in group order."""
        return self._ranks

    def __repr__(self):
        return (f"<neuron_mpi.Communicator rank {self.rank} of {self.size} on "
                f"{self.topology.instance} LNC={self.topology.lnc}>")

    # --- running a schedule -------------------------------------------------------
    def _plan(self, op, algorithm, sizes, avg=False, extra=None):
        key = (op, algorithm, sizes, avg, extra)
        plan = self._plans.get(key)
        if plan is None:
            sched = schedule_for(self._view, op, algorithm, sizes, avg, extra)
            plan = Plan(sched, self._view, self.rank)
            if len(self._plans) > 512:
                self._plans.clear()
            self._plans[key] = plan
        return plan

    def _run(self, op, algorithm, sizes, x, out, out_shape, reduce_op="sum", extra=None,
             async_op=False):
        """x: validated input; out: validated out or None."""
        avg = reduce_op == "avg"
        algo = choose(op, self._view, algorithm)
        plan = self._plan(op, algo, sizes, avg, extra)
        x_flat = np.ascontiguousarray(x).reshape(-1)
        result = out if out is not None else np.empty(out_shape, x.dtype)
        target = result if result.flags.c_contiguous else np.empty(out_shape, x.dtype)
        out_flat = target.reshape(-1)
        if x_flat.size and out_flat.size and np.shares_memory(x_flat, out_flat):
            x_flat = x_flat.copy()  # in place: keep the input readable throughout
        bufs = make_buffers(x_flat, out_flat, plan.tmp_elems, x.dtype)
        self._seq += 1
        ex = Execution(self._engine, plan, bufs, self._id, self._seq, op,
                       "sum" if avg else reduce_op)
        ex.algorithm = algo

        def finish():
            if target is not result:
                result[...] = target
            return result

        if async_op:
            self._engine.active.append(ex)
            return Handle(self, ex, finish)
        self._engine.wait_until(ex.advance)
        return finish()

    def algorithm_for(self, op: str, algorithm=None) -> str:
        """The algorithm ``op`` would run with on this group (for --show-algorithm)."""
        return choose(op, self._view, algorithm)

    # --- collectives ----------------------------------------------------------------
    def all_reduce(self, x, op="sum", out=None, algorithm=None, async_op=False):
        x = V.array(x)
        op = V.reduce_op(op)
        out = V.out_array(out, x.shape, x.dtype)
        return self._run("all_reduce", algorithm, int(x.size), x, out, x.shape, op,
                         async_op=async_op)

    def all_gather(self, x, out=None, algorithm=None, async_op=False):
        x = V.array(x)
        r = V.rows(x)
        shape = (r * self.size,) + x.shape[1:]
        out = V.out_array(out, shape, x.dtype)
        counts = (int(x.size),) * self.size
        return self._run("all_gather", algorithm, counts, x, out, shape, async_op=async_op)

    def all_gather_v(self, x, counts, out=None, algorithm=None, async_op=False):
        x = V.array(x)
        r = V.rows(x)
        counts = V.counts(counts, self.size)
        if r != counts[self.rank]:
            raise InvalidArgumentError(
                f"counts: counts[{self.rank}] = {counts[self.rank]} rows but x has {r} rows")
        shape = (sum(counts),) + x.shape[1:]
        out = V.out_array(out, shape, x.dtype)
        re = V.row_elems(x)
        return self._run("all_gather_v", algorithm, tuple(c * re for c in counts), x, out,
                         shape, async_op=async_op)

    def reduce_scatter(self, x, op="sum", out=None, algorithm=None, async_op=False):
        x = V.array(x)
        op = V.reduce_op(op)
        r = V.rows(x)
        if r % self.size:
            raise InvalidArgumentError(
                f"x: axis 0 ({r} rows) must divide evenly into {self.size} blocks; use "
                "reduce_scatter_v for uneven blocks")
        shape = (r // self.size,) + x.shape[1:]
        out = V.out_array(out, shape, x.dtype)
        counts = (int(x.size) // self.size,) * self.size
        return self._run("reduce_scatter", algorithm, counts, x, out, shape, op,
                         async_op=async_op)

    def reduce_scatter_v(self, x, counts, op="sum", out=None, algorithm=None, async_op=False):
        x = V.array(x)
        op = V.reduce_op(op)
        r = V.rows(x)
        counts = V.counts(counts, self.size)
        if sum(counts) != r:
            raise InvalidArgumentError(
                f"counts: they sum to {sum(counts)} rows but x has {r} rows")
        shape = (counts[self.rank],) + x.shape[1:]
        out = V.out_array(out, shape, x.dtype)
        re = V.row_elems(x)
        return self._run("reduce_scatter_v", algorithm, tuple(c * re for c in counts), x, out,
                         shape, op, async_op=async_op)

    def all_to_all(self, x, out=None, algorithm=None, async_op=False):
        x = V.array(x)
        r = V.rows(x)
        if r % self.size:
            raise InvalidArgumentError(
                f"x: axis 0 ({r} rows) must divide evenly into {self.size} blocks; use "
                "all_to_all_v for uneven blocks")
        out = V.out_array(out, x.shape, x.dtype)
        b = int(x.size) // self.size
        matrix = tuple((b,) * self.size for _ in range(self.size))
        return self._run("all_to_all", algorithm, matrix, x, out, x.shape, async_op=async_op)

    def all_to_all_v(self, x, send_counts, recv_counts, out=None, algorithm=None,
                     async_op=False):
        x = V.array(x)
        r = V.rows(x)
        sc = V.counts(send_counts, self.size, "send_counts")
        rc = V.counts(recv_counts, self.size, "recv_counts")
        if sum(sc) != r:
            raise InvalidArgumentError(
                f"send_counts: they sum to {sum(sc)} rows but x has {r} rows")
        if sc[self.rank] != rc[self.rank]:
            raise InvalidArgumentError(
                f"recv_counts: recv_counts[{self.rank}] = {rc[self.rank]} but this rank "
                f"sends itself send_counts[{self.rank}] = {sc[self.rank]}")
        shape = (sum(rc),) + x.shape[1:]
        out = V.out_array(out, shape, x.dtype)
        re = V.row_elems(x)
        # this rank knows its row (what it sends) and its column (what it receives)
        me, n = self.rank, self.size
        matrix = tuple(
            tuple(sc[j] * re if i == me else (rc[i] * re if j == me else 0) for j in range(n))
            for i in range(n))
        return self._run("all_to_all_v", algorithm, matrix, x, out, shape, async_op=async_op)

    def permute(self, x, pairs, out=None, algorithm=None, async_op=False):
        x = V.array(x)
        pairs = V.pairs(pairs, self.size)
        out = V.out_array(out, x.shape, x.dtype)
        return self._run("permute", algorithm, int(x.size), x, out, x.shape, extra=pairs,
                         async_op=async_op)

    def broadcast(self, x, root=0, out=None, algorithm=None, async_op=False):
        x = V.array(x)
        root = V.rank(root, self.size, "root")
        out = V.out_array(out, x.shape, x.dtype)
        return self._run("broadcast", algorithm, int(x.size), x, out, x.shape, extra=root,
                         async_op=async_op)

    def barrier(self) -> None:
        dummy = np.empty(0, np.uint8)
        self._run("barrier", None, 0, dummy, None, (0,))

    # --- point to point ---------------------------------------------------------------
    def send(self, x, dst) -> None:
        x = V.array(x)
        dst = V.rank(dst, self.size, "dst")
        n = self._p2p_sent.get(dst, 0)
        self._p2p_sent[dst] = n + 1
        payload = np.ascontiguousarray(x).reshape(-1).view(np.uint8)
        reqs = self._engine.post((self._id, n, -1 - self.rank), self._ranks[dst], payload)
        self._engine.wait_until(lambda: MPI.Request.Testall(reqs))

    def recv(self, out, src):
        out = V.array(out, "out")
        src = V.rank(src, self.size, "src")
        if not out.flags.writeable:
            raise InvalidArgumentError("out: expected a writeable array, got a read-only array")
        n = self._p2p_recv.get(src, 0)
        self._p2p_recv[src] = n + 1
        key = (self._id, n, -1 - src)
        eng = self._engine
        eng.wait_until(lambda: eng.has(key))
        data = eng.take(key)
        if data.nbytes != out.nbytes:
            raise InvalidArgumentError(
                f"out: rank {src} sent {data.nbytes} bytes but out holds {out.nbytes} "
                f"({out.shape} {out.dtype})")
        out[...] = data.view(out.dtype).reshape(out.shape)
        return out

    # --- groups -----------------------------------------------------------------------
    def split(self, replica_groups):
        """This rank's communicator among ``replica_groups`` (lists of this
        communicator's ranks); None if the rank is in no group. Every rank must
        call it with the same groups."""
        gs = V.replica_groups(replica_groups, self.size)
        world_groups = [[self._ranks[r] for r in g] for g in gs]
        for wg in world_groups:
            G.check_group(self.topology, wg, self.strict)
        self._nsplit += 1
        for i, g in enumerate(gs):
            if self.rank in g:
                return Communicator(self._engine, self.topology, world_groups[i],
                                    _child_id(self._id, self._nsplit, i), self.strict)
        return None

    def link_stats(self) -> list[dict]:
        """What this rank sent since init: one entry per (next hop, link kind)."""
        return self._engine.link_stats()


def init(instance=None, lnc=None, nodes=None, comm=None, strict=True) -> Communicator:
    """Lay the ranks of ``comm`` (default MPI.COMM_WORLD) on the topology and return
    the world communicator. Collective over ``comm``."""
    world = comm if comm is not None else MPI.COMM_WORLD
    topo = make_topology(instance, lnc, nodes, ranks=world.Get_size())
    G.check_group(topo, range(topo.size), strict)
    engine = Engine(world.Dup(), topo)
    atexit.register(engine.drain)
    return Communicator(engine, topo, range(topo.size), 1, strict)
