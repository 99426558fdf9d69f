"""The bad-input and fault matrix, under mpiexec, each launch under an outer timeout.

* tests/fault_programs/matrix.py: ~100 cases in one job per world size (4 and 8
  ranks), each on a fresh communicator; one JSON line per case per rank. Every case
  becomes one test here per world size (parametrized from ``matrix.cases(n)``), asserting
  its stated expectation: the error class on every rank, the field or rank the text
  names, no hang past the deadline, inputs unchanged, no wrong result.
* tests/fault_programs/die.py: a rank exits / aborts / is killed / raises, before or
  inside a collective, under ``neuron-mpirun`` (``python -m mpi4py``), with
  NEURON_MPI_TIMEOUT=5: the job must end non-zero within the timeout + 20 s, and the
  output must name the rank.
* tests/fault_programs/straggler.py: a straggler above the timeout with
  NEURON_MPI_TRACE_DIR; ``python -m neuron_mpi.diagnose`` must name the straggler.
* tests/fault_programs/nopickle.py: pickle made to raise; everything still works.
* tests/fault_programs/first_call.py: a job with an empty numba cache under
  ``neuron-mpirun --no-warm`` and NEURON_MPI_TIMEOUT=5: the compile happens in init,
  and the first all_reduce does not time out; the code compiled there holds no call
  into numba's runtime.
* tests/fault_programs/cc_core.py: progress without the rank's own thread (async
  completion during a sleep; a group routed through sleeping ranks), on shared
  memory and over MPI; the dying-rank jobs also check /dev/shm is left clean.
* benchmarks/soak.py: 100 random checked collectives on 4 ranks, 0 failures.
* tests/fault_programs/steady.py: the same round of calls repeated 40 times after a
  warm-up keeps nothing per call (structure counts and collected objects unchanged).

All launches start together when the first test needs one (a few at a time), so the
file's wall time is about that of the longest chain, not the sum.

Cases where the library does not (yet) do what the issue asks are marked
xfail(strict=True) with the reason; docs/reliability.md lists them.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROGS = ROOT / "tests" / "fault_programs"
PY = sys.executable
BIN = Path(sys.executable).parent
MPIEXEC = str(BIN / "mpiexec") if (BIN / "mpiexec").exists() else "mpiexec"
LAUNCHER = ([str(BIN / "neuron-mpirun")] if (BIN / "neuron-mpirun").exists()
            else [PY, "-m", "neuron_mpi.launch.mpirun"])
WORLDS = (4, 8)
DIE_TIMEOUT = 5.0      # NEURON_MPI_TIMEOUT of the dying-rank jobs
DIE_BOUND = DIE_TIMEOUT + 20.0
FAST = 5.0             # s: an agreement failure must be reported well within this
SLACK = 10.0           # s: a timeout may fire this late on a loaded machine
COLD_TIMEOUT = 5.0     # NEURON_MPI_TIMEOUT of the cold-cache job: far below a compile


def _load_matrix():
    spec = importlib.util.spec_from_file_location("fault_matrix", PROGS / "matrix.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


MATRIX = _load_matrix()
CASES = {n: {c.name: c for c in MATRIX.cases(n)} for n in WORLDS}

# Cases the library gets wrong today (see docs/reliability.md, "Known gaps").
KNOWN_BUGS: dict[str, str] = {}


def _env(**extra) -> dict:
    env = dict(os.environ)
    for k in ("NEURON_MPI_INSTANCE", "NEURON_LOGICAL_NC_CONFIG", "NEURON_MPI_NODES",
              "NEURON_MPI_ALGO", "NEURON_MPI_CHECK", "NEURON_MPI_TIMEOUT",
              "NEURON_MPI_TRACE_DIR"):
        env.pop(k, None)
    env.setdefault("NUMBA_CACHE_DIR", "/tmp/numba_cache_dev")
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               PRTE_MCA_rmaps_default_mapping_policy=":oversubscribe")
    env.update(extra)
    return env


class Launch:
    """One MPI job run to completion (or killed at ``timeout``)."""

    def __init__(self, argv, env, timeout):
        self.argv, self.env, self.timeout = argv, env, timeout
        self.rc = None
        self.out = self.err = ""
        self.wall = None
        self.timed_out = False

    def run(self) -> "Launch":
        t0 = time.monotonic()
        proc = subprocess.Popen(self.argv, env=self.env, cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, errors="replace",
                                start_new_session=True)
        try:
            self.out, self.err = proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.timed_out = True
            os.killpg(proc.pid, 9)  # the job's own process group: mpiexec and ranks
            self.out, self.err = proc.communicate()
        self.rc = proc.returncode
        self.wall = time.monotonic() - t0
        return self

    def tail(self) -> str:
        return (f"argv: {' '.join(map(str, self.argv))}\nrc={self.rc} wall={self.wall:.1f}s "
                f"timed_out={self.timed_out}\n--- stdout\n{self.out[-3000:]}\n--- stderr\n"
                f"{self.err[-4000:]}")


# --- every launch of this file, started together --------------------------------------
# NEURON_MPI_FAULTS_OUT=DIR keeps every job's output there (for the figures in
# docs/reliability.md); by default a temporary folder, removed at the end
_KEEP = os.environ.get("NEURON_MPI_FAULTS_OUT")
TMP = Path(_KEEP) if _KEEP else Path(tempfile.mkdtemp(prefix="neuron_mpi_faults_"))
TMP.mkdir(parents=True, exist_ok=True)
DIE_MODES = ("exit0", "exit1", "os_exit", "abort", "sigkill", "sigterm", "raise")
DIE_CASES = [(m, w) for w in ("before", "mid") for m in DIE_MODES]
STEADY_ROUNDS = 40


def _launches() -> dict:
    jobs = {}
    for n in WORLDS:
        jobs[f"matrix{n}"] = Launch(
            [MPIEXEC, "-n", str(n), PY, "-m", "mpi4py", str(PROGS / "matrix.py"),
             str(TMP / f"matrix{n}")], _env(), timeout=600)
    for mode, when in DIE_CASES:
        jobs[f"die-{mode}-{when}"] = Launch(
            LAUNCHER + ["--no-warm", "-n", "4", "python", str(PROGS / "die.py"), mode, when],
            _env(NEURON_MPI_TIMEOUT=str(DIE_TIMEOUT)), timeout=DIE_BOUND + 60)
    jobs["die-raise-before-plain"] = Launch(
        [MPIEXEC, "-n", "4", PY, str(PROGS / "die.py"), "raise", "before"],
        _env(NEURON_MPI_TIMEOUT=str(DIE_TIMEOUT)), timeout=DIE_BOUND + 60)
    for tag, check in (("check", "1"), ("nocheck", "0")):
        jobs[f"straggler-{tag}"] = Launch(
            [MPIEXEC, "-n", "4", PY, "-m", "mpi4py", str(PROGS / "straggler.py"), "3", "5"],
            _env(NEURON_MPI_TRACE_DIR=str(TMP / f"trace-{tag}"), NEURON_MPI_CHECK=check),
            timeout=120)
    for transport in ("auto", "mpi"):
        jobs[f"cc_core-{transport}"] = Launch(
            LAUNCHER + ["--no-warm", "-n", "16", "python", str(PROGS / "cc_core.py")],
            _env(NEURON_MPI_TRANSPORT=transport), timeout=180)
    jobs["first_call-cold-cache"] = Launch(
        LAUNCHER + ["--no-warm", "-n", "4", "python", str(PROGS / "first_call.py")],
        _env(NUMBA_CACHE_DIR=str(TMP / "cold_numba_cache"),
             NEURON_MPI_TIMEOUT=str(COLD_TIMEOUT)), timeout=900)
    jobs["nopickle"] = Launch([MPIEXEC, "-n", "4", PY, "-m", "mpi4py",
                               str(PROGS / "nopickle.py")], _env(), timeout=300)
    jobs["soak"] = Launch([MPIEXEC, "-n", "4", PY, "-m", "mpi4py",
                           str(ROOT / "benchmarks" / "soak.py"), "--calls", "100",
                           "--seed", "7", "--json", str(TMP / "soak.json")],
                          _env(), timeout=300)
    jobs["steady"] = Launch([MPIEXEC, "-n", "4", PY, "-m", "mpi4py",
                             str(PROGS / "steady.py"), str(STEADY_ROUNDS)], _env(), timeout=300)
    return jobs


_JOBS: dict = {}
_FUTURES: dict = {}
_POOL: list = []


def job(name: str) -> Launch:
    if not _FUTURES:
        _JOBS.update(_launches())
        pool = ThreadPoolExecutor(max_workers=int(os.environ.get("NEURON_MPI_TEST_JOBS", "3")))
        _POOL.append(pool)
        # the longest first, so the others fill in around them: the cold-cache job
        # (one rank compiles the data plane on one core: about 75 s here), then the
        # matrices (25 s)
        for key in sorted(_JOBS, key=lambda k: (k != "first_call-cold-cache",
                                                not k.startswith("matrix8"),
                                                not k.startswith("matrix"), k)):
            _FUTURES[key] = pool.submit(_JOBS[key].run)
    return _FUTURES[name].result()


def teardown_module(module):
    for pool in _POOL:
        pool.shutdown(wait=True)
    if _KEEP:
        for name, launch in _JOBS.items():
            if launch.rc is not None:
                (TMP / f"{name}.log").write_text(
                    f"argv: {launch.argv}\nrc={launch.rc} wall={launch.wall:.2f}s "
                    f"timed_out={launch.timed_out}\n--- stdout\n{launch.out}\n--- stderr\n"
                    f"{launch.err}")
    else:
        shutil.rmtree(TMP, ignore_errors=True)


# --- the matrix ------------------------------------------------------------------------------
_PARSED: dict = {}


def matrix(n: int) -> dict:
    """case -> {rank: record} of the n-rank matrix job."""
    if n not in _PARSED:
        launch = job(f"matrix{n}")
        recs: dict = {}
        for r in range(n):
            path = TMP / f"matrix{n}" / f"rank{r}.jsonl"
            if path.exists():
                for line in path.read_text().splitlines():
                    rec = json.loads(line)
                    recs.setdefault(rec["case"], {})[rec["rank"]] = rec
        _PARSED[n] = (launch, recs)
    return _PARSED[n]


@pytest.mark.parametrize("n", WORLDS)
def test_matrix_job_completes(n):
    launch, recs = matrix(n)
    assert not launch.timed_out and launch.rc == 0, launch.tail()
    done = recs.get("__done__", {})
    assert sorted(done) == list(range(n)), launch.tail()
    assert all(d["cases"] == len(CASES[n]) for d in done.values())


def _matrix_params():
    for n in WORLDS:
        for name, case in CASES[n].items():
            marks = []
            if name in KNOWN_BUGS:
                marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[name]))
            yield pytest.param(n, name, id=f"{n}-{name}", marks=marks)


def _is(rec, cls: str) -> bool:
    return rec["error"] is not None and cls in rec["error_mro"]


def _show(recs) -> str:
    return "\n".join(f"  rank {r}: {d['error']} ({d['elapsed']} s): {d['msg'][:300]}"
                     for r, d in sorted(recs.items()))


@pytest.mark.parametrize("n,name", list(_matrix_params()))
def test_case(n, name):
    case = CASES[n][name]
    launch, all_recs = matrix(n)
    recs = all_recs.get(name, {})
    assert sorted(recs) == list(range(n)), f"ranks missing for {name}\n{launch.tail()}"
    shown = _show(recs)
    # on every rank: the inputs were not written, and nothing hung past the deadline
    for r, d in recs.items():
        assert d["input_unchanged"], f"rank {r} input modified\n{shown}"
        assert d["elapsed"] <= case.timeout + SLACK, f"rank {r} overran the deadline\n{shown}"
    k = case.offender
    exp = case.expect
    if exp == "ok":
        for r, d in recs.items():
            assert d["error"] is None and d["result_ok"] is True, f"rank {r}\n{shown}"
    elif exp == "mismatch":
        for r, d in recs.items():
            assert d["error"] == "CollectiveMismatchError", f"rank {r}\n{shown}"
            assert case.field in d["msg"], f"rank {r}: {case.field!r} not named\n{shown}"
            assert d["elapsed"] < FAST, f"rank {r}: mismatch took {d['elapsed']} s\n{shown}"
            assert "no data moved" in d["msg"] or "send_counts" in case.field
            if k is not None and "send_counts" not in case.field:
                assert f"rank {k}:" in d["msg"], f"offender {k} not named\n{shown}"
            if d["out_unchanged"] is not None:
                assert d["out_unchanged"], f"rank {r}: out written\n{shown}"
        if "send_counts" in case.field:
            assert all(f"rank {k}" in d["msg"] for d in recs.values()), shown
    elif exp == "rejected":
        own = recs[k]
        assert (_is(own, "InvalidArgumentError") or _is(own, "UnsupportedGroupError")), shown
        assert case.field in own["msg"], f"offender's error does not name {case.field}\n{shown}"
        for r, d in recs.items():
            if r == k:
                continue
            assert d["error"] == "InvalidArgumentError", f"rank {r}\n{shown}"
            assert f"rank(s) {k} of the group rejected" in d["msg"], f"rank {r}\n{shown}"
        for r, d in recs.items():
            assert d["elapsed"] < FAST, f"rank {r}: took {d['elapsed']} s\n{shown}"
            if d["out_unchanged"] is not None:
                assert d["out_unchanged"], f"rank {r}: out written\n{shown}"
    elif exp == "all_reject":
        for r, d in recs.items():
            assert d["error"] == "InvalidArgumentError", f"rank {r}\n{shown}"
            assert case.field in d["msg"], f"rank {r}\n{shown}"
            assert d["elapsed"] < FAST
    elif exp == "local":
        assert _is(recs[k], "InvalidArgumentError") and case.field in recs[k]["msg"], shown
        for r, d in recs.items():
            if r != k:
                assert d["error"] is None, f"rank {r}\n{shown}"
    elif exp == "failed":
        for r, d in recs.items():
            assert d["error"] == "CommunicatorFailedError", f"rank {r}\n{shown}"
            assert case.field in d["msg"], shown
            assert d["elapsed"] < FAST, f"rank {r}: reuse took {d['elapsed']} s\n{shown}"
            assert d["cause"] is not None, "the original error is not attached"
            assert d["first_error"] not in (None, "none"), f"rank {r}: first call did not fail"
    elif exp == "timeout":
        for r, d in recs.items():
            if r in case.waiting:
                assert d["error"] == "CollectiveTimeoutError", f"rank {r}\n{shown}"
                assert case.timeout * 0.9 <= d["elapsed"] <= case.timeout + SLACK, \
                    f"rank {r}: timed out after {d['elapsed']} s, deadline {case.timeout}"
                want = case.offender_field if (r == k and case.offender_field) else case.field
                assert want in d["msg"], f"rank {r}: {want!r} not in the text\n{shown}"
                assert f"within {case.timeout:g} s" in d["msg"] or \
                    f"after {case.timeout:g} s" in d["msg"], shown
            elif case.other == "ok_or_timeout":
                assert d["error"] in (None, "CollectiveTimeoutError"), f"rank {r}\n{shown}"
                if d["error"] is None:
                    assert d["result_ok"] is True, f"rank {r}: wrong result\n{shown}"
            else:
                assert d["error"] is None, f"rank {r}\n{shown}"
                assert d["result_ok"] in (True, None), f"rank {r}: wrong result\n{shown}"
    else:
        raise AssertionError(f"unknown expectation {exp}")
    # a call that raised returned nothing, so no wrong result can have been used
    for r, d in recs.items():
        if d["error"] is not None:
            assert not d["returned"]


def test_timeout_text_names_step_peer_and_link():
    """Without the agreement (NEURON_MPI_CHECK=0) the waiting ranks' text names the
    call, the algorithm, the step, the straggler and the link."""
    _, recs = matrix(4)
    d = recs["straggler-above-timeout-nocheck"][0]
    assert re.search(r"all_reduce \(call \d+ on this communicator, algorithm \w+\) timed out "
                     r"after 2 s at step \d+ of \d+: waiting for data from rank 3 "
                     r"\(transfer \d+\)( forwarded via rank \d+)? over [\w-]+", d["msg"]), d["msg"]


def test_mismatch_text_example():
    _, recs = matrix(4)
    msg = recs["count-short-all_reduce-r2"][0]["msg"]
    assert re.fullmatch(r"all_reduce \(call 1 on this communicator\): ranks disagree on "
                        r"count; count: rank 0-1,3: 8; rank 2: 7; no data moved", msg), msg


# --- dead and raising ranks (one launch each, under neuron-mpirun) -------------------------
# What may name the dead rank: Open MPI's launcher, or a surviving rank's error text
# (not the dying rank's own output).
_PRTE_NAMES = re.compile(r"process rank 2 with PID|MPI_ABORT was invoked on rank 2\b")


def _survivor_names_rank2(err: str) -> bool:
    for line in err.splitlines():
        if line.startswith("[rank 2]") or "fails on purpose" in line:
            continue
        if ("CollectiveTimeoutError" in line or "CommunicatorFailedError" in line) and \
                re.search(r"\brank 2\b", line):
            return True
    return False


@pytest.mark.parametrize("mode,when", DIE_CASES, ids=[f"{m}-{w}" for m, w in DIE_CASES])
def test_dead_rank_ends_the_job(mode, when):
    launch = job(f"die-{mode}-{when}")
    assert not launch.timed_out, launch.tail()
    assert launch.rc != 0, launch.tail()
    assert launch.wall < DIE_BOUND, f"took {launch.wall:.1f} s\n{launch.tail()}"
    assert "finished (unexpected)" not in launch.out, launch.tail()
    assert "result WRONG" not in launch.out, launch.tail()


def _naming_params():
    for mode, when in DIE_CASES:
        marks = []
        yield pytest.param(mode, when, id=f"{mode}-{when}", marks=marks)


@pytest.mark.parametrize("mode,when", DIE_CASES, ids=[f"{m}-{w}" for m, w in DIE_CASES])
def test_no_segment_left_in_dev_shm(mode, when):
    """Whatever ends the job (exit, exception, abort, a signal, SIGKILL mid-call),
    the shared-memory segment is gone from /dev/shm: unlinked once every rank had
    it mapped."""
    launch = job(f"die-{mode}-{when}")
    paths = re.findall(r"die\.py: segment (\S+)", launch.out)
    assert len(paths) == 1, launch.tail()
    assert paths[0].startswith("/dev/shm/neuron_mpi-")
    assert not os.path.exists(paths[0]), launch.tail()


# ids not spelled "mpi": pytest-mpi skips a test whose keywords hold "mpi" outside
# mpiexec, and a bare parameter id becomes a keyword
@pytest.mark.parametrize("transport", ("auto", "mpi"), ids=("shm", "transport-mpi"))
def test_cc_core_progresses_without_the_ranks_thread(transport):
    """An async all_reduce completes while its rank sleeps; a group finishes while
    the ranks its routes pass through sleep 3 s outside neuron_mpi (tests/
    fault_programs/cc_core.py), on shared memory and with every hop over MPI."""
    launch = job(f"cc_core-{transport}")
    recs = [json.loads(ln[3:]) for ln in launch.out.splitlines() if ln.startswith("@@ ")]
    assert launch.rc == 0 and len(recs) == 16, launch.tail()
    assert all(not r["fails"] and r["async_done_while_asleep"] for r in recs), recs
    group = [r["group_s"] for r in recs if r["group_s"] is not None]
    assert len(group) == 2 and max(group) < 2.0, group


@pytest.mark.parametrize("mode,when", list(_naming_params()))
def test_dead_rank_is_named(mode, when):
    launch = job(f"die-{mode}-{when}")
    if mode in ("os_exit", "abort", "sigkill", "sigterm"):
        assert _PRTE_NAMES.search(launch.err), launch.tail()
    elif mode in ("raise", "exit1"):  # mpi4py aborts the job at once from that rank
        assert _PRTE_NAMES.search(launch.err), launch.tail()
    else:  # a rank that leaves through Python: the survivors must say whom they miss
        assert _survivor_names_rank2(launch.err), launch.tail()


def test_uncaught_exception_without_mpi4py_wrapper():
    """Plain ``mpiexec python prog.py``: no MPI_Abort; the job still ends, because every
    survivor's own deadline (NEURON_MPI_TIMEOUT) fires and it exits with the error."""
    launch = job("die-raise-before-plain")
    assert not launch.timed_out and launch.rc != 0, launch.tail()
    assert launch.wall < DIE_BOUND, launch.tail()
    assert launch.err.count("CollectiveTimeoutError") >= 3, launch.tail()


# --- straggler above the timeout: recorder and diagnosis ------------------------------------
def _straggler(tag):
    launch = job(f"straggler-{tag}")
    recs = {}
    for line in launch.out.splitlines():
        if line.startswith("@@ "):
            rec = json.loads(line[3:])
            recs[rec["rank"]] = rec
    diag = subprocess.run([PY, "-m", "neuron_mpi.diagnose", str(TMP / f"trace-{tag}")],
                          capture_output=True, text=True, timeout=60, env=_env())
    return launch, recs, diag


def test_straggler_above_timeout_nocheck_diagnosis():
    launch, recs, diag = _straggler("nocheck")
    assert launch.rc == 0 and sorted(recs) == [0, 1, 2, 3], launch.tail()
    for r in (0, 1, 2):
        assert recs[r]["error"] == "CollectiveTimeoutError", recs
        assert "waiting for data from rank 3" in recs[r]["msg"] and " at step " in recs[r]["msg"]
        assert 2.7 <= recs[r]["elapsed"] <= 3 + SLACK
    assert recs[3]["error"] in (None, "CollectiveTimeoutError")
    assert recs[3]["result_ok"] in (True, None)
    assert diag.returncode == 1, diag.stdout + diag.stderr
    lines = [ln for ln in diag.stdout.splitlines() if ln.startswith("communicator ")]
    assert lines and "first divergence at call 5 (all_reduce)" in lines[0], diag.stdout
    assert re.search(r"\brank 3 (left no dump|never called|started)", lines[0]), diag.stdout


def test_straggler_above_timeout_check_fails_every_rank():
    launch, recs, diag = _straggler("check")
    assert launch.rc == 0 and sorted(recs) == [0, 1, 2, 3], launch.tail()
    for r in (0, 1, 2):
        assert recs[r]["error"] == "CollectiveTimeoutError"
        assert "no agreement on the arguments within 3 s" in recs[r]["msg"]
        assert 2.7 <= recs[r]["elapsed"] <= 3 + SLACK
    # the straggler passes the agreement (the others' contributions are posted) and
    # then waits for data that will not come
    assert recs[3]["error"] == "CollectiveTimeoutError" and " at step " in recs[3]["msg"]
    assert diag.returncode == 1
    assert sorted(int(f.stem[4:]) for f in (TMP / "trace-check").glob("rank*.json")) == \
        [0, 1, 2, 3]
    assert "first divergence at call 5 (all_reduce)" in diag.stdout, diag.stdout


def test_straggler_above_timeout_check_names_the_straggler():
    launch, recs, diag = _straggler("check")
    assert all(re.search(r"\brank 3\b", recs[r]["msg"]) for r in (0, 1, 2)), recs
    lines = [ln for ln in diag.stdout.splitlines() if ln.startswith("communicator ")]
    named = re.findall(r"\brank ([\d,\-]+)", lines[0]) if lines else []
    assert "3" in named, diag.stdout


# --- a cold numba cache ------------------------------------------------------------------
def test_cold_cache_compile_is_not_inside_the_first_call():
    """With an empty numba cache and no warm-up, the ranks compile the data plane
    (tens of seconds each): in init, not inside the first all_reduce, whose deadline
    (5 s here) it used to run out (every rank: ``no agreement on the arguments``)."""
    launch = job("first_call-cold-cache")
    assert not launch.timed_out and launch.rc == 0, launch.tail()
    assert "CollectiveTimeoutError" not in launch.err, launch.tail()
    ok = re.findall(r"first_call OK rank (\d+) ([\d.]+)", launch.out)
    assert sorted(int(r) for r, _ in ok) == [0, 1, 2, 3], launch.tail()
    assert any((TMP / "cold_numba_cache").iterdir()), "the job did not use the empty cache"


def test_the_compiled_data_plane_counts_no_references():
    """The data plane is compiled without numba's runtime (plane.PLANE_OPTIONS): with
    it, every array it was handed, sliced or viewed was reference-counted with atomic
    instructions, most of the compiled run's CPU at 8 ranks. In the cold-cache job
    (above) the domain's first rank compiled it afresh (code loaded from the cache
    cannot be inspected): exec_run's module and those of its entry points hold no
    NRT call, and the scratch arrays it makes (_stack_i64) are on the stack."""
    launch = job("first_call-cold-cache")
    assert launch.rc == 0, launch.tail()
    rows = [line.split()[2:] for line in launch.out.splitlines()
            if line.startswith("first_call IR ")]
    assert [r[0] for r in rows] == ["exec_run", "exec_pass", "read_slot", "post"], launch.tail()
    assert all(r[1:3] == ["0", "0"] and int(r[3]) >= 1 for r in rows), launch.out


# --- no pickle, soak ---------------------------------------------------------------------------
def test_no_pickle_on_any_path():
    launch = job("nopickle")
    assert launch.rc == 0, launch.tail()
    ok = re.findall(r"nopickle OK rank (\d+): (\d+) checks", launch.out)
    assert sorted(int(r) for r, _ in ok) == [0, 1, 2, 3], launch.tail()
    assert all(int(c) >= 40 for _, c in ok)
    assert "FAIL" not in launch.out


def test_soak_short_run_has_no_failures():
    launch = job("soak")
    assert launch.rc == 0, launch.tail()
    report = json.loads((TMP / "soak.json").read_text())
    assert report["failures"] == 0 and report["calls"] == 400, report
    assert report["anon_growth_mib_max"] < 64, report


def test_repeated_calls_keep_nothing_per_call():
    """After a warm-up, 40 more rounds of the same calls (every collective, sync and
    async, on the world and the halves, send/recv, a rejected argument) leave every
    per-rank structure with the entries it had (inbox, queue, executions in flight,
    plans, point-to-point counters, flight recorder, schedule and next-hop caches,
    boards, numba specialisations) and, over the second half of the rounds, fewer new
    objects for the cycle collector than a
    quarter per call and fewer new pymalloc blocks than half a block per call
    (docs/reliability.md, Soak: what one such entry or object per call adds)."""
    launch = job("steady")
    assert launch.rc == 0, launch.tail()
    recs = [json.loads(line[len("steady "):]) for line in launch.out.splitlines()
            if line.startswith("steady ")]
    assert sorted(r["rank"] for r in recs) == [0, 1, 2, 3], launch.tail()
    for r in recs:
        assert r["fails"] == [] and r["rounds"] == STEADY_ROUNDS, r
        calls = r["world_calls"] * 2  # the halves make as many calls as the world
        assert calls >= 12 * STEADY_ROUNDS, r
        assert r["census_after"] == r["census_before"], r
        assert r["census_after"]["recorder"] == r["recorder_depth"], r
        for k in ("inbox", "outq", "active"):
            assert r["census_after"][k] == 0, (k, r)
        # the second half of the rounds: one-time offsets (a few hundred objects and
        # blocks on this host, first uses after the warm-up) land in the first half;
        # one object or block kept per call would add about `calls / 2` here too
        grew = {k: r["probe_after"][k] - r["probe_middle"][k] for k in r["probe_middle"]}
        assert grew["gc_objects"] < calls / 8, (grew, r)
        assert grew["pymalloc_blocks"] < calls / 4, (grew, r)
