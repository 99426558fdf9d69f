"""The names a user types, each list kept once (pure: no numpy, no MPI).

* Reduce ops: ``REDUCE_OPS`` here (``nm.SUM`` ... are these strings). ``avg`` is a
  sum followed by one division; the kernels reduce with the other four
  (``KERNEL_REDUCE_OPS``).
* Data types: ``DTYPE_NAMES`` here, the short names nccom-test prints (``fp32``,
  ``bf16``, ``fp8_e4m3`` ...), and ``DTYPE_ALIASES``, the other spellings accepted;
  ``neuron_mpi.kernels.dtypes`` pairs each name with its numpy dtype.
* Operations: the communicator's in ``neuron_mpi.algorithms.registry`` (``OPS``:
  ``all_reduce``, ``all_to_all``, ``broadcast`` ...), the benchmark's and the model's
  (nccom-test's: ``alltoall``, ``sendrecv``, ``allr`` ...) in
  ``neuron_mpi.model.workload`` (``OPS``, ``ALIASES``, ``canonical_op``): each list
  stays with the code that gives its names a meaning.
"""
from __future__ import annotations

SUM, PROD, MAX, MIN, AVG = REDUCE_OPS = ("sum", "prod", "max", "min", "avg")
#: what a reduction kernel applies; avg is sum, then a division by the group size
KERNEL_REDUCE_OPS = tuple(op for op in REDUCE_OPS if op != AVG)

#: every type a collective may carry, by its nccom-test short name
DTYPE_NAMES = ("fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "int8", "uint8", "int16",
               "uint16", "int32", "uint32", "int64", "uint64", "fp64")
#: floating types narrower than fp32 (arithmetic in float32, each result rounded back)
SMALL_FLOAT_NAMES = ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2")

#: lower-case spelling -> short name. Where NCCL and numpy disagree these follow NCCL /
#: nccl-tests: "float" is fp32 (numpy: float64), "int" is int32 and "uint" uint32
#: (numpy: 64 bits); numpy's own codes ("f4", "i8" = int64, "u2") are left to numpy, so
#: no alias here collides with one.
DTYPE_ALIASES: dict[str, str] = {name: name for name in DTYPE_NAMES}
DTYPE_ALIASES.update({
    "float": "fp32", "float32": "fp32", "single": "fp32",
    "half": "fp16", "float16": "fp16",
    "bfloat16": "bf16",
    # fp8 e4m3 is the "fn" variant: no infinity, one NaN per sign
    # (nccom-test's page spells its fp8 "fp8 (fp8e4)")
    "fp8": "fp8_e4m3", "fp8e4": "fp8_e4m3", "e4m3": "fp8_e4m3", "f8e4m3": "fp8_e4m3",
    "fp8e4m3": "fp8_e4m3",
    "fp8_e4m3fn": "fp8_e4m3", "float8_e4m3": "fp8_e4m3", "float8_e4m3fn": "fp8_e4m3",
    "e5m2": "fp8_e5m2", "f8e5m2": "fp8_e5m2", "fp8e5m2": "fp8_e5m2",
    "float8_e5m2": "fp8_e5m2",
    "double": "fp64", "float64": "fp64",
    # NCCL: ncclChar = int8, ncclInt = int32, ncclUint32
    "char": "int8", "short": "int16", "int": "int32", "uint": "uint32",
})


def dtype_help() -> str:
    """The -d/--datatype help of the benchmark and the model."""
    return ("data type (default fp32): " + " ".join(DTYPE_NAMES)
            + " (also fp8, float, half, bfloat16, double, int ...)")

