"""torch tensors as numpy arrays sharing their memory, in the dtypes neuron_mpi
carries: bfloat16 and float8 (e4m3fn, e5m2) become ml_dtypes arrays (viewed through
a same-width integer tensor, since numpy has no such types), complex tensors become
their real and imaginary parts (sum and average only), bool tensors their bytes
(0 or 1: reductions as logical or / and, ``reduce_op``)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

from ..errors import InvalidArgumentError

_VIA = {
    torch.bfloat16: (torch.int16, np.dtype(ml_dtypes.bfloat16)),
    torch.float8_e4m3fn: (torch.uint8, np.dtype(ml_dtypes.float8_e4m3fn)),
    torch.float8_e5m2: (torch.uint8, np.dtype(ml_dtypes.float8_e5m2)),
    torch.bool: (torch.uint8, np.dtype(np.uint8)),
}
_PLAIN = (torch.float32, torch.float64, torch.float16, torch.int8, torch.uint8, torch.int16,
          torch.int32, torch.int64, torch.uint16, torch.uint32, torch.uint64)
_COMPLEX = (torch.complex64, torch.complex128)

SUPPORTED = ("float32, float64, float16, bfloat16, float8_e4m3fn, float8_e5m2, int8, uint8, "
             "int16, uint16, int32, uint32, int64, uint64, complex64, complex128, bool")

#: a reduction of bool tensors, on their 0/1 bytes: SUM and MAX are a logical or,
#: PRODUCT and MIN a logical and (as gloo's; no average)
_BOOL_OPS = {"sum": "max", "max": "max", "prod": "min", "min": "min"}


def complex_ok(op: str) -> bool:
    return op in ("sum", "avg")


def reduce_op(op: str, tensors, name: str) -> str:
    """The op the Communicator reduces ``tensors`` with for the caller's ``op``;
    InvalidArgumentError naming ``name`` for an op their dtype does not take."""
    tensors = [t for t in tensors if isinstance(t, torch.Tensor)]  # (as_numpy names others)
    for t in tensors:
        if t.is_complex() and not complex_ok(op):
            raise InvalidArgumentError(
                f"{name}: complex tensors reduce with SUM or AVG only, got {op}")
    bools = [t.dtype == torch.bool for t in tensors]
    if not any(bools):
        return op
    if not all(bools):
        raise InvalidArgumentError(
            f"{name}: bool tensors reduce as logical or / and, so one call cannot mix them "
            "with tensors of other dtypes")
    if op not in _BOOL_OPS:
        raise InvalidArgumentError(
            f"{name}: bool tensors reduce with SUM, PRODUCT, MIN or MAX, got {op}")
    return _BOOL_OPS[op]


def as_numpy(t, name: str, write: bool = True) -> np.ndarray:
    """A numpy view of CPU tensor ``t``; InvalidArgumentError naming ``name``
    otherwise."""
    if not isinstance(t, torch.Tensor):
        raise InvalidArgumentError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cpu":
        raise InvalidArgumentError(
            f"{name}: the neuron backend takes CPU tensors, got a tensor on {t.device}")
    if t.is_sparse or t.layout != torch.strided:
        raise InvalidArgumentError(f"{name}: expected a dense (strided) tensor, got {t.layout}")
    t = t.detach()
    if t.dtype in _VIA:
        via, np_dt = _VIA[t.dtype]
        return t.view(via).numpy().view(np_dt)
    if t.dtype in _COMPLEX:
        return torch.view_as_real(t).numpy()
    if t.dtype in _PLAIN:
        return t.numpy()
    raise InvalidArgumentError(
        f"{name}: unsupported dtype {t.dtype}; the neuron backend carries {SUPPORTED}")
