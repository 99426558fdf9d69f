"""Write bit-level codecs as numba intrinsics in plain-looking Python.

numba widens every integer operation to 64 bits, which halves the width of
the vectorised loops (and some shifts defeat LLVM's narrowing altogether).
The fp16 / bf16 / fp8 codecs are therefore emitted as LLVM IR on 32-bit
lanes: a codec is a Python function over ``U32`` / ``F32`` values, whose
operators build IR (``+ - & | << >>`` are i32 add, sub, and, or, shl and
*logical* shift right; ``< <= > >=`` compare unsigned; ``eq``/``ne``),
and ``decoder`` / ``encoder`` turn it into an intrinsic that is inlined
into the kernel loops.

Note: numba's disk cache is keyed on the file that defines a kernel; a
change here does not invalidate cached kernels of other files.  After
editing this file, clear NUMBA_CACHE_DIR (and neuron_mpi/kernels/__pycache__).
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

#: numba options of every kernel.  error_model="numpy": no ZeroDivisionError
#: branch in the loops (divisors are checked before the call).
JIT_OPTIONS = dict(nogil=True, cache=True, error_model="numpy")

I32 = ir.IntType(32)
F32_T = ir.FloatType()


class U32:
    """An unsigned 32-bit LLVM value with Python operators."""

    __slots__ = ("b", "v")

    def __init__(self, builder: ir.IRBuilder, value):
        self.b = builder
        self.v = value

    def _c(self, other):
        return other.v if isinstance(other, U32) else ir.Constant(I32, other)

    def _new(self, value) -> "U32":
        return U32(self.b, value)

    def __add__(self, o):
        return self._new(self.b.add(self.v, self._c(o)))

    def __sub__(self, o):
        return self._new(self.b.sub(self.v, self._c(o)))

    def __and__(self, o):
        return self._new(self.b.and_(self.v, self._c(o)))

    def __or__(self, o):
        return self._new(self.b.or_(self.v, self._c(o)))

    def __lshift__(self, o):
        return self._new(self.b.shl(self.v, self._c(o)))

    def __rshift__(self, o):
        return self._new(self.b.lshr(self.v, self._c(o)))

    __radd__ = __add__
    __rand__ = __and__
    __ror__ = __or__

    def __lt__(self, o):
        return self.b.icmp_unsigned("<", self.v, self._c(o))

    def __le__(self, o):
        return self.b.icmp_unsigned("<=", self.v, self._c(o))

    def __gt__(self, o):
        return self.b.icmp_unsigned(">", self.v, self._c(o))

    def __ge__(self, o):
        return self.b.icmp_unsigned(">=", self.v, self._c(o))

    def eq(self, o):
        return self.b.icmp_unsigned("==", self.v, self._c(o))

    def ne(self, o):
        return self.b.icmp_unsigned("!=", self.v, self._c(o))

    def as_f32(self) -> "F32":
        """The float32 with these bits."""
        return F32(self.b, self.b.bitcast(self.v, F32_T))

    def to_f32(self) -> "F32":
        """The float32 nearest to this unsigned integer (exact below 2**24)."""
        return F32(self.b, self.b.uitofp(self.v, F32_T))


class F32:
    """A float32 LLVM value: IEEE add / multiply by a constant, bits, NaN test."""

    __slots__ = ("b", "v")

    def __init__(self, builder: ir.IRBuilder, value):
        self.b = builder
        self.v = value

    def _c(self, other):
        return other.v if isinstance(other, F32) else ir.Constant(F32_T, float(other))

    def __add__(self, o):
        return F32(self.b, self.b.fadd(self.v, self._c(o)))

    def __mul__(self, o):
        return F32(self.b, self.b.fmul(self.v, self._c(o)))

    def bits(self) -> U32:
        return U32(self.b, self.b.bitcast(self.v, I32))

    def isnan(self):
        return self.b.fcmp_unordered("uno", self.v, self.v)


def select(cond, a, b) -> U32:
    """``a if cond else b``; one of a and b may be an int constant."""
    ref = a if isinstance(a, U32) else b
    return ref._new(ref.b.select(cond, ref._c(a), ref._c(b)))


def umin(a: U32, b) -> U32:
    return select(a < b, a, b)


def _to_i32(builder, value, ty):
    if ty.bitwidth < 32:
        return builder.zext(value, I32)
    if ty.bitwidth > 32:
        return builder.trunc(value, I32)
    return value


def decoder(body, name: str):
    """Intrinsic ``name(code) -> float32`` from ``body(U32) -> U32 bits``."""

    def typer(typingctx, code):
        if not isinstance(code, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            u = U32(builder, _to_i32(builder, args[0], code))
            return builder.bitcast(body(u).v, F32_T)

        return types.float32(code), codegen

    typer.__name__ = typer.__qualname__ = name
    return intrinsic(typer)


def encoder(body, name: str, bits: int):
    """Intrinsic ``name(float32) -> uint{bits}`` from ``body(F32) -> U32``."""
    ret = {8: types.uint8, 16: types.uint16}[bits]

    def typer(typingctx, x):
        if x != types.float32:
            return None

        def codegen(context, builder, sig, args):
            code = body(F32(builder, args[0]))
            return builder.trunc(code.v, ir.IntType(bits))

        return ret(x), codegen

    typer.__name__ = typer.__qualname__ = name
    return intrinsic(typer)
