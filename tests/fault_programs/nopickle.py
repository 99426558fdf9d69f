"""No pickle on any data or control path.

    mpiexec -n 4 python -m mpi4py tests/fault_programs/nopickle.py

After the numba kernels are loaded from their on-disk cache (numba's cache index is
itself pickled: that is a compile-time path, not a data or control path), and before
neuron_mpi starts, ``pickle.dumps/loads`` (and ``pickle._dumps/_loads``) and
mpi4py's own serializer (``MPI.pickle``, behind every lower-case ``comm.bcast`` /
``allgather`` / ``send``) are replaced by functions that raise. The program then
checks that the trap works, and runs init, every collective (sync and async, several
dtypes), split, send/recv, barrier, a rejected argument, a mismatch and a timeout;
each result is checked against NumPy. Prints ``nopickle OK <n> checks`` on every
rank, or ``nopickle FAIL ...`` lines; exit status 0 only if all passed.
"""
import pickle
import sys
import time

import ml_dtypes
import numpy as np
from mpi4py import MPI

import neuron_mpi.kernels

neuron_mpi.kernels.warm()  # load every kernel specialisation now (numba unpickles its cache)


class PickleUsed(Exception):
    pass


def _trap(*args, **kwargs):
    raise PickleUsed("pickle was used")


pickle.dumps = pickle.loads = pickle._dumps = pickle._loads = _trap  # noqa: SLF001
MPI.pickle.__init__(_trap, _trap)

import neuron_mpi as nm  # noqa: E402

BF16 = np.dtype(ml_dtypes.bfloat16)
FAILS: list[str] = []
CHECKS = [0]


def check(what, got, want):
    CHECKS[0] += 1
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != want.dtype or got.shape != want.shape or \
            got.tobytes() != want.tobytes():
        FAILS.append(f"{what}: got {got.dtype}{got.shape} {got.ravel()[:6]}, want "
                     f"{want.dtype}{want.shape} {want.ravel()[:6]}")


def expect_error(what, cls, fn):
    CHECKS[0] += 1
    try:
        fn()
    except cls:
        return
    except PickleUsed as e:
        FAILS.append(f"{what}: {e}")
        return
    except Exception as e:  # noqa: BLE001
        FAILS.append(f"{what}: raised {type(e).__name__}: {e}, want {cls.__name__}")
        return
    FAILS.append(f"{what}: returned, want {cls.__name__}")


def x_of(rank, count, dtype):
    return ((np.arange(count) + 3 * rank) % 11 - 5).astype(np.float64).astype(dtype)


def main() -> int:
    # the trap itself works: mpi4py's pickle-based calls now fail
    expect_error("trap: MPI.COMM_WORLD.allgather", PickleUsed,
                 lambda: MPI.COMM_WORLD.allgather(1))
    expect_error("trap: pickle.dumps", PickleUsed, lambda: pickle.dumps(1))

    w = nm.init()
    n, r = w.size, w.rank
    for dt in (np.float32, BF16, np.int32, ml_dtypes.float8_e4m3fn):
        dt = np.dtype(dt)
        xs = [x_of(q, 4 * n, dt) for q in range(n)]
        total = np.asarray(sum(x.astype(np.float64) for x in xs)).astype(dt)
        check(f"all_reduce {dt}", w.all_reduce(xs[r], timeout=60), total)
        check(f"all_reduce max {dt}", w.all_reduce(xs[r], op="max", timeout=60),
              np.max(np.stack([x.astype(np.float64) for x in xs]), 0).astype(dt))
        check(f"all_gather {dt}", w.all_gather(xs[r], timeout=60), np.concatenate(xs))
        check(f"reduce_scatter {dt}", w.reduce_scatter(xs[r], timeout=60),
              total[4 * r:4 * r + 4])
        check(f"all_to_all {dt}", w.all_to_all(xs[r], timeout=60),
              np.concatenate([x[4 * r:4 * r + 4] for x in xs]))
        check(f"broadcast {dt}", w.broadcast(xs[r], root=n - 1, timeout=60), xs[n - 1])
        pairs = [(i, (i + 1) % n) for i in range(n)]
        check(f"permute {dt}", w.permute(xs[r], pairs, timeout=60), xs[(r - 1) % n])
    counts = [(q % 3) for q in range(n)]
    xs = [x_of(q, counts[q], np.float32) for q in range(n)]
    check("all_gather_v", w.all_gather_v(xs[r], counts, timeout=60), np.concatenate(xs))
    full = [x_of(q, sum(counts), np.float32) for q in range(n)]
    tot = np.asarray(sum(full))
    off = sum(counts[:r])
    check("reduce_scatter_v", w.reduce_scatter_v(full[r], counts, timeout=60),
          tot[off:off + counts[r]])
    sc = [(r + j) % 2 for j in range(n)]
    rc = [(i + r) % 2 for i in range(n)]
    xin = x_of(r, sum(sc), np.float32)
    want = []
    for i in range(n):
        xi = x_of(i, sum((i + j) % 2 for j in range(n)), np.float32)
        o = sum((i + j) % 2 for j in range(r))
        want.append(xi[o:o + (i + r) % 2])
    check("all_to_all_v", w.all_to_all_v(xin, sc, rc, timeout=60), np.concatenate(want))
    w.barrier(timeout=60)
    CHECKS[0] += 1

    # async: several in flight, finished out of order
    x = x_of(r, 64, np.float32)
    hs = [w.all_reduce(x, async_op=True, timeout=60), w.all_gather(x, async_op=True, timeout=60),
          w.broadcast(x, root=0, async_op=True, timeout=60)]
    while not all(h.test() for h in hs):
        pass
    check("async broadcast", hs[2].wait(), x_of(0, 64, np.float32))
    check("async all_gather", hs[1].wait(),
          np.concatenate([x_of(q, 64, np.float32) for q in range(n)]))
    check("async all_reduce", hs[0].wait(),
          np.asarray(sum(x_of(q, 64, np.float32) for q in range(n)), np.float32))

    # split: halves, and a group this rank is not in
    half = n // 2
    sub = w.split([list(range(half)), list(range(half, n))], timeout=60)
    base = 0 if r < half else half
    check("split all_reduce", sub.all_reduce(x, timeout=60),
          np.asarray(sum(x_of(base + q, 64, np.float32) for q in range(half)), np.float32))
    only = w.split([[0, 1]], timeout=60)
    CHECKS[0] += 1
    if (only is None) != (r > 1):
        FAILS.append(f"split [[0, 1]]: rank {r} got {only!r}")
    if only is not None:
        check("split pair all_gather", only.all_gather(x[:2], timeout=60),
              np.concatenate([x_of(q, 64, np.float32)[:2] for q in range(2)]))

    # point to point around a ring, twice, with a large message
    for count in (5, 100_000):
        msg = x_of(r, count, np.float32)
        got = np.empty(count, np.float32)
        if r % 2 == 0:
            w.send(msg, (r + 1) % n, timeout=60)
            w.recv(got, (r - 1) % n, timeout=60)
        else:
            w.recv(got, (r - 1) % n, timeout=60)
            w.send(msg, (r + 1) % n, timeout=60)
        check(f"send/recv {count}", got, x_of((r - 1) % n, count, np.float32))

    # error paths: a rejected argument, a mismatch, a timeout, a failed communicator
    c = w.split([list(range(n))], timeout=60)
    expect_error("rejected root", nm.InvalidArgumentError,
                 lambda: c.broadcast(x, root=(n if r == n - 1 else 0), timeout=60))
    c = w.split([list(range(n))], timeout=60)
    expect_error("mismatch", nm.CollectiveMismatchError,
                 lambda: c.all_reduce(x[: (7 if r == 0 else 8)], timeout=60))
    expect_error("failed", nm.CommunicatorFailedError, lambda: c.all_reduce(x, timeout=60))
    c = w.split([list(range(n))], timeout=60)
    if r == 0:
        time.sleep(2.5)

    def late():
        c.all_reduce(x, timeout=1.0)
    expect_error("timeout", nm.CollectiveTimeoutError, late)
    w.barrier(timeout=60)

    if FAILS:
        for f in FAILS:
            print(f"nopickle FAIL rank {r}: {f}", flush=True)
        return 1
    print(f"nopickle OK rank {r}: {CHECKS[0]} checks", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
