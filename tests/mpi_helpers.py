"""Verifiable inputs and NumPy references for the MPI suites (tests/mpi/).

Pure NumPy, no MPI: every rank builds the whole input table of a collective (the
inputs of all ranks) from one seed, takes its own row as its input and computes
the answer it must get with plain NumPy (nccl-tests ``verifiable/``).

Values are small integers. For sum / avg they are masked so that, on every
element, the sum of the magnitudes over all ranks stays within the integers the
dtype holds exactly (fp8 e4m3: 16, bf16: 256, fp16: 2048): every partial sum in
any order is then exact, so any algorithm must agree bit for bit. For prod at
most 8 ranks per element contribute a factor other than 1, each of magnitude
<= 2 (floats): partial products are powers of two <= 256. Integers wrap the same
way in any order, so they are exact anyway.
"""
from __future__ import annotations

import os
import zlib

import ml_dtypes
import numpy as np

from neuron_mpi.algorithms import registry

# The launch's size, known before MPI starts (parametrizations are built at
# collection); 1 outside mpiexec. Checks of mechanics that do not depend on the
# topology run whole in small worlds (<= SMALL_WORLD ranks) and in part above.
WORLD_HINT = int(os.environ.get("OMPI_COMM_WORLD_SIZE") or os.environ.get("PMI_SIZE") or 1)
SMALL_WORLD = 8


def waited_out(seconds: float) -> float:
    """The deadline of a call that a test lets time out on purpose (a member that
    never comes): ``seconds`` above SMALL_WORLD ranks, where 64 processes share 2
    cores and the present members' own steps take a while; a third of it up to
    SMALL_WORLD, where they take milliseconds (each such wait is idle time of the
    test command, once per launch)."""
    return seconds if WORLD_HINT > SMALL_WORLD else seconds / 3

DTYPES = {
    "fp32": np.dtype(np.float32),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "fp8_e4m3": np.dtype(ml_dtypes.float8_e4m3fn),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "uint8": np.dtype(np.uint8),
    "fp64": np.dtype(np.float64),
    "fp16": np.dtype(np.float16),
}
DTYPE_NAMES = tuple(DTYPES)
OPS = ("sum", "max", "min", "prod", "avg")

# Largest integer magnitude every value up to which the dtype holds exactly (floats)
# or that we allow without wrapping (integers).
_EXACT = {"fp32": 2**24, "bf16": 256, "fp8_e4m3": 16, "int32": 2**30, "int64": 2**40,
          "uint8": 255, "fp64": 2**53, "fp16": 2048}
_CAP = 50  # largest magnitude of one rank's value (keeps failures readable)
_SMALL_FLOATS = {DTYPES["bf16"], DTYPES["fp8_e4m3"], DTYPES["fp16"]}

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLD = np.uint64(0x9E3779B97F4A7C15)


def name_of(dtype) -> str:
    dt = np.dtype(dtype)
    for k, v in DTYPES.items():
        if v == dt:
            return k
    raise KeyError(dt)


def mix(seed: int, rows, cols) -> np.ndarray:
    """Deterministic pseudo-random uint64 per (seed, row, col) (splitmix64)."""
    r = np.asarray(rows, np.uint64).reshape(-1, 1)
    c = np.asarray(cols, np.uint64).reshape(1, -1)
    with np.errstate(over="ignore"):
        x = (np.uint64(seed & (2**63 - 1)) * _GOLD + r * _M1 + c * _GOLD + _M2)
        x = (x ^ (x >> np.uint64(30))) * _M1
        x = (x ^ (x >> np.uint64(27))) * _M2
        x = x ^ (x >> np.uint64(31))
    return x


def _uniform(seed, n, count, lo, hi) -> np.ndarray:
    """int64 (n, count) uniform in [lo, hi]."""
    span = np.uint64(hi - lo + 1)
    return (mix(seed, np.arange(n), np.arange(count)) % span).astype(np.int64) + lo


def int_table(seed: int, n: int, count: int, dtype, op: str = "any") -> np.ndarray:
    """The integer values all n ranks contribute: int64 array (n, count).

    op: "sum"/"avg" (magnitudes masked to stay exact), "prod" (few factors != 1),
    anything else: any value the dtype holds exactly (max, min, data movement).
    """
    name = name_of(dtype)
    unsigned = name == "uint8"
    B = _EXACT[name]
    idx = np.arange(count).reshape(1, -1)
    ranks = np.arange(n).reshape(-1, 1)
    if op in ("sum", "avg"):
        m = max(1, min(B // n, _CAP))
        active_max = max(1, B // m)  # ranks per element that may be non-zero
        k = -(-n // active_max)
        active = (idx + ranks) % k == 0
        v = _uniform(seed, n, count, 0 if unsigned else -m, m)
        return np.where(active, v, 0)
    if op == "prod":
        k = -(-n // 8)
        active = (idx + ranks) % k == 0
        choices = np.array([1, 2, 3] if unsigned else
                           ([2, -1, 3, -2] if np.dtype(dtype).kind == "i" else [2, -1, -2, 1]),
                           np.int64)
        v = choices[_uniform(seed, n, count, 0, len(choices) - 1)]
        return np.where(active, v, 1)
    lim = min(B, 100)
    return _uniform(seed, n, count, 0 if unsigned else -lim, lim)


def to_dtype(ints: np.ndarray, dtype) -> np.ndarray:
    """Exact conversion of small integers to ``dtype`` (asserts exactness)."""
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        out = ints.astype(dt)
    else:
        out = ints.astype(np.float64).astype(dt)
        back = out.astype(np.float64)
        assert np.array_equal(back, ints.astype(np.float64)), "input not exact in " + str(dt)
    return out


def table(seed: int, n: int, count: int, dtype, op: str = "any") -> np.ndarray:
    """(n, count) array of ``dtype``: row r is rank r's input."""
    return to_dtype(int_table(seed, n, count, dtype, op), dtype)


def reduce_ref(ints: np.ndarray, op: str, dtype) -> np.ndarray:
    """What reducing the rows of ``ints`` (int64, (n, count)) with ``op`` gives in
    ``dtype``, computed exactly and rounded once."""
    dt = np.dtype(dtype)
    n = ints.shape[0]
    if op in ("sum", "avg"):
        acc = ints.sum(axis=0)
    elif op == "prod":
        acc = ints.prod(axis=0)
    elif op == "max":
        acc = ints.max(axis=0)
    elif op == "min":
        acc = ints.min(axis=0)
    else:
        raise ValueError(op)
    # integers wrap (astype from int64 wraps modulo 2**bits); floats are exact here
    res = acc.astype(dt) if dt.kind in "iu" else acc.astype(np.float64).astype(dt)
    if op != "avg":
        return res
    if dt in _SMALL_FLOATS:
        return (res.astype(np.float32) / np.float32(n)).astype(dt)
    if dt.kind == "f":
        return (res / dt.type(n)).astype(dt)
    w = res.astype(np.int64)
    q = np.sign(w) * (np.abs(w) // n)  # truncate toward zero
    return q.astype(dt)


def diff(got: np.ndarray, want: np.ndarray, what: str = "") -> str | None:
    """None when got equals want bit for bit (shape, dtype, bytes); else a message
    naming the first differing positions."""
    if got.dtype != want.dtype:
        return f"{what}: dtype {got.dtype}, want {want.dtype}"
    if got.shape != want.shape:
        return f"{what}: shape {got.shape}, want {want.shape}"
    if got.size == 0:
        return None
    g = np.ascontiguousarray(got).reshape(-1).view(np.uint8).reshape(got.size, -1)
    w = np.ascontiguousarray(want).reshape(-1).view(np.uint8).reshape(want.size, -1)
    bad = np.nonzero((g != w).any(axis=1))[0]
    if len(bad) == 0:
        return None
    gf, wf = got.reshape(-1), want.reshape(-1)
    shown = ", ".join(f"[{i}] got {gf[i]!r} want {wf[i]!r}" for i in bad[:6])
    return f"{what}: {len(bad)} of {got.size} elements differ: {shown}"


def assert_same(got, want, what: str = "") -> None:
    msg = diff(np.asarray(got), np.asarray(want), what)
    assert msg is None, msg


def counts(seed: int, n: int, lo: int, hi: int) -> list[int]:
    """n counts in [lo, hi] from a seed (the same on every rank)."""
    return [int(v) for v in _uniform(seed, 1, n, lo, hi)[0]]


def count_matrix(seed: int, n: int, hi: int) -> list[list[int]]:
    """m[i][j] in [0, hi]: rows rank i sends rank j (all_to_all_v)."""
    return [[int(v) for v in row] for row in _uniform(seed, n, n, 0, hi)]


def permutation(seed: int, n: int) -> list[int]:
    order = np.argsort(mix(seed, [0], np.arange(n))[0], kind="stable")
    return [int(v) for v in order]


def seed_of(*parts) -> int:
    """A seed from labels, the same in every process (unlike hash())."""
    return zlib.crc32("/".join(map(str, parts)).encode())


# --- which algorithm applies: read from the registry (neuron_mpi/algorithms/) ------------
APPLIES = {op: registry.applies_to(op) for op in registry.OPS}
ALGORITHMS = registry.names()
LEVELS = APPLIES["all_reduce"]  # the reductions' algorithms


def structurally_applies(topo, ranks, algo) -> bool:
    """Whether ``algo`` fits a group of world ``ranks`` on ``topo`` (its registry
    entry's own rule, for the reducing collectives)."""
    from neuron_mpi.algorithms.group import GroupView

    return registry.get(algo).applies("all_reduce", GroupView(topo, ranks)) is None


def applies(comm, op, algo) -> bool:
    """Whether forcing ``algo`` on ``op`` over communicator ``comm`` must work (else it
    must raise AlgorithmError). None (the default) always applies."""
    from neuron_mpi.algorithms.group import GroupView

    return algo is None or (algo in APPLIES[op] and registry.get(algo).reason(
        op, GroupView(comm.topology, comm.ranks)) is None)


def settled_bytes(comm, barrier: bool = True) -> dict:
    """Payload bytes this rank has sent per (next hop, link kind), non-zero entries.

    With ``barrier``, first a barrier on ``comm`` (the world): every earlier
    collective has then completed on every rank, so the only traffic that can still
    pass through this rank (it forwards for others) is the barrier's own, which
    carries no bytes. Take it before a call that must not move data, then again
    without the barrier after it: the two must be equal.
    """
    if barrier:
        comm.barrier()
    return {(e["dst"], e["link"]): e["bytes"] for e in comm.link_stats() if e["bytes"]}
