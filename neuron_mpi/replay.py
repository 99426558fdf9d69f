"""Replay a schedule in one process on NumPy arrays: the oracle for every algorithm
at any rank count. Same round semantics as the executor: sources are read at the
start of a round, deliveries applied in listed order."""
from __future__ import annotations

import numpy as np

from .schedule import IN, OUT, TMP, Locals, Round


def replay(schedule, inputs, op: str = "sum", dtype=None):
    """inputs: one flat array per member (``schedule.in_elems[g]`` elements).
    Returns the members' flat "out" buffers."""
    from .kernels import divide_into_ref, reduce_into_ref

    dtype = np.dtype(dtype if dtype is not None else inputs[0].dtype)
    n = schedule.size
    bufs = [{IN: np.ascontiguousarray(inputs[g], dtype).reshape(-1).copy(),
             OUT: np.zeros(schedule.out_elems[g], dtype),
             TMP: np.zeros(schedule.tmp_elems[g], dtype)} for g in range(n)]
    for g in range(n):
        bufs[g][IN].flags.writeable = False
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
                dst = bufs[lo.rank][lo.dst_buf][lo.dst_off:lo.dst_off + lo.count]
                if lo.kind == "copy":
                    dst[...] = bufs[lo.rank][lo.src_buf][lo.src_off:lo.src_off + lo.count]
                elif lo.kind == "reduce":
                    reduce_into_ref(dst, bufs[lo.rank][lo.src_buf][lo.src_off:lo.src_off + lo.count], op)
                elif lo.kind == "divide":
                    divide_into_ref(dst, lo.divisor)
                elif lo.kind == "zero":
                    dst[...] = np.zeros(1, dtype)[0]
                else:
                    raise AssertionError(lo.kind)
    return [b[OUT] for b in bufs]
