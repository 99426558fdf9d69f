"""Replay a schedule in one process on NumPy arrays: the oracle for every algorithm
at any rank count. Same round semantics as the executor: sources are read at the
start of a round, deliveries applied in listed order."""
from __future__ import annotations

import numpy as np

from .schedule import IN, OUT, TMP, Locals, Round


def replay(schedule, inputs, op: str = "sum", dtype=None):
    """inputs: one flat array per member (``schedule.in_elems[g]`` elements).
    Returns the members' flat "out" buffers."""
    from .kernels import reduce_into_ref

    dtype = np.dtype(dtype if dtype is not None else inputs[0].dtype)
    bufs = _buffers(inputs, dtype, schedule.out_elems, schedule.tmp_elems)
    for step in schedule.steps:
        if isinstance(step, Round):
            data = [bufs[x.src][x.src_buf][x.src_off:x.src_off + x.count].copy()
                    for x in step.xfers]
            for x, d in zip(step.xfers, data):
                dst = bufs[x.dst][x.dst_buf][x.dst_off:x.dst_off + x.count]
                if x.reduce:
                    reduce_into_ref(dst, d, op)
                else:
                    dst[...] = d
        elif isinstance(step, Locals):
            for lo in step.ops:
                _local(bufs[lo.rank], lo, op)
    return [b[OUT] for b in bufs]


def _buffers(inputs, dtype, out_elems, tmp_elems) -> list:
    """Each member's in (a read-only copy of its input), out and tmp."""
    bufs = [{IN: np.ascontiguousarray(inputs[g], dtype).reshape(-1).copy(),
             OUT: np.zeros(out_elems[g], dtype), TMP: np.zeros(tmp_elems[g], dtype)}
            for g in range(len(inputs))]
    for b in bufs:
        b[IN].flags.writeable = False
    return bufs


def _local(b, lo, op) -> None:
    """Apply one member's local step ``lo`` to its buffers ``b``."""
    from .kernels import divide_into_ref, reduce_into_ref

    dst = b[lo.dst_buf][lo.dst_off:lo.dst_off + lo.count]
    if lo.kind == "copy":
        dst[...] = b[lo.src_buf][lo.src_off:lo.src_off + lo.count]
    elif lo.kind == "reduce":
        reduce_into_ref(dst, b[lo.src_buf][lo.src_off:lo.src_off + lo.count], op)
    elif lo.kind == "divide":
        divide_into_ref(dst, lo.divisor)
    elif lo.kind == "zero":
        dst[...] = np.zeros(1, dst.dtype)[0]
    else:
        raise AssertionError(lo.kind)


def replay_plans(plans, view, schedule, inputs, op: str = "sum", seed: int = 0):
    """Replay members' executor Plans (one per member, in member order) in one
    process, each member advancing on its own as the executor does: a round's
    sends are read when the member starts the round; its deliveries are applied as
    they arrive, in a random order (in listed order where they overlap each other),
    and members take turns in a random order. The oracle for what a Plan does to a
    schedule (piece cutting, executor.elide_leading_copies). Returns the members'
    flat "out" buffers."""
    from .kernels import reduce_into_ref

    rng = np.random.default_rng(seed)
    n = len(plans)
    member = {r: g for g, r in enumerate(view.ranks)}
    bufs = _buffers(inputs, np.dtype(inputs[0].dtype), schedule.out_elems,
                    [p.tmp_elems for p in plans])
    box: dict = {}
    pos, missing = [0] * n, [None] * n

    def region(g, buf, off, count):
        return bufs[g][buf][off:off + count]

    def advance(g) -> bool:
        steps = plans[g].steps
        moved = False
        while pos[g] < len(steps):
            kind, st = steps[pos[g]]
            if kind == "locals":
                for lo in st:
                    _local(bufs[g], lo, op)
                pos[g] += 1
                moved = True
                continue
            if missing[g] is None:
                for s in st.sends:
                    box[(g, member[s.dst], s.xid, s.piece)] = region(g, s.buf, s.off, s.count).copy()
                missing[g] = list(range(len(st.recvs)))
                if not st.ordered:
                    rng.shuffle(missing[g])
                moved = True
            still = []
            for i in missing[g]:
                r = st.recvs[i]
                key = (member[r.src], g, r.xid, r.piece)
                if key not in box or (still and st.ordered):
                    still.append(i)
                    continue
                data = box.pop(key)
                dst = region(g, r.buf, r.off, r.count)
                if r.reduce:
                    if r.base is not None:
                        dst[...] = region(g, r.base[0], r.base[1], r.count)
                    reduce_into_ref(dst, data, op)
                else:
                    dst[...] = data
                moved = True
            missing[g] = still
            if still:
                return moved
            missing[g] = None
            pos[g] += 1
        return moved

    while any(pos[g] < len(plans[g].steps) for g in range(n)):
        if not any([advance(g) for g in rng.permutation(n)]):
            raise RuntimeError("replay_plans: no member can advance (the plans deadlock)")
    return [b[OUT] for b in bufs]
