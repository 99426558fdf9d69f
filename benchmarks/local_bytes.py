"""Bytes a rank moves by itself per call: the local steps of its executor plan
(copies, reductions, divides) and the reduced deliveries that read the input in
place, with and without reading the input where it lies
(executor.elide_leading_copies). No MPI; plans are built as the ranks build them.

    python benchmarks/local_bytes.py [-n 64] [--instance trn2.48xlarge] [--lnc 2]
                                     [--bytes 8MB] [op:algorithm ...]

``--bytes`` is each rank's input (all_gather: its output; permute: a ring).
Prints, per op:algorithm, the mean over ranks of the MiB its local steps read and
write (a copy counts its bytes once, as does a reduction into its destination),
elided and not.
"""
from __future__ import annotations

import argparse

import neuron_mpi as nm
from neuron_mpi.algorithms.group import GroupView
from neuron_mpi.algorithms.select import schedule_for
from neuron_mpi.bench.sizes import parse_size
from neuron_mpi.executor import Plan

DEFAULT = ("reduce_scatter:rdh", "reduce_scatter:mesh", "reduce_scatter:kangaring",
           "all_reduce:ring", "all_reduce:rdh", "all_reduce:kangaring", "all_reduce:mesh")


def local_bytes(plan, itemsize) -> int:
    return sum(lo.count * itemsize for kind, st in plan.steps if kind == "locals" for lo in st)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--instance", default="trn2.48xlarge")
    ap.add_argument("--lnc", type=int, default=2)
    ap.add_argument("--bytes", default="8MB", help="per rank's input")
    ap.add_argument("pairs", nargs="*", default=list(DEFAULT))
    a = ap.parse_args(argv)
    topo = nm.topology(a.instance, a.lnc, None, ranks=a.n)
    view = GroupView(topo, range(a.n))
    elems = parse_size(a.bytes) // 4
    print(f"{a.n} ranks, {a.instance} LNC={a.lnc}, {a.bytes} of float32 per rank (the "
          "input; all_gather's output): local MiB per rank and call")
    print(f"{'op:algorithm':<28}{'copy first':>12}{'in place':>12}")
    for pair in a.pairs:
        op, algo = pair.split(":")
        sizes, extra = (elems // a.n,) * a.n, None  # reduce_scatter, all_gather
        if op in ("all_reduce", "permute"):
            sizes = elems
        elif op == "all_to_all":
            sizes = (sizes,) * a.n
        if op == "permute":  # a ring
            extra = tuple((i, (i + 1) % a.n) for i in range(a.n))
        try:
            sched = schedule_for(view, op, algo, sizes, False, extra)
        except Exception as e:  # an algorithm that does not apply here
            print(f"{pair:<28}{'-':>12}{'-':>12}  ({e})")
            continue
        row = []
        for elide in (False, True):
            tot = sum(local_bytes(Plan(sched, view, me, 4, elide=elide), 4) for me in range(a.n))
            row.append(tot / a.n / 2**20)
        print(f"{pair:<28}{row[0]:>12.3f}{row[1]:>12.3f}")


if __name__ == "__main__":
    main()
