"""The compiled data plane of the shared-memory transport: its layout (the segment's
geometry, a piece's header, a plan's tables), the statuses of a run, and its
functions (transport/plane.py says what they do).

The functions come from the module built ahead of time for this source
(kernels.aot: ``kernels.warm()`` builds it, as neuron-mpirun does before a launch)
when there is one and NEURON_MPI_AOT is not 0: a rank that loads it never imports
numba nor starts its compiler, which saves each rank about 0.3 CPU s at launch and
50 MiB of memory. Otherwise numba compiles them (or loads them from its disk
cache): the same source, the same code.
"""
from __future__ import annotations

import platform

import numpy as np

SUPPORTED = platform.machine().lower() in ("x86_64", "amd64")

GEOMETRY = ("L", "K", "S", "N", "me", "me_world", "ctl", "state", "want", "hdr", "ledger",
            "data", "pid", "pull", "spin")
(G_L, G_K, G_S, G_N, G_ME, G_MEW, G_CTL, G_STATE, G_WANT, G_HDR, G_LEDGER, G_DATA, G_PID,
 G_PULL, G_SPIN) = range(len(GEOMETRY))
HDR_WORDS = 16
# header words 8 and 9 of a piece left in its sender's memory: the address and the pid
# the receiver reads it from (process_vm_readv); word 8 is 0 for a piece in its slot
H_ADDR, H_PID = 8, 9
KEY_SHIFT = 20  # a piece's lookup key: xid << 20 | piece
# dst local, dst world, buf, byte offset, bytes, xid, piece, total, charges lo, hi, and
# whether the receiver may read the piece from the sender's buffer (its final
# destination in this domain: it copies or reduces the piece from there)
SEND_COLS = 11
S_MAY_READ = 10  # (that last column)
# buf, byte offset, bytes, xid, piece, reduce, the transfer's bytes, and for a reduced
# piece that stands in for a leading copy the buffer (else -1) and byte offset of the
# input it reduces with (destination = input op piece; executor.Recv.base)
RECV_COLS = 9

# A rank's control words (segment.CTL_STRIDE int32 each): 0 doorbell, 1 its sleepers
# that wake on any ring, 2 the agent's word, 3 its sleepers, 4 a compiled run asleep
# on the doorbell counting pieces, 5 the doorbell value that run waits for.
CTL_ANY, CTL_COUNTING, CTL_WAKE_AT = 1, 4, 5

# --- executions ------------------------------------------------------------------------
# A plan as tables (executor.NativePlan): steps [kind (0 round, 1 locals), lo, hi];
# rounds [send lo, send hi, recv lo, recv hi]; sends [SEND_COLS]; recvs [RECV_COLS];
# keys/order: per round, the recvs' lookup keys sorted, and the recv each belongs to;
# locals [kind (0 copy, 1 reduce, 2 divide, 3 zero), src buf, src byte offset, dst buf,
# dst byte offset, bytes]. State of one run: xs [step, round started, recv of a wrong
# size (or whose read failed), agreement (1 publish, 2 wait, 0 done), pieces still
# missing when blocked (the errno of a failed read), 1: a sleeping run wakes on any
# ring, counting no pieces (point to point: a peer may never send what this rank
# expects)], flags (one byte per send of the
# round, then one per recv: 1 done; a send 2: published from this rank's buffer, not
# read yet), pend (per send of the round: the slot and generation of such a piece).
# The agreement (plane._agreement): every member's first FP_FIELDS words
# (agree.FIELDS) must equal this rank's; words past them are shares that must sum to
# 0 mod 2**64 over the members (all-to-all-v's pairwise count check, agree.pair_share).
FP_FIELDS = 9
# The plan's eight tables travel to the compiled run as one int64 array ``tab``
# (``tables``): a header of (offset, rows) per table, in this order, then each
# table's rows; the run takes them back as views (plane._table / plane._vector).
# Each array argument costs a compiled call about 90 ns to unbox (a meminfo made and
# freed; more with more ranks than cores, its object out of cache): an exec_run that
# returns at once took 2.0 us with the tables apart (22 arrays), 1.65 us with them in
# one (15; 2 ranks, warm).
TABLES = ("steps", "rounds", "sends", "charges", "recvs", "keys", "order", "locs")
TABLE_COLS = (3, 4, SEND_COLS, 0, RECV_COLS, 0, 0, 6)  # 0: a vector
DONE, BLOCKED, PYTHON, SIZE, TIMEOUT, MISMATCH, YIELDED, FAULT = range(8)
STUCK_GRACE_NS = 2_000_000  # exec_run: how long a full channel waits before it is copied aside

def read_failed(nbytes: int, origin: int, err: int, xid: int, piece: int) -> str:
    """The message of a failed read_slot (errno ``err``)."""
    import os

    return (f"reading {nbytes} bytes from rank {origin}'s buffer failed (errno {err}: "
            f"{os.strerror(err)}; transfer {xid}, piece {piece})")


#: the functions of the data plane that Python calls (kernels.aot exports them)
FUNCTIONS = ("read_remote", "ring", "ring_piece", "ring_many", "post", "post_read", "release",
             "read_slot", "find", "passing", "stuck", "drop", "any_want", "exec_pass",
             "take_back", "exec_run", "reduce_bytes", "divide_bytes")


def _bind():
    """Bind FUNCTIONS here: from the module built ahead of time, else from numba's
    compilation of transport/plane.py. Returns the module they come from."""
    from ..kernels import aot

    impl = aot.load()
    if impl is None:
        from . import plane as impl
    g = globals()
    for name in FUNCTIONS:
        g[name] = getattr(impl, name)
    return impl


def tables(*parts) -> np.ndarray:
    """The eight tables (in TABLES' order, int64, C-contiguous) as one ``tab``."""
    head = 2 * len(TABLES)
    tab = np.empty(head + sum(p.size for p in parts), np.int64)
    o = head
    for k, p in enumerate(parts):
        tab[2 * k], tab[2 * k + 1] = o, p.shape[0]
        tab[o:o + p.size] = p.reshape(-1)
        o += p.size
    return tab


def table_views(tab) -> tuple:
    """``tab``'s eight tables, as views of it (a write to one lands in ``tab``)."""
    out = []
    for k, cols in enumerate(TABLE_COLS):
        o, rows = int(tab[2 * k]), int(tab[2 * k + 1])
        out.append(tab[o:o + rows * max(cols, 1)].reshape((rows, cols) if cols else rows))
    return tuple(out)


def warm(impl=None) -> int:
    """Call every function of the data plane once, on a throwaway segment: numba
    compiles them (or loads them from its cache); returns how many functions that
    is. ``impl``: the module whose functions to call (transport.plane: numba's
    even when a module built ahead of time is bound here); None: the bound ones."""
    f = IMPL if impl is None else impl
    from .segment import Layout

    lay = Layout(2, 2, 2, 64)
    seg = np.zeros(lay.total, np.uint8)
    g = geometry(lay, 0, 0)
    gen = np.zeros(1, np.int64)
    charges = np.zeros(2, np.int64)
    head = np.zeros(8, np.int64)
    head[7] = 1
    f.post(seg, g, gen, 1, head, np.zeros(8, np.uint8), charges, 0, 2)
    f.find(seg, g, 0, 0, 0, 0)
    out = np.zeros(4, np.int64)
    f.passing(seg, g, out)
    f.stuck(seg, g, out)
    f.drop(seg, g, np.zeros(1, np.int64))
    f.any_want(seg, g)
    f.ring_many(seg, g, np.zeros(1, np.int64))
    f.release(seg, geometry(lay, 1, 1), 2 * 2 + 0)
    z = np.zeros((0, SEND_COLS), np.int64)
    r = np.zeros((0, RECV_COLS), np.int64)
    k = np.zeros(0, np.int64)
    b = np.zeros(8, np.uint8)
    steps = np.zeros((1, 3), np.int64)
    steps[0, 0] = 1
    locs = np.zeros((1, 6), np.int64)
    locs[0, 0] = 1  # a reduce of 0 bytes
    xs = np.zeros(6, np.int64)
    rounds = np.zeros((0, 4), np.int64)
    args = (seg, g, gen, tables(steps, rounds, z, charges, r, k, k, locs), xs,
            np.zeros(1, np.uint8), b, b, b, 0, 0, 0, np.zeros(2, np.int32),
            np.zeros((1, 16), np.int64), 0, 1, np.zeros(9, np.int64), 0, np.zeros(1, np.int64),
            np.zeros((1, 2), np.int64))
    f.exec_pass(*args)
    xs[:] = 0
    f.exec_run(*args, np.zeros(1, np.int32), -1)
    f.take_back(seg, g, steps, rounds, xs, args[5], args[-1])
    f.read_slot(seg, g, 0, b, 0, 0)
    f.read_remote(0, b, 0, 0, 0)  # engine._can_read_each_other's probe
    return 13 + warm_reductions(f)


def warm_reductions(impl=None) -> int:
    """Call reduce_bytes and divide_bytes once (the Python path's reductions, of
    pieces that came over MPI): numba compiles them or loads them from its cache now,
    not inside a rank's first call; from the module built ahead of time this costs
    nothing. Returns 2."""
    f = IMPL if impl is None else impl
    b = np.zeros(8, np.uint8)
    f.reduce_bytes(0, b, b.copy())
    f.divide_bytes(0, b, 1)
    return 2


def geometry(layout, me: int, me_world: int, pid: int = 0, spin: int = 0) -> np.ndarray:
    """The geometry vector; its "pull" entry (0: off) is set by the transport once
    the domain has agreed that its ranks can read each other's memory; "spin": how
    many times a compiled run yields the CPU and looks again before it sleeps."""
    return np.array([layout.L, layout.K, layout.S, layout.N, me, me_world, layout.ctl,
                     layout.state, layout.want, layout.hdr, layout.ledger, layout.data,
                     pid, 0, spin], np.int64)


IMPL = _bind()  # (last: transport/plane.py imports the names above)
