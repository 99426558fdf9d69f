"""Launch the MPI suites (tests/mpi/) under mpiexec: one launch per configuration.

Each configuration runs

    mpiexec -n N python -m mpi4py -m pytest --with-mpi -p no:cacheprovider -q
            --timeout=T --timeout-method=thread tests/mpi/<files>

with its environment (NEURON_MPI_INSTANCE ...), in its own process group, killed
whole if it runs past its limit. A configuration passes when mpiexec exits 0 (any
rank failing makes `python -m mpi4py` abort the job with a non-zero status) and
rank 0's report shows that the suite really ran on N ranks with tests passed and
none failed (so a suite that skipped everything, e.g. without --with-mpi, fails).

The plain user program tests/mpi/program_check.py is run the same way for a few N.
This is the one place MPI is launched; the rest of tests/ never starts MPI.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MPI_DIR = ROOT / "tests" / "mpi"
# test_mpi_link_stats.py last: it checks everything sent before it
ALL = ("test_mpi_collectives.py", "test_mpi_api.py", "test_mpi_validation.py",
       "test_mpi_groups.py", "test_mpi_rooted.py", "test_mpi_link_stats.py")
# variables of ours that must not leak in from the caller's environment
_SCRUB = ("NEURON_MPI_INSTANCE", "NEURON_LOGICAL_NC_CONFIG", "NEURON_MPI_NODES",
          "NEURON_MPI_ALGO", "NEURON_MPI_TIMEOUT", "NEURON_MPI_CHECK", "NEURON_MPI_TEST_STRICT",
          "NEURON_MPI_STRICT", "NEURON_MPI_AOT",
          "NEURON_MPI_TRANSPORT", "NEURON_MPI_SHM", "NEURON_MPI_SHM_SLOTS",
          "NEURON_MPI_SHM_SLOT_KIB", "NEURON_MPI_SHM_READ_KIB", "NEURON_MPI_SHM_READ_PIECE_KIB",
          "NEURON_MPI_TEST_LEVEL", "NEURON_MPI_TEST_BATCH", "NEURON_MPI_TRACE")


@dataclass(frozen=True)
class Config:
    name: str
    ranks: int
    env: dict = field(default_factory=dict)
    files: tuple = ALL
    test_timeout: int = 120  # pytest-timeout, per test (a hang ends the job)
    limit: int = 300  # the whole launch


CONFIGS = [
    Config("trn2-1", 1),
    Config("trn2-2", 2),
    # 3 ranks are refused by the strict group rules: the suite uses init(strict=False)
    Config("trn2-3-nonstrict", 3, {"NEURON_MPI_TEST_STRICT": "0"}),
    Config("trn2-8", 8, {"NEURON_MPI_TEST_LEVEL": "full"}),
    Config("inf2.48xlarge-24", 24, {"NEURON_MPI_INSTANCE": "inf2.48xlarge",
                                     "NEURON_MPI_TEST_LEVEL": "reduced"}),
    Config("trn1.32xlarge-32", 32, {"NEURON_MPI_INSTANCE": "trn1.32xlarge",
                                     "NEURON_MPI_TEST_LEVEL": "reduced"}),
    # 64 ranks on 2 cores are slow: small data, "slim" matrix (tests/mpi/test_mpi_collectives.py)
    Config("trn2-64", 64, {"NEURON_MPI_INSTANCE": "trn2.48xlarge",
                           "NEURON_MPI_TEST_LEVEL": "slim"}, limit=600, test_timeout=240),
    # the other transports: every hop over MPI (today's path before shared memory),
    # and one shared-memory domain per emulated node, MPI between them (the EFA hops,
    # as between hosts); small landing slots so large messages go in many pieces, and
    # small read pieces (copied transfers inside a node are read from their senders'
    # buffers in pieces of 16 KiB, larger than a slot; reduced ones go in 4 KiB pieces)
    Config("trn2-8-transport-mpi", 8, {"NEURON_MPI_TRANSPORT": "mpi",
                                       "NEURON_MPI_TEST_LEVEL": "reduced"}),
    # one domain of 8 with small slots and read pieces: a message of many pieces fills
    # a channel, as the point-to-point tests of the wrong size need to find lost rings
    Config("trn2-8-small-slots", 8, {"NEURON_MPI_SHM_SLOT_KIB": "4",
                                     "NEURON_MPI_SHM_READ_KIB": "2",
                                     "NEURON_MPI_SHM_READ_PIECE_KIB": "16",
                                     "NEURON_MPI_TEST_LEVEL": "reduced"},
           files=("test_mpi_collectives.py",)),
    # two nodes: 2 x 32 ranks of trn1.32xlarge joined by EFA (default: hierarchical),
    # one domain per node: the collectives' matrix, groups (tp, dp, forced algorithms,
    # across domains) and the ledger. With one domain for both nodes (what one host
    # runs by default) the schedules are the same and only the EFA hops' transport
    # differs: shared memory, which the 64-rank suite above runs whole (that launch,
    # 55-75 s, is no longer made). The API and argument checks do not depend on the
    # topology and ran above
    Config("trn1.32xlarge-2nodes-64-shm-per-node", 64,
           {"NEURON_MPI_INSTANCE": "trn1.32xlarge", "NEURON_MPI_NODES": "2",
            "NEURON_MPI_SHM": "node", "NEURON_MPI_SHM_SLOT_KIB": "4",
            "NEURON_MPI_SHM_READ_KIB": "2", "NEURON_MPI_SHM_READ_PIECE_KIB": "16",
            "NEURON_MPI_TEST_LEVEL": "slim"},
           files=("test_mpi_collectives.py", "test_mpi_groups.py", "test_mpi_link_stats.py"),
           limit=600, test_timeout=240),
]

PROGRAMS = [
    (2, "trn2.48xlarge"),
    (12, "inf2.48xlarge"),
    (16, "trn1.32xlarge"),
]


# --- launching ---------------------------------------------------------------------------
def mpiexec() -> str:
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("mpiexec")
    if found is None:
        pytest.skip("no mpiexec beside this Python or on PATH")
    return found


def numba_cache_dir() -> str:
    if os.environ.get("NUMBA_CACHE_DIR"):
        return os.environ["NUMBA_CACHE_DIR"]
    from neuron_mpi.launch.mpirun import default_numba_cache
    return default_numba_cache()


def base_env(extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    env["PRTE_MCA_rmaps_default_mapping_policy"] = ":oversubscribe"
    env["NUMBA_CACHE_DIR"] = numba_cache_dir()
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


@pytest.fixture(scope="module", autouse=True)
def warm_kernels():
    """Compile (or load) the numba kernels once, in one process, into the cache
    every rank then loads from."""
    cache = Path(numba_cache_dir())
    cache.mkdir(parents=True, exist_ok=True)
    res = subprocess.run([sys.executable, "-c", "import neuron_mpi.kernels as k; k.warm()"],
                         env=base_env({}), cwd=ROOT, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, f"kernel warm-up failed:\n{res.stdout}\n{res.stderr}"


def launch(argv: list[str], env: dict, limit: float) -> tuple[int, str, float]:
    """Run argv in its own process group; kill the whole group past ``limit``.
    Returns (exit status, stdout+stderr, seconds)."""
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                out, _ = proc.communicate(timeout=15)
                break
            except subprocess.TimeoutExpired:
                continue
        else:
            out = ""
        out = (out or "") + f"\n[harness] killed: the launch ran past {limit:g} s\n"
        return -1, out, time.monotonic() - t0
    return proc.returncode, out, time.monotonic() - t0


def _tail(text: str, limit: int = 20000) -> str:
    return text if len(text) <= limit else "...\n" + text[-limit:]


_SUMMARY_LINE = re.compile(r"\b\d+ (?:passed|failed|skipped|errors?|xfailed|xpassed|deselected)\b"
                           r".* in [\d.]+s")


def summary_counts(output: str) -> dict[str, int]:
    """Counts of pytest's last summary line ("12 passed, 3 skipped in 4.5s")."""
    lines = [ln for ln in output.splitlines() if _SUMMARY_LINE.search(ln)]
    if not lines:
        return {}
    return {word: int(num) for num, word in re.findall(r"(\d+) (\w+)", lines[-1].split(" in ")[0])}


# --- the suites ------------------------------------------------------------------------------
@pytest.mark.parametrize("cfg", CONFIGS, ids=[c.name for c in CONFIGS])
def test_mpi_suite(cfg: Config):
    argv = [mpiexec(), "-n", str(cfg.ranks), sys.executable, "-m", "mpi4py", "-m", "pytest",
            "--with-mpi", "-p", "no:cacheprovider", "-q", "--color=no", "--tb=short",
            f"--timeout={cfg.test_timeout}", "--timeout-method=thread", "--durations=5",
            *[str(MPI_DIR / f) for f in cfg.files]]
    rc, out, secs = launch(argv, base_env(cfg.env), cfg.limit)
    print(f"{cfg.name}: {cfg.ranks} ranks, {secs:.1f} s, exit {rc}")
    for line in out.splitlines():  # rank 0's slowest tests and its summary
        if re.match(r"\s*[\d.]+s (call|setup|teardown) ", line) or _SUMMARY_LINE.search(line):
            print("   ", line.strip())
    assert rc == 0, f"{cfg.name}: mpiexec exited {rc} after {secs:.0f} s\n{_tail(out)}"
    counts = summary_counts(out)
    assert f"neuron-mpi MPI suite: {cfg.ranks} ranks" in out, (
        f"{cfg.name}: rank 0 did not report an MPI run on {cfg.ranks} ranks\n{_tail(out)}")
    assert counts.get("passed", 0) > 0, f"{cfg.name}: nothing passed: {counts}\n{_tail(out)}"
    assert not counts.get("failed") and not counts.get("error") and not counts.get("errors"), (
        f"{cfg.name}: {counts}\n{_tail(out)}")
    assert counts.get("passed", 0) > counts.get("skipped", 0), (
        f"{cfg.name}: mostly skipped: {counts}\n{_tail(out)}")


@pytest.mark.parametrize("ranks,instance", PROGRAMS, ids=[f"{i}-{n}" for n, i in PROGRAMS])
def test_user_program(ranks, instance):
    argv = [mpiexec(), "-n", str(ranks), sys.executable, "-m", "mpi4py",
            str(MPI_DIR / "program_check.py")]
    rc, out, secs = launch(argv, base_env({"NEURON_MPI_INSTANCE": instance}), 180)
    print(f"program_check: {ranks} ranks of {instance}, {secs:.1f} s, exit {rc}")
    assert rc == 0, f"exit {rc}\n{_tail(out)}"
    assert f"program_check OK: {ranks} ranks on {instance}" in out, _tail(out)
    # where a C compiler is (kernels.aot builds with it; the warm-up above built it),
    # ranks load the data plane built ahead of time and never import numba
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc):
        assert "data plane built ahead of time: yes; numba imported: no" in out, _tail(out)


def test_suites_skip_without_mpi():
    """Without --with-mpi the MPI suites skip cleanly (and never start MPI)."""
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--color=no",
            *[str(MPI_DIR / f) for f in ALL]]
    env = base_env({})
    rc, out, _ = launch(argv, env, 120)
    assert rc == 0, _tail(out)
    counts = summary_counts(out)
    assert counts.get("skipped", 0) > 0 and not counts.get("passed"), counts
    assert "neuron-mpi MPI suite" not in out


def test_summary_parser():
    assert summary_counts("x\n==== 12 passed, 3 skipped in 4.50s ====\n") == {
        "passed": 12, "skipped": 3}
    assert summary_counts("1 failed, 2 passed, 1 xfailed in 0.1s") == {
        "failed": 1, "passed": 2, "xfailed": 1}
    assert summary_counts("no summary") == {}
