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
  --compare gloo (their run(), from torch_checks.py, in the 8-rank launch):
  identical parameters on every rank and identical to gloo's.

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
    env = base_env({"PYTORCH_PRINT_REPRO_ON_FAILURE": "0"})
    env["PYTHONPATH"] = str(ROOT / "examples")  # torch_checks imports the examples
    rc, out, secs = launch(argv, env, limit)
    sums = [{k: v for k, v in s.items() if k != "warnings"} for s in _summaries(out)]
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
def test_torch_distributed_group_tests_and_examples_8_ranks():
    """The suite's group tests, our group checks and the two examples, at 8 ranks."""
    # the examples' own line ("ddp: 4 steps on 8 ranks, ...: identical on every rank,
    # identical to gloo") is asserted inside test_example_identical_to_gloo
    counts, out = _run_suite(8, ["-k", "group or example", "-rA"], 900)
    assert counts.get("passed", 0) >= 36, counts
    for name in ("ddp_train", "fsdp2_train"):
        assert f"PASSED tests/outside/torch_checks.py::test_example_identical_to_gloo[{name}]" \
            in out, f"{name} did not pass\n{_tail(out)}"
