"""A plain user program written against the neuron_mpi API (no pytest):

    mpiexec -n N python -m mpi4py tests/mpi/program_check.py

Every rank makes its data from its own seed, runs a few collectives, and checks the
results against NumPy computed from the seeds of all ranks. Rank 0 prints
"program_check OK: N ranks ..." when every rank agrees; the exit status is 1 on
any mismatch (tests/test_mpi_suites.py runs it for a few N).
"""
import sys

import numpy as np

import neuron_mpi as nm


def data(rank: int, count: int) -> np.ndarray:
    # integer-valued floats: sums are exact in any order
    return np.random.default_rng(1000 + rank).integers(-50, 51, count).astype(np.float32)


def main() -> int:
    comm = nm.init()
    n, me = comm.size, comm.rank
    everyone = [data(r, 4 * n + 3) for r in range(n)]
    x = data(me, 4 * n + 3)
    problems = []

    def check(name, got, want):
        if got.shape != want.shape or got.dtype != want.dtype or not np.array_equal(got, want):
            problems.append(f"{name}: got {got!r}, want {want!r}")

    check("all_reduce sum", comm.all_reduce(x), np.sum(everyone, axis=0, dtype=np.float32))
    check("all_reduce max", comm.all_reduce(x, op="max"), np.max(everyone, axis=0))
    grads = x[: 4 * n]
    check("all_gather", comm.all_gather(x), np.concatenate(everyone))
    block = np.sum([e[: 4 * n] for e in everyone], axis=0)
    check("reduce_scatter", comm.reduce_scatter(grads), block[4 * me:4 * me + 4])
    check("broadcast", comm.broadcast(x, root=n - 1), everyone[n - 1])
    check("all_to_all", comm.all_to_all(grads),
          np.concatenate([e[4 * me:4 * me + 4] for e in everyone]))
    nxt, prv = (me + 1) % n, (me - 1) % n
    check("permute", comm.permute(x, [(i, (i + 1) % n) for i in range(n)]), everyone[prv])
    comm.send(x, nxt)
    check("recv", comm.recv(np.empty_like(x), prv), everyone[prv])
    comm.barrier()
    check("all_reduce avg", comm.all_reduce(grads, op="avg"),
          (np.sum([e[: 4 * n] for e in everyone], axis=0) / np.float32(n)).astype(np.float32))
    numba = "numba" in sys.modules  # (avg's divide too is in the compiled plane)

    for p in problems:
        print(f"[rank {me}] {p}", file=sys.stderr, flush=True)
    ok = comm.all_gather(np.array([0 if problems else 1], np.int32))
    numba = comm.all_gather(np.array([int(numba)], np.int32)).any()  # on any rank
    if me == 0 and ok.all():
        from neuron_mpi.transport import native

        aot = native.IMPL.__name__.startswith("_neuron_mpi_plane_")
        print(f"program_check OK: {n} ranks on {comm.topology.instance}; data plane built "
              f"ahead of time: {'yes' if aot else 'no'}; numba imported: "
              f"{'yes' if numba else 'no'}", flush=True)
    return 0 if ok.all() else 1


if __name__ == "__main__":
    sys.exit(main())
