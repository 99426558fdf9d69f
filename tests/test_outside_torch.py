"""torch's own distributed test suite, and the DDP and FSDP2 examples, on the
"neuron" backend under mpiexec.

* tests/outside/torch_suite.py runs torch/testing/_internal/distributed/
  distributed_test.py (shipped in the torch wheel) in-process on every rank: at 4
  ranks the whole suite, at 8 ranks its group tests (-k group). Every test that
  applies to a CPU backend outside torch runs and must pass; the skips (CUDA-only
  tests, tests the suite reserves for backends it names) and the deselected tests
  are listed with their reasons in docs/outside-suites.md.
* tests/outside/torch_checks.py (ours) runs in the same launches: every dtype bit
  for bit, the rooted and all-to-all forms, async Work, groups, and the errors on
  bad input (a tensor on another device, shapes that differ across ranks, a group
  the instance refuses).
* examples/ddp_train.py and examples/fsdp2_train.py train at 8 ranks with
  --compare gloo: identical parameters on every rank and identical to gloo's.

Needs torch (the test command installs it: tools/test.sh).
"""
from __future__ import annotations

import re
import sys

import pytest

from test_mpi_suites import ROOT, _tail, base_env, launch, mpiexec

pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[torch]')")

SUITE = ROOT / "tests" / "outside" / "torch_suite.py"
CHECKS = ROOT / "tests" / "outside" / "torch_checks.py"  # ours, in the same launch


def _summaries(out: str) -> list[dict]:
    found = []
    for line in out.splitlines():
        if re.search(r"\d+ passed.* in [\d.]+s", line):
            found.append({w: int(n) for n, w in re.findall(r"(\d+) (\w+)", line.split(" in ")[0])})
    return found


def _run_suite(ranks: int, extra: list[str], limit: float):
    argv = [mpiexec(), "-n", str(ranks), sys.executable, "-m", "mpi4py", "-m", "pytest",
            "-p", "no:cacheprovider", "-q", "--color=no", "--tb=short", "-rs",
            "--timeout=120", *extra, str(SUITE), str(CHECKS)]
    rc, out, secs = launch(argv, base_env({"PYTORCH_PRINT_REPRO_ON_FAILURE": "0"}), limit)
    sums = _summaries(out)
    print(f"torch distributed_test, {ranks} ranks {' '.join(extra)}: {sums[:1]}, {secs:.1f} s")
    assert rc == 0, f"mpiexec exited {rc} after {secs:.0f} s\n{_tail(out)}"
    assert len(sums) == ranks, f"expected a pytest summary from each of {ranks} ranks\n{_tail(out)}"
    for s in sums:  # every rank ran the same tests with the same outcome
        assert s == sums[0], f"ranks disagree: {sums}"
        assert not s.get("failed") and not s.get("error") and not s.get("errors"), (
            f"{s}\n{_tail(out)}")
    return sums[0], out


@pytest.mark.slow
def test_torch_distributed_suite_4_ranks():
    counts, _ = _run_suite(4, [], 900)
    assert counts.get("passed", 0) >= 70, counts


@pytest.mark.slow
def test_torch_distributed_group_tests_8_ranks():
    counts, _ = _run_suite(8, ["-k", "group"], 900)
    assert counts.get("passed", 0) >= 30, counts


@pytest.mark.slow
@pytest.mark.parametrize("script", ["ddp_train.py", "fsdp2_train.py"])
def test_example_identical_to_gloo(script):
    argv = [mpiexec(), "-n", "8", sys.executable, "-m", "mpi4py",
            str(ROOT / "examples" / script), "--compare", "gloo"]
    rc, out, secs = launch(argv, base_env({}), 600)
    name = script.split("_")[0]
    line = next((ln for ln in out.splitlines() if ln.startswith(f"{name}: ")), None)
    print(f"{script}: {line} ({secs:.1f} s)")
    assert rc == 0, f"{script} exited {rc}\n{_tail(out)}"
    assert line is not None and "on 8 ranks" in line and line.endswith(
        "identical on every rank, identical to gloo"), _tail(out)
