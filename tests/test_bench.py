"""The benchmark (neuron_mpi.bench): sizes and options, the table and the JSON report,
the check data (replayed through every schedule, no MPI), and one MPI run of the
benchmark under neuron-mpirun (plus one with a deliberately corrupted result)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import neuron_mpi as nm
from neuron_mpi.algorithms.group import GroupView
from neuron_mpi.algorithms.select import choose, schedule_for
from neuron_mpi.bench import collectives as C
from neuron_mpi.bench import data, report
from neuron_mpi.bench.cli import main as bench_main
from neuron_mpi.bench.cli import load_groups, parse_args
from neuron_mpi.bench.harness import CORRUPT_ENV, statistic
from neuron_mpi.bench.sizes import parse_size, sweep
from neuron_mpi.kernels import DTYPES
from neuron_mpi.replay import replay
from env_helpers import child_env

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = Path(sys.executable).parent / "neuron-mpirun"
ENV = ("NEURON_MPI_INSTANCE", "NEURON_LOGICAL_NC_CONFIG", "NEURON_MPI_NODES",
       "NEURON_MPI_ALGO", CORRUPT_ENV)

BENCH_HEADER = ["size(B)", "count(elems)", "type", "time(us)", "algbw(GB/s)",
                "busbw(GB/s)", "model_time(us)", "model_busbw(GB/s)", "#wrong"]


# --- sizes ----------------------------------------------------------------------------
@pytest.mark.parametrize("text,value", [
    ("8", 8), ("8b", 8), ("2kb", 2048), ("2K", 2048), ("2KiB", 2048), ("1MB", 1 << 20),
    ("64M", 64 << 20), ("1GB", 1 << 30), ("1g", 1 << 30), (" 3 kb ", 3072)])
def test_parse_size_units_are_binary(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "1x", "-1", "1.5MB", "MB", "1 M B", "0x10"])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError, match="invalid size"):
        parse_size(text)


def test_sweep():
    assert sweep(8, 64) == [8, 16, 32, 64]
    assert sweep(1024, 4 << 20, 4) == [1024 * 4 ** k for k in range(7)]
    assert sweep(8, 40, stepbytes=8) == [8, 16, 24, 32, 40]
    assert sweep(5, 5) == [5]
    for bad in [dict(minbytes=64, maxbytes=8), dict(minbytes=8, maxbytes=64, stepfactor=1),
                dict(minbytes=8, maxbytes=64, stepfactor=2, stepbytes=8),
                dict(minbytes=0, maxbytes=64)]:
        with pytest.raises(ValueError):
            sweep(**bad)


# --- operations, aliases, bus factors ---------------------------------------------------
@pytest.mark.parametrize("alias,name", [
    ("allr", "all_reduce"), ("all_reduce", "all_reduce"), ("allg", "all_gather"),
    ("redsct", "reduce_scatter"), ("alltoall", "alltoall"), ("all_to_all", "alltoall"),
    ("alltoallv", "alltoallv"), ("all_to_all_v", "alltoallv"), ("permute", "permute"),
    ("sendrecv", "sendrecv"), ("all_gather_v", "all_gather_v"),
    ("reduce_scatter_v", "reduce_scatter_v"), ("ALLR", "all_reduce")])
def test_aliases(alias, name):
    assert C.get(alias).name == name


def test_bus_factors():
    r = 8
    assert C.get("allr").bus_factor(r) == pytest.approx(2 * 7 / 8)
    for op in ("allg", "redsct", "alltoall", "alltoallv", "all_gather_v", "reduce_scatter_v"):
        assert C.get(op).bus_factor(r) == pytest.approx(7 / 8)
    assert C.get("sendrecv").bus_factor(r) == C.get("permute").bus_factor(r) == 1.0


def test_sizes_per_operation():
    """size(B): all-reduce buffer, all-gather output, reduce-scatter input, one
    rank's all-to-all send buffer; rounded to whole blocks."""
    wl = C.get("allg").workload(1 << 20, 8, 4)
    assert wl.size == 1 << 20 and wl.out_elems(0) == 1 << 18 and wl.in_elems(3) == 1 << 15
    wl = C.get("redsct").workload(1000, 8, 4)
    assert wl.size == 992 and wl.in_elems(0) == 248 and wl.out_elems(0) == 31
    wl = C.get("alltoallv").workload(1 << 16, 8, 4)
    assert all(wl.in_elems(g) == wl.out_elems(g) == wl.elems for g in range(8))
    assert len({wl.matrix[0][j] for j in range(8)}) == 3  # uneven per peer
    wl = C.get("all_gather_v").workload(1 << 16, 8, 2)
    assert wl.counts[1] == 2 * wl.counts[0] and wl.size == sum(wl.counts) * 2


# --- the command line -------------------------------------------------------------------
def test_parse_args_defaults_and_options(tmp_path):
    opts, _ = parse_args(["allr"])
    assert opts.op == "all_reduce" and opts.sizes == [1 << 10, 1 << 12, 1 << 14, 1 << 16,
                                                     1 << 18, 1 << 20]
    assert (opts.iters, opts.warmup, opts.dtype, opts.check, opts.redops) == (
        10, 2, "fp32", None, ("sum",))
    opts, _ = parse_args(["redsct", "-b", "8", "-e", "64", "-f", "2", "-n", "3", "-w", "0",
                          "-d", "fp8", "-c", "all_ones", "-o", "all", "-t", "p99",
                          "--show-algorithm", "--vs-mpi", "--algorithm", "mesh"])
    assert opts.sizes == [8, 16, 32, 64] and opts.dtype == "fp8_e4m3"
    assert opts.redops == ("sum", "prod", "max", "min", "avg") and opts.show_redop
    assert (opts.iters, opts.warmup, opts.stats, opts.algorithm) == (3, 0, "p99", "mesh")
    assert opts.vs_mpi and opts.show_algorithm and opts.check == "all_ones"
    f = tmp_path / "g.json"
    f.write_text("[[0, 1, 2, 3], [4, 5, 6, 7]]")
    assert parse_args(["allg", "--custom-replica-groups", str(f)])[0].groups == [
        [0, 1, 2, 3], [4, 5, 6, 7]]
    assert load_groups("[[0,2],[1,3]]") == [[0, 2], [1, 3]]
    assert parse_args(["allg", "-i", "1kb", "-b", "1kb", "-e", "3kb"])[0].sizes == [
        1024, 2048, 3072]


@pytest.mark.parametrize("argv,check,op", [
    (["allr", "-c"], "random", "all_reduce"),  # nccom-test: -c alone checks random
    (["-c", "allg"], "random", "all_gather"),  # its page: "--check allg"
    (["--check", "-d", "fp32", "allg"], "random", "all_gather"),
    (["allr", "-c", "ALL_ONES"], "all_ones", "all_reduce"),
    (["allr", "--check", "all_ones"], "all_ones", "all_reduce"),
    (["allgv", "-c", "random"], "random", "all_gather_v"),
    (["all_gatherv"], None, "all_gather_v"),
])
def test_nccom_tests_check_flag_and_spellings(argv, check, op):
    opts, _ = parse_args(argv)
    assert (opts.check, opts.op) == (check, op)


def test_several_statistics_as_nccom_tests_stats():
    """--stats avg p25 p50 p99 (nccom-test's example, the operation last): a
    time:STAT(us) column each, the first giving time_us, algbw and busbw."""
    opts, _ = parse_args(["-n", "1000", "--stats", "avg", "p25", "p50", "p99", "allg"])
    assert (opts.op, opts.stats, opts.more_stats) == ("all_gather", "avg", ("p25", "p50", "p99"))
    opts, _ = parse_args(["allg", "-t", "p50", "-t", "avg"])
    assert (opts.stats, opts.more_stats) == ("p50", ("avg",))
    cols = report.bench_columns(stats=("avg", "p50"))
    assert [c.header for c in cols[3:6]] == ["time:avg(us)", "time:p50(us)", "algbw(GB/s)"]
    assert [c.key for c in cols[3:5]] == ["time_us", "time:p50"]
    assert [c.header for c in report.bench_columns()][3] == "time(us)"
    row = dict(ROW, **{"time:p50": 1000.0})
    (res,) = report.nccom_results([row])
    assert res["time:avg(us)"] == ROW["time_us"] and res["time:p50(us)"] == 1000.0


def test_nccom_tests_seed_nworkers_and_fp8e4():
    opts, _ = parse_args(["-r", "8", "allr", "-c", "--seed", "7", "-d", "fp8e4"])
    assert (opts.nworkers, opts.seed, opts.check, opts.dtype) == (8, 7, "random", "fp8_e4m3")
    assert parse_args(["allr"])[0].seed is None


@pytest.mark.parametrize("argv,needle", [
    (["all_smash"], "unknown operation"),
    (["allr", "-b", "1x"], "invalid size"),
    (["allr", "-b", "4MB", "-e", "1MB"], "smaller than minbytes"),
    (["allr", "-f", "4", "-i", "8"], "not both"),
    (["allr", "-f", "1"], "stepfactor"),
    (["allr", "-d", "fp7"], "datatype"),
    (["allr", "-o", "xor"], "-o/--op"),
    (["allr", "-c", "maybe"], "-c/--check"),
    (["allr", "-t", "p101"], "-t/--stats"),
    (["allr", "-t", "median"], "-t/--stats"),
    (["allr", "-n", "0"], "positive integer"),
    (["allr", "-w", "-1"], "integer >= 0"),
    (["allr", "--custom-replica-groups", "[[0,1],[2"], "not valid JSON"),
    (["allr", "--custom-replica-groups", "[[0,1],[2]]"], "same size"),
    (["allr", "--custom-replica-groups", "[0,1]"], "lists of ranks"),
    (["allr", "--custom-replica-groups", "groups.json"], "neither an existing file nor"),
    (["allr", "--report-to-json-file", "."], "argument --report-to-json-file: '.' is a dir"),
    (["allr", "--plot", "/"], "argument --plot: '/' is a directory"),
    (["allr", "--link-stats", "/dev/null/x"], "'/dev/null' is not a directory"),
    (["allr", "--report-to-json-file", "/proc/x.json"], "cannot write '/proc/x.json': No such"),
    (["allr", "--plot", "x.txt"], "matplotlib writes png"),
    (["allr", "--seed", "3"], "--seed: seeds the random check data"),
    (["allr", "-c", "all_ones", "--seed", "3"], "--seed"),
    (["allr", "-c", "--seed", "-3"], "--seed: expected an integer >= 0"),
    (["allr", "-r", "0"], "-r/--nworkers"),
    (["allr", "--bogus"], "unrecognized arguments"),
    ([], "required"),
])
def test_option_errors_exit_2_with_a_message(capsys, argv, needle):
    assert bench_main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("neuron-mpi-bench: error: ") and needle in err
    assert err.count("\n") == 1  # one line, no usage dump, no traceback


def test_option_error_as_a_program():
    res = subprocess.run([sys.executable, "-m", "neuron_mpi.bench", "allr", "-e", "1q"],
                         capture_output=True, text=True, timeout=60, env=child_env(ENV))
    assert res.returncode == 2
    assert "neuron-mpi-bench: error:" in res.stderr and "invalid size" in res.stderr
    assert res.stdout == ""


def test_statistic():
    assert statistic([1, 2, 3, 10], "avg") == 4
    assert statistic([1, 2, 3, 10], "p50") == 2.5
    assert statistic([1, 2, 3, 10], "p100") == 10


# --- the table and the report --------------------------------------------------------------
ROW = {"op": "all_reduce", "redop": "sum", "size": 1024, "count": 256, "type": "fp32",
       "time_us": 1234.5678, "algbw": 0.00083, "busbw": 0.00145, "model_time_us": 21.01,
       "model_busbw": 0.085, "algorithm": "ring", "wrong": 0, "mpi_time_us": 100.0,
       "ratio": 12.345678}


def test_table_columns():
    cols = report.bench_columns()
    assert report.header_line(cols).lstrip("#").split() == BENCH_HEADER
    full = report.bench_columns(show_redop=True, show_algorithm=True, vs_mpi=True)
    assert report.header_line(full).lstrip("#").split() == [
        "size(B)", "count(elems)", "type", "redop", "time(us)", "algbw(GB/s)",
        "busbw(GB/s)", "model_time(us)", "model_busbw(GB/s)", "algorithm", "#wrong",
        "mpi_time(us)", "ratio"]
    cells = report.row_line(full, ROW).split()
    assert cells == ["1024", "256", "fp32", "sum", "1234.57", "0.00", "0.00", "21.01",
                     "0.09", "ring", "0", "100.00", "12.35"]
    na = report.row_line(cols, dict(ROW, wrong=None)).split()
    assert na[-1] == "N/A"
    text = "\n".join([report.header_line(full), report.row_line(full, ROW)])
    headers, rows = report.parse_table(text)
    assert headers[0] == "size(B)" and rows == [cells]


def test_footer():
    rows = [dict(ROW, busbw=1.0), dict(ROW, busbw=3.0)]
    assert report.footer_lines(rows, 0) == ["# Avg bus bandwidth : 2.0000",
                                            "# Out of bounds values : 0 OK"]
    assert report.footer_lines(rows, 5)[1] == "# Out of bounds values : 5 FAILED"


def _check_report_schema(rep):
    assert tuple(rep) == report.REPORT_KEYS
    assert rep["schema"] == "neuron-mpi-bench/1"
    assert set(rep["topology"]) >= {"instance", "lnc", "nodes", "ranks"}
    assert set(rep["machine"]) >= {"platform", "cpu_count", "hostname"}
    assert set(rep["versions"]) >= {"python", "numpy", "numba", "mpi4py", "mpi_library",
                                    "neuron_mpi"}
    for row in rep["rows"]:
        assert set(row) >= {"op", "redop", "size", "count", "type", "time_us", "algbw",
                            "busbw", "model_time_us", "model_busbw", "algorithm", "wrong",
                            "mpi_time_us", "ratio", "iteration_times_us"}


def test_report_schema(tmp_path):
    topo = nm.topology("trn2.48xlarge", ranks=8)
    rep = report.build_report([dict(ROW, iteration_times_us=[1.0])], command=["x"],
                              options={"op": "all_reduce"},
                              topology=report.topology_info(topo, range(8)),
                              mpi_library="Open MPI", wrong=0)
    _check_report_schema(rep)
    assert rep["ok"] and rep["topology"]["ranks"] == 8
    # nccom-test's "results", its columns' names as keys
    (res,) = rep["results"]
    assert res == {"size(B)": ROW["size"], "count(elems)": ROW["count"], "type": ROW["type"],
                   "algbw(GB/s)": ROW["algbw"], "busbw(GB/s)": ROW["busbw"],
                   "time:avg(us)": ROW["time_us"], "algorithm": ROW["algorithm"]}
    path = tmp_path / "sub" / "r.json"
    report.write_json(str(path), rep)
    assert json.loads(path.read_text()) == json.loads(json.dumps(rep))


def test_plot(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "p.png"
    report.plot(str(path), [dict(ROW, size=s, mpi_busbw=0.01) for s in (1024, 4096)], "t")
    assert path.read_bytes()[:4] == b"\x89PNG"


# --- check data: every rank's expected result, replayed through the schedules -------------
def _replay_check(name, view, nbytes, dtype, redop, mode, algorithm=None):
    coll = C.get(name)
    dt = DTYPES[dtype]
    wl = coll.workload(nbytes, view.size, dt.itemsize, view.rings[0])
    algo = choose(wl.sched_op, view, algorithm)
    avg = redop == "avg" and coll.reduces
    sched = schedule_for(view, wl.sched_op, algo, wl.sizes, avg, wl.extra)
    cases = [C.make_case(wl, g, dt, redop, mode) for g in range(view.size)]
    outs = replay(sched, [c.x for c in cases], "sum" if avg else redop, dt)
    wrong = sum(data.count_wrong(o, coll.expected(c)) for o, c in zip(outs, cases))
    return wrong, outs, cases, coll


@pytest.mark.parametrize("name", list(C.COLLECTIVES))
@pytest.mark.parametrize("mode", data.MODES)
def test_expected_results_match_the_schedules(name, mode):
    view = GroupView(nm.topology("trn2.48xlarge", ranks=16), range(16))
    wrong, outs, cases, coll = _replay_check(name, view, 3000, "fp32", "sum", mode)
    assert wrong == 0
    # and a corrupted element is counted
    outs[3].reshape(-1).view(np.uint8)[0] ^= 0xFF
    assert data.count_wrong(outs[3], coll.expected(cases[3])) == 1


@pytest.mark.parametrize("dtype,redop,algorithm,ranks", [
    ("fp8_e4m3", "sum", "ring", 64), ("fp8_e4m3", "sum", "mesh", 24),
    ("bf16", "sum", "ring", 64), ("fp16", "avg", "ring", 32), ("fp8_e5m2", "prod", "ring", 64),
    ("int8", "sum", "mesh", 32), ("uint8", "max", "ring", 64), ("bf16", "min", None, 128),
    ("fp32", "prod", None, 128), ("int32", "avg", None, 128)])
def test_random_data_is_exact_in_any_order(dtype, redop, algorithm, ranks):
    """Small types over many ranks: sums, products, averages all bit-exact, whatever
    the algorithm's order (128 ranks: two trn2 nodes, hierarchical)."""
    view = GroupView(nm.topology("trn2.48xlarge", ranks=ranks), range(ranks))
    for name in ("all_reduce", "reduce_scatter"):
        wrong, outs, cases, _ = _replay_check(name, view, 4096, dtype, redop, "random",
                                              algorithm)
        assert wrong == 0, (name, dtype, redop)
    vals = np.stack([c.x for c in cases]).astype(np.float64)
    assert (vals == np.round(vals)).all() and vals.max() > vals.min()


def test_all_ones_sum_is_r():
    view = GroupView(nm.topology("trn2.48xlarge", ranks=8), range(8))
    wrong, outs, _, _ = _replay_check("all_reduce", view, 64, "fp32", "sum", "all_ones")
    assert wrong == 0 and (outs[0] == 8).all()
    for redop in ("prod", "max", "min", "avg"):
        wrong, outs, _, _ = _replay_check("all_reduce", view, 64, "fp32", redop, "all_ones")
        assert wrong == 0 and (outs[5] == 1).all()


@pytest.mark.parametrize("dtype", ["int8", "int32", "fp32", "bf16", "fp8_e4m3", "uint8"])
def test_random_data_has_both_signs_in_signed_types(dtype):
    """Signed types draw negative values too, so a reduction that treats them as
    unsigned (or drops a sign) is caught; unsigned types stay non-negative."""
    dt = DTYPES[dtype]
    signed = dtype != "uint8"
    for redop in ("sum", "prod", "max", None):
        v = data.values("random", dt, redop, 2, 8, 0, 4000).astype(np.float64)
        assert (v.min() < 0) == signed and v.max() > 0, (dtype, redop)
    if dtype == "int8":  # a max taken on the bytes as uint8 is wrong somewhere
        xs = [data.values("random", dt, "max", g, 8, 0, 4000) for g in range(8)]
        as_unsigned = np.maximum.reduce([x.view(np.uint8) for x in xs]).view(np.int8)
        assert data.count_wrong(as_unsigned, data.reduced("random", dt, "max", 8, 0,
                                                          4000)) > 0


def test_check_data_slices_agree():
    a = data.values("random", DTYPES["fp32"], "sum", 3, 64, 0, 1000)
    b = data.values("random", DTYPES["fp32"], "sum", 3, 64, 600, 400)
    assert (a[600:] == b).all()
    other = data.values("random", DTYPES["fp32"], "sum", 4, 64, 0, 1000)
    assert not (a == other).all()


# --- MPI: the benchmark under neuron-mpirun -------------------------------------------------
def _launch(args, timeout=240, program=None, ranks=8, **env):
    program = program or [sys.executable, "-m", "neuron_mpi.bench"]
    cmd = [str(LAUNCHER), "--instance", "trn2.48xlarge", "-n", str(ranks), "--timeout",
           str(timeout - 20), *program, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env=child_env(ENV, **env), cwd=ROOT)


def test_mpi_all_reduce_benchmark(tmp_path):
    """neuron-mpirun -n 8 python -m neuron_mpi.bench all_reduce -b 1kb -e 4MB -f 4
    -c random --vs-mpi: the table, 0 wrong, an OK footer, exit 0, and the JSON."""
    out = tmp_path / "r.json"
    res = _launch(["all_reduce", "-b", "1kb", "-e", "4MB", "-f", "4", "-c", "random",
                   "--vs-mpi", "--report-to-json-file", str(out)])
    assert res.returncode == 0, res.stdout + res.stderr
    headers, rows = report.parse_table(res.stdout)
    assert headers == BENCH_HEADER + ["mpi_time(us)", "ratio"]
    assert [int(r[0]) for r in rows] == [1024 * 4 ** k for k in range(7)]
    assert res.stdout.count("size(B)") == 1  # rank 0 alone prints
    for r in rows:
        assert r[2] == "fp32" and int(r[1]) == int(r[0]) // 4
        assert r[8] == "0"
        t, mt, ratio = float(r[3]), float(r[9]), float(r[10])
        assert t > 0 and mt > 0 and ratio == pytest.approx(t / mt, rel=0.01, abs=0.01)
        assert float(r[7]) > 0  # model busbw
    assert "# Out of bounds values : 0 OK" in res.stdout
    assert "# Avg bus bandwidth :" in res.stdout
    assert "# running size 1048576" in res.stdout
    rep = json.loads(out.read_text())
    _check_report_schema(rep)
    assert rep["ok"] and rep["topology"]["ranks"] == 8 and len(rep["rows"]) == 7
    assert "--vs-mpi" in rep["command"]
    assert all(len(r["iteration_times_us"]) == 10 for r in rep["rows"])


def test_mpi_errors_reach_every_rank_and_are_printed_once(tmp_path):
    """Under the launcher a bad command line, a size no host can hold, a -r other
    than the launch's and a report that cannot be written (/dev/full: accepted when
    the command line is read, full when written) each end the job with status 2
    and one line from rank 0 (printed before the other ranks leave), no traceback,
    no hang; a -r that agrees and a --seed run."""
    script = str(Path(sys.executable).parent / "neuron-mpi-bench")
    for args, needle in (
            (["allr", "-d", "foo"], "-d/--datatype"),
            (["allr", "-b", "1TB", "-e", "1TB"], "-e/--maxbytes: 1024GB needs"),
            (["allr", "-r", "3", "-b", "1kb", "-e", "1kb"], "-r/--nworkers: 3 ranks asked"),
            (["allr", "-b", "1kb", "-e", "1kb", "-n", "1", "-w", "0",
              "--report-to-json-file", "/dev/full"], "--report-to-json-file: [Errno 28]")):
        res = _launch(args, ranks=4, timeout=120, program=[script])
        assert res.returncode == 2, (args, res.stdout + res.stderr)
        assert res.stderr.count(f"neuron-mpi-bench: error: {needle}") == 1, (args, res.stderr)
        assert "Traceback" not in res.stderr + res.stdout
    # sizes that round to one row run once: 1 and 8 B are one fp64 per rank (32 B)
    res = _launch(["-r", "4", "redsct", "-d", "fp64", "-b", "1", "-e", "64", "-f", "8", "-n",
                   "1", "-w", "0", "-c", "--seed", "11"], ranks=4, timeout=120,
                  program=[script])
    assert res.returncode == 0, res.stdout + res.stderr
    assert "check random" in res.stdout and "# Out of bounds values : 0 OK" in res.stdout
    assert [int(r[0]) for r in report.parse_table(res.stdout)[1]] == [32, 64]


def test_mpi_corrupted_result_fails():
    """The hidden hook flips one element on rank 0: one wrong value, a FAILED footer,
    exit status 1 (through the console script, which neuron-mpirun does not wrap in
    ``python -m mpi4py``, so the job ends without an MPI_Abort)."""
    script = str(Path(sys.executable).parent / "neuron-mpi-bench")
    res = _launch(["allr", "-b", "1kb", "-e", "1kb", "-n", "1", "-w", "1", "-c", "random"],
                  program=[script], **{CORRUPT_ENV: "1"})
    assert res.returncode == 1, res.stdout + res.stderr
    headers, rows = report.parse_table(res.stdout)
    assert [r[-1] for r in rows] == ["1"]
    assert "# Out of bounds values : 1 FAILED" in res.stdout


def test_facade_p2p_benchmark_runs_every_way_exactly():
    """benchmarks/facade_p2p.py on 4 ranks: a row per size and way of receiving
    through the mpi4py facade (the MPI baseline at 1.00), every message exact, exit
    0; an odd number of ranks is refused."""
    prog = [sys.executable, str(ROOT / "benchmarks" / "facade_p2p.py")]
    res = _launch(["--bytes", "4KB", "300KB", "--iters", "3"], program=prog, ranks=4)
    assert res.returncode == 0, res.stdout + res.stderr
    rows = [ln.split() for ln in res.stdout.splitlines() if ln.startswith("  ")]
    assert [(r[0], r[1]) for r in rows] == [
        (b, w) for b in ("4096", "307200") for w in ("mpi", "named", "any", "irecv-any",
                                                     "ssend")]
    assert all(r[-1] == "yes" and float(r[2]) > 0 for r in rows)
    assert all(float(r[4]) == 1.0 for r in rows if r[1] == "mpi")
    odd = _launch(["--iters", "1"], program=prog, ranks=3, NEURON_MPI_STRICT="0")
    assert odd.returncode != 0 and "needs an even number of ranks" in odd.stderr


def test_facade_halo_benchmark_runs_both_libraries_exactly():
    """benchmarks/facade_halo.py on 4 ranks (a periodic 2 x 2 grid, where each
    neighbour is met twice): a row per size, operation and library (Open MPI's at
    1.00), every block from the neighbour it should come from, exit 0."""
    prog = [sys.executable, str(ROOT / "benchmarks" / "facade_halo.py")]
    res = _launch(["--bytes", "1KB", "40KB", "--iters", "3"], program=prog, ranks=4)
    assert res.returncode == 0, res.stdout + res.stderr
    rows = [ln.split() for ln in res.stdout.splitlines() if ln.startswith("  ")]
    assert [(r[0], r[1], r[2]) for r in rows] == [
        (b, op, lib) for b in ("1024", "40960") for op in ("alltoall", "allgather")
        for lib in ("mpi", "facade")]
    assert all(r[-1] == "yes" and float(r[3]) > 0 for r in rows)
    assert all(float(r[5]) == 1.0 for r in rows if r[2] == "mpi")


def test_idle_benchmark_reports_the_three_waits():
    """benchmarks/idle.py on 2 ranks where agreements are routed (every hop over
    MPI): the barrier, Open MPI's and the barrier in flight while the waiting rank
    sleeps, each with its CPU seconds and wall time, exit 0."""
    prog = [sys.executable, str(ROOT / "benchmarks" / "idle.py")]
    res = _launch(["--seconds", "0.3"], program=prog, ranks=2, NEURON_MPI_TRANSPORT="mpi")
    assert res.returncode == 0, res.stdout + res.stderr
    walls = [float(w) for w in re.findall(r"CPU s  \(wall ([\d.]+) s\)", res.stdout)]
    assert len(walls) == 3 and "ratio neuron_mpi / MPI" in res.stdout, res.stdout
    assert walls[2] >= 0.8, res.stdout  # (the waiting rank slept 0.8 s)


def test_facade_objects_benchmark_runs_every_operation_alike():
    """benchmarks/facade_objects.py on 3 ranks: a row per object and operation,
    every rank's result the same as mpi4py's own call gave, exit 0."""
    prog = [sys.executable, str(ROOT / "benchmarks" / "facade_objects.py")]
    res = _launch(["--iters", "2", "--array-bytes", "40KB"], program=prog, ranks=3,
                  NEURON_MPI_STRICT="0")
    assert res.returncode == 0, res.stdout + res.stderr
    rows = [ln.split() for ln in res.stdout.splitlines() if ln.startswith("  ")]
    assert [(r[0], r[2]) for r in rows] == [
        (k, op) for k in ("float", "dict", "array")
        for op in ("bcast", "allreduce", "allgather", "gather", "scatter", "alltoall",
                   "sendrecv", "pingpong")]
    assert all(r[-1] == "yes" and float(r[4]) > 0 for r in rows)


def test_p2p_benchmark_runs_every_method_exactly():
    """benchmarks/p2p.py on 8 ranks: a row per size and method (the MPI baseline at
    1.00), every result exact, exit 0."""
    res = _launch(["--bytes", "4KB", "300KB", "--iters", "3"],
                  program=[sys.executable, str(ROOT / "benchmarks" / "p2p.py")])
    assert res.returncode == 0, res.stdout + res.stderr
    rows = [ln.split() for ln in res.stdout.splitlines() if ln.startswith("  ")]
    assert [(r[0], r[1]) for r in rows] == [
        (b, m) for b in ("4096", "307200") for m in ("mpi", "send+recv", "sendrecv", "permute")]
    assert all(r[-1] == "yes" for r in rows)
    assert all(float(r[4]) == 1.0 for r in rows if r[1] == "mpi")
    each = _launch(["--bytes", "4KB", "--iters", "3", "--each"],
                   program=[sys.executable, str(ROOT / "benchmarks" / "p2p.py")])
    assert each.returncode == 0, each.stdout + each.stderr
    assert "each call after a barrier" in each.stdout
    rows = [ln.split() for ln in each.stdout.splitlines() if ln.startswith("  ")]
    assert [r[1] for r in rows] == ["mpi", "send+recv", "sendrecv", "permute"]
    assert all(r[-1] == "yes" and float(r[2]) > 0 for r in rows)
    pong = _launch(["--bytes", "4KB", "600KB", "--iters", "3", "--pattern", "pingpong"],
                   program=[sys.executable, str(ROOT / "benchmarks" / "p2p.py")])
    assert pong.returncode == 0, pong.stdout + pong.stderr
    assert "pairs sending back" in pong.stdout
    rows = [ln.split() for ln in pong.stdout.splitlines() if ln.startswith("  ")]
    assert [(r[0], r[1]) for r in rows] == [
        (b, m) for b in ("4096", "614400") for m in ("mpi", "send+recv")]
    assert all(r[-1] == "yes" for r in rows)
    chain = _launch(["--bytes", "600KB", "--iters", "3", "--pattern", "chain"],
                    program=[sys.executable, str(ROOT / "benchmarks" / "p2p.py")])
    assert chain.returncode == 0, chain.stdout + chain.stderr
    assert "a chain of 8 ranks" in chain.stdout
    rows = [ln.split() for ln in chain.stdout.splitlines() if ln.startswith("  ")]
    assert [r[1] for r in rows] == ["mpi", "send+recv"] and all(r[-1] == "yes" for r in rows)
    odd = _launch(["--pattern", "pingpong"], ranks=3,
                  program=[sys.executable, str(ROOT / "benchmarks" / "p2p.py")])
    assert odd.returncode == 2 and "needs an even number of ranks, not 3" in odd.stderr


def test_overlap_benchmark_reports_both_measures(tmp_path):
    """benchmarks/overlap.py on 8 ranks with --loop-iters: a row per size with the
    per-iteration and the step-loop measures, each overlap computed from its own
    columns, results checked (0 wrong), the same figures in the JSON, exit 0; a
    negative --loop-iters is a usage error naming the option."""
    out = tmp_path / "o.json"
    prog = [sys.executable, str(ROOT / "benchmarks" / "overlap.py")]
    res = _launch(["--bytes", "64KB", "256KB", "--iters", "2", "--loop-iters", "3",
                   "--json", str(out)], program=prog)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = [ln.split() for ln in res.stdout.splitlines() if ln and not ln.startswith("#")]
    assert [int(r[0]) for r in lines] == [64 << 10, 256 << 10]
    rows = json.loads(out.read_text())
    for r, ln in zip(rows, lines):
        assert r["wrong"] == 0 and ln[-1] == "0"
        assert r["loop_iters"] == 3 and r["loop_C_ms"] > 0 and r["loop_wall_ms"] > 0
        c, t = r["C_ms"], r["T_ms"]
        assert r["overlap"] == pytest.approx((t + c - r["wall_ms"]) / min(t, c))
        assert r["loop_overlap"] == pytest.approx(2 - r["loop_wall_ms"] / r["loop_C_ms"])
        assert r["loop_serial_overlap"] == pytest.approx(
            2 - r["loop_serial_wall_ms"] / r["loop_C_ms"])
        assert float(ln[8]) == pytest.approx(r["loop_overlap"], abs=0.006)
        # the same overlaps against the blocking call timed inside the baseline's
        # iterations (after the same check and sleep as the async ones)
        ci = r["C_in_place_ms"]
        assert ci > 0 and float(ln[10]) == pytest.approx(ci, abs=0.006)
        assert r["overlap_in_place"] == pytest.approx((t + ci - r["wall_ms"]) / min(t, ci))
        assert r["serial_overlap_in_place"] == pytest.approx(
            (t + ci - r["serial_wall_ms"]) / min(t, ci))
        assert float(ln[11]) == pytest.approx(r["overlap_in_place"], abs=0.006)
        # the blocking call alone takes less than the blocking iteration (call + T)
        assert ci < r["serial_wall_ms"]
    bad = _launch(["--loop-iters", "-1"], program=prog, timeout=120)
    assert bad.returncode != 0 and "--loop-iters" in bad.stderr


@pytest.mark.parametrize("api", ["mpi4py", "torch"])
def test_overlap_benchmark_through_the_front_ends(tmp_path, api):
    """--api mpi4py (Iallreduce) and --api torch (all_reduce with async_op=True,
    MAX in place), at 2 ranks: the same rows, results checked (0 wrong), the API
    named in the JSON; --fresh-results is refused with another API, naming the
    option."""
    if api == "torch":
        pytest.importorskip("torch")
    out = tmp_path / "o.json"
    prog = [sys.executable, str(ROOT / "benchmarks" / "overlap.py")]
    res = _launch(["--api", api, "--bytes", "256KB", "--iters", "2", "--loop-iters", "2",
                   "--json", str(out)], program=prog, ranks=2)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"through {api}" in res.stdout
    [r] = json.loads(out.read_text())
    assert r["api"] == api and r["wrong"] == 0 and r["bytes"] == 256 << 10
    assert r["overlap"] == pytest.approx((r["T_ms"] + r["C_ms"] - r["wall_ms"]) /
                                         min(r["T_ms"], r["C_ms"]))
    bad = _launch(["--api", api, "--fresh-results"], program=prog, timeout=120, ranks=2)
    assert bad.returncode != 0 and "--fresh-results" in bad.stderr


@pytest.mark.parametrize("op", ["all_reduce", "all_to_all", "all_to_all_v", "barrier"])
def test_call_cost_benchmark_checks_and_reports(op):
    """benchmarks/call_cost.py on 8 ranks: both loops timed, the compiled run's share
    within the wall, the ratio of the two walls, every result exact, exit 0."""
    res = _launch(["--op", op, "--calls", "30", "--split"],
                  program=[sys.executable, str(ROOT / "benchmarks" / "call_cost.py")])
    assert res.returncode == 0, res.stdout + res.stderr
    line = {ln.split(":")[0].strip(): ln for ln in res.stdout.splitlines() if ":" in ln}
    ours = re.search(r"([\d.]+) us per call, CPU ([\d.]+) us per call and rank; ([\d.]+) us "
                     r"of the wall inside", line["neuron_mpi"])
    mpi = re.search(r"([\d.]+) us per call, CPU ([\d.]+)", line["MPI"])
    wall, cpu, inside = map(float, ours.groups())
    assert 0 < inside <= wall and cpu > 0
    ratio = float(re.search(r"ratio\s*: ([\d.]+)", res.stdout).group(1))
    assert ratio == pytest.approx(wall / float(mpi.group(1)), rel=0.02, abs=0.01)
    assert "results exact: yes" in res.stdout
    assert (f"# {op} on 8 ranks" if op == "barrier" else f"# {op} of 8KB on 8 ranks") \
        in res.stdout


def test_call_cost_benchmark_splits_an_async_calls_cpu():
    """benchmarks/call_cost.py --async-ms on 8 ranks: the blocking and async loops
    with a sleep before wait(), the async CPU split between the caller's start and
    wait and the agent, which did work (it runs the call while the caller sleeps);
    the parts within the process's CPU; results exact (the async ones checked too).
    --async-ms with barrier (no async form) or below 0 is refused naming it."""
    prog = [sys.executable, str(ROOT / "benchmarks" / "call_cost.py")]
    res = _launch(["--op", "reduce_scatter", "--calls", "30", "--async-ms", "2"], program=prog)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "# with 2 ms of sleep after each call" in res.stdout, res.stdout
    block = re.search(r"blocking\s*:\s*([\d.]+) us per call, CPU ([\d.]+)", res.stdout)
    got = re.search(r"async\s*:\s*([\d.]+) us per call, CPU ([\d.]+): start ([\d.]+), "
                    r"wait ([\d.]+), agent ([\d.]+)", res.stdout)
    assert block and got, res.stdout
    assert float(block.group(1)) >= 2000 and float(got.group(1)) >= 2000  # (the sleep)
    total, start, wait, agent = map(float, got.groups()[1:])
    assert start > 0 and agent > 0 and wait >= 0
    assert start + wait + agent <= total * 1.02 + 1, res.stdout
    assert "results exact: yes" in res.stdout
    for bad in (["--op", "barrier", "--async-ms", "1"], ["--async-ms", "-1"]):
        out = _launch(bad, program=prog, timeout=120)
        assert out.returncode != 0 and "--async-ms: expected a number of ms >= 0" in \
            out.stderr, out.stderr


def test_call_cost_benchmark_on_groups():
    """benchmarks/call_cost.py --groups 2 on 8 ranks: each rank calls on its half
    (neuron_mpi and MPI alike), every result exact; a count that does not divide
    the ranks is refused naming --groups, on every rank, before init."""
    prog = [sys.executable, str(ROOT / "benchmarks" / "call_cost.py")]
    res = _launch(["--op", "reduce_scatter", "--calls", "30", "--groups", "2"], program=prog)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "# reduce_scatter of 8KB on 2 groups of 4 of 8 ranks" in res.stdout, res.stdout
    assert "results exact: yes" in res.stdout
    bad = _launch(["--groups", "3"], program=prog, timeout=120)
    assert bad.returncode != 0 and "--groups: expected a divisor of the 8 ranks" in bad.stderr


def test_vs_mpi_gives_up_on_a_launch_that_stalls(tmp_path):
    """benchmarks/vs_mpi.py kills an operation's launch that outlives --timeout and
    exits non-zero naming the operation and the option (here a launch of a million
    iterations, minutes long, against 3 s); a timeout that is not positive is
    refused naming --timeout."""
    prog = [sys.executable, str(ROOT / "benchmarks" / "vs_mpi.py")]
    res = subprocess.run(prog + ["-n", "2", "--ops", "all_reduce", "-b", "8KB", "-e", "8KB",
                                 "--iters", "1000000", "--timeout", "3"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert res.returncode != 0, res.stdout + res.stderr
    assert "all_reduce did not finish within --timeout 3 s" in res.stderr, res.stderr
    end = time.monotonic() + 20  # the launch's ranks go with it
    while True:
        left = subprocess.run(["pgrep", "-f", "neuron_mpi.bench all_reduce -b 8KB"],
                              capture_output=True, text=True).stdout.strip()
        if not left or time.monotonic() > end:
            break
        time.sleep(0.5)
    assert left == "", left
    bad = subprocess.run(prog + ["--timeout", "0"], capture_output=True, text=True,
                         timeout=60, cwd=tmp_path)
    assert bad.returncode == 2 and "--timeout: expected a positive number" in bad.stderr
