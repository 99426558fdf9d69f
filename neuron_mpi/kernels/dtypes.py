"""The data types a collective can carry, their short names and aliases.

Short names follow nccom-test (``fp32``, ``bf16``, ``fp8_e4m3`` ...); the
aliases accepted on top of them are the spellings nccom-test, nccl-tests and
NCCL use (``float``, ``half``, ``bfloat16``, ``fp8``, ``f8e5m2``, ``int`` ...).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

__all__ = ["DTYPES", "REDUCE_OPS", "SMALL_FLOATS", "canonical_dtype", "dtype_name"]

#: Canonical short name -> numpy dtype, for every type a collective may carry.
DTYPES: dict[str, np.dtype] = {
    "fp32": np.dtype(np.float32),
    "fp16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "fp8_e4m3": np.dtype(ml_dtypes.float8_e4m3fn),
    "fp8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "int8": np.dtype(np.int8),
    "uint8": np.dtype(np.uint8),
    "int16": np.dtype(np.int16),
    "uint16": np.dtype(np.uint16),
    "int32": np.dtype(np.int32),
    "uint32": np.dtype(np.uint32),
    "int64": np.dtype(np.int64),
    "uint64": np.dtype(np.uint64),
    "fp64": np.dtype(np.float64),
}

#: The reduction operators; "avg" is "sum" followed by ``divide_into``.
REDUCE_OPS = ("sum", "prod", "max", "min")

#: Floating types narrower than fp32: arithmetic runs in float32 and each
#: result is rounded back (round to nearest, ties to even).
SMALL_FLOATS = frozenset(DTYPES[k] for k in ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2"))

# Lower-case spelling -> short name.  Strings only.  Where NCCL and numpy
# disagree, these follow NCCL / nccl-tests: "float" is fp32 (numpy: float64),
# "int" is int32 and "uint" uint32 (numpy: 64 bits); the Python types float
# and int keep numpy's meaning.  numpy's own codes ("f4", "i8" = int64, "u2")
# are left to numpy, so no alias here collides with one.
_ALIASES: dict[str, str] = {name: name for name in DTYPES}
_ALIASES.update({
    "float": "fp32", "float32": "fp32", "single": "fp32",
    "half": "fp16", "float16": "fp16",
    "bfloat16": "bf16",
    # fp8 e4m3 is the "fn" variant: no infinity, one NaN per sign
    "fp8": "fp8_e4m3", "e4m3": "fp8_e4m3", "f8e4m3": "fp8_e4m3", "fp8e4m3": "fp8_e4m3",
    "fp8_e4m3fn": "fp8_e4m3", "float8_e4m3": "fp8_e4m3", "float8_e4m3fn": "fp8_e4m3",
    "e5m2": "fp8_e5m2", "f8e5m2": "fp8_e5m2", "fp8e5m2": "fp8_e5m2",
    "float8_e5m2": "fp8_e5m2",
    "double": "fp64", "float64": "fp64",
    # NCCL: ncclChar = int8, ncclInt = int32, ncclUint32
    "char": "int8", "short": "int16", "int": "int32", "uint": "uint32",
})

_NAMES: dict[np.dtype, str] = {dt: name for name, dt in DTYPES.items()}


def _shown(x) -> str:
    if isinstance(x, str):
        return x
    return getattr(x, "__name__", None) or str(x)


def _unsupported(x, why: str = "") -> ValueError:
    extra = f" ({why})" if why else ""
    return ValueError(
        f"unsupported dtype {_shown(x)!r}{extra}; supported: {', '.join(DTYPES)} "
        f"(aliases include fp8, float, half, bfloat16, double, int)")


def canonical_dtype(x) -> np.dtype:
    """The numpy dtype of one of the supported types, from any spelling.

    Accepts a numpy dtype or anything ``np.dtype`` accepts (``np.float32``,
    ``"float32"``, ``ml_dtypes.bfloat16``), a short name from ``DTYPES`` or
    one of the nccom-test / nccl-tests aliases (case-insensitive).  Raises
    ValueError naming the dtype and listing the supported ones otherwise.
    """
    if isinstance(x, str):
        name = _ALIASES.get(x.strip().lower())
        if name is not None:
            return DTYPES[name]
    if x is None:                       # np.dtype(None) would be float64
        raise _unsupported(x)
    try:
        dt = np.dtype(x)
    except (TypeError, ValueError):
        raise _unsupported(x, "not a dtype") from None
    # dtype equality, not identity: '>f4' (big-endian) is not float32 here
    for supported in DTYPES.values():
        if dt == supported:
            return supported
    if not dt.isnative:
        raise _unsupported(x, "byte order is not native")
    raise _unsupported(x, "" if str(dt) == _shown(x) else str(dt))


def dtype_name(dtype) -> str:
    """Canonical short name (a key of ``DTYPES``) of a supported dtype."""
    return _NAMES[canonical_dtype(dtype)]
