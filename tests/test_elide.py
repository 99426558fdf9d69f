"""executor.elide_leading_copies on hand-made schedules: each path of "reading the
input where it lies" (docs/architecture.md) against the plan-level oracle
(replay.replay_plans) and the plain schedule replay, and the shape it gives."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from neuron_mpi.executor import Plan
from neuron_mpi.replay import replay, replay_plans
from neuron_mpi.schedule import IN, OUT, TMP, Local, Locals, Round, Schedule, Xfer

N = 8  # elements of every member's input and output


def _sched(steps, tmp=0):
    return Schedule("toy", "toy", 2, [N, N], [N, N], [tmp, tmp], steps)


def _lead(*spans, buf=OUT):
    """A leading Locals step: both members copy IN[a:e] to ``buf`` at the same place
    (or at ``(src, dst, count)`` when a span has three numbers)."""
    ops = []
    for r in (0, 1):
        for sp in spans:
            s, d, c = sp if len(sp) == 3 else (sp[0], sp[0], sp[1] - sp[0])
            ops.append(Local(r, "copy", IN, s, c, buf, d))
    return Locals(ops)


def _run(sched, seeds=range(12)):
    """Replay the members' plans (pieces of 2 elements), elided and not, in many
    delivery orders; all must give what the schedule gives. Returns member 0's
    elided plan steps in whole transfers."""
    view = SimpleNamespace(ranks=[0, 1])
    rng = np.random.default_rng(7)
    inputs = [rng.integers(-50, 50, N).astype(np.int64) for _ in range(2)]
    want = replay(sched, inputs)
    for elide in (True, False):
        for seed in seeds:
            plans = [Plan(sched, view, g, 8, 16, elide=elide) for g in range(2)]
            got = replay_plans(plans, view, sched, inputs, "sum", seed)
            for g in range(2):
                np.testing.assert_array_equal(got[g], want[g], err_msg=f"elide {elide} seed {seed}")
    return Plan(sched, view, 0, 8, 1024).steps


def _copies(steps):
    return [(lo.src_buf, lo.src_off, lo.count, lo.dst_buf, lo.dst_off)
            for kind, st in steps if kind == "locals" for lo in st]


def _recvs(steps):
    return [r for kind, st in steps if kind == "round" for r in st.recvs]


def test_a_reduced_delivery_reads_the_input_and_nothing_is_copied():
    sched = _sched([_lead((0, N)),
                    Round([Xfer(1, 0, IN, 2, 4, OUT, 2, reduce=True),
                           Xfer(0, 1, IN, 2, 4, OUT, 2, reduce=True)])])
    steps = _run(sched)
    # OUT[2:6] comes from IN op piece; the rest of OUT still owes its copy at the end
    assert [r.base for r in _recvs(steps)] == [(IN, 2)]
    assert sorted(_copies(steps)) == [(IN, 0, 2, OUT, 0), (IN, 6, 2, OUT, 6)]


def test_a_send_of_an_owed_region_reads_the_input_at_its_shifted_place():
    # IN[0:4] is copied to TMP[4:8]; the send of TMP[4:8] reads IN[0:4] instead
    sched = _sched([_lead((0, 4, 4), buf=TMP),
                    Round([Xfer(0, 1, TMP, 4, 4, OUT, 0), Xfer(1, 0, TMP, 4, 4, OUT, 0)]),
                    Locals([Local(r, "copy", IN, 4, 4, OUT, 4) for r in (0, 1)])], tmp=N)
    steps = _run(sched)
    sends = [s for kind, st in steps if kind == "round" for s in st.sends]
    assert [(s.buf, s.off) for s in sends] == [(IN, 0)] * len(sends)
    assert _copies(steps) == [(IN, 4, 4, OUT, 4)]  # the later step's own; TMP owes nothing


def test_a_copied_delivery_overwrites_what_is_owed():
    sched = _sched([_lead((0, N)),
                    Round([Xfer(1, 0, IN, 0, N, OUT, 0), Xfer(0, 1, IN, 0, N, OUT, 0)])])
    steps = _run(sched)
    assert _copies(steps) == []
    assert all(r.base is None for r in _recvs(steps))


def test_a_delivery_straddling_two_owed_regions_gets_them_copied_first():
    # two owed regions with different shifts; OUT[2:6] holds parts of both
    sched = _sched([_lead((4, 0, 4), (0, 4, 4)),
                    Round([Xfer(1, 0, IN, 0, 4, OUT, 2, reduce=True),
                           Xfer(0, 1, IN, 0, 4, OUT, 2, reduce=True)])])
    steps = _run(sched)
    assert steps[0][0] == "locals"  # the copies come before the round
    assert sorted(_copies(steps[:1])) == [(IN, 0, 2, OUT, 4), (IN, 6, 2, OUT, 2)]
    assert all(r.base is None for r in _recvs(steps))
    assert sorted(_copies(steps[2:])) == [(IN, 2, 2, OUT, 6), (IN, 4, 2, OUT, 0)]


def test_overlapping_deliveries_of_one_round_get_the_copy_first():
    # two members' pieces into overlapping regions, applied in list order
    sched = Schedule("toy", "toy", 3, [N] * 3, [N] * 3, [0] * 3, [
        Locals([Local(r, "copy", IN, 0, N, OUT, 0) for r in range(3)]),
        Round([Xfer(1, 0, IN, 0, 4, OUT, 0, reduce=True), Xfer(2, 0, IN, 0, 4, OUT, 2, reduce=True),
               Xfer(0, 1, IN, 0, 4, OUT, 0, reduce=True), Xfer(0, 2, IN, 0, 4, OUT, 0, reduce=True)])])
    view = SimpleNamespace(ranks=[0, 1, 2])
    rng = np.random.default_rng(3)
    inputs = [rng.integers(-50, 50, N).astype(np.int64) for _ in range(3)]
    want = replay(sched, inputs)
    for seed in range(12):
        plans = [Plan(sched, view, g, 8, 16) for g in range(3)]
        got = replay_plans(plans, view, sched, inputs, "sum", seed)
        for g in range(3):
            np.testing.assert_array_equal(got[g], want[g])
    steps = Plan(sched, view, 0, 8, 1024).steps
    assert steps[0][0] == "locals" and sorted(_copies(steps[:1])) == [(IN, 0, 4, OUT, 0), (IN, 4, 2, OUT, 4)]
    assert all(r.base is None for r in _recvs(steps))


def test_a_later_local_step_gets_the_copy_of_what_it_touches():
    sched = _sched([_lead((0, N)),
                    Locals([Local(r, "reduce", IN, 0, 4, OUT, 4) for r in (0, 1)])])
    steps = _run(sched)
    assert _copies(steps[:1]) == [(IN, 4, 4, OUT, 4)]
    assert _copies(steps[2:]) == [(IN, 0, 4, OUT, 0)]


@pytest.mark.parametrize("lead", [
    Locals([Local(r, "copy", IN, 0, N, OUT, 0) for r in (0, 1)] +
           [Local(r, "copy", IN, 0, 4, OUT, 2) for r in (0, 1)]),  # overlapping copies
    Locals([Local(r, "reduce", IN, 0, N, OUT, 0) for r in (0, 1)]),  # not a copy
])
def test_leading_steps_it_cannot_read_in_place_are_kept(lead):
    sched = _sched([lead, Round([Xfer(1, 0, IN, 0, 4, OUT, 0, reduce=True)])])
    view = SimpleNamespace(ranks=[0, 1])
    assert _copies(Plan(sched, view, 0, 8, 1024).steps) == _copies(
        Plan(sched, view, 0, 8, 1024, elide=False).steps)


def test_local_bytes_benchmark_shows_the_copies_gone():
    """benchmarks/local_bytes.py at 8 ranks, 8 MiB: ring and rdh all-reduce copy
    nothing locally once the input is read in place; every row moves fewer bytes."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "local_bytes.py"
    out = subprocess.run([sys.executable, str(script), "-n", "8", "--bytes", "8MB"],
                         capture_output=True, text=True, check=True).stdout
    rows = {ln.split()[0]: [float(v) for v in ln.split()[1:3]]
            for ln in out.splitlines()[2:]}
    assert set(rows) >= {"all_reduce:ring", "all_reduce:rdh", "reduce_scatter:rdh"}
    assert rows["all_reduce:ring"] == [8.0, 0.0] and rows["all_reduce:rdh"] == [8.0, 0.0]
    assert rows["reduce_scatter:rdh"] == [9.0, 1.0]
    assert all(after < before for before, after in rows.values())


def test_region_overlap_is_any_pair_sharing_an_element():
    """executor._overlap (which rounds need ordered deliveries, which sends a
    delivery may overwrite, which owed copies a round needs first) against the
    pairwise definition, on random lists of regions of three buffers, empty ones
    included: a region [lo, hi) overlaps [lo2, hi2) of the same buffer when lo < hi2
    and lo2 < hi."""
    from neuron_mpi.executor import _overlap

    def pair(x, y):
        return x[0] == y[0] and x[1] < y[2] and y[1] < x[2]

    rng = np.random.default_rng(11)
    seen = set()
    for _ in range(3000):
        def regions():
            out = []
            for _ in range(int(rng.integers(0, 7))):
                lo = int(rng.integers(0, 12))
                out.append((("in", "out", "tmp")[int(rng.integers(0, 3))], lo,
                            lo + int(rng.integers(0, 4))))
            return out

        a, b = regions(), regions()
        want_same = any(pair(a[i], a[j]) for i in range(len(a)) for j in range(len(a))
                        if i != j)
        want = any(pair(x, y) for x in a for y in b)
        assert _overlap(a, a) == want_same, a
        assert _overlap(a, b) == want == _overlap(b, a), (a, b)
        seen.add((want_same, want))
    assert seen == {(False, False), (False, True), (True, False), (True, True)}
