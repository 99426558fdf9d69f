"""Throughput of neuron_mpi.kernels.reduce_into against the NumPy / ml_dtypes
reference and against a plain memory copy, for every op x dtype x size.

    python benchmarks/kernels.py [--sizes 64KiB,1MiB,16MiB,256MiB] [--quick]
                                 [--ops sum,max] [--dtypes fp32,bf16] [--repeat N]

GB/s counts the bytes of dst (1e9 bytes per GB).  ratio_vs_numpy is
jit / numpy throughput; ratio_vs_memcpy is jit throughput over that of
np.copyto of the same number of bytes, measured in the same run.  Times are
best of N (fewer runs once a measurement has taken a second).  Big references of small float types run over 64 Mi-element
chunks (marked *) so that their float32 temporaries stay within ~1 GiB.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time

os.environ.setdefault("NUMBA_CACHE_DIR", "/tmp/numba_cache_kernels")

import numpy as np  # noqa: E402

from neuron_mpi import env  # noqa: E402
from neuron_mpi.kernels import (DTYPES, REDUCE_OPS, canonical_dtype,  # noqa: E402
                                dtype_name, reduce_into, reduce_into_ref, warm)
from neuron_mpi.kernels.dtypes import SMALL_FLOATS  # noqa: E402

_UNITS = {"": 1, "B": 1, "KIB": 2 ** 10, "MIB": 2 ** 20, "GIB": 2 ** 30,
          "K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30,
          "KB": 10 ** 3, "MB": 10 ** 6, "GB": 10 ** 9}
DEFAULT_SIZES = "64KiB,1MiB,16MiB,256MiB"
QUICK_SIZES = "64KiB,256KiB,1MiB,4MiB"
REF_CHUNK = 64 * 2 ** 20          # elements per reference chunk (small floats)
MAX_SIZE = 256 * 2 ** 20


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).upper() not in _UNITS:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (e.g. 64KiB, 16MiB)")
    size = int(m.group(1)) * _UNITS[m.group(2).upper()]
    if not 0 < size <= MAX_SIZE:
        raise argparse.ArgumentTypeError(f"size {text!r} outside 1 B .. 256 MiB")
    return size


def fmt_size(n: int) -> str:
    for unit, k in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= k and n % k == 0:
            return f"{n // k}{unit}"
    return f"{n}B"


def best_time(fn, repeat: int, budget_s: float = 1.0) -> float:
    """Best of `repeat` runs, or of fewer once they have taken budget_s."""
    best = float("inf")
    start = time.perf_counter()
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
        if time.perf_counter() - start > budget_s:
            break
    return best


def fill(rng: np.random.Generator, buf: np.ndarray, dt: np.dtype, op: str) -> np.ndarray:
    """Data in buf (raw bytes) viewed as dt, values that stay tame when the
    op is applied over and over (no subnormals, little overflow)."""
    arr = buf.view(dt)
    if dt.kind in "iu":
        buf[...] = rng.integers(0, 256, size=buf.size, dtype=np.uint8)
        return arr
    n = arr.size
    step = 1 << 22
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        if op == "prod":
            vals = rng.uniform(0.5, 2.0, hi - lo).astype(np.float32)
            vals *= np.where(rng.random(hi - lo) < 0.5, -1, 1).astype(np.float32)
        else:
            vals = rng.standard_normal(hi - lo, dtype=np.float32)
        arr[lo:hi] = vals.astype(dt)
    return arr


def run_ref(dst: np.ndarray, src: np.ndarray, op: str, chunk: int | None) -> None:
    if chunk is None:
        reduce_into_ref(dst, src, op)
        return
    for lo in range(0, dst.size, chunk):
        reduce_into_ref(dst[lo:lo + chunk], src[lo:lo + chunk], op)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=None,
                    help=f"comma-separated sizes of dst (default {DEFAULT_SIZES})")
    ap.add_argument("--quick", action="store_true", help=f"sizes {QUICK_SIZES}")
    ap.add_argument("--ops", default=",".join(REDUCE_OPS))
    ap.add_argument("--dtypes", default=",".join(DTYPES))
    ap.add_argument("--repeat", type=int, default=7, help="best of N (default 7)")
    args = ap.parse_args(argv)

    sizes = [parse_size(s) for s in (args.sizes or (QUICK_SIZES if args.quick
                                                     else DEFAULT_SIZES)).split(",")]
    ops = [o.strip() for o in args.ops.split(",")]
    for op in ops:
        if op not in REDUCE_OPS:
            ap.error(f"unknown op {op!r}; choose from {', '.join(REDUCE_OPS)}")
    try:
        dtypes = [canonical_dtype(d.strip()) for d in args.dtypes.split(",")]
    except ValueError as exc:
        ap.error(str(exc))

    t0 = time.perf_counter()
    count = warm()
    print(f"# warm(): {count} specialisations in {time.perf_counter() - t0:.2f} s "
          f"(NUMBA_CACHE_DIR={env.numba_cache_dir()})")
    print(f"# numpy {np.__version__}, best of {args.repeat}, GB = 1e9 bytes of dst")
    header = (f"{'op':<5} {'dtype':<9} {'size':>7} {'GB/s(jit)':>10} "
              f"{'GB/s(numpy)':>12} {'ratio_vs_numpy':>15} {'ratio_vs_memcpy':>16}")
    print(header)
    print("-" * len(header))
    rng = np.random.default_rng(0)
    for size in sizes:
        dst_buf = np.empty(size, np.uint8)
        src_buf = np.empty(size, np.uint8)
        dst_buf[...] = 1
        src_buf[...] = 2
        t_copy = best_time(lambda: np.copyto(dst_buf, src_buf), args.repeat)
        copy_gbs = size / t_copy / 1e9
        print(f"# {fmt_size(size)}: memcpy (np.copyto) {copy_gbs:.2f} GB/s")
        for dt in dtypes:
            n_el = size // dt.itemsize
            if n_el == 0:
                continue
            nbytes = n_el * dt.itemsize
            chunk = REF_CHUNK if dt in SMALL_FLOATS and n_el > REF_CHUNK else None
            for op in ops:
                dst = fill(rng, dst_buf[:nbytes], dt, op)
                src = fill(rng, src_buf[:nbytes], dt, op)
                t_jit = best_time(lambda: reduce_into(dst, src, op), args.repeat)
                t_ref = best_time(lambda: run_ref(dst, src, op, chunk), args.repeat)
                jit_gbs = nbytes / t_jit / 1e9
                ref_gbs = nbytes / t_ref / 1e9
                mark = "*" if chunk else " "
                print(f"{op:<5} {dtype_name(dt):<9} {fmt_size(nbytes):>7} "
                      f"{jit_gbs:10.2f} {ref_gbs:11.2f}{mark} "
                      f"{jit_gbs / ref_gbs:15.2f} {jit_gbs / copy_gbs:16.2f}",
                      flush=True)
        del dst_buf, src_buf
    return 0


if __name__ == "__main__":
    sys.exit(main())
