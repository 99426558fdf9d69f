"""The bad-input and fault matrix: many cases in one MPI job, each on a fresh
communicator.

    mpiexec -n N python -m mpi4py tests/fault_programs/matrix.py OUT_DIR [CASE ...]

Every rank runs every case (or only the named ones) in order. A case gets a fresh
communicator over all ranks (``world.split([all ranks])``: a failed communicator
stays dead, the world stays healthy), runs one or a few calls and writes one JSON
line per rank to ``OUT_DIR/rank<R>.jsonl``:

    {"case", "rank", "error" (class name or null), "msg", "elapsed" (s, the observed
     call), "input_unchanged", "out_unchanged" (null without an out buffer),
     "result_ok" (null when the call raised), "first_error" (multi-call cases)}

and a last line {"case": "__done__"} once every case ran. Nothing here uses pickle.

``cases(n)`` lists the cases for a world of n ranks without starting MPI (the
pytest side, tests/test_faults.py, parametrizes on it). Each case states its
expectation:

    ok        every rank returns the right result
    mismatch  every rank raises CollectiveMismatchError naming ``field``
    rejected  rank ``offender`` raises InvalidArgumentError naming ``field``; every
              other rank raises InvalidArgumentError saying that rank rejected
    all_reject  every rank raises InvalidArgumentError naming ``field``
    local     only the offender raises (InvalidArgumentError naming ``field``); the
              others do nothing (point to point)
    failed    every rank raises CommunicatorFailedError (reuse of a failed one)
    timeout   ranks in ``waiting`` raise CollectiveTimeoutError after ~``timeout`` s
              whose text contains ``field``; the others succeed (or raise what
              ``other`` says)
"""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field as dfield
from typing import Callable

import ml_dtypes
import numpy as np

BF16 = np.dtype(ml_dtypes.bfloat16)
SHORT = 2.0   # seconds: the deadline of calls that are meant to time out
BAD_T = 5.0   # seconds: the deadline in the local-bad-input cases (a rank left waiting
              # by a rejection that is not passed on costs this much)
LONG = 60.0   # seconds: the deadline of calls that must not time out (a bug bound)
SLEEP_BELOW = 1.0   # a straggler that arrives well within LONG


@dataclass
class Case:
    name: str
    expect: str
    run: Callable
    field: str = ""            # what the error text must contain
    offender: int | None = None
    timeout: float = LONG
    waiting: tuple = ()        # "timeout": the ranks that must time out
    other: str | None = None   # "timeout": what the non-waiting ranks do: None (return
                               # the right result) or "ok_or_timeout"
    offender_field: str = ""   # what the offender's error text must contain, if other
    env: dict = dfield(default_factory=dict)  # set on every rank around the case
    note: str = ""


class Ctx:
    """Remembers every input (and out) buffer of a case to check it afterwards, and
    when the observed call began (``mark()``; default: the start of the case)."""

    def __init__(self):
        self.inputs: list = []
        self.outs: list = []
        self.first_error = None
        self.t_mark = None

    def mark(self):
        self.t_mark = time.monotonic()

    def inp(self, a):
        self.inputs.append((a, a.copy()))
        return a

    def out(self, a):
        self.outs.append((a, a.copy()))
        return a

    @staticmethod
    def _same(pairs):
        return all(a.dtype == b.dtype and a.shape == b.shape and
                   np.ascontiguousarray(a).view(np.uint8).tobytes() ==
                   np.ascontiguousarray(b).view(np.uint8).tobytes() for a, b in pairs)


# --- inputs and references ---------------------------------------------------------------
def data(rank, count, dtype=np.float32, salt=0):
    """Rank ``rank``'s input: small integers, exact in every dtype used here."""
    v = (np.arange(count, dtype=np.int64) * 3 + rank * 5 + salt) % 13 - 6
    return v.astype(np.float64).astype(dtype)


def rows_data(rank, rows, cols, dtype=np.float32, salt=0):
    return data(rank, rows * cols, dtype, salt).reshape(rows, cols)


def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return (a.dtype == b.dtype and a.shape == b.shape and
            np.ascontiguousarray(a).view(np.uint8).tobytes() ==
            np.ascontiguousarray(b).view(np.uint8).tobytes())


def ref_sum(n, count, dtype=np.float32, salt=0):
    acc = sum(data(q, count, np.float64, salt) for q in range(n))
    return np.asarray(acc, np.float64).astype(dtype)


# --- the cases -------------------------------------------------------------------------------
OPS4 = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


def _count_case(op, kind, k):
    """Rank k passes one element (one row per block) fewer/more than the others."""
    def run(c, ctx):
        n, r = c.size, c.rank
        delta = 0 if r != k else (-1 if kind == "short" else 1)
        if op in ("all_reduce", "all_gather"):
            x = ctx.inp(data(r, 8 + delta))
        else:  # reduce_scatter / all_to_all: rows must divide evenly, so blocks differ
            x = ctx.inp(rows_data(r, n * (2 + delta), 3))
        return getattr(c, op)(x, timeout=LONG), None
    return Case(f"count-{kind}-{op}-r{k}", "mismatch", run, field="count", offender=k)


def _call(name, c, x, **kw):
    return getattr(c, name)(x, timeout=kw.pop("timeout", LONG), **kw)


def cases(n: int) -> list[Case]:
    last = n - 1
    out: list[Case] = []

    # count mismatch, too short and too long, every rank taking its turn
    for op in OPS4:
        for kind in ("short", "long"):
            for k in range(n):
                out.append(_count_case(op, kind, k))

    # dtype mismatch with equal byte counts: fp32 x 8 against bf16 x 16
    for op in ("all_reduce", "all_gather", "broadcast"):
        for k in (0, last):
            def run(c, ctx, op=op, k=k):
                x = data(c.rank, 8)
                if c.rank == k:
                    x = data(c.rank, 8).view(BF16)  # the same 32 bytes
                return _call(op, c, ctx.inp(x)), None
            out.append(Case(f"dtype-fp32-vs-bf16-{op}-r{k}", "mismatch", run, field="dtype",
                            offender=k))

    def run(c, ctx):  # fp32 against int32: same count, same bytes, only the dtype differs
        x = data(c.rank, 8, np.int32 if c.rank == last else np.float32)
        return c.all_reduce(ctx.inp(x), timeout=LONG), None
    out.append(Case("dtype-fp32-vs-int32-all_reduce", "mismatch", run, field="dtype",
                    offender=last))

    # reduce-op mismatch
    for op in ("all_reduce", "reduce_scatter"):
        def run(c, ctx, op=op):
            x = ctx.inp(rows_data(c.rank, n, 2))
            return _call(op, c, x, op="max" if c.rank == last else "sum"), None
        out.append(Case(f"redop-{op}", "mismatch", run, field="reduce op", offender=last))

    # an async call: the mismatch is raised by wait() at the latest, before data moved
    def run(c, ctx):
        x = ctx.inp(data(c.rank, 9 if c.rank == last else 8))
        return c.all_reduce(x, async_op=True, timeout=LONG).wait(), None
    out.append(Case("count-async-all_reduce", "mismatch", run, field="count",
                    offender=last))

    # broadcast root mismatch
    def run(c, ctx):
        x = ctx.inp(data(c.rank, 8))
        return c.broadcast(x, root=1 if c.rank == last else 0, timeout=LONG), None
    out.append(Case("bcast-root", "mismatch", run, field="root", offender=last))

    # permute pairs that disagree between ranks (each list valid on its own)
    def run(c, ctx):
        x = ctx.inp(data(c.rank, 8))
        fwd = [(i, (i + 1) % n) for i in range(n)]
        back = [(i, (i - 1) % n) for i in range(n)]
        return c.permute(x, back if c.rank == last else fwd, timeout=LONG), None
    out.append(Case("permute-pairs-disagree", "mismatch", run, field="layout",
                    offender=last))

    # permute pairs that are not a permutation: on every rank, then on one rank
    def run(c, ctx):
        x = ctx.inp(data(c.rank, 8))
        return c.permute(x, [(0, 1), (2, 1)], timeout=LONG), None
    out.append(Case("permute-not-a-permutation-all", "all_reject", run, field="pairs"))

    def run(c, ctx):
        x = ctx.inp(data(c.rank, 8))
        pairs = [(0, 1), (1, 0), (0, 2)] if c.rank == last else [(0, 1), (1, 0)]
        return c.permute(x, pairs, timeout=LONG), None
    out.append(Case("permute-not-a-permutation-one", "rejected", run, field="pairs",
                    offender=last))

    # different collectives at the same sequence number
    for other in ("all_gather", "broadcast", "barrier"):
        def run(c, ctx, other=other):
            x = ctx.inp(data(c.rank, 8))
            if c.rank == last:
                return (c.barrier(timeout=LONG) if other == "barrier"
                        else _call(other, c, x)), None
            return c.all_reduce(x, timeout=LONG), None
        out.append(Case(f"different-op-all_reduce-vs-{other}", "mismatch", run,
                        field="operation", offender=last))

    def run(c, ctx):  # all_to_all_v against all_to_all: the former also gathers counts
        x = ctx.inp(rows_data(c.rank, n, 2))
        if c.rank == last:
            return c.all_to_all_v(x, [1] * n, [1] * n, timeout=BAD_T), None
        return c.all_to_all(x, timeout=BAD_T), None
    out.append(Case("different-op-all_to_all-vs-all_to_all_v", "mismatch", run,
                    field="operation", offender=last, timeout=BAD_T))

    # a forced algorithm on one rank only
    def run(c, ctx):
        x = ctx.inp(data(c.rank, 8))
        algo = "ring" if c.rank == last else "mesh"
        return c.all_reduce(x, algorithm=algo, timeout=LONG), None
    out.append(Case("algorithm-disagree", "mismatch", run, field="algorithm",
                    offender=last))

    # v-op counts that disagree between ranks
    def run(c, ctx):
        counts = [1] * n
        if c.rank == last:
            counts = [2] + [1] * (n - 2) + [0]
        x = ctx.inp(rows_data(c.rank, counts[c.rank], 2))
        return c.all_gather_v(x, counts, timeout=LONG), None
    out.append(Case("all_gather_v-counts-disagree", "mismatch", run, field="layout",
                    offender=last))

    def run(c, ctx):
        sc = [1] * n
        rc = [1] * n
        if c.rank == last:
            rc[0] = 2  # expects 2 rows from rank 0, which sends it 1
        x = ctx.inp(rows_data(c.rank, sum(sc), 2))
        return c.all_to_all_v(x, sc, rc, timeout=LONG), None
    out.append(Case("all_to_all_v-send-recv-disagree", "mismatch", run,
                    field="send_counts and recv_counts", offender=last))

    # trailing shape differs, element count equal (the digest covers shape[1:])
    def run(c, ctx):
        x = ctx.inp(rows_data(c.rank, 2, 3) if c.rank != last
                    else data(c.rank, 6).reshape(3, 2))
        return c.all_gather(x, timeout=LONG), None
    out.append(Case("all_gather-trailing-shape", "mismatch", run, field="layout",
                    offender=last, note="the row-shape digest is reported as layout"))

    # one rank skips a call
    def run(c, ctx):
        x = ctx.inp(data(c.rank, 8))
        if c.rank != last:
            c.all_reduce(x, timeout=LONG)
        ctx.mark()
        return c.all_gather(x, timeout=LONG), None
    out.append(Case("skip-then-other-op", "mismatch", run, field="operation",
                    offender=last, note="the skipper's next call meets the skipped one"))

    def run(c, ctx):
        x = ctx.inp(data(c.rank, 8))
        if c.rank != last:
            y = c.all_reduce(x, timeout=LONG)
            ctx.first_error = "ok" if same(y, ref_sum(n, 8)) else "WRONG"
        ctx.mark()
        y = c.all_reduce(x, timeout=SHORT)
        return y, same(y, ref_sum(n, 8))
    out.append(Case("skip-then-same-op", "timeout", run, field="no agreement",
                    offender=last, timeout=SHORT, waiting=tuple(range(last)),
                    note="the skipper's call pairs with the others' first; their second "
                         "waits for it"))

    def run(c, ctx):
        x = ctx.inp(data(c.rank, 8))
        if c.rank == last:
            return None, None
        y = c.all_reduce(x, timeout=SHORT)
        return y, same(y, ref_sum(n, 8))
    out.append(Case("skip-last-call", "timeout", run, field="no agreement", offender=last,
                    timeout=SHORT, waiting=tuple(range(last))))

    # local bad input on one rank
    def bad(name, fieldname, fn, offender=last, expect="rejected", note=""):
        def run(c, ctx):
            return fn(c, ctx, c.rank == offender), None
        out.append(Case(name, expect, run, field=fieldname, offender=offender, note=note,
                        timeout=BAD_T))

    bad("bad-negative-count-all_gather_v", "counts[0]",
        lambda c, ctx, me: c.all_gather_v(
            ctx.inp(rows_data(c.rank, 1, 2)),
            ([-1] if me else [1]) + [1] * (n - 1), timeout=BAD_T))
    bad("bad-negative-count-reduce_scatter_v", "counts[1]",
        lambda c, ctx, me: c.reduce_scatter_v(
            ctx.inp(rows_data(c.rank, n, 2)),
            ([2, -1] if me else [1, 1]) + [1] * (n - 2), timeout=BAD_T))
    bad("bad-negative-count-all_to_all_v", "send_counts[0]",
        lambda c, ctx, me: c.all_to_all_v(
            ctx.inp(rows_data(c.rank, n, 2)), ([-1, 2] if me else [1, 1]) + [1] * (n - 2),
            [1] * n, timeout=BAD_T))
    bad("bad-root-out-of-range", "root",
        lambda c, ctx, me: c.broadcast(ctx.inp(data(c.rank, 8)), root=n if me else 0,
                                       timeout=BAD_T))
    bad("bad-root-negative", "root",
        lambda c, ctx, me: c.broadcast(ctx.inp(data(c.rank, 8)), root=-1 if me else 0,
                                       timeout=BAD_T), offender=0)
    bad("bad-peer-out-of-range-permute", "pairs[0][1]",
        lambda c, ctx, me: c.permute(ctx.inp(data(c.rank, 8)),
                                     [(0, n)] if me else [(0, 1)], timeout=BAD_T))

    def ro_out(c, ctx, me):
        o = ctx.out(np.zeros(8, np.float32))
        if me:
            o.flags.writeable = False
        return c.all_reduce(ctx.inp(data(c.rank, 8)), out=o, timeout=BAD_T)
    bad("bad-read-only-out", "out", ro_out)

    def shape_out(c, ctx, me):
        o = ctx.out(np.zeros(9 if me else 8, np.float32))
        return c.all_reduce(ctx.inp(data(c.rank, 8)), out=o, timeout=BAD_T)
    bad("bad-wrong-shape-out", "out", shape_out)

    def dtype_out(c, ctx, me):
        o = ctx.out(np.zeros(8, np.float64 if me else np.float32))
        return c.all_reduce(ctx.inp(data(c.rank, 8)), out=o, timeout=BAD_T)
    bad("bad-wrong-dtype-out", "out", dtype_out, offender=0)

    bad("bad-unsupported-dtype", "unsupported dtype",
        lambda c, ctx, me: c.all_reduce(ctx.inp(
            np.ones(8, np.complex64) if me else data(c.rank, 8)), timeout=BAD_T))
    bad("bad-reduce-op-name", "op",
        lambda c, ctx, me: c.all_reduce(ctx.inp(data(c.rank, 8)), op="xor" if me else "sum",
                                        timeout=BAD_T))
    bad("bad-not-an-array", "x",
        lambda c, ctx, me: c.all_gather([1.0, 2.0] if me else ctx.inp(data(c.rank, 2)),
                                        timeout=BAD_T))
    bad("bad-indivisible-rows", "axis 0",
        lambda c, ctx, me: c.reduce_scatter(
            ctx.inp(rows_data(c.rank, n + (1 if me else 0), 2)), timeout=BAD_T))
    bad("bad-unknown-algorithm", "algorithm",
        lambda c, ctx, me: c.all_reduce(ctx.inp(data(c.rank, 8)),
                                        algorithm="bogus" if me else None, timeout=BAD_T))
    bad("bad-algorithm-not-applicable", "algorithm",
        lambda c, ctx, me: c.all_to_all(ctx.inp(rows_data(c.rank, n, 1)),
                                        algorithm="ring" if me else None, timeout=BAD_T))
    bad("bad-timeout-value", "timeout",
        lambda c, ctx, me: c.all_reduce(ctx.inp(data(c.rank, 8)),
                                        timeout="soon" if me else BAD_T),
        note="the others' deadline is BAD_T")

    def bad_group(c, ctx, me):
        # 3 ranks is not a group size trn2 accepts (strict mode); the others ask for
        # halves, which it does
        groups = [list(range(3))] if me else [list(range(n // 2)), list(range(n // 2, n))]
        return c.split(groups, timeout=BAD_T)
    bad("bad-split-group-not-allowed", "replica_groups", bad_group,
        note="UnsupportedGroupError on the offender")

    bad("bad-split-rank-out-of-range", "replica_groups",
        lambda c, ctx, me: c.split([list(range(n + 1))] if me else [list(range(n))],
                                   timeout=BAD_T))
    bad("bad-split-rank-twice", "more than one group",
        lambda c, ctx, me: c.split([[0, 1], [1, 2]] if me else [list(range(n))],
                                   timeout=BAD_T))

    # point to point: only the offender sees it (there is no agreement)
    bad("p2p-send-dst-out-of-range", "dst",
        lambda c, ctx, me: c.send(ctx.inp(data(c.rank, 4)), n, timeout=LONG) if me else None,
        expect="local")

    def read_only_out(receive):
        def run(c, ctx, me):
            if not me:
                return None
            o = np.zeros(4, np.float32)
            o.flags.writeable = False
            return receive(c, ctx, o)
        return run
    bad("p2p-recv-read-only-out", "out",
        read_only_out(lambda c, ctx, o: c.recv(o, 0, timeout=LONG)), expect="local")
    bad("p2p-sendrecv-src-out-of-range", "src",
        lambda c, ctx, me: c.sendrecv(ctx.inp(data(c.rank, 4)), 0, np.empty(4, np.float32), -1,
                                      timeout=LONG) if me else None,
        expect="local")
    bad("p2p-sendrecv-read-only-out", "out", read_only_out(
        lambda c, ctx, o: c.sendrecv(ctx.inp(data(c.rank, 4)), 0, o, 0, timeout=LONG)),
        expect="local")

    # reuse of a failed communicator
    def reuse(first):
        def run(c, ctx):
            x = ctx.inp(data(c.rank, 8))
            try:
                first(c, x)
                ctx.first_error = "none"
            except Exception as e:
                ctx.first_error = type(e).__name__
            ctx.mark()
            return c.all_reduce(x, timeout=SHORT), None
        return run

    out.append(Case("reuse-after-mismatch", "failed", reuse(
        lambda c, x: c.all_reduce(x[: 7 if c.rank == last else 8], timeout=LONG)),
        field="failed earlier", timeout=SHORT))
    out.append(Case("reuse-after-timeout", "failed", reuse(
        lambda c, x: (time.sleep(SHORT + 1.5) if c.rank == last else None,
                      c.all_reduce(x, timeout=SHORT))),
        field="failed earlier", timeout=SHORT))

    def run(c, ctx):  # split and p2p on a failed communicator refuse as well
        x = ctx.inp(data(c.rank, 8))
        try:
            c.all_reduce(x, op="max" if c.rank == last else "sum", timeout=LONG)
        except Exception as e:
            ctx.first_error = type(e).__name__
        errs = []
        for call in (lambda: c.split([list(range(n))], timeout=SHORT),
                     lambda: c.send(x, (c.rank + 1) % n, timeout=SHORT),
                     lambda: c.recv(np.empty(8, np.float32), (c.rank - 1) % n, timeout=SHORT),
                     lambda: c.sendrecv(x, (c.rank + 1) % n, np.empty(8, np.float32),
                                        (c.rank - 1) % n, timeout=SHORT),
                     lambda: c.barrier(timeout=SHORT)):
            try:
                call()
                errs.append("none")
            except Exception as e:
                errs.append(type(e).__name__)
        if set(errs) != {"CommunicatorFailedError"}:
            raise AssertionError(f"split/send/recv/sendrecv/barrier on a failed communicator: "
                                 f"{errs}")
        ctx.mark()
        return c.all_gather(x, timeout=SHORT), None
    out.append(Case("reuse-split-p2p-after-failure", "failed", run, field="failed earlier",
                    timeout=SHORT))

    def run(c, ctx):  # an async handle of a failed communicator
        x = ctx.inp(data(c.rank, 8))
        h = c.all_reduce(x, async_op=True, timeout=LONG)
        h.wait()
        try:
            c.broadcast(x, root=(1 if c.rank == last else 0), timeout=LONG)
        except Exception as e:
            ctx.first_error = type(e).__name__
        ctx.mark()
        return c.all_reduce(x, async_op=True, timeout=SHORT).wait(), None
    out.append(Case("reuse-async-after-failure", "failed", run, field="failed earlier",
                    timeout=SHORT))

    # a rank rejects its own arguments: is the communicator still usable afterwards?
    def run(c, ctx):
        x = ctx.inp(data(c.rank, 8))
        try:
            c.all_reduce(x, op="xor" if c.rank == last else "sum", timeout=LONG)
            ctx.first_error = "none"
        except Exception as e:
            ctx.first_error = type(e).__name__
        ctx.mark()
        y = c.all_reduce(x, timeout=SHORT)
        return y, ctx.first_error == "InvalidArgumentError" and same(y, ref_sum(n, 8))
    out.append(Case("reuse-after-rejected-argument", "ok", run, offender=last,
                    timeout=SHORT,
                    note="a rejected argument moves nothing and fails no communicator: "
                         "every rank can go on using it"))

    # stragglers
    def straggle(sleep, timeout):
        # the single-step mesh: one round, so every waiting rank waits for the
        # straggler itself (in a multi-step schedule such as the default two-step
        # mesh it names the peer that waits for the straggler), and the straggler
        # finds the others' data already posted
        def run(c, ctx):
            x = ctx.inp(data(c.rank, 64))
            if c.rank == last:
                time.sleep(sleep)
            ctx.mark()
            y = c.all_reduce(x, timeout=timeout, algorithm="mesh1")
            return y, same(y, ref_sum(n, 64))
        return run
    out.append(Case("straggler-below-timeout", "ok", straggle(SLEEP_BELOW, 30.0),
                    offender=last, timeout=30.0))
    out.append(Case("straggler-above-timeout", "timeout", straggle(SHORT + 1.5, SHORT),
                    field="no agreement", offender=last, timeout=SHORT,
                    offender_field=" at step ",
                    waiting=tuple(range(n)), note="the straggler itself then times out "
                    "waiting for data the others no longer send"))
    out.append(Case("straggler-above-timeout-nocheck", "timeout",
                    straggle(SHORT + 1.5, SHORT), field=f"waiting for data from rank {last}",
                    offender=last, timeout=SHORT, waiting=tuple(range(last)),
                    other="ok_or_timeout", env={"NEURON_MPI_CHECK": "0"},
                    note="without the agreement the waiting ranks name the step, the "
                         "straggler and the link; the straggler completes"))

    # edge sizes and uneven v counts: must succeed with the right result
    def ok(name, fn):
        out.append(Case(name, "ok", fn))

    for cnt in (0, 1):
        for dt in (np.float32, BF16):
            tag = f"{cnt}-{np.dtype(dt).name}"

            def run(c, ctx, cnt=cnt, dt=dt):
                y = c.all_reduce(ctx.inp(data(c.rank, cnt, dt)), timeout=LONG)
                return y, same(y, ref_sum(n, cnt, dt))
            ok(f"edge-all_reduce-count-{tag}", run)

        def run(c, ctx, cnt=cnt):
            y = c.all_gather(ctx.inp(data(c.rank, cnt)), timeout=LONG)
            return y, same(y, np.concatenate([data(q, cnt) for q in range(n)]))
        ok(f"edge-all_gather-count-{cnt}", run)

        def run(c, ctx, cnt=cnt):
            x = ctx.inp(rows_data(c.rank, n * cnt, 2))
            y = c.reduce_scatter(x, timeout=LONG)
            full = sum(rows_data(q, n * cnt, 2, np.float64) for q in range(n))
            want = np.asarray(full, np.float64).astype(np.float32)[c.rank * cnt:(c.rank + 1) * cnt]
            return y, same(y, want)
        ok(f"edge-reduce_scatter-rows-{cnt}-per-rank", run)

        def run(c, ctx, cnt=cnt):
            y = c.all_to_all(ctx.inp(rows_data(c.rank, n * cnt, 2)), timeout=LONG)
            want = np.concatenate([rows_data(q, n * cnt, 2)[c.rank * cnt:(c.rank + 1) * cnt]
                                   for q in range(n)])
            return y, same(y, want)
        ok(f"edge-all_to_all-rows-{cnt}-per-rank", run)

        def run(c, ctx, cnt=cnt):
            y = c.broadcast(ctx.inp(data(c.rank, cnt)), root=last, timeout=LONG)
            return y, same(y, data(last, cnt))
        ok(f"edge-broadcast-count-{cnt}", run)

        def run(c, ctx, cnt=cnt):
            pairs = [(i, (i + 1) % n) for i in range(n)]
            y = c.permute(ctx.inp(data(c.rank, cnt)), pairs, timeout=LONG)
            return y, same(y, data((c.rank - 1) % n, cnt))
        ok(f"edge-permute-count-{cnt}", run)

    def run(c, ctx):
        y = c.permute(ctx.inp(data(c.rank, 5)), [], timeout=LONG)
        return y, same(y, np.zeros(5, np.float32))
    ok("edge-permute-no-pairs", run)

    uneven = [(3 * i + 1) % 4 for i in range(n)]  # includes 0, sum not divisible by n
    uneven[0] = 0

    def run(c, ctx):
        y = c.all_gather_v(ctx.inp(rows_data(c.rank, uneven[c.rank], 3)), uneven,
                           timeout=LONG)
        return y, same(y, np.concatenate([rows_data(q, uneven[q], 3) for q in range(n)]))
    ok("edge-all_gather_v-uneven", run)

    def run(c, ctx):
        total = sum(uneven)
        y = c.reduce_scatter_v(ctx.inp(rows_data(c.rank, total, 3)), uneven, timeout=LONG)
        full = np.asarray(sum(rows_data(q, total, 3, np.float64) for q in range(n)))
        off = sum(uneven[:c.rank])
        return y, same(y, full.astype(np.float32)[off:off + uneven[c.rank]])
    ok("edge-reduce_scatter_v-uneven", run)

    def mat(i, j):
        return (i * 7 + j * 3) % 4 if (i + j) % 3 else 0

    def run(c, ctx):
        me = c.rank
        sc = [mat(me, j) for j in range(n)]
        rc = [mat(i, me) for i in range(n)]
        x = ctx.inp(rows_data(me, sum(sc), 2, salt=1))
        y = c.all_to_all_v(x, sc, rc, timeout=LONG)
        parts = []
        for i in range(n):
            xi = rows_data(i, sum(mat(i, j) for j in range(n)), 2, salt=1)
            off = sum(mat(i, j) for j in range(me))
            parts.append(xi[off:off + mat(i, me)])
        return y, same(y, np.concatenate(parts))
    ok("edge-all_to_all_v-uneven", run)

    def run(c, ctx):
        x = ctx.inp(data(c.rank, 16))
        hs = [c.all_reduce(x, async_op=True, timeout=LONG),
              c.all_gather(x, async_op=True, timeout=LONG)]
        g = hs[1].wait()
        y = hs[0].wait()
        return y, same(y, ref_sum(n, 16)) and same(
            g, np.concatenate([data(q, 16) for q in range(n)]))
    ok("async-two-in-flight", run)

    def run(c, ctx):  # three before any wait: the board's two parities turn over
        x = ctx.inp(data(c.rank, 16))
        hs = [c.all_reduce(x, async_op=True, timeout=LONG) for _ in range(3)]
        ys = [h.wait() for h in reversed(hs)]
        return ys[0], all(same(y, ref_sum(n, 16)) for y in ys)
    ok("async-three-in-flight", run)

    def run(c, ctx):  # a blocking call while an async one may still be agreeing
        x = ctx.inp(data(c.rank, 16))
        if c.rank == last:
            time.sleep(0.3)
        h = c.all_reduce(x, async_op=True, timeout=LONG)
        g = c.all_gather(x, timeout=LONG)
        y = h.wait()
        return y, same(y, ref_sum(n, 16)) and same(
            g, np.concatenate([data(q, 16) for q in range(n)]))
    ok("async-then-blocking-straggler", run)

    def run(c, ctx):
        c.barrier(timeout=LONG)
        return None, True
    ok("barrier", run)

    return out


# --- running ---------------------------------------------------------------------------------
def run_case(world, case: Case, log) -> None:
    n = world.size
    comm = world.split([list(range(n))], timeout=LONG + 30)
    old = {k: os.environ.get(k) for k in case.env}
    os.environ.update(case.env)
    ctx = Ctx()
    t0 = time.monotonic()
    err = None
    result = ok = None
    try:
        result, ok = case.run(comm, ctx)
    except Exception as e:  # noqa: BLE001 - every error is a finding here
        err = e
    elapsed = time.monotonic() - (ctx.t_mark or t0)
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    rec = {
        "case": case.name, "rank": world.rank,
        "error": None if err is None else type(err).__name__,
        "error_mro": [] if err is None else [k.__name__ for k in type(err).__mro__],
        "msg": "" if err is None else str(err)[:1500],
        "elapsed": round(elapsed, 3),
        "input_unchanged": Ctx._same(ctx.inputs),
        "out_unchanged": Ctx._same(ctx.outs) if ctx.outs else None,
        "result_ok": ok if err is None else None,
        "returned": err is None and result is not None,
        "first_error": ctx.first_error,
        "cause": None if err is None or err.__cause__ is None
        else type(err.__cause__).__name__,
    }
    log.write(json.dumps(rec) + "\n")
    log.flush()


def main(argv) -> int:
    import neuron_mpi as nm

    out_dir = argv[1]
    only = set(argv[2:])
    world = nm.init()
    os.makedirs(out_dir, exist_ok=True)
    todo = [c for c in cases(world.size) if not only or c.name in only]
    t0 = time.monotonic()
    with open(os.path.join(out_dir, f"rank{world.rank}.jsonl"), "w") as log:
        for case in todo:
            run_case(world, case, log)
        world.barrier(timeout=LONG + 30)
        log.write(json.dumps({"case": "__done__", "rank": world.rank,
                              "cases": len(todo),
                              "wall": round(time.monotonic() - t0, 2)}) + "\n")
    if world.rank == 0:
        print(f"matrix: {len(todo)} cases on {world.size} ranks in "
              f"{time.monotonic() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
