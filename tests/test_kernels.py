"""neuron_mpi.kernels: jit kernels bit-identical to their NumPy references.

Plain pytest, no MPI.  The first run compiles ~80 numba specialisations
(about 10 s); later runs load them from numba's cache (NUMBA_CACHE_DIR).
"""
from __future__ import annotations

import sys
import threading
import time

import ml_dtypes
import numpy as np
import pytest

from neuron_mpi.kernels import (DTYPES, REDUCE_OPS, canonical_dtype, divide_into,
                                divide_into_ref, dtype_name, reduce_into,
                                reduce_into_ref, warm)
from neuron_mpi.kernels.convert import from_float32, to_float32
from neuron_mpi.kernels.reduce import jit_kernels

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

NAMES = list(DTYPES)
FLOAT_NAMES = ["fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "fp64"]
SMALL = ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2"]
INT_NAMES = [n for n in NAMES if n not in FLOAT_NAMES]
LENGTHS = [0, 1, 7, 1000, 4099]
UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------
def is_float(dt: np.dtype) -> bool:
    return dtype_name(dt) in FLOAT_NAMES


def bits(a: np.ndarray) -> np.ndarray:
    return a.view(UINT[a.dtype.itemsize])


def isnan(a: np.ndarray) -> np.ndarray:
    return np.isnan(a.astype(np.float64)) if is_float(a.dtype) else np.zeros(a.shape, bool)


def specials(dt: np.dtype) -> np.ndarray:
    """NaNs, infinities, signed zeros, extremes, subnormals of a dtype."""
    if not is_float(dt):
        info = np.iinfo(dt)
        return np.array([0, 1, 2, 3, info.max, info.min, info.max - 1,
                         info.min + 1, info.max // 2, info.min // 2], dt)
    fi = ml_dtypes.finfo(dt)
    vals = [0.0, -0.0, 1.0, -1.0, 1.5, -2.5, float(fi.max), -float(fi.max),
            float(fi.tiny), -float(fi.tiny), float(fi.smallest_subnormal),
            -float(fi.smallest_subnormal), 3 * float(fi.smallest_subnormal),
            float(fi.eps), float(fi.max) / 2, np.inf, -np.inf, np.nan, -np.nan]
    out = np.array(vals, np.float64).astype(dt)
    # NaNs with other payloads (signalling too) where the format has them
    if dt.itemsize == 2:
        nans = np.array([0x7C01, 0xFC01, 0x7E01, 0x7D55] if dt == np.float16 else
                        [0x7F81, 0xFF81, 0x7FC1, 0x7FFF], np.uint16).view(dt)
        out = np.concatenate([out, nans])
    elif dt.itemsize == 4:
        out = np.concatenate([out, np.array([0x7F800001, 0xFFC00001, 0x7FFFFFFF],
                                            np.uint32).view(dt)])
    elif dt.itemsize == 8:
        out = np.concatenate([out, np.array([0x7FF0000000000001, 0xFFF8000000000001],
                                            np.uint64).view(dt)])
    return out


def random_data(dt: np.dtype, n: int, rng: np.random.Generator) -> np.ndarray:
    """Random bit patterns, tame values and specials, mixed."""
    raw = rng.integers(0, 256, n * dt.itemsize, dtype=np.uint8).view(dt).copy()
    if n == 0:
        return raw
    if is_float(dt):
        tame = (rng.standard_normal(n) * 2.0 ** rng.integers(-6, 7, n)).astype(dt)
        pick = rng.random(n)
        raw = np.where(pick < 0.4, tame, raw)
    sp = specials(dt)
    where = rng.random(n) < 0.15
    raw[where] = sp[rng.integers(0, sp.size, int(where.sum()))]
    return np.ascontiguousarray(raw)


def assert_bits_equal(got, want, a=None, b=None, op=None):
    """Bit-identical, except a NaN result may differ in payload / sign where
    both operands of sum or prod were NaN: IEEE leaves that open and numpy
    itself is position-dependent (its SIMD body returns the first operand,
    its scalar tail the second)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    same = bits(got) == bits(want)
    if op in ("sum", "prod") and a is not None and is_float(a.dtype):
        both = isnan(a) & isnan(b)
        assert isnan(got)[both].all()
        same |= both
    if not same.all():
        i = np.flatnonzero(~same)[:5]
        msg = f"{(~same).sum()} mismatches, e.g. at {i.tolist()}: got {got[i]}, want {want[i]}"
        if a is not None:
            msg += f" (a={a[i]}, b={b[i]})"
        raise AssertionError(msg)


def check_reduce(a, b, op):
    got, want = a.copy(), a.copy()
    b_before = b.copy()
    reduce_into(got, b, op)
    reduce_into_ref(want, b, op)
    assert_bits_equal(got, want, a, b, op)
    assert_bits_equal(b, b_before)          # src untouched
    return got


# --------------------------------------------------------------------------
# dtypes
# --------------------------------------------------------------------------
def test_dtypes_table():
    assert list(DTYPES) == ["fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "int8",
                            "uint8", "int16", "uint16", "int32", "uint32", "int64",
                            "uint64", "fp64"]
    assert DTYPES["bf16"] == np.dtype(ml_dtypes.bfloat16)
    assert DTYPES["fp8_e4m3"] == np.dtype(ml_dtypes.float8_e4m3fn)
    assert DTYPES["fp8_e5m2"] == np.dtype(ml_dtypes.float8_e5m2)
    assert DTYPES["fp64"] == np.float64 and DTYPES["fp32"] == np.float32
    assert REDUCE_OPS == ("sum", "prod", "max", "min")
    for name, dt in DTYPES.items():
        assert dtype_name(dt) == name
        assert canonical_dtype(name) == dt
        assert canonical_dtype(dt) == dt and canonical_dtype(dt.type) == dt


@pytest.mark.parametrize("alias,name", [
    ("fp8", "fp8_e4m3"), ("float", "fp32"), ("float32", "fp32"), ("FP32", "fp32"),
    ("half", "fp16"), ("float16", "fp16"), ("bfloat16", "bf16"), ("double", "fp64"),
    ("float64", "fp64"), ("int", "int32"), ("int32", "int32"), ("uint32", "uint32"),
    ("int8", "int8"), ("uint8", "uint8"), ("int64", "int64"), ("uint64", "uint64"),
    ("f8e4m3", "fp8_e4m3"), ("f8e5m2", "fp8_e5m2"), ("e5m2", "fp8_e5m2"),
    ("float8_e4m3fn", "fp8_e4m3"), (" bf16 ", "bf16"), ("<f4", "fp32"), ("i2", "int16"),
    ("i8", "int64"), ("u1", "uint8"), ("f2", "fp16"), ("BFloat16", "bf16"), ("Half", "fp16"),
    (np.float32, "fp32"), (np.uint16, "uint16"), (ml_dtypes.bfloat16, "bf16"),
    (ml_dtypes.float8_e5m2, "fp8_e5m2"), (np.dtype("int64"), "int64"), (float, "fp64"),
])
def test_canonical_dtype_aliases(alias, name):
    assert canonical_dtype(alias) == DTYPES[name]
    assert dtype_name(alias) == name


@pytest.mark.parametrize("bad,shown", [
    (np.complex64, "complex64"), (bool, "bool"), (object, "object"),
    (ml_dtypes.float8_e3m4, "float8_e3m4"), ("float8_e3m4", "float8_e3m4"),
    ("nosuchtype", "nosuchtype"), (None, "None"), (">f4", ">f4"), ("U8", "U8"),
])
def test_canonical_dtype_rejects(bad, shown):
    with pytest.raises(ValueError) as exc:
        canonical_dtype(bad)
    msg = str(exc.value)
    assert shown in msg and "fp32" in msg and "fp8_e5m2" in msg and "uint64" in msg
    with pytest.raises(ValueError):
        dtype_name(bad)


# --------------------------------------------------------------------------
# reduce_into vs reduce_into_ref
# --------------------------------------------------------------------------
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_matches_reference(op, name, n):
    rng = np.random.default_rng([REDUCE_OPS.index(op), NAMES.index(name), n])
    dt = DTYPES[name]
    a, b = random_data(dt, n, rng), random_data(dt, n, rng)
    check_reduce(a, b, op)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_specials_all_pairs(op, name):
    dt = DTYPES[name]
    sp = specials(dt)
    a, b = np.repeat(sp, sp.size), np.tile(sp, sp.size)
    check_reduce(a, b, op)


@pytest.mark.parametrize("name", ["fp8_e4m3", "fp8_e5m2"])
@pytest.mark.parametrize("op", REDUCE_OPS)
def test_fp8_exhaustive_pairs(op, name):
    codes = np.arange(256, dtype=np.uint8)
    a = np.repeat(codes, 256).view(DTYPES[name])
    b = np.tile(codes, 256).view(DTYPES[name])
    check_reduce(a, b, op)


@pytest.mark.parametrize("name", ["bf16", "fp16"])
@pytest.mark.parametrize("op", REDUCE_OPS)
def test_16bit_every_code_against_samples(op, name):
    rng = np.random.default_rng(16)
    dt = DTYPES[name]
    codes = np.arange(2 ** 16, dtype=np.uint16).view(dt)
    partners = np.concatenate([specials(dt), random_data(dt, 12, rng)])
    a = np.tile(codes, partners.size)
    b = np.repeat(partners, codes.size)
    check_reduce(a, b, op)
    check_reduce(b, a, op)


def _neighbours(dt):
    """(v, half an ulp above v) for every finite positive code v of dt."""
    codes = np.arange(2 ** (8 * dt.itemsize), dtype=UINT[dt.itemsize])
    v = codes.view(dt).astype(np.float64)
    ok = np.isfinite(v) & (v > 0)
    up = codes[ok] + 1
    nxt = up.view(dt).astype(np.float64)
    keep = np.isfinite(nxt)
    return codes[ok][keep], v[ok][keep], (nxt[keep] - v[ok][keep]) / 2


@pytest.mark.parametrize("name", SMALL)
def test_sum_ties_round_to_even(name):
    """v + ulp/2 lies exactly half-way: the result is the even neighbour."""
    dt = DTYPES[name]
    codes, v, half = _neighbours(dt)
    halfq = half.astype(dt)
    exact = halfq.astype(np.float64) == half            # half an ulp representable
    codes, v, halfq = codes[exact], v[exact], halfq[exact]
    a = codes.view(dt).copy()
    got = check_reduce(a, halfq, "sum")
    expect = codes + (codes & 1)                        # ties to even
    # (rounding up past the largest finite value gives inf, or NaN for e4m3fn)
    fine = np.isfinite(expect.view(dt).astype(np.float64))
    assert (bits(got)[fine] == expect[fine]).all()
    assert codes.size > 100


@pytest.mark.parametrize("name,big,expect", [
    ("bf16", 3.3e38, np.inf), ("fp16", 65504.0, np.inf), ("fp8_e5m2", 57344.0, np.inf),
    ("fp8_e4m3", 448.0, np.nan),
])
def test_sum_overflow(name, big, expect):
    dt = DTYPES[name]
    a = np.array([big, -big, big], np.float32).astype(dt)
    got = check_reduce(a, a.copy(), "sum").astype(np.float64)
    if np.isnan(expect):
        assert np.isnan(got).all() and np.signbit(got).tolist() == [False, True, False]
    else:
        assert got.tolist() == [np.inf, -np.inf, np.inf]


def test_fp8_e4m3_saturation_edge():
    dt = DTYPES["fp8_e4m3"]
    # 448 + 16 = 464: half-way between 448 and "480" (the NaN code): even -> 448
    a = np.array([448, 448, -448, 448], np.float32).astype(dt)
    b = np.array([16, 32, -16, 0], np.float32).astype(dt)
    got = check_reduce(a, b, "sum")
    assert bits(got).tolist() == [0x7E, 0x7F, 0xFE, 0x7E]


@pytest.mark.parametrize("name", ["fp32", "fp64", "bf16", "fp16", "fp8_e4m3"])
def test_max_min_signed_zero_and_nan(name):
    dt = DTYPES[name]
    a = np.array([-0.0, 0.0, np.nan, 1.0, np.nan], np.float32).astype(dt)
    b = np.array([0.0, -0.0, 1.0, np.nan, -np.nan], np.float32).astype(dt)
    for op, fn in (("max", np.maximum), ("min", np.minimum)):
        got = check_reduce(a, b, op).astype(np.float64)
        want = fn(a.astype(np.float64), b.astype(np.float64))
        assert np.signbit(got[:2]).tolist() == np.signbit(want[:2]).tolist()
        assert np.isnan(got[2:]).all()


@pytest.mark.parametrize("name", INT_NAMES)
def test_integers_wrap_like_numpy(name):
    dt = DTYPES[name]
    info = np.iinfo(dt)
    a = np.array([info.max, info.min, info.max, -1 if info.min else 0], dt)
    b = np.array([1, -1 if info.min else info.max, info.max, info.max], dt)
    for op in ("sum", "prod"):
        got = check_reduce(a, b, op)
        assert (got == (a + b if op == "sum" else a * b)).all()


def test_self_and_overlapping_operands():
    rng = np.random.default_rng(3)
    for name in ("fp32", "bf16", "int16", "fp8_e5m2"):
        dt = DTYPES[name]
        buf = random_data(dt, 1001, rng)
        for op in REDUCE_OPS:
            got, want = buf.copy(), buf.copy()
            reduce_into(got, got, op)
            reduce_into_ref(want, want, op)
            assert_bits_equal(got, want, buf, buf, op)
            got, want = buf.copy(), buf.copy()
            reduce_into(got[1:], got[:-1], op)          # partial overlap
            reduce_into_ref(want[1:], want[:-1], op)
            assert_bits_equal(got, want, buf, np.concatenate([buf[:1], buf[:-1]]), op)


def test_unaligned_arrays():
    rng = np.random.default_rng(4)
    for name in ("fp32", "bf16", "fp64"):
        dt = DTYPES[name]
        raw_a = rng.integers(0, 256, 1001 * dt.itemsize + 1, dtype=np.uint8)
        raw_b = rng.integers(0, 256, 1001 * dt.itemsize + 1, dtype=np.uint8)
        a, b = raw_a[1:].view(dt), raw_b[1:].view(dt)
        assert not a.flags.aligned
        check_reduce(a, b, "sum")


def test_read_only_src():
    rng = np.random.default_rng(6)
    for name in ("fp32", "fp8_e4m3"):
        dt = DTYPES[name]
        a = random_data(dt, 100, rng)
        b = np.frombuffer(random_data(dt, 100, rng).tobytes(), dt)
        assert not b.flags.writeable
        check_reduce(a, b, "max")


# --------------------------------------------------------------------------
# conversions (the codecs inside the small float kernels)
# --------------------------------------------------------------------------
@pytest.mark.parametrize("name", SMALL)
def test_decode_every_code(name):
    dt = DTYPES[name]
    codes = np.arange(2 ** (8 * dt.itemsize), dtype=UINT[dt.itemsize]).view(dt)
    assert_bits_equal(to_float32(codes), codes.astype(np.float32))


def _encode_sweep(dt):
    # every 65521st float32 bit pattern: all exponents, both signs, NaN payloads
    sweep = (np.arange(0, 2 ** 32, 65521, dtype=np.uint64)).astype(np.uint32).view(np.float32)
    # every half-way point between neighbours, and the float32s next to it
    codes, v, half = _neighbours(dt)
    mid = np.concatenate([v + half, -(v + half)]).astype(np.float32)
    near = [mid, np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(-np.inf))]
    # float32 subnormals, specials, random bit patterns
    extra = np.array([0, 1, 2, 0x7FFFFF, 0x800000, 0x7F7FFFFF, 0x7F800000, 0x7F800001,
                      0x7FC00000, 0x7FFFFFFF, 0xFFC00001, 0xFF800000, 0x80000001,
                      0x80000000, 0x7F801FFF, 0x7F802000, 0x7FA00000], np.uint32).view(np.float32)
    rand = np.random.default_rng(5).integers(0, 2 ** 32, 200_000, dtype=np.uint64)
    return np.concatenate([sweep, *near, extra, rand.astype(np.uint32).view(np.float32)])


@pytest.mark.parametrize("name", SMALL)
def test_encode_sweep_matches_ml_dtypes(name):
    dt = DTYPES[name]
    x = _encode_sweep(dt)
    got, want = from_float32(x, dt), x.astype(dt)
    same = bits(got) == bits(want)
    assert same.all(), (x[~same][:5], got[~same][:5], want[~same][:5])


def test_bf16_encode_ties_to_even_exhaustive():
    hi = np.arange(2 ** 16, dtype=np.uint32)
    x = ((hi << 16) | 0x8000).view(np.float32)          # exactly half-way
    got = bits(from_float32(x, DTYPES["bf16"])).astype(np.uint32)
    finite = np.isfinite(x) & ((hi & 0x7FFF) < 0x7F7F)  # stays below inf
    assert (got[finite] == (hi + (hi & 1))[finite]).all()


def test_codec_rejects_other_dtypes():
    with pytest.raises(ValueError, match="float32"):
        to_float32(np.zeros(3, np.float32))


# --------------------------------------------------------------------------
# divide_into (the "avg" op)
# --------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 3, 64])
@pytest.mark.parametrize("name", NAMES)
def test_divide_matches_reference(name, n):
    rng = np.random.default_rng([NAMES.index(name), n])
    dt = DTYPES[name]
    for size in (0, 1, 7, 4099):
        a = np.concatenate([specials(dt), random_data(dt, size, rng)])
        got, want = a.copy(), a.copy()
        divide_into(got, n)
        divide_into_ref(want, n)
        assert_bits_equal(got, want)


@pytest.mark.parametrize("name", INT_NAMES)
def test_divide_truncates_toward_zero(name):
    dt = DTYPES[name]
    info = np.iinfo(dt)
    vals = [0, 1, 2, 5, 7, 63, 64, 65, int(info.max), int(info.max) - 1, int(info.max) // 3]
    if info.min:
        vals += [-1, -2, -5, -7, -63, -64, -65, int(info.min), int(info.min) + 1]
    for n in (1, 2, 3, 7, 64, 1000, 2 ** 40):
        a = np.array(vals, dt)
        divide_into(a, n)
        exact = [(abs(v) // n) * (1 if v >= 0 else -1) for v in vals]   # Python ints
        assert a.tolist() == exact, n
        b = np.array(vals, dt)
        divide_into_ref(b, n)
        assert b.tolist() == exact, n


def test_divide_small_floats_round_in_float32():
    for name in SMALL + ["fp32"]:
        dt = DTYPES[name]
        a = np.array([1, -1, 3, 7, 448, -0.0], np.float32).astype(dt)
        got = a.copy()
        divide_into(got, 3)
        want = (a.astype(np.float32) / np.float32(3)).astype(dt)
        assert_bits_equal(got, want)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3", None, 2 ** 63])
def test_divide_rejects_bad_n(bad):
    for fn in (divide_into, divide_into_ref):
        with pytest.raises(ValueError, match="n must"):
            fn(np.ones(4, np.float32), bad)


# --------------------------------------------------------------------------
# argument errors
# --------------------------------------------------------------------------
@pytest.mark.parametrize("fn", [reduce_into, reduce_into_ref])
def test_reduce_argument_errors(fn):
    f32 = np.ones(8, np.float32)
    with pytest.raises(ValueError, match="length"):
        fn(f32.copy(), np.ones(7, np.float32), "sum")
    with pytest.raises(ValueError, match="dtype"):
        fn(f32.copy(), np.ones(8, np.float64), "sum")
    with pytest.raises(ValueError, match="dtype"):
        fn(f32.copy().view(np.int32), f32, "sum")
    with pytest.raises(ValueError, match="op"):
        fn(f32.copy(), f32, "avg")
    with pytest.raises(ValueError, match="1-D"):
        fn(np.ones((2, 4), np.float32), f32.reshape(2, 4), "sum")
    with pytest.raises(ValueError, match="contiguous"):
        fn(np.ones(16, np.float32)[::2], f32, "sum")
    with pytest.raises(ValueError, match="read-only"):
        ro = f32.copy()
        ro.flags.writeable = False
        fn(ro, f32, "sum")
    with pytest.raises(ValueError, match="complex64"):
        fn(np.ones(8, np.complex64), np.ones(8, np.complex64), "sum")
    with pytest.raises(ValueError, match="dtype"):
        fn(np.ones(8, ">f4"), np.ones(8, ">f4"), "sum")
    with pytest.raises(TypeError):
        fn([1.0] * 8, f32, "sum")


def test_divide_argument_errors():
    with pytest.raises(ValueError, match="bool"):
        divide_into(np.ones(4, bool), 2)
    with pytest.raises(ValueError, match="contiguous"):
        divide_into(np.ones(8, np.float32)[::2], 2)


# --------------------------------------------------------------------------
# compilation, cache, GIL
# --------------------------------------------------------------------------
def test_warm_compiles_every_specialisation():
    from neuron_mpi.kernels import atomics
    from neuron_mpi.transport import native

    assert warm() == 4 * 14 + 14 + atomics.warm() + native.warm()
    kernels = jit_kernels()
    assert len(kernels) >= 4 * 5 + 4 + 3 + 5
    for k in kernels:
        assert k.targetoptions["nogil"] is True
        assert k._cache is not None and type(k._cache).__name__ != "NullCache"
        assert k.signatures, k
    t0 = time.perf_counter()
    warm()
    assert time.perf_counter() - t0 < 5.0


def _max_gap_while(worker) -> tuple[float, float]:
    """Longest pause of this thread while `worker` runs in another one.

    The clock starts before Thread.start(): start() waits for the new
    thread, so a kernel holding the GIL may run entirely inside it."""
    th = threading.Thread(target=worker)
    t_start = last = time.perf_counter()
    gap = 0.0
    th.start()
    while th.is_alive():
        now = time.perf_counter()
        gap = max(gap, now - last)
        last = now
    th.join()
    end = time.perf_counter()
    return max(gap, end - last), end - t_start


def test_kernels_release_the_gil():
    """While a long kernel runs in a thread, this thread keeps running."""
    a = np.arange(1, 2 ** 23, dtype=np.int64)         # 64 MiB, ~20 ms of idiv
    divide_into(a[:8].copy(), 3)
    results = []
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)                         # quick GIL hand-overs
    try:
        for _ in range(3):                              # noise only adds gaps
            x = a.copy()
            gap, total = _max_gap_while(lambda: divide_into(x, 3))
            results.append((round(gap, 4), round(total, 4)))
            if gap < total / 2:
                break
        else:
            pytest.fail(f"this thread stalled while a kernel ran: (gap, total) = {results}")
    finally:
        sys.setswitchinterval(interval)
    assert (x[:4] == a[:4] // 3).all()


def test_concurrent_threads_agree():
    rng = np.random.default_rng(9)
    dt = DTYPES["bf16"]
    a, b = random_data(dt, 1 << 18, rng), random_data(dt, 1 << 18, rng)
    want = a.copy()
    reduce_into_ref(want, b, "sum")
    outs = [a.copy() for _ in range(4)]
    ths = [threading.Thread(target=reduce_into, args=(o, b, "sum")) for o in outs]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    for o in outs:
        assert_bits_equal(o, want, a, b, "sum")


# --- byte copies of the shared-memory data plane ---------------------------------------------
@pytest.mark.parametrize("n", [0, 1, 7, 4096, (1 << 18) + 3])
def test_copy_bytes_matches_slice_assignment(n):
    from neuron_mpi.kernels.bytes import copy_bytes

    rng = np.random.default_rng(n)
    src = rng.integers(0, 256, n + 16, dtype=np.uint8)
    dst = rng.integers(0, 256, n + 32, dtype=np.uint8)
    want = dst.copy()
    want[9:9 + n] = src[5:5 + n]
    copy_bytes(dst, 9, src, 5, n)
    assert np.array_equal(dst, want)


@pytest.mark.parametrize("shift", [-13, 13])
def test_copy_bytes_overlapping_ranges_as_numpy(shift):
    from neuron_mpi.kernels.bytes import copy_bytes

    a = (np.arange(300) % 251).astype(np.uint8)
    want = a.copy()
    want[50 + shift:250 + shift] = a[50:250].copy()
    copy_bytes(a, 50 + shift, a, 50, 200)
    assert np.array_equal(a, want)


def test_copy_bytes_strided_and_out_of_range():
    from neuron_mpi.kernels.bytes import copy_bytes

    base = np.zeros(64, np.uint8)
    view = base[::2]  # not contiguous: the element-wise path
    copy_bytes(view, 3, np.arange(10, dtype=np.uint8), 2, 6)
    assert list(view[3:9]) == [2, 3, 4, 5, 6, 7] and not base[1::2].any()
    with pytest.raises(IndexError):
        copy_bytes(base, 60, base, 0, 8)
