"""Determinism and rounding of the reductions.

Without MPI (replay of each algorithm's schedule in one process, as the executor
runs it): every member of an all-reduce gets the same bits, a replay repeated gives
the same bits, data movement keeps every bit (NaN payloads included), max/min are
exact, and a sum in bf16 / fp16 / fp8 stays within a stated bound of the float64
sum of the same inputs.

The bound, per algorithm and group: every reduce step rounds once (both operands
widened to float32, added, rounded back to nearest even), so an output element that
went through ``D`` reduce steps on its longest path (``D`` = the schedule's
reduction depth, computed below from the schedule itself: n - 1 for a ring, fewer
for trees such as rdh) is off the exact sum by at most ``D * u * sum|x_i|``, u the
unit roundoff; we assert ``|got - exact| <= D * ulp(sum|x_i|)`` elementwise
(ulp(s) >= u*s, so this is the classical recursive-summation bound in units of the
last place of the sum of magnitudes).

With MPI (one launch, 8 ranks): tests/fault_programs/determinism.py runs every
algorithm on random (rounding) inputs three times, all-gathers the raw bytes of each
result with neuron_mpi, and checks they are the same on every rank, in every repeat,
and equal to the replay of the same schedule.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import neuron_mpi as nm
from neuron_mpi.algorithms.group import GroupView
from neuron_mpi.algorithms.select import _APPLIES, choose, schedule_for
from neuron_mpi.errors import AlgorithmError
from neuron_mpi.replay import replay
from neuron_mpi.schedule import IN, OUT, TMP, Locals, Round

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
MPIEXEC = str(Path(sys.executable).parent / "mpiexec")

WORLDS = {
    "trn2-8": ("trn2.48xlarge", 2, None, 8),         # 2 chips: ring, mesh, chip, rdh
    "trn2-12": ("trn2.48xlarge", 2, None, 12),       # 3 chips: no Hamiltonian cycle
    "trn2-64": ("trn2.48xlarge", 2, None, 64),       # full torus: two rings
    "trn1-2nodes-64": ("trn1.32xlarge", 1, 2, 64),   # hierarchical over EFA
    "inf2-24": ("inf2.48xlarge", 1, None, 24),
}
SMALL = {
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "fp16": np.dtype(np.float16),
    "fp8_e4m3": np.dtype(ml_dtypes.float8_e4m3fn),
    "fp8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "fp32": np.dtype(np.float32),
}
REDUCING = ("all_reduce", "reduce_scatter")


def _view(world):
    inst, lnc, nodes, ranks = WORLDS[world]
    topo = nm.topology(inst, lnc, nodes, ranks=ranks)
    return GroupView(topo, range(topo.size))


def _algorithms(view, op):
    out = []
    for algo in _APPLIES[op]:
        try:
            out.append(choose(op, view, algo))
        except AlgorithmError:
            pass
    return sorted(set(out))


def _sizes(op, n):
    return 3 * n + 5 if op == "all_reduce" else (5,) * n


def _schedule(view, op, algo):
    return schedule_for(view, op, algo, _sizes(op, view.size), False, None)


def reduction_depth(sched) -> int:
    """The most reduce steps any output element went through (replay of depths)."""
    bufs = [{IN: np.zeros(sched.in_elems[g], np.int64),
             OUT: np.zeros(sched.out_elems[g], np.int64),
             TMP: np.zeros(sched.tmp_elems[g], np.int64)} for g in range(sched.size)]
    for step in sched.steps:
        if isinstance(step, Round):
            data = [bufs[x.src][x.src_buf][x.src_off:x.src_off + x.count].copy()
                    for x in step.xfers]
            for x, d in zip(step.xfers, data):
                dst = bufs[x.dst][x.dst_buf][x.dst_off:x.dst_off + x.count]
                dst[...] = np.maximum(dst, d) + 1 if x.reduce else d
        elif isinstance(step, Locals):
            for lo in step.ops:
                dst = bufs[lo.rank][lo.dst_buf][lo.dst_off:lo.dst_off + lo.count]
                if lo.kind in ("copy", "reduce"):
                    src = bufs[lo.rank][lo.src_buf][lo.src_off:lo.src_off + lo.count].copy()
                    dst[...] = np.maximum(dst, src) + 1 if lo.kind == "reduce" else src
                elif lo.kind == "zero":
                    dst[...] = 0
    return int(max((b[OUT].max() for b in bufs if b[OUT].size), default=0))


def ulp(s: np.ndarray, dtype) -> np.ndarray:
    """The unit in the last place of |s| in ``dtype`` (subnormal spacing below the
    smallest normal)."""
    fi = ml_dtypes.finfo(dtype)
    s = np.maximum(np.abs(s), float(fi.smallest_normal))
    return float(fi.eps) * np.exp2(np.floor(np.log2(s)))


def _inputs(sched, dtype, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(sched.in_elems[g]).astype(dtype) for g in range(sched.size)]


def _exact(op, inputs, n):
    """float64 sum (exact for these few small-precision terms) and sum of |x|."""
    wide = np.stack([x.astype(np.float64) for x in inputs])
    s, a = wide.sum(0), np.abs(wide).sum(0)
    if op == "all_reduce":
        return [s] * n, [a] * n
    b = len(s) // n
    return ([s[g * b:(g + 1) * b] for g in range(n)], [a[g * b:(g + 1) * b] for g in range(n)])


def _cases():
    for world in WORLDS:
        view = _view(world)
        for op in REDUCING:
            for algo in _algorithms(view, op):
                yield pytest.param(world, op, algo, id=f"{world}-{op}-{algo}")


# (world, op, algorithm, dtype) -> (depth bound, largest error seen) in ulp(sum|x|)
OBSERVED: dict = {}


@pytest.mark.parametrize("world,op,algo", list(_cases()))
def test_sum_within_depth_ulps_of_float64(world, op, algo):
    view = _view(world)
    n = view.size
    sched = _schedule(view, op, algo)
    depth = reduction_depth(sched)
    assert 1 <= depth <= n - 1, f"{algo}: reduction depth {depth} for {n} members"
    for name, dt in SMALL.items():
        worst = 0.0
        for seed in range(3):
            xs = _inputs(sched, dt, seed)
            outs = replay(sched, xs, "sum", dt)
            again = replay(sched, xs, "sum", dt)
            exact, mags = _exact(op, xs, n)
            for g in range(n):
                assert outs[g].tobytes() == again[g].tobytes(), f"{name}: replay not repeatable"
                got = outs[g].astype(np.float64)
                assert np.isfinite(got).all(), f"{name} member {g}: overflow"
                err = np.abs(got - exact[g]) / ulp(mags[g], dt)
                worst = max(worst, float(err.max(initial=0.0)))
                assert (err <= depth).all(), (
                    f"{world} {op} {algo} {name} member {g}: error {err.max():.2f} ulp of "
                    f"sum|x| exceeds the depth bound {depth}")
            if op == "all_reduce":
                first = outs[0].tobytes()
                assert all(o.tobytes() == first for o in outs), \
                    f"{name}: members of one all-reduce got different bits"
        OBSERVED[(world, op, algo, name)] = (depth, round(worst, 3))
        if os.environ.get("NEURON_MPI_SHOW_ULPS"):  # the figures in docs/reliability.md
            print(f"\nULPS {world} {op} {algo} {name} depth {depth} max {worst:.3f}")


@pytest.mark.parametrize("world", list(WORLDS))
@pytest.mark.parametrize("reduce_op", ["max", "min"])
def test_max_min_are_exact(world, reduce_op):
    view = _view(world)
    n = view.size
    for op in REDUCING:
        for algo in _algorithms(view, op):
            sched = _schedule(view, op, algo)
            for name, dt in SMALL.items():
                xs = _inputs(sched, dt, 7)
                outs = replay(sched, xs, reduce_op, dt)
                wide = np.stack([x.astype(np.float64) for x in xs])
                want = wide.max(0) if reduce_op == "max" else wide.min(0)
                b = len(want) // n
                for g in range(n):
                    w = want if op == "all_reduce" else want[g * b:(g + 1) * b]
                    assert outs[g].tobytes() == w.astype(dt).tobytes(), \
                        f"{world} {op} {algo} {name} {reduce_op} member {g}"


@pytest.mark.parametrize("world", list(WORLDS))
def test_data_movement_keeps_every_bit(world):
    """All-gather, broadcast, all-to-all, permute: raw bit patterns, NaNs and
    negative zeros included, arrive unchanged."""
    view = _view(world)
    n = view.size
    rng = np.random.default_rng(3)
    for op in ("all_gather", "broadcast", "all_to_all", "permute"):
        for algo in _algorithms(view, op):
            if op == "all_gather":
                sizes, extra = (6,) * n, None
            elif op == "all_to_all":
                sizes, extra = tuple((2,) * n for _ in range(n)), None
            elif op == "permute":
                sizes, extra = 6, tuple((i, (i + 3) % n) for i in range(n))
            else:
                sizes, extra = 6, n - 1
            sched = schedule_for(view, op, algo, sizes, False, extra)
            for dt in (SMALL["bf16"], SMALL["fp8_e4m3"]):
                ints = np.uint16 if dt.itemsize == 2 else np.uint8
                xs = [rng.integers(0, np.iinfo(ints).max + 1, sched.in_elems[g]).astype(ints)
                      .view(dt) for g in range(n)]
                outs = replay(sched, xs, "sum", dt)
                for g in range(n):
                    if op == "all_gather":
                        want = np.concatenate(xs)
                    elif op == "broadcast":
                        want = xs[n - 1]
                    elif op == "permute":
                        want = xs[(g - 3) % n]
                    else:
                        want = np.concatenate([x[2 * g:2 * g + 2] for x in xs])
                    assert outs[g].tobytes() == want.tobytes(), f"{world} {op} {algo} {g}"


def test_depth_of_known_algorithms():
    """The bound is not vacuous: a ring reduces n - 1 times, a tree log2(n) times."""
    view = _view("trn2-8")
    assert reduction_depth(_schedule(view, "all_reduce", "ring")) == 7
    if "rdh" in _algorithms(view, "all_reduce"):
        assert reduction_depth(_schedule(view, "all_reduce", "rdh")) <= 7


# --- under MPI ---------------------------------------------------------------------------
def _env():
    env = dict(os.environ)
    env.setdefault("NUMBA_CACHE_DIR", "/tmp/numba_cache_dev")
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               PRTE_MCA_rmaps_default_mapping_policy=":oversubscribe")
    for k in ("NEURON_MPI_INSTANCE", "NEURON_LOGICAL_NC_CONFIG", "NEURON_MPI_NODES",
              "NEURON_MPI_ALGO", "NEURON_MPI_CHECK", "NEURON_MPI_TIMEOUT"):
        env.pop(k, None)
    return env


def test_mpi_every_rank_and_run_same_bits_as_replay():
    prog = ROOT / "tests" / "fault_programs" / "determinism.py"
    res = subprocess.run([MPIEXEC, "-n", "8", PY, "-m", "mpi4py", str(prog)],
                         capture_output=True, text=True, env=_env(), timeout=300, cwd=ROOT)
    recs = [json.loads(ln[3:]) for ln in res.stdout.splitlines() if ln.startswith("@@ ")]
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    summary = [r["summary"] for r in recs if "summary" in r]
    assert summary and summary[0]["failed"] == 0 and summary[0]["ranks"] == 8
    cases = [r for r in recs if "op" in r]
    algos = {(r["op"], r["algorithm"]) for r in cases}
    # every algorithm that applies on 8 ranks of trn2 (2 chips) took part
    view = GroupView(nm.topology("trn2.48xlarge", 2, None, ranks=8), range(8))
    for op in ("all_reduce", "reduce_scatter", "all_gather"):
        for algo in _algorithms(view, op):
            assert (op, algo) in algos, f"{op}/{algo} not run"
    assert all(r["same_runs"] and r["same_as_replay"] and r["same_across_ranks"]
               for r in cases), [r for r in cases if not r["same_as_replay"]]
