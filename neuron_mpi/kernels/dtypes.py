"""The data types a collective can carry, their short names and aliases.

Short names follow nccom-test (``fp32``, ``bf16``, ``fp8_e4m3`` ...); the
aliases accepted on top of them are the spellings nccom-test, nccl-tests and
NCCL use (``float``, ``half``, ``bfloat16``, ``fp8``, ``f8e5m2``, ``int`` ...).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from ..vocab import DTYPE_ALIASES, DTYPE_NAMES, KERNEL_REDUCE_OPS, SMALL_FLOAT_NAMES

__all__ = ["DTYPES", "REDUCE_OPS", "SMALL_FLOATS", "canonical_dtype", "dtype_name"]

#: Canonical short name -> numpy dtype, for every type a collective may carry
#: (the names: neuron_mpi.vocab.DTYPE_NAMES, in this order).
DTYPES: dict[str, np.dtype] = dict(zip(DTYPE_NAMES, map(np.dtype, (
    np.float32, np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn,
    ml_dtypes.float8_e5m2, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32,
    np.int64, np.uint64, np.float64)), strict=True))

#: The reduction operators; "avg" is "sum" followed by ``divide_into``.
REDUCE_OPS = KERNEL_REDUCE_OPS

#: Floating types narrower than fp32: arithmetic runs in float32 and each
#: result is rounded back (round to nearest, ties to even).
SMALL_FLOATS = frozenset(DTYPES[k] for k in SMALL_FLOAT_NAMES)

# Lower-case spelling -> short name (neuron_mpi.vocab).  Strings only; the Python
# types float and int keep numpy's meaning.
_ALIASES = DTYPE_ALIASES

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


_KNOWN: dict = {}  # numpy dtypes already accepted -> their canonical dtype


def canonical_dtype(x) -> np.dtype:
    """The numpy dtype of one of the supported types, from any spelling.

    Accepts a numpy dtype or anything ``np.dtype`` accepts (``np.float32``,
    ``"float32"``, ``ml_dtypes.bfloat16``), a short name from ``DTYPES`` or
    one of the nccom-test / nccl-tests aliases (case-insensitive).  Raises
    ValueError naming the dtype and listing the supported ones otherwise.
    """
    if isinstance(x, np.dtype):
        known = _KNOWN.get(x)  # every call checks its array's dtype: skip the loop
        if known is not None:
            return known
    elif isinstance(x, str):
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
            if isinstance(x, np.dtype):
                _KNOWN[x] = supported
            return supported
    if not dt.isnative:
        raise _unsupported(x, "byte order is not native")
    raise _unsupported(x, "" if str(dt) == _shown(x) else str(dt))


def dtype_name(dtype) -> str:
    """Canonical short name (a key of ``DTYPES``) of a supported dtype."""
    return _NAMES[canonical_dtype(dtype)]
