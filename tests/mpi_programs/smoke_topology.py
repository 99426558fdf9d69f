"""MPI smoke test of the launcher and the topology (run by tests/test_launcher.py).

    neuron-mpirun -n 8 python tests/mpi_programs/smoke_topology.py [--fail-rank R]

Every rank builds neuron_mpi.topology(ranks=size) from the environment the launcher
exported and checks that all ranks see the same topology (a digest, allgathered) and
that its own placement round-trips. Exit 0 if all agree, 1 otherwise. With
--fail-rank R, rank R raises before a barrier the others wait at: under
``python -m mpi4py`` that must abort the whole job.
"""
import hashlib
import json
import os
import sys

from mpi4py import MPI

import neuron_mpi


def main() -> int:
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if "--fail-rank" in sys.argv:
        bad = int(sys.argv[sys.argv.index("--fail-rank") + 1])
        if rank == bad:
            raise RuntimeError(f"rank {rank} fails on purpose")
        comm.barrier()  # never completes: the failing rank must abort the job
        return 0

    topo = neuron_mpi.topology(ranks=size)
    blob = json.dumps(topo.to_json(), sort_keys=True).encode()
    digest = int.from_bytes(hashlib.sha256(blob).digest()[:8], "big")
    p = topo.placement(rank)
    problems = []
    if topo.size != size:
        problems.append(f"topology has {topo.size} ranks, world has {size}")
    if topo.rank_of(p.node, p.chip, p.core) != rank:
        problems.append(f"placement {p} does not map back to rank {rank}")
    if os.environ.get("NEURON_MPI_INSTANCE") != topo.instance:
        problems.append(f"NEURON_MPI_INSTANCE={os.environ.get('NEURON_MPI_INSTANCE')!r}, "
                        f"topology says {topo.instance!r}")
    digests = comm.allgather(digest)
    places = comm.allgather((p.node, p.chip, p.core))
    if len(set(digests)) != 1:
        problems.append(f"ranks disagree on the topology: {digests}")
    if len(set(places)) != size:
        problems.append(f"two ranks share a placement: {places}")
    expected = [(q.node, q.chip, q.core) for q in topo.placements]
    if places != expected:
        problems.append(f"placements {places} differ from the topology's {expected}")
    ok = comm.allgather(not problems)
    for msg in problems:
        print(f"r{rank} | {msg}", flush=True)
    if rank == 0 and all(ok):
        print(f"smoke_topology OK: {size} ranks on {topo.instance} LNC={topo.lnc}, "
              f"{topo.chips_used} chips, digest {digest:016x}", flush=True)
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
