"""torch's own distributed test suite against the "neuron" backend, in-process
under mpiexec (tests/test_outside_torch.py launches it; never collected by a plain
pytest run: the file name does not start with test_).

torch ships torch/testing/_internal/distributed/distributed_test.py with a hook for
backends from outside torch: a name in ``DistTestCases.backend_feature["plugin"]``
counts as an available backend. torch's own runner spawns a fresh set of processes
per test; here every MPI rank runs the same tests in the same order on one process
group made once by ``init_process_group("neuron")``:

* ``_barrier`` (a file-based barrier upstream) is MPI_Barrier on the world;
* a test that ends its process with a TEST_SKIPS exit code (e.g. "no_cuda", which
  the upstream runner turns into a skip) is reported as skipped with that message;
* the tests listed in docs/outside-suites.md are deselected by the launcher, each
  for the reason given there.
"""
from __future__ import annotations

import functools
import os
import sys
import tempfile
import unittest

import neuron_mpi.torch  # noqa: E402,F401  registers "neuron", fills RANK/WORLD_SIZE from MPI
import torch.distributed as dist  # noqa: E402
from mpi4py import MPI  # noqa: E402

os.environ.setdefault("BACKEND", "neuron")
if "TEMP_DIR" not in os.environ:  # one directory for all ranks (test_get_rank reads it)
    os.environ["TEMP_DIR"] = MPI.COMM_WORLD.bcast(
        tempfile.mkdtemp(prefix="neuron-torch-suite-") if MPI.COMM_WORLD.Get_rank() == 0
        else None)
from torch.testing._internal.common_distributed import (  # noqa: E402
    TEST_SKIPS, DistTestCases)

DistTestCases.backend_feature["plugin"].add("neuron")  # the outside-backend hook
# features the suite looks up by backend name: "neuron" has DDP on CPU tensors
# (examples/ddp_train.py); it has no CUDA, so not "gpu", "cuda" or "subgroup" (CUDA)
DistTestCases.backend_feature["ddp"].add("neuron")

from torch.testing._internal.common_utils import TestCase  # noqa: E402
from torch.testing._internal.distributed import distributed_test as DT  # noqa: E402

for sub in ("barrier", "test_dir"):
    os.makedirs(os.path.join(os.environ["TEMP_DIR"], sub), exist_ok=True)

if not dist.is_initialized():
    dist.init_process_group("neuron")

_SKIP_CODES = {v.exit_code: v.message for v in TEST_SKIPS.values()}


def _skips_from_exit(fn):
    @functools.wraps(fn)
    def run(self, *args, **kwargs):
        try:
            return fn(self, *args, **kwargs)
        except SystemExit as e:
            if e.code in _SKIP_CODES:
                raise unittest.SkipTest(_SKIP_CODES[e.code]) from None
            raise
    return run


class TestNeuronBackend(DT.DistributedTest._DistTestBase, TestCase):
    rank = dist.get_rank()
    world_size = os.environ["WORLD_SIZE"]  # a string, as upstream's property
    file_name = os.path.join(os.environ["TEMP_DIR"], "init_file")

    @property
    def init_method(self):
        return f"file://{self.file_name}"

    def _barrier(self, *args, **kwargs):
        MPI.COMM_WORLD.Barrier()


for _name in dir(TestNeuronBackend):
    if _name.startswith("test_"):
        setattr(TestNeuronBackend, _name, _skips_from_exit(getattr(TestNeuronBackend, _name)))
