"""Heat diffusion on a square (Jacobi steps), written against plain mpi4py: a
Cartesian grid of ranks, halo rows and columns exchanged with Sendrecv along
Shift, the parameters broadcast as a dict (``comm.bcast``), the largest change
reduced as a Python float (``comm.allreduce(..., op=MPI.MAX)``), and the blocks
gathered as NumPy arrays to rank 0 (``comm.gather``), which prints the residuals and
a digest of the whole grid.

    mpiexec -n 4 python examples/heat_mpi4py.py                          # Open MPI
    neuron-mpirun -n 4 python -m neuron_mpi.mpi examples/heat_mpi4py.py  # the emulator

Both print the same lines, bit for bit (tests/test_outside_mpi4py.py checks it):
every floating-point sum is local, and the only reduction across ranks is a MAX.
Options: ``--n`` (grid side, divisible by the grid of ranks), ``--steps``.
"""
from __future__ import annotations

import argparse
import hashlib

import numpy as np
from mpi4py import MPI


def exchange(cart, u) -> None:
    """Fill ``u``'s halo rows and columns from the neighbours (none at the edges)."""
    for dim in (0, 1):
        lo, hi = cart.Shift(dim, 1)
        for send_at, recv_at, dst, src in ((-2, 0, hi, lo), (1, -1, lo, hi)):
            edge = u[send_at, 1:-1] if dim == 0 else u[1:-1, send_at]
            got = np.empty(edge.size)
            cart.Sendrecv(np.ascontiguousarray(edge), dst, dim, got, src, dim)
            if src != MPI.PROC_NULL:
                if dim == 0:
                    u[recv_at, 1:-1] = got
                else:
                    u[1:-1, recv_at] = got


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--steps", type=int, default=200)
    args = ap.parse_args(argv)
    comm = MPI.COMM_WORLD
    params = comm.bcast({"n": args.n, "steps": args.steps, "alpha": 0.2, "hot": 100.0}
                        if comm.rank == 0 else None, root=0)
    dims = MPI.Compute_dims(comm.size, 2)
    cart = comm.Create_cart(dims, periods=[False, False])
    row, col = cart.Get_coords(cart.rank)
    n = params["n"]
    ny, nx = n // dims[0], n // dims[1]
    gy = np.arange(ny) + row * ny
    gx = np.arange(nx) + col * nx
    u = np.zeros((ny + 2, nx + 2))
    u[1:-1, 1:-1] = params["hot"] * ((np.abs(gy - n / 2)[:, None] < n / 8) &
                                     (np.abs(gx - n / 2)[None, :] < n / 8))
    a = params["alpha"]
    for step in range(params["steps"]):
        exchange(cart, u)
        inner = u[1:-1, 1:-1]
        new = inner + a * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * inner)
        change = float(np.abs(new - inner).max())
        u[1:-1, 1:-1] = new
        if step % 50 == 49:
            largest = cart.allreduce(change, op=MPI.MAX)
            if cart.rank == 0:
                print(f"step {step + 1}: largest change {largest!r}", flush=True)
    blocks = cart.gather(((row, col), u[1:-1, 1:-1].copy()), root=0)
    if cart.rank == 0:
        grid = np.zeros((n, n))
        for (r, c), b in blocks:
            grid[r * ny:(r + 1) * ny, c * nx:(c + 1) * nx] = b
        print(f"grid {n}x{n} on {dims[0]}x{dims[1]} ranks: sha256 "
              f"{hashlib.sha256(grid.tobytes()).hexdigest()}", flush=True)
    cart.Free()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
