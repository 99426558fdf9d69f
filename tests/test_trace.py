"""Timelines (docs/trace.md): the trace-event checker, the modeled run's timeline
(no MPI), and traced MPI runs merged by ``neuron-mpi trace`` (8 ranks with
``neuron_mpi.trace(DIR)``, 4 ranks with NEURON_MPI_TRACE): valid trace-event JSON,
slices that nest, flows that pair up, a flow per transfer and, per rank and call,
as many step slices as the rank's plan of the schedule has steps. The program also
shows that with tracing off no call reaches the recorder
(tests/mpi_programs/trace_program.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import neuron_mpi as nm
from neuron_mpi import timeline as tl
from neuron_mpi.algorithms.group import GroupView
from neuron_mpi.algorithms.select import schedule_for
from neuron_mpi.cli import main as cli_main
from neuron_mpi.executor import Plan
from neuron_mpi.model import predict
from neuron_mpi.model.cli import main as model_main

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "tests" / "mpi_programs" / "trace_program.py"
LAUNCHER = Path(sys.executable).parent / "neuron-mpirun"
ENV = ("NEURON_MPI_INSTANCE", "NEURON_LOGICAL_NC_CONFIG", "NEURON_MPI_NODES",
       "NEURON_MPI_ALGO", "NEURON_MPI_TRACE", "NEURON_MPI_TRANSPORT")


def _x(name, ts, dur, tid=1, cat="call"):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 1, "tid": tid}


def _flow(ph, fid, ts, tid=1):
    e = {"ph": ph, "name": "n", "cat": "transfer", "id": fid, "ts": ts, "pid": 1, "tid": tid}
    if ph == "f":
        e["bp"] = "e"
    return e


# --- the checker ---------------------------------------------------------------------
def test_check_accepts_a_valid_document():
    doc = {"traceEvents": [tl.metadata(1, None, "process_name", "p"),
                           _x("call", 0, 10), _x("step", 1, 3, cat="step"),
                           _x("step", 4, 6, cat="step"), _x("call", 0, 10, tid=2),
                           _x("step", 2, 5, tid=2, cat="step"),
                           _flow("s", 1, 2), _flow("f", 1, 6, tid=2)]}
    assert tl.check(doc) == []
    counts = tl.step_counts(doc)
    assert sorted(counts.values()) == [[1], [2]]


@pytest.mark.parametrize("events,words", [
    ([_x("a", 0, 10), _x("b", 5, 10)], "without nesting"),
    ([_x("a", 0, 10), _flow("s", 1, 2)], "expected one s and one f"),
    ([_x("a", 0, 10), _flow("s", 1, 2), _flow("s", 1, 3)], "expected one s and one f"),
    ([_x("a", 0, 10), _flow("s", 1, 8), _flow("f", 1, 3)], "before it starts"),
    ([_x("a", 0, 10), _flow("s", 1, 2), _flow("f", 1, 30)], "in no slice"),
    ([{"ph": "X", "name": "a", "ts": 0, "pid": 1, "tid": 1}], "missing dur"),
    ([{"ph": "Q", "name": "a"}], "unknown phase"),
    ([_x("a", -1, 1)], "bad ts"),
])
def test_check_finds_problems(events, words):
    problems = tl.check({"traceEvents": events})
    assert any(words in p for p in problems), problems


def test_check_rejects_a_non_document():
    assert tl.check([1, 2]) and tl.check({"events": []})


# --- the modeled run ------------------------------------------------------------------
def _plan_steps(view, op, algo, sizes, me, avg=False):
    """Member ``me``'s steps of the schedule as written: the modeled timeline keeps
    the leading copies (free there, a slice of 0 us), as traced calls do; untraced
    calls leave them out (executor.elide_leading_copies)."""
    return len(Plan(schedule_for(view, op, algo, sizes, avg, None), view, me,
                    elide=False).steps)


@pytest.mark.parametrize("ranks,algo,size", [(16, "ring", 1 << 20), (16, "mesh", 64 << 10),
                                             (64, None, 4 << 20),
                                             (16, "kangaring", 64 << 20)])
def test_model_trace_matches_schedule(tmp_path, capsys, ranks, algo, size):
    out = tmp_path / "model.json"
    argv = ["--instance", "trn2.48xlarge", "all_reduce", "-b", str(size), "-e", str(size),
            "-r", str(ranks), "--trace", str(out)]
    if algo:
        argv += ["--algorithm", algo]
    assert model_main(argv) == 0
    doc = json.loads(out.read_text())
    assert tl.check(doc) == []
    p = predict("all_reduce", size, instance="trn2.48xlarge", ranks=ranks, algorithm=algo)
    assert doc["otherData"]["time_us"] == pytest.approx(p.time_us, abs=1e-2)
    view = GroupView(nm.topology("trn2.48xlarge", ranks=ranks), range(ranks))
    counts = tl.step_counts(doc)
    for r in range(ranks):
        want = _plan_steps(view, "all_reduce", p.algorithm, size // 4, r)
        assert counts[tl.rank_thread_name(view.topo, r)] == [want], r
    # a flow per transfer between distinct ranks (folded ones move nothing on the
    # hardware: no flow); links carry the schedule's bytes
    sched = schedule_for(view, "all_reduce", p.algorithm, size // 4, False, None)
    xfers = [x for st in sched.rounds for x in st.xfers if x.src != x.dst and not x.fold]
    flows = [e for e in doc["traceEvents"] if e["ph"] == "s"]
    assert len(flows) == len(xfers)
    link_bytes = sum(e["args"]["bytes"] for e in doc["traceEvents"]
                     if e["ph"] == "X" and e.get("cat") == "link")
    assert link_bytes == sum(p.cost.bytes_by_kind.values())
    names = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    assert "chip 0" in names and any(n.startswith("chip 0 -> chip 1") for n in names)


def test_model_trace_sweep_lays_calls_back_to_back(tmp_path):
    out = tmp_path / "m.json"
    assert model_main(["--instance", "trn1.32xlarge", "all_gather", "-b", "1kb", "-e", "64kb",
                       "-f", "8", "--trace", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert tl.check(doc) == []
    calls = sorted((e for e in doc["traceEvents"] if e.get("cat") == "call" and e["tid"] == 1),
                   key=lambda e: e["ts"])
    assert [c["args"]["bytes"] for c in calls] == [1024, 8192, 65536]
    for a, b in zip(calls, calls[1:]):
        assert b["ts"] == pytest.approx(a["ts"] + a["dur"], abs=2e-3)


# --- the emulated run ---------------------------------------------------------------------
def _launch(n, folder, env_trace=None):
    env = {k: v for k, v in os.environ.items() if k not in ENV}
    env.setdefault("NUMBA_CACHE_DIR", str(ROOT / ".numba_cache"))
    if env_trace:
        env["NEURON_MPI_TRACE"] = str(env_trace)
    r = subprocess.run([str(LAUNCHER), "-n", str(n), "--timeout", "240", "--", "python",
                        str(PROGRAM), str(folder)], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "trace program done" in r.stdout


def _merged(folder, out, capsys):
    assert cli_main(["trace", str(folder), "-o", str(out)]) == 0
    said = capsys.readouterr().out
    assert str(out) in said and "transfers" in said
    return json.loads(Path(out).read_text())


def _check_against_schedules(doc, n):
    """Each rank's call slices hold as many steps as its plan; a flow per transfer
    between distinct ranks of every call."""
    assert tl.check(doc) == []
    topo = nm.topology("trn2.48xlarge", ranks=n)
    view = GroupView(topo, range(n))
    calls = {}
    for e in doc["traceEvents"]:
        if e.get("cat") == "call":
            calls.setdefault(e["tid"], []).append(e)
    counts = tl.step_counts(doc)
    nflows = 0
    for r in range(n):
        mine = sorted(calls[r + 1], key=lambda e: e["ts"])
        want = []
        for c in mine:
            a = c["args"]
            op, item = c["name"], np.dtype(a["dtype"]).itemsize
            elems = a["bytes"] // item
            extra = None
            if op == "all_reduce":
                sizes = elems
            elif op == "barrier":  # its agreement ran (the default): it is the barrier
                sizes, extra = 0, 1
            else:  # all_gather: output bytes; reduce_scatter: input bytes
                sizes = (elems // n,) * n
            sched = schedule_for(view, op, a["algorithm"], sizes, False, extra)
            want.append(len(Plan(sched, view, r, elide=False).steps))
            assert a["steps"] == want[-1]
            if r == 0:
                nflows += sum(1 for st in sched.rounds for x in st.xfers if x.src != x.dst)
        assert counts[tl.rank_thread_name(topo, r)] == want, r
    assert sum(1 for e in doc["traceEvents"] if e["ph"] == "s") == nflows
    names = {e["name"] for e in doc["traceEvents"] if e["ph"] == "s"}
    assert any(nm_.startswith("intra-chip ") for nm_ in names)
    if n > topo.ranks_per_chip:
        assert any(nm_.startswith("neuronlink ") for nm_ in names)
    return calls


def test_traced_run_8_ranks(tmp_path, capsys):
    _launch(8, tmp_path)
    doc = _merged(tmp_path / "ctx", tmp_path / "run.json", capsys)
    calls = _check_against_schedules(doc, 8)
    # the block's four calls, on every rank, the algorithms asked for
    for r in range(8):
        names = [(c["name"], c["args"]["algorithm"]) for c in
                 sorted(calls[r + 1], key=lambda e: e["ts"])]
        assert names[:2] == [("all_reduce", "ring"), ("all_reduce", "mesh")]
        assert [n for n, _ in names] == ["all_reduce", "all_reduce", "all_gather",
                                         "reduce_scatter"]
    procs = [e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"]
    assert procs == ["node 0 · trn2.48xlarge LNC=2 (emulated)"]


def test_traced_run_from_env(tmp_path, capsys):
    _launch(4, tmp_path / "ctx-run", env_trace=tmp_path / "env")
    doc = _merged(tmp_path / "env", tmp_path / "env.json", capsys)
    calls = _check_against_schedules(doc, 4)
    # from init to exit, but the block's calls went to the block's folder
    for r in range(4):
        assert [c["name"] for c in sorted(calls[r + 1], key=lambda e: e["ts"])] == \
            ["all_reduce", "all_gather"] * 3 + ["all_reduce", "barrier"]
    ctx = _merged(tmp_path / "ctx-run" / "ctx", tmp_path / "ctx.json", capsys)
    assert ctx["otherData"]["calls"] == 4 * 4


def test_merge_errors(tmp_path):
    with pytest.raises(nm.InvalidArgumentError, match="no trace-rank"):
        tl.merge(tmp_path)
    with pytest.raises(nm.InvalidArgumentError, match="not a directory"):
        tl.merge(tmp_path / "nope")
    assert cli_main(["trace", str(tmp_path / "nope"), "-o", str(tmp_path / "x.json")]) == 2
    # an output that cannot be written is refused before the merge
    assert cli_main(["trace", str(tmp_path), "-o", str(tmp_path)]) == 2


def test_trace_folder_argument():
    with pytest.raises(nm.InvalidArgumentError, match="folder"):
        with nm.trace(""):
            pass


# --- merging, on hand-made rank files (no MPI) ---------------------------------------------
def _rank_file(folder, rank, calls, steps, sends, recvs, host="h", shift=0):
    d = {"schema": "neuron-mpi-trace/1", "rank": rank, "host": host,
         "clock": {"perf_ns": 0, "wall_ns": shift},
         "topology": {"instance": "trn2.48xlarge", "lnc": 2, "nodes": 1, "ranks": 8},
         "calls": calls, "steps": steps, "sends": sends, "recvs": recvs}
    (Path(folder) / f"trace-rank{rank}.json").write_text(json.dumps(d))


def _call(seq, t0, t1, steps=1, op="all_reduce", error=None):
    return {"comm": 1, "seq": seq, "op": op, "algorithm": "ring", "bytes": 64,
            "dtype": "float32", "size": 8, "steps": steps, "t0": t0, "t1": t1, "error": error}


def _step(seq, k, t0, t1):
    return {"comm": 1, "seq": seq, "step": k, "kind": "round", "sends": 1, "recvs": 1,
            "t0": t0, "t1": t1}


def test_merge_overlapping_calls_failed_calls_and_hosts(tmp_path):
    # rank 0: two async calls in flight at once, then one that failed mid-step;
    # rank 4 (chip 1) on another host whose monotonic clock is 5 s behind
    _rank_file(tmp_path, 0,
               [_call(1, 1000, 9000), _call(2, 2000, 8000), _call(3, 10000, None)],
               [_step(1, 0, 1100, 8500), _step(2, 0, 2100, 7000), _step(3, 0, 10100, None)],
               [{"comm": 1, "seq": 1, "xid": 0, "dst": 4, "bytes": 64, "t": 1200}], [],
               host="a")
    _rank_file(tmp_path, 4, [_call(1, 1000 - 5000, 9500 - 5000)],
               [_step(1, 0, 1100 - 5000, 9400 - 5000)], [],
               [{"comm": 1, "seq": 1, "xid": 0, "src": 0, "bytes": 64, "t0": 4000 - 5000,
                 "t1": 4100 - 5000}], host="b", shift=5000)
    doc = tl.merge(tmp_path)
    assert tl.check(doc) == []
    names = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    assert names == {"rank 0 · chip 0 core 0", "rank 0 · chip 0 core 0 (overlapping calls 1)",
                     "rank 4 · chip 1 core 0"}
    calls = [e for e in doc["traceEvents"] if e.get("cat") == "call"]
    failed = next(e for e in calls if e["args"]["seq"] == 3 and e["tid"] == 1)
    assert failed["dur"] == pytest.approx(0.1)  # closed at its last record
    (s,) = [e for e in doc["traceEvents"] if e["ph"] == "s"]
    (f,) = [e for e in doc["traceEvents"] if e["ph"] == "f"]
    assert s["name"] == "neuronlink 64 B" and f["tid"] == 5
    assert f["ts"] - s["ts"] == pytest.approx(2.9)  # on one time base despite the hosts
    assert doc["otherData"]["flows"] == 1 and doc["otherData"]["calls"] == 4


def test_merge_refuses_mixed_runs(tmp_path):
    _rank_file(tmp_path, 0, [], [], [], [])
    d = json.loads((tmp_path / "trace-rank0.json").read_text())
    d["topology"]["ranks"] = 16
    d["rank"] = 1
    (tmp_path / "trace-rank1.json").write_text(json.dumps(d))
    with pytest.raises(nm.InvalidArgumentError, match="different topologies"):
        tl.merge(tmp_path)


def test_model_trace_of_sliced_rounds_nests(tmp_path):
    """A sliced round (reduction overlapping the transfer) lasts less than transfer
    plus reduction: each transfer's slice ends with its sliced time, inside the round."""
    out = tmp_path / "m.json"
    assert model_main(["--instance", "trn2.48xlarge", "all_reduce", "-b", "64MB", "-e",
                       "64MB", "-r", "16", "--algorithm", "ring", "--trace", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert tl.check(doc) == []
    p = predict("all_reduce", 64 << 20, instance="trn2.48xlarge", ranks=16, algorithm="ring")
    assert p.cost.reduce_us > 0
    assert doc["otherData"]["time_us"] == pytest.approx(p.time_us, abs=1e-2)
