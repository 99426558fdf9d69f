"""neuron_mpi.vocab: reduce ops and dtype names are listed once; the rest derive."""
from __future__ import annotations

import re
from pathlib import Path

import neuron_mpi as nm
from neuron_mpi import vocab
from neuron_mpi.kernels import DTYPES, REDUCE_OPS
from neuron_mpi.model import workload as W

PACKAGE = Path(__file__).resolve().parent.parent / "neuron_mpi"


def test_the_lists_agree():
    assert (nm.SUM, nm.PROD, nm.MAX, nm.MIN, nm.AVG) == vocab.REDUCE_OPS
    assert REDUCE_OPS + ("avg",) == vocab.REDUCE_OPS
    assert tuple(DTYPES) == vocab.DTYPE_NAMES
    assert set(vocab.DTYPE_ALIASES.values()) == set(vocab.DTYPE_NAMES)
    assert set(W.NCCOM_ALIASES.values()) <= set(W.OPS)
    assert "all_reduce|allr" in W.ops_help() and "alltoallv" in W.ops_help()


# three names of a list in a row, as a literal tuple / list / set
_LISTS = [re.compile(r'"sum",\s*"prod",\s*"max"'),
          re.compile(r'"(?:u?int8|fp32|fp16|bf16)",\s*"(?:u?int\d+|fp\d+|bf16)",\s*"(?:u?int\d+|fp\d+|bf16)"')]


def test_no_other_module_lists_them():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "vocab.py":
            continue
        text = path.read_text()
        for rx in _LISTS:
            offenders += [f"{path.name}: {m.group(0)}" for m in rx.finditer(text)]
    assert not offenders, "derive these from neuron_mpi.vocab:\n" + "\n".join(offenders)
