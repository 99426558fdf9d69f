"""torch.distributed backend "neuron": the emulated Neuron collectives under torch.

``import neuron_mpi.torch`` registers the backend. Under ``neuron-mpirun`` (or
mpiexec), ``dist.init_process_group("neuron")`` then needs no rank, world size or
address: they come from MPI (see ``_env_from_mpi``). TorchNeuron's own backend has
the same name (torch.distributed with ``backend="neuron"``; NEURON_FACTS.md).

Each process group is a ``NeuronProcessGroup`` (a Python ``dist.ProcessGroup``)
over a ``neuron_mpi`` Communicator: the default group over the world communicator
(``neuron_mpi.init()``, so NEURON_MPI_INSTANCE etc. choose the topology), every
other group over ``Communicator.group(ranks)``, which torch calls on the member
ranks only; the instance's group rules apply (strict, as ``init``;
NEURON_MPI_STRICT=0 lifts them). Tensors travel
as numpy views of their memory (bfloat16 and float8 as ml_dtypes arrays), reduced
exactly as the Communicator reduces. ``allreduce`` of one tensor and the
single-tensor forms of all-gather, reduce-scatter and all-to-all
(``all_gather_into_tensor``, ``reduce_scatter_tensor``, ``all_to_all_single`` with
even splits) of at least ASYNC_MIN_BYTES, called with ``async_op=True`` (or from
C++, as DDP's are), are in flight when they return: their
``Work`` (``work.InFlight``) finishes while torch computes (the rank's agent moves the
data), so ``dist.all_reduce(t, async_op=True)`` overlaps until ``work.wait()``.
``get_future()`` gives a future that completes by itself when the call ends (a
thread of this module completes it, outside the engine), so DDP's comm hooks,
which take the future at once and wait at the end of backward, overlap too. Every other call runs
to completion before it returns its ``Work`` (a completed future).

The mapping of every ProcessGroup method to the Communicator call is the table in
docs/api.md ("Front-ends").
"""
from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

from .. import env
from ..errors import InvalidArgumentError, NeuronMPIError
from ..tagged import ANY, Tagged, send_tag
from .tensors import as_numpy, reduce_op
from .work import InFlight, Later, done

BACKEND = "neuron"

def _env_from_mpi() -> None:
    """Under an MPI launcher, fill RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
    MASTER_PORT (torch's env:// rendezvous) from MPI where they are not set: rank 0
    picks a free port and broadcasts it. Collective over MPI.COMM_WORLD."""
    if not env.under_mpi_launcher():
        return
    if not env.unset(("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")):
        return
    import socket

    from ..comm import MPI  # the real mpi4py.MPI, also under python -m neuron_mpi.mpi
    world = MPI.COMM_WORLD
    addr = port = None
    names = world.allgather(MPI.Get_processor_name())
    if world.Get_rank() == 0:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        addr = "127.0.0.1" if len(set(names)) == 1 else socket.gethostbyname(socket.gethostname())
    addr, port = world.bcast((addr, port), root=0)
    me = world.Get_rank()
    env.set_defaults({"RANK": me, "WORLD_SIZE": world.Get_size(),
                      "LOCAL_RANK": names[:me].count(names[me]),
                      "MASTER_ADDR": addr, "MASTER_PORT": port})


_WORLD = []

#: async calls on tensors of at least this many bytes run in flight (``InFlight``);
#: smaller ones complete at the call, where an async call's set-up (tens of
#: microseconds: docs/benchmarks.md, "The overlap benchmark's checks") would cost
#: more than the data
ASYNC_MIN_BYTES = 64 * 1024


def world_communicator():
    """The world Communicator of this process (made on first use)."""
    if not _WORLD:
        import neuron_mpi as nm
        from .. import env
        _WORLD.append(nm.init(strict=env.strict_groups()))
    return _WORLD[0]


def _in_flight(opts, nbytes: int, *arrays) -> bool:
    """Whether a call on these arrays runs in flight: asked for (torch sets
    ``opts.asyncOp`` from the call's ``async_op``; options made without it, as
    DDP's, default to True), big enough, and each array contiguous (written in
    place, with no copy after the data is in). A blocking call (async_op=False,
    waited at once) runs compiled on the calling thread instead: in flight, the
    agent would start it only for the caller to take it back."""
    return (opts is None or getattr(opts, "asyncOp", True)) and \
        nbytes >= ASYNC_MIN_BYTES and all(a.flags.c_contiguous for a in arrays)


def _op(reduce_op) -> str:
    R = dist.ReduceOp
    table = {R.SUM: "sum", R.AVG: "avg", R.PRODUCT: "prod", R.MIN: "min", R.MAX: "max"}
    for k, v in table.items():
        if reduce_op == k:
            return v
    name = next((f"ReduceOp.{n}" for n in ("BAND", "BOR", "BXOR", "PREMUL_SUM")
                 if reduce_op == getattr(R, n, None)), None)
    if name is None:  # (a ReduceOp object prints as its address; its type name helps)
        name = getattr(reduce_op, "name", None) or type(reduce_op).__name__
    raise InvalidArgumentError(
        f"op: the neuron backend reduces with SUM, AVG, PRODUCT, MIN or MAX, got {name}")


def _landed(a: np.ndarray, buf: np.ndarray, src: int, tag: int, n: int) -> None:
    """A message of ``n`` bytes from ``src`` received into ``buf`` for tensor
    array ``a``: its size checked, copied into ``a`` when ``buf`` stood in for it."""
    if n != a.nbytes:
        raise InvalidArgumentError(
            f"tensor: rank {src} sent {n} bytes (tag {tag}) but the tensor holds {a.nbytes}")
    if buf is not a:
        a[...] = buf


def _flat(a: np.ndarray) -> np.ndarray:
    return a.reshape(-1) if a.flags.c_contiguous else np.ascontiguousarray(a).reshape(-1)


def _rows(t: torch.Tensor) -> int:
    return t.shape[0] if t.dim() else 1


class NeuronProcessGroup(dist.ProcessGroup):
    """A torch process group over a neuron_mpi Communicator."""

    def __init__(self, comm, rank: int, size: int):
        super().__init__(rank, size)
        self.comm = comm
        self._tagged = Tagged(comm, "tensor")  # point to point, matched by tag as gloo does

    def getBackendName(self):
        return BACKEND

    # torch names every group (FSDP2 and the functional collectives look groups up
    # by name); a Python ProcessGroup has no C++ backend to keep the name, so it is
    # kept here
    def _set_group_name(self, name):
        self._group_name = name

    @property
    def group_name(self):
        name = getattr(self, "_group_name", None)
        if name is None:
            raise RuntimeError("ProcessGroup name not set")
        return name

    pg_name = group_name

    def _set_group_desc(self, desc):
        self._group_desc = desc

    @property
    def group_desc(self):
        return getattr(self, "_group_desc", "")

    def __repr__(self):
        return f"<NeuronProcessGroup rank {self.rank()} of {self.size()} over {self.comm!r}>"

    # --- helpers ----------------------------------------------------------------
    def _arrays(self, op, tensors, name, write=True):
        """numpy views of ``tensors`` (refused on every member if one is bad)."""
        try:
            return [as_numpy(t, f"{name}[{i}]" if len(tensors) > 1 else name, write)
                    for i, t in enumerate(tensors)]
        except NeuronMPIError as e:
            self.comm.refuse(op, e)

    def _one(self, op, tensors, name):
        if len(tensors) != 1:
            self.comm.refuse(op, InvalidArgumentError(
                f"{name}: the neuron backend takes one tensor per rank (CPU), got "
                f"{len(tensors)}"))
        return self._arrays(op, tensors, name)[0]

    def _reduce_op(self, which, opts, tensors, name) -> str:
        """The op of a reduction (``opts.reduceOp``, SUM without opts) as the
        Communicator takes it for these tensors (refused on every member if their
        dtype does not take it)."""
        try:
            return reduce_op(_op(opts.reduceOp) if opts is not None else "sum", tensors, name)
        except NeuronMPIError as e:
            self.comm.refuse(which, e)

    def _check(self, op, cond, msg):
        if not cond:
            self.comm.refuse(op, InvalidArgumentError(msg))

    # --- all-reduce ---------------------------------------------------------------
    def allreduce(self, tensors, opts=None):
        op = self._reduce_op("all_reduce", opts, tensors, "tensor")
        arrays = self._arrays("all_reduce", tensors, "tensor")
        if len(arrays) == 1 and _in_flight(opts, arrays[0].nbytes, arrays[0]):
            a = arrays[0]
            return InFlight(self.comm.all_reduce(a, op, out=a, async_op=True), tensors)
        for a in arrays:
            self.comm.all_reduce(a, op, out=a)
        return done(tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    # --- all-gather -----------------------------------------------------------------
    def allgather(self, output_tensors, input_tensors, opts=None):
        x = self._one("all_gather", input_tensors, "input_tensor")
        self._check("all_gather", len(output_tensors) == 1,
                    f"output_tensor_lists: one list per rank, got {len(output_tensors)}")
        outs = output_tensors[0]
        self._check("all_gather", len(outs) == self.size(),
                    f"tensor_list: expected {self.size()} tensors (one per rank), got "
                    f"{len(outs)}")
        oa = self._arrays("all_gather", outs, "tensor_list")
        counts = [o.size for o in oa]
        self._check("all_gather", counts[self.rank()] == x.size,
                    f"tensor: {x.size} elements but tensor_list[{self.rank()}] holds "
                    f"{counts[self.rank()]}")
        self._check("all_gather", all(o.dtype == x.dtype for o in oa),
                    f"tensor_list: every tensor must have the input's dtype {x.dtype}")
        if len(set(counts)) == 1:
            res = self.comm.all_gather(_flat(x))
        else:
            res = self.comm.all_gather_v(_flat(x), counts)
        off = 0
        for o, c in zip(oa, counts):
            o[...] = res[off:off + c].reshape(o.shape)
            off += c
        return done(output_tensors)

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        """output_lists[r][i]: rank r's input_list[i]."""
        self._check("all_gather", len(output_lists) == self.size(),
                    f"output_tensor_lists: expected {self.size()} lists (one per rank), got "
                    f"{len(output_lists)}")
        for i, x in enumerate(input_list):
            self.allgather([[outs[i] for outs in output_lists]], [x], opts)
        return done(output_lists)

    def _allgather_base(self, output, input, opts=None):
        o = self._arrays("all_gather", [output], "output_tensor")[0]
        x = self._arrays("all_gather", [input], "input_tensor", write=False)[0]
        self._check("all_gather", o.size == x.size * self.size() and o.dtype == x.dtype,
                    f"output_tensor: expected {x.size * self.size()} elements of {x.dtype} "
                    f"(world size x input), got {o.size} of {o.dtype}")
        if _in_flight(opts, o.nbytes, o):
            return InFlight(self.comm.all_gather(_flat(x), out=o.reshape(-1), async_op=True),
                         [output])
        res = self.comm.all_gather(_flat(x))
        o[...] = res.reshape(o.shape)
        return done([output])

    all_gather_single = _allgather_base

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        for o, x in zip(outputs, inputs):
            self._allgather_base(o, x, opts)
        return done(outputs)

    all_gather_single_coalesced = allgather_into_tensor_coalesced

    # --- reduce-scatter ---------------------------------------------------------------
    def reduce_scatter(self, output_tensors, input_lists, opts=None):
        op = self._reduce_op("reduce_scatter", opts, output_tensors, "output")
        out = self._one("reduce_scatter", output_tensors, "output")
        self._check("reduce_scatter", len(input_lists) == 1 and len(input_lists[0]) == self.size(),
                    f"input_list: expected {self.size()} tensors (one per rank)")
        ins = self._arrays("reduce_scatter", input_lists[0], "input_list", write=False)
        counts = [a.size for a in ins]
        self._check("reduce_scatter", counts[self.rank()] == out.size,
                    f"output: {out.size} elements but input_list[{self.rank()}] holds "
                    f"{counts[self.rank()]}")
        x = np.concatenate([a.reshape(-1) for a in ins]) if ins else np.empty(0, out.dtype)
        if len(set(counts)) == 1:
            res = self.comm.reduce_scatter(x, op)
        else:
            res = self.comm.reduce_scatter_v(x, counts, op)
        out[...] = res.reshape(out.shape)
        return done(output_tensors)

    def _reduce_scatter_base(self, output, input, opts=None):
        op = self._reduce_op("reduce_scatter", opts, [output], "output")
        o = self._arrays("reduce_scatter", [output], "output")[0]
        x = self._arrays("reduce_scatter", [input], "input", write=False)[0]
        self._check("reduce_scatter", x.size == o.size * self.size() and o.dtype == x.dtype,
                    f"input: expected {o.size * self.size()} elements of {o.dtype} "
                    f"(world size x output), got {x.size} of {x.dtype}")
        if _in_flight(opts, x.nbytes, o):
            return InFlight(self.comm.reduce_scatter(_flat(x), op, out=o.reshape(-1),
                                                  async_op=True), [output])
        res = self.comm.reduce_scatter(_flat(x), op)
        o[...] = res.reshape(o.shape)
        return done([output])

    reduce_scatter_single = _reduce_scatter_base

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        for o, x in zip(outputs, inputs):
            self._reduce_scatter_base(o, x, opts)
        return done(outputs)

    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced

    # --- all-to-all -------------------------------------------------------------------
    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        o = self._arrays("all_to_all", [output], "output")[0]
        x = self._arrays("all_to_all", [input], "input", write=False)[0]
        n = self.size()
        self._check("all_to_all", o.dtype == x.dtype,
                    f"output: dtype {o.dtype} differs from input's {x.dtype}")
        if not output_split_sizes and not input_split_sizes:
            self._check("all_to_all", x.size == o.size and _rows(input) % n == 0,
                        f"input: {_rows(input)} rows must divide evenly into {n} blocks and "
                        "match output's size")
            if _in_flight(opts, o.nbytes, o):
                return InFlight(self.comm.all_to_all(_flat(x), out=o.reshape(-1), async_op=True),
                             [output])
            res = self.comm.all_to_all(_flat(x))
        else:
            re = x.size // max(_rows(input), 1) if x.size else (
                o.size // max(_rows(output), 1) if o.size else 1)
            sc = list(input_split_sizes) or [_rows(input) // n] * n
            rc = list(output_split_sizes) or [_rows(output) // n] * n
            self._check("all_to_all", len(sc) == n and len(rc) == n,
                        f"input_split_sizes/output_split_sizes: expected {n} sizes each")
            self._check("all_to_all", sum(sc) * re == x.size and sum(rc) * re == o.size,
                        "input_split_sizes/output_split_sizes: they must sum to the rows of "
                        "input and output")
            res = self.comm.all_to_all_v(_flat(x), [c * re for c in sc], [c * re for c in rc])
        o[...] = res.reshape(o.shape)
        return done([output])

    def all_to_all_single(self, output, input, output_split_sizes=None,
                          input_split_sizes=None, opts=None):
        return self.alltoall_base(output, input, output_split_sizes or [],
                                  input_split_sizes or [], opts)

    def alltoall(self, output_tensors, input_tensors, opts=None):
        n = self.size()
        self._check("all_to_all", len(output_tensors) == n and len(input_tensors) == n,
                    f"output_tensor_list/input_tensor_list: expected {n} tensors each")
        ins = self._arrays("all_to_all", input_tensors, "input_tensor_list", write=False)
        outs = self._arrays("all_to_all", output_tensors, "output_tensor_list")
        dt = ins[0].dtype
        self._check("all_to_all", all(a.dtype == dt for a in ins + outs),
                    "input_tensor_list/output_tensor_list: every tensor must have one dtype")
        x = np.concatenate([a.reshape(-1) for a in ins])
        res = self.comm.all_to_all_v(x, [a.size for a in ins], [a.size for a in outs])
        off = 0
        for o in outs:
            o[...] = res[off:off + o.size].reshape(o.shape)
            off += o.size
        return done(output_tensors)

    # --- broadcast, barrier ------------------------------------------------------------
    def broadcast(self, tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        for a in self._arrays("broadcast", tensors, "tensor"):
            self.comm.broadcast(a, root, out=a)
        return done(tensors)

    def barrier(self, opts=None):
        self.comm.barrier()
        return done(None)

    # --- point to point -----------------------------------------------------------------
    # Matched by tag (the first message from the source with that tag, in the order
    # sent: neuron_mpi.tagged). A send leaves at the call; a receive is made at its
    # wait (dist.recv waits at once), so irecv before the matching isend works.
    def send(self, tensors, dst, tag=0):
        tag = send_tag(tag)
        for a in self._arrays_p2p(tensors, "tensor", False):
            self._tagged.send(np.ascontiguousarray(a).reshape(-1).view(np.uint8), dst, tag)
        return done(tensors)

    def recv(self, tensors, src, tag=0):
        tag = send_tag(tag)
        arrays = self._arrays_p2p(tensors, "tensor", True)
        # (a strided view receives into a contiguous copy, written back)
        bufs = [a if a.flags.c_contiguous else np.empty(a.shape, a.dtype) for a in arrays]
        makes = [self._tagged.post(b.reshape(-1).view(np.uint8), src, tag) for b in bufs]

        def make():
            for a, b, m in zip(arrays, bufs, makes):
                _landed(a, b, src, tag, m()[2])
        last = makes[-1] if makes else None
        return Later(make, tensors,
                     None if last is None else lambda: self._tagged.ready(last))

    def recv_anysource(self, tensors, tag=0):
        """recv/irecv with src=None: a receive from any rank, posted now (matched
        in posting order with the other receives, neuron_mpi.tagged) and made at
        the Work's wait (its ``_source_rank()`` names the sender), asleep until a
        message comes from some rank."""
        tag = send_tag(tag)
        if len(tensors) != 1:
            raise InvalidArgumentError(
                f"tensors: a receive from any source takes one tensor, got {len(tensors)}")
        a = self._arrays_p2p(tensors, "tensor", True)[0]
        buf = a if a.flags.c_contiguous else np.empty(a.shape, a.dtype)
        r = self._tagged.post(buf.reshape(-1).view(np.uint8), ANY, tag)
        work: list = []

        def make():
            src, _, n = r()
            _landed(a, buf, src, tag, n)
            work[0]._source = src

        work.append(Later(make, tensors, lambda: self._tagged.ready(r)))
        return work[0]

    def _arrays_p2p(self, tensors, name, write):
        # point to point has no group agreement: the error is raised here alone
        return [as_numpy(t, name, write) for t in tensors]

    # --- rooted ---------------------------------------------------------------------------
    def reduce(self, tensors, opts=None):
        op = self._reduce_op("reduce", opts, tensors, "tensor")
        root = opts.rootRank
        for a in self._arrays("reduce", tensors, "tensor"):
            self.comm.reduce(a, root, op, out=a if self.rank() == root else None)
        return done(tensors)

    def gather(self, output_lists, input_tensors, opts=None):
        root = opts.rootRank
        x = self._one("gather", input_tensors, "tensor")
        if self.rank() == root:
            self._check("gather", len(output_lists) == 1 and len(output_lists[0]) == self.size(),
                        f"gather_list: expected {self.size()} tensors on the root")
            outs = self._arrays("gather", output_lists[0], "gather_list")
            self._check("gather", all(o.size == x.size and o.dtype == x.dtype for o in outs),
                        f"gather_list: every tensor must hold {x.size} elements of {x.dtype}")
        else:
            self._check("gather", not output_lists or not output_lists[0],
                        "gather_list: only the root passes a gather_list")
        res = self.comm.gather(_flat(x), root)
        if self.rank() == root:
            for i, o in enumerate(outs):
                o[...] = res[i * x.size:(i + 1) * x.size].reshape(o.shape)
        return done(output_lists)

    def scatter(self, output_tensors, input_lists, opts=None):
        root = opts.rootRank
        out = self._one("scatter", output_tensors, "tensor")
        x = None
        if self.rank() == root:
            self._check("scatter", len(input_lists) == 1 and len(input_lists[0]) == self.size(),
                        f"scatter_list: expected {self.size()} tensors on the root")
            ins = self._arrays("scatter", input_lists[0], "scatter_list", write=False)
            self._check("scatter", all(a.size == out.size and a.dtype == out.dtype for a in ins),
                        f"scatter_list: every tensor must hold {out.size} elements of "
                        f"{out.dtype}")
            x = np.concatenate([a.reshape(-1) for a in ins])
        flat = _flat(out)
        self.comm.scatter(x, flat, root)
        if not np.shares_memory(flat, out):
            out[...] = flat.reshape(out.shape)
        return done(output_tensors)


def _create(dist_opts, backend_opts):
    """The backend's creator (torch calls it on the member ranks of each group)."""
    world = world_communicator()
    ranks = list(dist_opts.global_ranks_in_group)
    size, rank = dist_opts.group_size, dist_opts.group_rank
    if not dist.is_initialized():  # the default group
        if size != world.size or rank != world.rank:
            raise InvalidArgumentError(
                f"world_size: torch has rank {rank} of {size} but MPI has rank "
                f"{world.rank} of {world.size}; launch with neuron-mpirun/mpiexec and "
                "let neuron_mpi.torch fill RANK and WORLD_SIZE")
        comm = world
    else:
        if not ranks:
            ranks = list(range(world.size))
        comm = world.group(ranks)
    return NeuronProcessGroup(comm, rank, size)


def _register() -> None:
    if BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["cpu"])


_env_from_mpi()
_register()

__all__ = ["BACKEND", "NeuronProcessGroup", "world_communicator"]
