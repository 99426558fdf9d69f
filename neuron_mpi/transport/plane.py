"""The data plane's functions as numba compiles them (no GIL): transport.native
binds them when no module built ahead of time (kernels.aot) matches this source.

Everything a piece needs on its way through a landing slot happens here, in one
call per batch instead of a dozen NumPy calls per piece: find a free slot, write
header and payload, publish, ring the receiver, charge the ledger; scan this rank's
incoming slots for the pieces of a round, copy the ones delivered by copy straight
into their destination, hand back the ones to reduce; free slots and ring a waiting
sender. Waking a sleeper is a futex syscall issued from compiled code (x86-64).

The segment is passed as one uint8 array plus a geometry vector ``g`` (offsets and
sizes, see GEOMETRY); compiled code makes its typed views itself.

Everything here is compiled without numba's runtime (PLANE_OPTIONS, ``_nrt=False``;
numba passes the flag on to the kernels it calls): no function allocates, arrays
from Python arrive with no meminfo, and nothing is reference-counted. With the
runtime, every array handed in, sliced or viewed was counted up and down with
atomic instructions, most of a small call's compiled CPU at 8 ranks on 2 cores.
The cost of going without: scratch arrays live on the stack (``_stack_i64``), the
helpers that return views of the segment are inlined (``inline="always"``: a
function compiled without the runtime may return only an array it was passed),
and slice assignments that may copy their source are written as loops.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.arrayobj import populate_array

from ..kernels.atomic_ops import _cmpxchg, _fetch_add, _load, _store  # noqa: F401
from ..kernels.bytes import copy_bytes, divide_bytes, reduce_bytes
from ..kernels.llvm_ops import JIT_OPTIONS
from .native import (  # noqa: F401  (the data plane's layout and statuses)
    SUPPORTED, GEOMETRY, G_L, G_K, G_S, G_N, G_ME, G_MEW, G_CTL, G_STATE, G_WANT, G_HDR, G_LEDGER,
    G_DATA, G_PID, G_PULL, G_SPIN, HDR_WORDS, H_ADDR, H_PID, KEY_SHIFT, SEND_COLS,
    RECV_COLS, CTL_ANY, CTL_COUNTING, CTL_WAKE_AT, DONE, BLOCKED, FP_FIELDS, PYTHON, SIZE,
    TIMEOUT, MISMATCH, YIELDED, FAULT, STUCK_GRACE_NS)

PLANE_OPTIONS = dict(JIT_OPTIONS, _nrt=False)  # see the module's docstring

if SUPPORTED:
    # compiling the inline "syscall" needs LLVM's assembly parser, which numba
    # does not set up itself
    from llvmlite import binding as _llvm

    _llvm.initialize_native_asmparser()


# x86-64 system call registers: the number in rax, the arguments in this order
_SYSCALL_REGS = ("rdi", "rsi", "rdx", "r10", "r8", "r9")


def _syscall(args):
    """The typing result of a raw x86-64 system call intrinsic with ``args`` (the
    number, then the arguments): all int64, the result in rax; None if any is
    not an integer."""
    if not all(isinstance(a, types.Integer) for a in args):
        return None
    n = len(args)
    regs = ",".join("{%s}" % r for r in _SYSCALL_REGS[:n - 1])
    constraints = "={rax},{rax}," + regs + ",~{rcx},~{r11},~{memory}"

    def codegen(context, builder, signature, vals):
        i64 = ir.IntType(64)
        vals = [context.cast(builder, v, t, types.int64) for v, t in zip(vals, signature.args)]
        asm = ir.InlineAsm(ir.FunctionType(i64, [i64] * n), "syscall", constraints,
                           side_effect=True)
        return builder.call(asm, vals)

    return types.int64(*([types.int64] * n)), codegen


@intrinsic
def _syscall3(typingctx, nr, a1, a2, a3):
    """A raw x86-64 system call with three arguments."""
    return _syscall((nr, a1, a2, a3))


@intrinsic
def _syscall4(typingctx, nr, a1, a2, a3, a4):
    """A raw x86-64 system call with four arguments (the fourth in r10)."""
    return _syscall((nr, a1, a2, a3, a4))


@intrinsic
def _syscall6(typingctx, nr, a1, a2, a3, a4, a5, a6):
    """A raw x86-64 system call with six arguments (r10, r8, r9 after rdx)."""
    return _syscall((nr, a1, a2, a3, a4, a5, a6))


@intrinsic
def _stack_i64(typingctx, n):
    """A C-contiguous int64 array of ``n`` (a constant) elements on the calling
    function's stack, with no meminfo: scratch space that costs no allocation,
    for code compiled without NRT (PLANE_OPTIONS). Valid until that function
    returns; never return it or keep it."""
    if not isinstance(n, types.IntegerLiteral):
        return None
    count = n.literal_value
    aryty = types.Array(types.int64, 1, "C")
    sig = aryty(n)

    def codegen(context, builder, signature, args):
        data = cgutils.alloca_once(builder, ir.IntType(64), size=count)
        ary = context.make_array(aryty)(context, builder)
        intp = context.get_value_type(types.intp)
        populate_array(ary, data=data, shape=[ir.Constant(intp, count)],
                       strides=[ir.Constant(intp, 8)], itemsize=ir.Constant(intp, 8),
                       meminfo=None)
        return ary._getvalue()

    return sig, codegen


@njit(**PLANE_OPTIONS)
def read_remote(pid, dst, off, addr, n):
    """Copy n bytes at ``addr`` in process ``pid`` into dst[off:off + n]
    (process_vm_readv, one copy); 0 or the errno."""
    iov = _stack_i64(4)
    done = 0
    while done < n:
        iov[0] = dst.ctypes.data + off + done
        iov[1] = n - done
        iov[2] = addr + done
        iov[3] = n - done
        got = _syscall6(310, pid, iov.ctypes.data, 1, iov.ctypes.data + 16, 1, 0)
        if got <= 0:
            return -got if got < 0 else 5  # EIO: nothing moved
        done += got
    return 0


@njit(inline="always", **PLANE_OPTIONS)
def _ctl(seg, g):
    o = g[G_CTL]
    return seg[o:o + g[G_L] * 64].view(np.int32)


@njit(inline="always", **PLANE_OPTIONS)
def _state(seg, g):
    o = g[G_STATE]
    return seg[o:o + g[G_L] * g[G_L] * g[G_K] * 8].view(np.int64)


@njit(inline="always", **PLANE_OPTIONS)
def _want(seg, g):
    o = g[G_WANT]
    return seg[o:o + g[G_L] * g[G_L] * 4].view(np.int32)


@njit(inline="always", **PLANE_OPTIONS)
def _hdr(seg, g):
    o = g[G_HDR]
    return seg[o:o + g[G_L] * g[G_L] * g[G_K] * HDR_WORDS * 8].view(np.int64)


@njit(inline="always", **PLANE_OPTIONS)
def _ledger(seg, g):
    o = g[G_LEDGER]
    return seg[o:o + g[G_L] * g[G_N] * 16].view(np.int64)




@njit(**PLANE_OPTIONS)
def ring(seg, g, local, word):
    """Add one to a rank's word (0: doorbell, 2: agent) and wake every sleeper."""
    ctl = _ctl(seg, g)
    i = local * 16 + word
    _fetch_add(ctl, i, 1)
    if _load(ctl, i + CTL_ANY) > 0 or _load(ctl, i + CTL_COUNTING) > 0:
        _syscall3(202, ctl.ctypes.data + 4 * i, 1, 0x7FFFFFFF)  # futex(FUTEX_WAKE)


@njit(**PLANE_OPTIONS)
def _reached(v, target):
    """v at or past target, on int32 words that wrap."""
    return ((v - target) & 0xFFFFFFFF) < 0x80000000


@njit(**PLANE_OPTIONS)
def ring_piece(seg, g, local):
    """Ring a rank's doorbell for a piece just delivered to it. A compiled run
    asleep on it counting pieces is woken only once the doorbell reaches the value
    it waits for (one wake-up per round, not one per piece); sleepers that wake on
    any ring are woken at once."""
    ctl = _ctl(seg, g)
    i = local * 16
    v = _fetch_add(ctl, i, 1) + 1
    if _load(ctl, i + CTL_ANY) > 0 or (_load(ctl, i + CTL_COUNTING) > 0 and
                                       _reached(v, _load(ctl, i + CTL_WAKE_AT))):
        _syscall3(202, ctl.ctypes.data + 4 * i, 1, 0x7FFFFFFF)  # futex(FUTEX_WAKE)


@njit(**PLANE_OPTIONS)
def ring_many(seg, g, locals_):
    """Ring the doorbells of these ranks (local indices)."""
    for i in range(locals_.size):
        ring(seg, g, locals_[i], 0)


@njit(**PLANE_OPTIONS)
def _free_slot(state, base, K):
    for k in range(K):
        if _load(state, base + k) == 0:
            return base + k
    return -1


@njit(**PLANE_OPTIONS)
def _claim(seg, g, dst):
    """A free slot of channel me -> dst, or -1 (the sender's want flag raised, the
    receiver rung)."""
    L, K, me = g[G_L], g[G_K], g[G_ME]
    state = _state(seg, g)
    base = (dst * L + me) * K
    slot = _free_slot(state, base, K)
    if slot < 0:
        want = _want(seg, g)
        _store(want, dst * L + me, 1)
        slot = _free_slot(state, base, K)
        if slot < 0:
            ring(seg, g, dst, 0)
            ring(seg, g, dst, 2)
    return slot


@njit(**PLANE_OPTIONS)
def _publish(seg, g, gen, dst, slot, n, charges, c_lo, c_hi):
    gen[0] += 1
    _store(_state(seg, g), slot, gen[0])
    ring_piece(seg, g, dst)
    if c_hi > c_lo:
        led = _ledger(seg, g)
        for j in range(c_lo, c_hi, 2):
            _fetch_add(led, charges[j], n)
            _fetch_add(led, charges[j + 1], 1)


@njit(**PLANE_OPTIONS)
def post(seg, g, gen, dst, head, payload, charges, c_lo, c_hi):
    """Copy one piece into a free slot of channel me -> dst (local index) and
    publish it; charge ledger indices charges[c_lo:c_hi] (pairs: bytes, messages).
    False (and the sender's want flag raised, the receiver rung) if no slot is free."""
    slot = _claim(seg, g, dst)
    if slot < 0:
        return False
    n = payload.size
    hdr = _hdr(seg, g)
    h = slot * HDR_WORDS
    for j in range(8):
        hdr[h + j] = head[j]
    hdr[h + H_ADDR] = 0
    copy_bytes(seg, g[G_DATA] + slot * g[G_S], payload, 0, n)
    _publish(seg, g, gen, dst, slot, n, charges, c_lo, c_hi)
    return True


@njit(**PLANE_OPTIONS)
def post_read(seg, g, gen, dst, head, src, off, n, charges, c_lo, c_hi):
    """Publish one piece that stays in the sender's buffer (src[off:off + n]): the
    slot carries only its header, the address and this process's pid; the receiver
    copies it straight into its destination (read_remote) and frees the slot, which
    rings this rank. The slot, or -1 as ``post``'s False."""
    slot = _claim(seg, g, dst)
    if slot < 0:
        return -1
    hdr = _hdr(seg, g)
    h = slot * HDR_WORDS
    for j in range(8):
        hdr[h + j] = head[j]
    hdr[h + H_ADDR] = src.ctypes.data + off
    hdr[h + H_PID] = g[G_PID]
    _publish(seg, g, gen, dst, slot, n, charges, c_lo, c_hi)
    return slot


@njit(**PLANE_OPTIONS)
def release(seg, g, slot):
    """Free one of this rank's incoming slots; ring its sender if it waits, or
    (a piece read from the sender's buffer) count the read on its doorbell."""
    L, K, me = g[G_L], g[G_K], g[G_ME]
    read = _hdr(seg, g)[slot * HDR_WORDS + H_ADDR] != 0
    _store(_state(seg, g), slot, 0)
    src = (slot - me * L * K) // K
    want = _want(seg, g)
    if want[me * L + src] != 0:
        _store(want, me * L + src, 0)
        ring(seg, g, src, 0)
    elif read:
        ring_piece(seg, g, src)


@njit(inline="always", **PLANE_OPTIONS)
def _start_read(state, slot):
    """Mark the read of the piece in ``slot`` under way (its generation negated);
    False when its sender took it back (nothing to read)."""
    v = _load(state, slot)
    return v > 0 and _cmpxchg(state, slot, v, -v) == v


@njit(**PLANE_OPTIONS)
def read_slot(seg, g, slot, dst, off, n):
    """The payload of a piece left in its sender's memory, read into dst[off:off +
    n] (one copy), and the slot freed; 0, -1 (the sender took it back: nothing
    read, nothing freed) or the errno. A read under way shows as the negated
    generation, so the sender's take_back waits for it."""
    hdr = _hdr(seg, g)
    h = slot * HDR_WORDS
    if not _start_read(_state(seg, g), slot):
        return -1
    err = read_remote(hdr[h + H_PID], dst, off, hdr[h + H_ADDR], n)
    release(seg, g, slot)
    return err


PULL_BLOCK = 65536  # bytes: a block of a reduced piece read from its sender, then reduced


@njit(**PLANE_OPTIONS)
def read_slot_reduce(seg, g, slot, code, dst, off, base, boff, n):
    """A reduced piece left in its sender's memory, reduced into dst[off:off + n]
    (``base`` not None: dst = base[boff:boff + n] op piece, executor.Recv.base) and
    its slot freed: read block by block into this thread's stack, each block
    reduced while it is in cache (one copy of the piece out of DRAM, where through a
    slot it is written there and read back). Returns as read_slot; a failed read
    leaves dst part reduced (the call fails: dst is never the caller's input)."""
    hdr = _hdr(seg, g)
    h = slot * HDR_WORDS
    if not _start_read(_state(seg, g), slot):
        return -1
    tmp = _stack_i64(8192).view(np.uint8)  # PULL_BLOCK bytes
    pid, addr = hdr[h + H_PID], hdr[h + H_ADDR]
    err = 0
    i = 0
    while i < n:
        m = min(PULL_BLOCK, n - i)
        err = read_remote(pid, tmp, 0, addr + i, m)
        if err != 0:
            break
        if base is not None:
            _reduce_onto(code, dst, off + i, base, boff + i, tmp, 0, m)
        else:
            reduce_bytes(code, dst[off + i:off + i + m], tmp[:m])
        i += m
    release(seg, g, slot)
    return err


@njit(inline="always", **PLANE_OPTIONS)
def _incoming(seg, g):
    """This rank's incoming slots: (state, hdr, the first slot, how many)."""
    L, K, me = g[G_L], g[G_K], g[G_ME]
    return _state(seg, g), _hdr(seg, g), me * L * K, L * K


@njit(**PLANE_OPTIONS)
def find(seg, g, comm, seq, xid, piece):
    """The incoming slot holding piece (comm, seq, xid, piece) for this rank, or -1."""
    state, hdr, base, m = _incoming(seg, g)
    for slot in range(base, base + m):
        if state[slot] == 0:
            continue
        h = slot * HDR_WORDS
        if (hdr[h] == comm and hdr[h + 1] == seq and hdr[h + 2] == xid
                and hdr[h + 3] == piece and hdr[h + 7] == g[G_MEW]):
            _load(state, slot)  # acquire: the header was read after the state
            return slot
    return -1


@njit(**PLANE_OPTIONS)
def passing(seg, g, out):
    """Incoming slots holding pieces addressed to another rank (to forward), into
    ``out``; returns how many."""
    state, hdr, base, m = _incoming(seg, g)
    n = 0
    for slot in range(base, base + m):
        if state[slot] != 0 and hdr[slot * HDR_WORDS + 7] != g[G_MEW] and n < out.size:
            out[n] = slot
            n += 1
    return n


@njit(**PLANE_OPTIONS)
def drop(seg, g, dead):
    """Free this rank's incoming slots holding pieces for it of the communicators in
    ``dead`` (ids, sorted): failed here, never to be taken. A piece left in its
    sender's memory is claimed first (as a read) so its sender sees it done; one
    its sender took back is left alone. Returns how many were freed."""
    state, hdr, base, m = _incoming(seg, g)
    n = 0
    for slot in range(base, base + m):
        if _load(state, slot) <= 0:  # free, or a read under way
            continue
        h = slot * HDR_WORDS
        if hdr[h + 7] != g[G_MEW]:
            continue
        i = np.searchsorted(dead, hdr[h])
        if i >= dead.size or dead[i] != hdr[h]:
            continue
        if hdr[h + H_ADDR] != 0 and not _start_read(state, slot):
            continue
        release(seg, g, slot)
        n += 1
    return n


@njit(**PLANE_OPTIONS)
def stuck(seg, g, out):
    """Slots of channels whose sender waits for room while all K slots are full:
    the caller copies them aside. Returns how many were written to ``out``."""
    return _stuck(seg, g, out, 0, 0)


@njit(**PLANE_OPTIONS)
def _stuck(seg, g, out, comm, seq):
    """stuck(), leaving out the channels whose K pieces all belong to this rank's
    collective call (comm, seq) (seq > 0; 0: none is left out): the run of that
    call takes them itself in a later round, and holding them never blocks it (a
    rank of the lowest round of a schedule always progresses: whoever it waits for
    has sent, or is in that round too), so copying them aside only costs."""
    L, K, me, mew = g[G_L], g[G_K], g[G_ME], g[G_MEW]
    state = _state(seg, g)
    want = _want(seg, g)
    hdr = _hdr(seg, g)
    n = 0
    for s in range(L):
        if want[me * L + s] == 0:
            continue
        base = (me * L + s) * K
        full = 0
        ours = 0
        for k in range(K):
            if _load(state, base + k) != 0:
                full += 1
                h = (base + k) * HDR_WORDS
                if seq > 0 and hdr[h] == comm and hdr[h + 1] == seq and hdr[h + 7] == mew:
                    ours += 1
        if full == K and ours < K:
            for k in range(K):
                if n < out.size:
                    out[n] = base + k
                    n += 1
    return n


@njit(**PLANE_OPTIONS)
def any_want(seg, g):
    L, me = g[G_L], g[G_ME]
    want = _want(seg, g)
    for s in range(L):
        if want[me * L + s] != 0:
            return True
    return False




@njit(**PLANE_OPTIONS)
def _agreement(seg, g, xs, counter, table, member, size, fp, target, bells):
    """The argument agreement on the communicator's board (see segment.Board): xs[3]
    1 = publish this rank's fingerprint, 2 = wait for every member. The last member
    to arrive wakes the counter's sleepers and rings every member's doorbell
    (``bells``: their local indices). Returns DONE (every row's first FP_FIELDS
    words equal ours, and the words past them sum to 0 over the members), BLOCKED
    or MISMATCH (the caller reads the table)."""
    if xs[3] == 1:
        w = fp.size
        for f in range(table.shape[1]):
            table[member, f] = fp[f] if f < w else 0
        old = _fetch_add(counter, 0, 1)
        if old + 1 == target:
            if _load(counter, 1) > 0:  # the Python path's sleepers (segment.Board)
                _syscall3(202, counter.ctypes.data, 1, 0x7FFFFFFF)  # futex(FUTEX_WAKE)
            ring_many(seg, g, bells)
        xs[3] = 2
    if _load(counter, 0) - target < 0:
        return BLOCKED
    nf = min(fp.size, FP_FIELDS)
    for m in range(size):
        for f in range(nf):
            if table[m, f] != fp[f]:
                return MISMATCH
    for f in range(nf, fp.size):  # shares (all-to-all-v's counts): a sum that wraps
        total = np.uint64(0)
        for m in range(size):
            total += np.uint64(table[m, f])
        if total != 0:
            return MISMATCH
    xs[3] = 0
    return DONE


@njit(inline="always", **PLANE_OPTIONS)
def _buf(b, b0, b1, b2):
    return b0 if b == 0 else (b1 if b == 1 else b2)


ONTO_BLOCK = 16384  # bytes: a block copied, then reduced while still in cache


@njit(**PLANE_OPTIONS)
def _reduce_onto(code, dst, off, base, boff, seg, d, n):
    """dst[off:off + n] = base[boff:boff + n] op seg[d:d + n], block by block, so
    that each block is reduced while the copy just made of it is in cache: the
    memory traffic of one three-operand pass, with the two-operand kernels."""
    i = 0
    while i < n:
        m = min(ONTO_BLOCK, n - i)
        copy_bytes(dst, off + i, base, boff + i, m)
        reduce_bytes(code, dst[off + i:off + i + m], seg[d + i:d + i + m])
        i += m


@njit(**PLANE_OPTIONS)
def _locals(locs, lo, hi, b0, b1, b2, code):
    """One locals step (executor.NativePlan's rows: kind, source buffer and offset,
    destination buffer and offset, bytes; a divide's source offset is its divisor)."""
    for j in range(lo, hi):
        kind, sb, so, db, do, n = (locs[j, 0], locs[j, 1], locs[j, 2], locs[j, 3],
                                   locs[j, 4], locs[j, 5])
        if kind == 0:
            copy_bytes(_buf(db, b0, b1, b2), do, _buf(sb, b0, b1, b2), so, n)
        elif kind == 1:
            reduce_bytes(code, _buf(db, b0, b1, b2)[do:do + n], _buf(sb, b0, b1, b2)[so:so + n])
        elif kind == 2:
            divide_bytes(code, _buf(db, b0, b1, b2)[do:do + n], so)
        else:
            _buf(db, b0, b1, b2)[do:do + n] = 0


@njit(inline="always", **PLANE_OPTIONS)
def _table(tab, k, cols):
    """Table ``k`` of a plan's ``tab`` (native.tables), a view."""
    o, rows = tab[2 * k], tab[2 * k + 1]
    return tab[o:o + rows * cols].reshape((rows, cols))


@njit(inline="always", **PLANE_OPTIONS)
def _vector(tab, k):
    o = tab[2 * k]
    return tab[o:o + tab[2 * k + 1]]


@njit(**PLANE_OPTIONS)
def exec_pass(seg, g, gen, tab, xs, flags, b0, b1, b2, comm, seq, code, counter, table,
              member, size, fp, target, bells, pend):
    """Advance an execution as far as the agreement, the arrived pieces and free
    slots allow. Returns (status, moved): DONE; BLOCKED (waiting for members,
    pieces, slots or reads of its buffers); SIZE (a piece of the wrong size, or of a transfer of
    the wrong size, xs[4] bytes, came for recv xs[2]);
    MISMATCH (the members' fingerprints differ: nothing moved); FAULT (reading recv
    xs[2]'s piece from its sender failed, errno xs[4]).

    A piece of at least g[G_PULL] bytes (0: never) whose receiver is its final
    destination is not copied into the slot: the receiver reads it from this rank's
    buffer (one copy instead of two; a reduced piece block by block, each reduced
    while in cache), and the send is done when it has (flags 2 until then)."""
    steps, rounds, sends = _table(tab, 0, 3), _table(tab, 1, 4), _table(tab, 2, SEND_COLS)
    charges, recvs, keys = _vector(tab, 3), _table(tab, 4, RECV_COLS), _vector(tab, 5)
    order, locs = _vector(tab, 6), _table(tab, 7, 6)
    moved = False
    if xs[3] != 0:
        a = _agreement(seg, g, xs, counter, table, member, size, fp, target, bells)
        if a != DONE:
            xs[4] = 1
            return a, False
        moved = True
    head = _stack_i64(8)
    head[0] = comm
    head[1] = seq
    head[6] = g[G_MEW]
    L, K, me, mew, pull = g[G_L], g[G_K], g[G_ME], g[G_MEW], g[G_PULL]
    state = _state(seg, g)
    hdr = _hdr(seg, g)
    while xs[0] < steps.shape[0]:
        kind, lo, hi = steps[xs[0], 0], steps[xs[0], 1], steps[xs[0], 2]
        if kind == 1:
            _locals(locs, lo, hi, b0, b1, b2, code)
            xs[0] += 1
            moved = True
            continue
        s_lo, s_hi, r_lo, r_hi = rounds[lo, 0], rounds[lo, 1], rounds[lo, 2], rounds[lo, 3]
        ns = s_hi - s_lo
        nr = r_hi - r_lo
        if xs[1] == 0:
            flags[:ns + nr] = 0
            xs[1] = 1
        unsent = 0
        unread = 0
        for i in range(ns):
            f = flags[i]
            if f == 1:
                continue
            if f == 2:
                v = _load(state, pend[i, 0])
                if v == pend[i, 1] or v == -pend[i, 1]:
                    unread += 1
                else:
                    flags[i] = 1
                    moved = True
                continue
            row = s_lo + i
            buf = _buf(sends[row, 2], b0, b1, b2)
            off = sends[row, 3]
            n = sends[row, 4]
            head[2] = sends[row, 5]
            head[3] = sends[row, 6]
            head[4] = n
            head[5] = sends[row, 7]
            head[7] = sends[row, 1]
            if pull > 0 and n >= pull and sends[row, 10] != 0:
                slot = post_read(seg, g, gen, sends[row, 0], head, buf, off, n, charges,
                                 sends[row, 8], sends[row, 9])
                if slot >= 0:
                    flags[i] = 2
                    pend[i, 0] = slot
                    pend[i, 1] = gen[0]
                    moved = True
                    unread += 1
                else:
                    unsent += 1
            elif post(seg, g, gen, sends[row, 0], head, buf[off:off + n], charges,
                      sends[row, 8], sends[row, 9]):
                flags[i] = 1
                moved = True
            else:
                unsent += 1
        missing = 0
        for i in range(nr):
            if flags[ns + i] == 0:
                missing += 1
        if missing:
            rkeys = keys[r_lo:r_hi]
            base = me * L * K
            for j in range(L * K):
                slot = base + j
                if state[slot] == 0:
                    continue
                h = slot * HDR_WORDS
                if hdr[h] != comm or hdr[h + 1] != seq or hdr[h + 7] != mew:
                    continue
                _load(state, slot)  # acquire: the header was read after the state
                key = (hdr[h + 2] << KEY_SHIFT) | hdr[h + 3]
                pos = np.searchsorted(rkeys, key)
                if pos >= nr or rkeys[pos] != key:
                    continue
                row = order[r_lo + pos]
                i = row - r_lo
                if flags[ns + i] != 0:
                    continue
                n = recvs[row, 2]
                if hdr[h + 4] != n or hdr[h + 5] != recvs[row, 6]:
                    xs[2] = row
                    xs[4] = hdr[h + 5]  # the size the sender sent
                    return SIZE, moved
                dst = _buf(recvs[row, 0], b0, b1, b2)
                off = recvs[row, 1]
                if hdr[h + H_ADDR] != 0:  # still in the sender's buffer: read it
                    if recvs[row, 5] == 0:
                        err = read_slot(seg, g, slot, dst, off, n)  # (frees the slot)
                    elif recvs[row, 7] >= 0:
                        err = read_slot_reduce(seg, g, slot, code, dst, off,
                                               _buf(recvs[row, 7], b0, b1, b2),
                                               recvs[row, 8], n)
                    else:
                        err = read_slot_reduce(seg, g, slot, code, dst, off, None, 0, n)
                    if err < 0:
                        continue  # taken back by its sender (failed)
                    if err != 0:
                        xs[2] = row
                        xs[4] = err
                        return FAULT, moved
                else:
                    d = g[G_DATA] + slot * g[G_S]
                    if recvs[row, 5]:
                        if recvs[row, 7] >= 0:  # destination = input op piece
                            _reduce_onto(code, dst, off, _buf(recvs[row, 7], b0, b1, b2),
                                         recvs[row, 8], seg, d, n)
                        else:
                            reduce_bytes(code, dst[off:off + n], seg[d:d + n])
                    else:
                        copy_bytes(dst, off, seg, d, n)
                    release(seg, g, slot)
                flags[ns + i] = 1
                moved = True
                missing -= 1
                if missing == 0:
                    break
        if unsent or missing or unread:
            xs[4] = missing + unread  # the rings this rank still waits for
            return BLOCKED, moved
        xs[0] += 1
        xs[1] = 0
        moved = True
    return DONE, moved


@njit(**PLANE_OPTIONS)
def take_back(seg, g, steps, rounds, xs, flags, pend):
    """A failed execution takes back the pieces its receivers have not read from
    its buffers yet (frees their slots), waiting out a read under way; returns how
    many it took back."""
    if xs[0] >= steps.shape[0] or steps[xs[0], 0] != 0 or xs[1] == 0:
        return 0
    lo = steps[xs[0], 1]
    ns = rounds[lo, 1] - rounds[lo, 0]
    state = _state(seg, g)
    n = 0
    for i in range(ns):
        if flags[i] != 2:
            continue
        slot, v = pend[i, 0], pend[i, 1]
        if _cmpxchg(state, slot, v, 0) == v:
            n += 1
        else:
            while _load(state, slot) == -v:
                _syscall3(24, 0, 0, 0)  # sched_yield: the receiver is reading it
        flags[i] = 0
    return n


@njit(**PLANE_OPTIONS)
def _now_ns(ts):
    _syscall3(228, 1, ts.ctypes.data, 0)  # clock_gettime(CLOCK_MONOTONIC)
    return ts[0] * 1000000000 + ts[1]


@njit(**PLANE_OPTIONS)
def exec_run(seg, g, gen, tab, xs, flags, b0, b1, b2, comm, seq, code, counter, table, member,
             size, fp, target, bells, pend, claim, deadline_ns):
    """Run an execution to its end on this thread (the GIL released), sleeping on
    this rank's doorbell while it waits (for pieces, for room, or for the members of
    the agreement: the last of them rings every member). Returns DONE, TIMEOUT (CLOCK_MONOTONIC
    passed ``deadline_ns``; < 0: none), SIZE, PYTHON: the caller must step in (a
    sender waits for room that only copying pieces aside can give), or
    YIELDED: ``claim[0]`` became non-zero (another thread of this process wants the
    engine: it raises the word, then rings the doorbell) while the run was blocked,
    or exec_pass's FAULT. Before it sleeps it yields the CPU (sched_yield) and looks
    at the doorbell again, up to g[G_SPIN] times since it last moved anything: a ring
    that comes meanwhile costs neither the ringer's futex wake nor this thread's
    sleep and wake-up."""
    ctl = _ctl(seg, g)
    bi = g[G_ME] * 16
    ts = _stack_i64(2)
    scratch = _stack_i64(1)  # stuck()'s: only whether any is
    graced_at = np.int64(-1)  # when a channel was first found stuck, nothing moved since
    left = np.int64(0)
    spins = 0
    while True:
        seen = _load(ctl, bi)
        status, moved = exec_pass(seg, g, gen, tab, xs, flags, b0, b1, b2, comm, seq, code,
                                  counter, table, member, size, fp, target, bells, pend)
        if status != BLOCKED:
            return status
        if _load(claim, 0) != 0:
            return YIELDED
        if moved:
            graced_at = np.int64(-1)
            spins = 0
            continue
        while spins < g[G_SPIN] and _load(ctl, bi) == seen and _load(claim, 0) == 0:
            spins += 1
            _syscall3(24, 0, 0, 0)  # sched_yield
        if _load(ctl, bi) != seen or _load(claim, 0) != 0:
            continue
        grace = False
        if xs[3] == 0 and _stuck(seg, g, scratch, comm, seq) > 0:
            # a full channel this run cannot empty (pieces of a later call, or of
            # another execution): wait STUCK_GRACE_NS for this run to move first, as
            # the call holding them up usually ends soon; still stuck when it is over,
            # with nothing moved (rings meanwhile that moved nothing do not cut it
            # short): the caller copies them aside
            now = _now_ns(ts)
            if graced_at < 0:
                graced_at = now
            elif now - graced_at >= STUCK_GRACE_NS:
                return PYTHON
            grace = True
            left = STUCK_GRACE_NS - (now - graced_at)
        wait = np.int64(-1)  # (typed alike by the JIT and by numba.pycc)
        if deadline_ns >= 0:
            wait = deadline_ns - _now_ns(ts)
            if wait <= 0:
                return TIMEOUT
        if grace and (wait < 0 or wait > left):
            wait = left
        if wait >= 0:
            ts[0] = wait // 1000000000
            ts[1] = wait % 1000000000
        tsp = np.int64(0)
        if wait >= 0:
            tsp = np.int64(ts.ctypes.data)
        # sleep until the pieces still missing have rung (or any forced ring: room,
        # the agreement, a claim); a ring since ``seen`` returns at once
        _store(ctl, bi + CTL_WAKE_AT, seen + (1 if xs[5] != 0 else max(xs[4], 1)))
        _fetch_add(ctl, bi + CTL_COUNTING, 1)
        _syscall4(202, ctl.ctypes.data + 4 * bi, 0, seen, tsp)
        _fetch_add(ctl, bi + CTL_COUNTING, -1)

