"""neuron-mpirun: command building (pure), dry runs, errors, and one MPI smoke test."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from neuron_mpi.errors import NeuronMPIError
from neuron_mpi.launch import mpirun
from neuron_mpi.launch.mpirun import LaunchError, build_command, with_mpi4py
from env_helpers import child_env

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "tests" / "mpi_programs" / "smoke_topology.py"
LAUNCHER = Path(sys.executable).parent / "neuron-mpirun"
ENV = ("NEURON_MPI_INSTANCE", "NEURON_LOGICAL_NC_CONFIG", "NEURON_MPI_NODES")
PY = sys.executable


def _np(argv) -> int:
    return int(argv[argv.index("-n") + 1])


def _program(argv) -> list[str]:
    return argv[argv.index("-n") + 2:]


# --- rank counts ---------------------------------------------------------------------
@pytest.mark.parametrize("opts,ranks,nodes", [
    ([], 64, 1),
    (["--lnc", "1"], 128, 1),
    (["--nodes", "2"], 128, 2),
    (["--instance", "trn1.32xlarge"], 32, 1),
    (["--instance", "trn1.32xlarge", "--nodes", "4"], 128, 4),
    (["--instance", "inf2.48xlarge"], 24, 1),
    (["--instance", "inf2.24xlarge"], 12, 1),
    (["--instance", "trn1.2xlarge"], 2, 1),
    (["--instance", "trn2-ultraserver"], 256, 1),
    (["-n", "8"], 8, 1),
    (["-n", "1"], 1, 1),
    (["-n", "128"], 128, 2),
    (["--nodes", "2", "-n", "128"], 128, 2),
    (["--instance", "inf2.48xlarge", "-n", "6"], 6, 1),
])
def test_rank_count_per_topology(opts, ranks, nodes):
    argv, env = build_command(opts + ["python", "prog.py"])
    assert _np(argv) == ranks
    assert env["NEURON_MPI_NODES"] == str(nodes)


def test_env_topology_is_used(monkeypatch):
    monkeypatch.setenv("NEURON_MPI_INSTANCE", "trn1.32xlarge")
    monkeypatch.setenv("NEURON_MPI_NODES", "2")
    argv, env = build_command(["python", "prog.py"])
    assert _np(argv) == 64
    assert env["NEURON_MPI_INSTANCE"] == "trn1.32xlarge"
    argv, env = build_command(["--instance", "trn2.48xlarge", "--nodes", "1", "echo"])
    assert _np(argv) == 64 and env["NEURON_MPI_NODES"] == "1"


@pytest.mark.parametrize("opts,needle", [
    (["-n", "100"], "must fill every node"),
    (["-n", "65", "--nodes", "1"], "ranks"),
    (["-n", "0"], "-n"),
    (["--instance", "inf2.48xlarge", "-n", "48"], "no EFA"),
    (["--instance", "trn1.2xlarge", "--nodes", "2"], "no EFA"),
    (["--instance", "trn9.huge"], "unknown instance"),
    (["--lnc", "3"], "lnc"),
    (["--nodes", "0"], "nodes"),
    (["--timeout", "0"], "--timeout"),
])
def test_bad_launches_raise(opts, needle):
    with pytest.raises(NeuronMPIError) as info:
        build_command(opts + ["python", "prog.py"])
    assert needle in str(info.value)


def test_no_command_is_an_error():
    with pytest.raises(LaunchError):
        build_command(["-n", "4"])
    with pytest.raises(LaunchError):
        build_command(["-n", "4", "--"])


# --- the command line ------------------------------------------------------------------
def test_mpiexec_beside_python_is_preferred():
    argv, _ = build_command(["-n", "2", "echo", "hi"])
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.exists():
        assert argv[0] == str(beside)
    assert argv[1:] == ["-n", "2", "echo", "hi"]


def test_no_mpiexec_anywhere(monkeypatch, tmp_path):
    monkeypatch.setattr(mpirun.sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(LaunchError) as info:
        build_command(["-n", "2", "echo"])
    assert "pip install 'neuron-mpi[mpi]'" in str(info.value)


@pytest.mark.parametrize("command,expected", [
    (["python", "prog.py", "-n", "3"], [PY, "-m", "mpi4py", "prog.py", "-n", "3"]),
    (["python3", "prog.py"], [PY, "-m", "mpi4py", "prog.py"]),
    (["python", "-m", "pkg.mod", "x"], [PY, "-m", "mpi4py", "-m", "pkg.mod", "x"]),
    (["python", "-c", "print(1)"], [PY, "-m", "mpi4py", "-c", "print(1)"]),
    (["python", "-u", "-X", "dev", "-W", "error", "p.py"],
     [PY, "-u", "-X", "dev", "-W", "error", "-m", "mpi4py", "p.py"]),
    (["python", "-mpkg"], [PY, "-m", "mpi4py", "-m", "pkg"]),
    (["python", "-m", "mpi4py", "p.py"], [PY, "-m", "mpi4py", "p.py"]),
    (["/opt/py/bin/python3.11", "p.py"], ["/opt/py/bin/python3.11", "-m", "mpi4py", "p.py"]),
    ([PY, "p.py"], [PY, "-m", "mpi4py", "p.py"]),
    (["python"], [PY]),
    (["echo", "python", "p.py"], ["echo", "python", "p.py"]),
    (["./a.out", "-c", "x"], ["./a.out", "-c", "x"]),
])
def test_python_is_wrapped_in_mpi4py(command, expected):
    argv, _ = build_command(["-n", "2", "--"] + command)
    assert _program(argv) == expected


def test_with_mpi4py_leaves_non_python_alone():
    assert with_mpi4py(["bash", "-c", "python x.py"]) == ["bash", "-c", "python x.py"]
    assert with_mpi4py(["pythonic", "x"]) == ["pythonic", "x"]


def test_double_dash_is_optional():
    a, _ = build_command(["-n", "4", "python", "p.py", "-n", "9", "--lnc", "7"])
    b, _ = build_command(["-n", "4", "--", "python", "p.py", "-n", "9", "--lnc", "7"])
    assert a == b
    assert _program(a)[-4:] == ["-n", "9", "--lnc", "7"]


def test_launcher_options_after_double_dash_belong_to_the_program():
    argv, _ = build_command(["--", "echo", "--instance", "x"])
    assert _program(argv) == ["echo", "--instance", "x"] and _np(argv) == 64


# --- environment -----------------------------------------------------------------------
def test_env_additions(monkeypatch):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    _, env = build_command(["--instance", "trn2.48xlarge", "--lnc", "1", "-n", "8", "echo"])
    assert env["PRTE_MCA_rmaps_default_mapping_policy"] == ":oversubscribe"
    assert env["NEURON_MPI_INSTANCE"] == "trn2.48xlarge"
    assert env["NEURON_LOGICAL_NC_CONFIG"] == "1"
    assert env["NEURON_MPI_NODES"] == "1"
    assert env["NUMBA_CACHE_DIR"].endswith(os.path.join("neuron_mpi", "numba"))
    root = os.geteuid() == 0
    assert ("OMPI_ALLOW_RUN_AS_ROOT" in env) == root
    assert ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM" in env) == root
    assert all(isinstance(v, str) for v in env.values())


def test_hosts_go_to_mpiexec_with_one_node_per_host_and_the_environment(monkeypatch):
    monkeypatch.setenv("NEURON_MPI_TIMEOUT", "90")
    argv, env = build_command(["--instance", "trn1.32xlarge", "--nodes", "2",
                               "--host", "a:32,b:32", "python", "prog.py"])
    assert argv[argv.index("--host") + 1] == "a:32,b:32"
    assert argv[argv.index("--map-by") + 1] == "ppr:32:node:oversubscribe"
    exported = {argv[i + 1] for i, w in enumerate(argv) if w == "-x"}
    assert set(env) <= exported and "NEURON_MPI_TIMEOUT" in exported
    assert argv[-3:] == ["-m", "mpi4py", "prog.py"] and _np(argv) == 64


def test_hostfile_and_host_errors(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("a slots=64\n")
    with pytest.raises(LaunchError, match="--hostfile and --host"):
        build_command(["--hostfile", str(hosts), "--host", "a", "echo"])
    with pytest.raises(LaunchError, match="--hostfile: .* not found"):
        build_command(["--hostfile", str(tmp_path / "none"), "echo"])
    argv, _ = build_command(["--hostfile", str(hosts), "-n", "8", "echo"])
    assert argv[argv.index("--hostfile") + 1] == str(hosts)


def test_users_numba_cache_is_kept(monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", "/somewhere/mine")
    _, env = build_command(["echo"])
    assert "NUMBA_CACHE_DIR" not in env


def test_warm_command_uses_the_programs_python():
    assert mpirun.warm_command(["python", "p.py"])[0] == PY
    assert mpirun.warm_command(["/x/python3", "p.py"])[0] == "/x/python3"
    assert mpirun.warm_command(["echo"])[0] == PY
    assert "warm" in mpirun.warm_command(["echo"])[2]


def test_warm_up_of_a_warm_cache_imports_no_numba(tmp_path):
    """Once kernels.warm() has run for this source into the cache, the launcher's
    warm-up finds its stamp (kernels.warmed) and ends without importing numba (about
    1.5 CPU s spared per launch); in an empty cache it is not warm."""
    import neuron_mpi.kernels as k

    k.warm()  # (loads from the suite's warmed cache; leaves the stamp)
    assert k.warmed()
    cmd = mpirun.warm_command(["python", "p.py"])
    res = subprocess.run([cmd[0], "-X", "importtime", *cmd[1:]], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    imported = [ln.rsplit("|", 1)[-1].strip() for ln in res.stderr.splitlines()
                if ln.startswith("import time:")]
    assert "neuron_mpi.kernels.aot" in imported and "numba" not in imported, res.stderr[-2000:]
    empty = subprocess.run([PY, "-c", "import neuron_mpi.kernels as k; print(k.warmed())"],
                           env=dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path)),
                           capture_output=True, text=True, timeout=120)
    assert empty.stdout.split() == ["False"], empty.stderr


# --- main(): dry run, errors, status -----------------------------------------------------
def test_dry_run_prints_and_runs_nothing(capsys, monkeypatch):
    monkeypatch.setattr(mpirun.subprocess, "Popen", None)  # would fail if called
    monkeypatch.setattr(mpirun.subprocess, "run", None)
    code = mpirun.main(["--dry-run", "-n", "8", "python", "prog.py", "a b"])
    out = capsys.readouterr().out
    assert code == 0
    assert "NEURON_MPI_INSTANCE=trn2.48xlarge" in out
    assert "PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe" in out
    assert "-n 8" in out and "-m mpi4py prog.py 'a b'" in out
    assert "warm-up" in out
    code = mpirun.main(["--dry-run", "--no-warm", "echo"])
    assert code == 0 and "warm-up" not in capsys.readouterr().out


@pytest.mark.parametrize("argv,needle", [
    (["-n", "100", "python", "p.py"], "must fill every node"),
    (["--instance", "nope", "echo"], "unknown instance"),
    (["--bogus", "echo"], "unrecognized arguments"),
    ([], "no command"),
])
def test_main_errors_exit_2_with_one_line(capsys, argv, needle):
    code = mpirun.main(argv)
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.splitlines()) == 1 and err.startswith("neuron-mpirun: error: ")
    assert needle in err


def test_status_passthrough():
    assert mpirun._status(0) == 0
    assert mpirun._status(3) == 3
    assert mpirun._status(-9) == 137


def test_dry_run_subprocess_no_traceback():
    res = subprocess.run([PY, "-m", "neuron_mpi.launch.mpirun", "--instance", "inf2.48xlarge",
                          "-n", "48", "python", "p.py"], capture_output=True, text=True,
                         env=child_env(ENV), timeout=60)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.startswith("neuron-mpirun: error: -n:")


# --- MPI (slow) ----------------------------------------------------------------------------
def _launcher() -> list[str]:
    if LAUNCHER.exists():
        return [str(LAUNCHER)]
    return [PY, "-m", "neuron_mpi.launch.mpirun"]


@pytest.mark.slow
def test_smoke_8_ranks():
    res = subprocess.run(_launcher() + ["-n", "8", "python", str(SMOKE)], capture_output=True,
                         text=True, env=child_env(ENV), timeout=180, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "smoke_topology OK: 8 ranks on trn2.48xlarge LNC=2, 2 chips" in res.stdout


@pytest.mark.slow
def test_smoke_8_ranks_through_a_hostfile(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost slots=8\n")
    res = subprocess.run(_launcher() + ["--hostfile", str(hosts), "-n", "8", "python",
                                        str(SMOKE)], capture_output=True,
                         text=True, env=child_env(ENV), timeout=180, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "smoke_topology OK: 8 ranks on trn2.48xlarge LNC=2, 2 chips" in res.stdout


@pytest.mark.slow
def test_exception_on_one_rank_aborts_the_job():
    res = subprocess.run(_launcher() + ["--no-warm", "-n", "4", "python", str(SMOKE),
                                        "--fail-rank", "2"],
                         capture_output=True, text=True, env=child_env(ENV), timeout=60, cwd=ROOT)
    assert res.returncode != 0
    assert "rank 2 fails on purpose" in res.stderr
