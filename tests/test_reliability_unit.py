"""Reliability pieces that need no MPI: argument checks, the agreement comparison and
its messages, the flight recorder, the diagnosis, and the timeout setting."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from neuron_mpi import agree as A
from neuron_mpi import diagnose as D
from neuron_mpi import validate as V
from neuron_mpi.errors import (AlgorithmError, CollectiveMismatchError,
                               CollectiveTimeoutError, CommunicatorFailedError,
                               InvalidArgumentError, NeuronMPIError, TopologyError,
                               UnsupportedGroupError)
from neuron_mpi.groups import check_group
from neuron_mpi.recorder import FlightRecorder
from neuron_mpi.topology import topology

BF16 = np.dtype(ml_dtypes.bfloat16)


# --- the error classes -------------------------------------------------------------------
def test_error_hierarchy():
    for cls in (InvalidArgumentError, CollectiveMismatchError, CollectiveTimeoutError,
                CommunicatorFailedError, TopologyError):
        assert issubclass(cls, NeuronMPIError)
    assert issubclass(InvalidArgumentError, ValueError)
    assert issubclass(AlgorithmError, InvalidArgumentError)
    assert issubclass(CollectiveTimeoutError, TimeoutError)
    # a refused group is a TopologyError, not an InvalidArgumentError
    assert issubclass(UnsupportedGroupError, TopologyError)
    assert not issubclass(UnsupportedGroupError, InvalidArgumentError)


# --- local argument checks: each names the argument ---------------------------------------
@pytest.mark.parametrize("fn,needle", [
    (lambda: V.array([1, 2]), "x: expected a numpy.ndarray, got 'list'"),
    (lambda: V.array(np.ones(2, np.complex64)), "x: unsupported dtype complex64"),
    (lambda: V.array(np.ones(2, bool)), "x: unsupported dtype bool"),
    (lambda: V.rows(np.float32(1).reshape(())), "x: expected an array with at least one"),
    (lambda: V.reduce_op("xor"), "op: expected one of sum, prod, max, min, avg"),
    (lambda: V.counts([1, -1, 2], 3), "counts[1]: expected an integer >= 0, got -1"),
    (lambda: V.counts([1, 2], 3), "counts: expected 3 counts (one per rank)"),
    (lambda: V.counts([1, 2.5, 2], 3), "counts[1]: expected an integer"),
    (lambda: V.counts(5, 3, "send_counts"), "send_counts: expected a sequence"),
    (lambda: V.rank(4, 4, "root"), "root: expected an integer in [0, 3], got 4"),
    (lambda: V.rank(-1, 4, "dst"), "dst: expected an integer in [0, 3], got -1"),
    (lambda: V.rank(True, 4, "src"), "src: expected an integer, got True"),
    (lambda: V.out_array(np.zeros(3, np.float32), (4,), np.float32), "out: expected shape (4,)"),
    (lambda: V.out_array(np.zeros(4, np.float64), (4,), np.dtype(np.float32)),
     "out: expected dtype float32"),
    (lambda: V.out_array([0.0], (1,), np.float32), "out: expected a numpy.ndarray or None"),
    (lambda: V.pairs([(0, 1), (2, 1)], 4), "pairs: rank 1 receives more than once"),
    (lambda: V.pairs([(0, 1), (0, 2)], 4), "pairs: rank 0 sends more than once"),
    (lambda: V.pairs([(0, 4)], 4), "pairs[0][1]: expected an integer in [0, 3], got 4"),
    (lambda: V.pairs([(0, 1, 2)], 4), "pairs[0]: expected a (src, dst) pair"),
    (lambda: V.pairs([(0, 1), (1.0, 2)], 4), "pairs[1][0]: expected an integer, got 1.0"),
    (lambda: V.pairs([(0, True)], 4), "pairs[0][1]: expected an integer, got True"),
    (lambda: V.pairs([(-1, 0)], 4), "pairs[0][0]: expected an integer in [0, 3], got -1"),
    (lambda: V.pairs([(0, 1), (np.int64(2), 1)], 4), "pairs: rank 1 receives more than once"),
    (lambda: V.pairs([(0,)], 4), "pairs[0]: expected a (src, dst) pair"),
    (lambda: V.replica_groups([[0, 1], [1, 2]], 4), "rank 1 appears in more than one group"),
    (lambda: V.replica_groups([[0, 5]], 4), "replica_groups[0]: expected an integer in [0, 3]"),
    (lambda: V.replica_groups([[]], 4), "replica_groups[0]: expected a non-empty group"),
])
def test_local_checks_name_the_argument(fn, needle):
    with pytest.raises(InvalidArgumentError) as info:
        fn()
    assert needle in str(info.value)


def test_valid_pairs_come_back_as_int_tuples():
    ring = [(i, (i + 1) % 64) for i in range(64)]
    assert V.pairs(ring, 64) == tuple(ring)
    assert V.pairs([[np.int32(3), 0], (0, np.int64(3))], 4) == ((3, 0), (0, 3))
    assert all(type(v) is int for q in V.pairs([(np.int8(1), 2)], 4) for v in q)
    assert V.pairs([], 4) == ()


def test_read_only_out_is_refused():
    out = np.zeros(4, np.float32)
    out.flags.writeable = False
    with pytest.raises(InvalidArgumentError, match="out: expected a writeable array"):
        V.out_array(out, (4,), np.dtype(np.float32))


def test_group_not_allowed_on_the_topology():
    topo = topology("trn2.48xlarge", 2, None, ranks=8)
    with pytest.raises(UnsupportedGroupError, match="replica_groups: CC not permitted"):
        check_group(topo, [0, 1, 2], strict=True)
    check_group(topo, [0, 1, 2], strict=False)
    check_group(topo, [0, 1, 2, 3], strict=True)


# --- fingerprints and their comparison -------------------------------------------------------
def _table(fps):
    return np.stack(fps)


def test_equal_calls_agree():
    fp = A.fingerprint("all_reduce", 3, 8, np.float32, "sum", -1, 0, "ring")
    A.compare(_table([fp] * 4), "all_reduce", 3)  # no error


def test_fp32_and_two_bf16_differ_in_dtype_and_count():
    a = A.fingerprint("all_reduce", 1, 8, np.dtype(np.float32), "sum")
    b = A.fingerprint("all_reduce", 1, 16, BF16, "sum")
    with pytest.raises(CollectiveMismatchError) as info:
        A.compare(_table([a, a, b, a]), "all_reduce", 1)
    msg = str(info.value)
    assert info.value.fields == ["count", "dtype"]
    assert "count: rank 0-1,3: 8; rank 2: 16" in msg
    assert "dtype: rank 0-1,3: fp32; rank 2: bf16" in msg
    assert msg.endswith("no data moved")


@pytest.mark.parametrize("field,kw_a,kw_b,shown", [
    ("operation", {"op": "all_reduce"}, {"op": "all_gather"}, "rank 3: all_gather"),
    ("count", {"count": 8}, {"count": 9}, "rank 3: 9"),
    ("reduce op", {"reduce_op": "sum"}, {"reduce_op": "max"}, "rank 3: max"),
    ("root", {"root": 0}, {"root": 2}, "rank 3: 2"),
    ("layout", {"dig": A.digest([[0, 1]])}, {"dig": A.digest([[1, 0]])}, "digest"),
    ("algorithm", {"algorithm": "ring"}, {"algorithm": "mesh"}, "rank 3: mesh"),
    ("sequence number", {"seq": 4}, {"seq": 5}, "rank 3: 5"),
])
def test_each_field_is_named(field, kw_a, kw_b, shown):
    base = dict(op="all_reduce", seq=4, count=8, dtype=np.float32, reduce_op="sum",
                root=-1, dig=0, algorithm="ring")
    a = A.fingerprint(**{**base, **kw_a})
    b = A.fingerprint(**{**base, **kw_b})
    with pytest.raises(CollectiveMismatchError) as info:
        A.compare(_table([a, a, a, b]), "all_reduce", 4)
    assert field in info.value.fields
    assert f"ranks disagree on {field}" in str(info.value) or \
        f", {field}" in str(info.value)
    assert shown in str(info.value)


def test_rejecting_rank_is_named_on_every_rank():
    ok = A.fingerprint("broadcast", 2, 8, np.float32)
    bad = A.fingerprint("broadcast", 2, status=1)
    with pytest.raises(InvalidArgumentError) as info:
        A.compare(_table([ok, bad, ok, bad]), "broadcast", 2)
    assert getattr(info.value, "agreed", False)
    assert str(info.value) == ("broadcast: rank(s) 1,3 of the group rejected their arguments "
                               "(their own error says why); no data moved")


def test_all_to_all_v_counts_checked_pairwise():
    n = 3
    send = np.array([[1, 2, 0], [0, 1, 1], [2, 0, 1]])
    rows = np.concatenate([send, send.T], axis=1)  # consistent
    A.check_all_to_all_v(rows, "all_to_all_v")
    rows[2, n + 0] = 5  # rank 2 expects 5 from rank 0, which sends it 0
    with pytest.raises(CollectiveMismatchError, match="rank 0 sends 0 rows to rank 2, "
                                                      "which expects 5"):
        A.check_all_to_all_v(rows, "all_to_all_v")


@pytest.mark.parametrize("ranks,text", [
    ([0, 1, 2, 5, 7, 8], "0-2,5,7-8"), ([3], "3"), ([], ""), ([4, 0, 1], "0-1,4")])
def test_ranks_text(ranks, text):
    assert A.ranks_text(ranks) == text


def test_digest_is_stable_and_sensitive():
    assert A.digest([[0, 1], [1, 0]]) == A.digest([[0, 1], [1, 0]])
    assert A.digest([[0, 1], [1, 0]]) != A.digest([[1, 0], [0, 1]])
    assert A.digest([1, 2], [3]) != A.digest([1], [2, 3])
    assert 0 <= A.digest([5]) < 2 ** 62


# --- flight recorder and diagnosis -------------------------------------------------------------
def _dump(folder, rank, calls, comms=None, reason="CollectiveTimeoutError: x"):
    rec = FlightRecorder(rank)
    for c, members in (comms or {1: [0, 1, 2, 3]}).items():
        rec.register(c, members)
    for call in calls:
        e = rec.start(call.get("comm", 1), call["seq"], call.get("op", "all_reduce"),
                      call.get("algorithm", "ring"), call.get("count", 8),
                      call.get("dtype", "float32"), 4)
        if call.get("state", "done") == "done":
            FlightRecorder.finish(e)
        elif call["state"] == "failed":
            FlightRecorder.fail(e, CollectiveTimeoutError(call.get("error", "late")))
        elif call["state"] == "refused":
            FlightRecorder.refuse(e, InvalidArgumentError("op: refused"))
    old = os.environ.get("NEURON_MPI_TRACE_DIR")
    os.environ["NEURON_MPI_TRACE_DIR"] = str(folder)
    try:
        return rec.dump(reason)
    finally:
        if old is None:
            del os.environ["NEURON_MPI_TRACE_DIR"]
        else:
            os.environ["NEURON_MPI_TRACE_DIR"] = old


def test_recorder_dumps_only_with_a_trace_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("NEURON_MPI_TRACE_DIR", raising=False)
    rec = FlightRecorder(5, depth=3)
    for s in range(1, 6):
        FlightRecorder.finish(rec.start(1, s, "all_reduce", "ring", 8, "float32", 4))
    assert rec.dump("why") is None
    monkeypatch.setenv("NEURON_MPI_TRACE_DIR", str(tmp_path / "t"))
    path = rec.dump("why")
    data = json.loads(open(path).read())
    assert path.endswith("rank5.json") and data["rank"] == 5 and data["reason"] == "why"
    assert [c["seq"] for c in data["calls"]] == [3, 4, 5]  # the last N only


def test_diagnose_names_a_rank_that_never_called(tmp_path):
    done = [{"seq": 1}, {"seq": 2}]
    for r in (0, 1, 3):
        _dump(tmp_path, r, done + [{"seq": 3, "state": "failed"}])
    _dump(tmp_path, 2, done)
    lines = D.divergences(D.load(str(tmp_path)))
    assert lines == ["communicator 1: first divergence at call 3 (all_reduce): rank 2 never "
                     "called it; rank 0-1,3 failed but did not finish "
                     "(CollectiveTimeoutError: late)"]


def test_diagnose_passes_over_a_call_refused_on_every_rank(tmp_path):
    """Call 2 was refused (rank 0's arguments; its entry names no count, dtype or
    algorithm) and every rank raised: not a divergence. Call 4 diverges; a refusal
    that some rank never reached is still one."""
    for r in range(4):
        mine = {"count": None, "dtype": None, "algorithm": None} if r == 0 else {}
        op = "all_gather" if r == 3 else "all_reduce"
        _dump(tmp_path, r, [{"seq": 1}, {"seq": 2, "state": "refused", **mine}, {"seq": 3},
                            {"seq": 4, "op": op, "state": "failed"}])
    (line,) = D.divergences(D.load(str(tmp_path)))
    assert "first divergence at call 4" in line and "rank 3 called op=all_gather" in line
    for r in range(4):
        _dump(tmp_path, r, [{"seq": 1}] + ([{"seq": 2, "state": "refused"}] if r else []))
    (line,) = D.divergences(D.load(str(tmp_path)))
    assert "first divergence at call 2" in line and "rank 0 never called it" in line


def test_diagnose_names_a_rank_without_a_dump(tmp_path):
    for r in (0, 1, 2):
        _dump(tmp_path, r, [{"seq": 1}, {"seq": 2, "state": "failed"}])
    (line,) = D.divergences(D.load(str(tmp_path)))
    assert "first divergence at call 2" in line
    assert "rank 3 left no dump" in line


def test_diagnose_names_different_operations(tmp_path):
    for r in range(4):
        op = "all_gather" if r == 1 else "all_reduce"
        _dump(tmp_path, r, [{"seq": 1}, {"seq": 2, "op": op, "state": "failed"}])
    (line,) = D.divergences(D.load(str(tmp_path)))
    assert "rank 0,2-3 called op=all_reduce" in line and "rank 1 called op=all_gather" in line


def test_diagnose_cli_exit_status(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    run = lambda d: subprocess.run([sys.executable, "-m", "neuron_mpi.diagnose", str(d)],  # noqa: E731
                                   capture_output=True, text=True, timeout=60)
    res = run(empty)
    assert res.returncode == 2 and "no rank*.json dumps" in res.stderr
    good = tmp_path / "good"
    for r in range(4):
        _dump(good, r, [{"seq": 1}, {"seq": 2}])
    res = run(good)
    assert res.returncode == 0 and "no divergence among the recorded calls" in res.stdout
    bad = tmp_path / "bad"
    for r in range(3):
        _dump(bad, r, [{"seq": 1}, {"seq": 2, "state": "failed"}])
    res = run(bad)
    assert res.returncode == 1 and "rank 3 left no dump" in res.stdout
    assert res.stdout.startswith("3 rank dumps: ranks 0-2")


# --- the timeout setting (in a child: importing neuron_mpi.comm starts MPI) --------------------
_TIMEOUT_PROBE = r"""
import mpi4py
mpi4py.rc.initialize = False
import os
from neuron_mpi.comm import _timeout_seconds, _checking, DEFAULT_TIMEOUT
from neuron_mpi.errors import InvalidArgumentError
out = {}
os.environ.pop("NEURON_MPI_TIMEOUT", None)
out["default"] = _timeout_seconds(None)
os.environ["NEURON_MPI_TIMEOUT"] = "7.5"
out["env"] = _timeout_seconds(None)
out["arg_wins"] = _timeout_seconds(2)
out["zero"] = _timeout_seconds(0)
out["negative"] = _timeout_seconds(-1)
for bad in ("soon", True):
    try:
        _timeout_seconds(bad)
        out[repr(bad)] = "accepted"
    except InvalidArgumentError as e:
        out[repr(bad)] = str(e)
os.environ["NEURON_MPI_TIMEOUT"] = "never"
try:
    _timeout_seconds(None)
except InvalidArgumentError as e:
    out["bad_env"] = str(e)
for v in ("1", "0", "off", "no", "false"):
    os.environ["NEURON_MPI_CHECK"] = v
    out["check_" + v] = _checking()
out["DEFAULT"] = DEFAULT_TIMEOUT
import json; print(json.dumps(out))
"""


def test_timeout_and_check_settings():
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURON_MPI_")}
    res = subprocess.run([sys.executable, "-c", _TIMEOUT_PROBE], capture_output=True,
                         text=True, timeout=120, env=env)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["default"] == out["DEFAULT"] == 60.0
    assert out["env"] == 7.5 and out["arg_wins"] == 2.0
    assert out["zero"] is None and out["negative"] is None  # no deadline
    assert out["'soon'"] == "timeout: expected seconds (a number), got 'soon'"
    assert out["True"].startswith("timeout: expected seconds")
    assert out["bad_env"] == "NEURON_MPI_TIMEOUT: expected seconds, got 'never'"
    assert out["check_1"] is True
    assert not any(out[f"check_{v}"] for v in ("0", "off", "no", "false"))


def test_pair_shares_sum_to_zero_exactly_when_the_counts_agree():
    """agree.pair_share: consistent count matrices give shares summing to 0 (mod
    2**64); changing any one count, of a sender or of a receiver, does not."""
    rng = np.random.default_rng(5)
    for n in (1, 2, 3, 8, 64):
        send = rng.integers(0, 1 << 40, (n, n))
        recv = send.T.copy()
        shares = np.array([A.pair_share(i, send[i], recv[i]) for i in range(n)], np.int64)
        assert A.pairs_agree(shares)
        for _ in range(5):
            i, j = (int(v) for v in rng.integers(0, n, 2))
            for which in (send, recv):
                keep = which[i, j]
                which[i, j] = keep + int(rng.integers(1, 1000))
                bad = np.array([A.pair_share(k, send[k], recv[k]) for k in range(n)], np.int64)
                assert not A.pairs_agree(bad), (n, i, j)
                which[i, j] = keep
    # a swap of two counts between receivers is a disagreement too
    send = np.array([[0, 1, 2], [3, 0, 4], [5, 6, 0]])
    recv = send.T.copy()
    recv[[1, 2], 0] = recv[[2, 1], 0]
    assert not A.pairs_agree(np.array([A.pair_share(k, send[k], recv[k]) for k in range(3)]))
