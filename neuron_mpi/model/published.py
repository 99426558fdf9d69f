"""Every example row of aws-neuron/aws-neuron-sdk ``tools/neuron-sys-tools/nccom-test.rst``.

The page has changed 24 times since 2023-04-27 (``git log --follow`` on that path);
its example blocks below are every block with numbers that appeared in any version,
each with the commit and date of the first version that printed it (every block is
still on the page at a3247f5b, 2026-08-17). Figures are the page's: ``time_us`` is
its time(us) / time:avg(us) column; sizes are size(B).

The page names no instance. ``instance``, ``lnc`` and ``nodes`` are our inference,
and ``why`` says what it rests on. ``streams``: the block ran beside another stream
(the multistream example); ``groups``: its replica groups; ``pairs``: permute's
source-target pairs; ``send_counts``: all-to-all-v / all-gather-v counts per peer.

``tests/test_model.py`` regenerates docs/model.md's validation table from these rows.
"""
from __future__ import annotations

from dataclasses import dataclass, field

DOC = "aws-neuron/aws-neuron-sdk tools/neuron-sys-tools/nccom-test.rst"


@dataclass(frozen=True)
class Block:
    key: str
    commit: str  # first version of the page that printed the block
    date: str
    command: str
    instance: str
    lnc: int
    nodes: int
    ranks: int
    op: str  # neuron_mpi.model op name
    dtype: str
    rows: tuple  # ((size_B, time_us), ...)
    why: str
    groups: tuple = ()
    pairs: tuple = ()
    send_counts: tuple = ()
    concurrent: str = ""  # key of a block that ran at the same time (multistream)
    algorithm: str = ""  # what we take the runtime to have run, when inferred
    note: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def year(self) -> int:
        return int(self.date[:4])

    @property
    def runtime(self) -> str:
        from .params import runtime_of_date

        return runtime_of_date(self.date)


_TRN1_2023 = ("2023 page: the SDK then ran collectives on trn1 only (trn2 arrived in "
              "December 2024)")
_RING_2023 = ("; no algorithm on the page: we take the ring, trn1's algorithm before the "
              "runtime docs describing Mesh and RDH appeared (intranode-collective-comm.rst, "
              "added 2025-12-01)")

_RING_WHY = ("; the page shows no algorithm: we take the ring, the only schedule whose "
             "step count explains both flat times (63 steps for 64 ranks, 258 us; 30 "
             "for 16 ranks, 101 us), where mesh would be flat near 10 us (allg8-stats)")

_MESH_WHY = ("; no algorithm on the page: we take mesh, one step whose routed hops "
             "(up to 4 of 1.5 us on the 4x4 torus) make 6.06 us, where a ring would take "
             "31 steps (46.5 us)")

BLOCKS = (
    Block("allr2-32MB", "4f641e78", "2023-04-27", "nccom-test -r 2 allr",
          "trn1.32xlarge", 1, 1, 2, "all_reduce", "uint8", ((33554432, 768),),
          _TRN1_2023 + "; 2 ranks = the two NeuronCores of one Trainium chip" + _RING_2023,
          algorithm="ring"),
    Block("allr2-sweep", "4f641e78", "2023-04-27",
          "nccom-test -r 2 --minbytes 1kb --maxbytes 1gb --stepfactor 4 --datatype fp32 allr",
          "trn1.32xlarge", 1, 1, 2, "all_reduce", "fp32",
          ((1024, 58), (4096, 58), (16384, 58), (65536, 58), (262144, 60), (1048576, 68),
           (4194304, 107), (16777216, 332), (67108864, 1214), (268435456, 4750),
           (1073741824, 18930)),
          _TRN1_2023 + "; 2 ranks = the two NeuronCores of one Trainium chip" + _RING_2023,
          algorithm="ring"),
    Block("allg32-2023", "4f641e78", "2023-04-27",
          "nccom-test -r 32 --minbytes 1kb --maxbytes 1mb --stepfactor 8 --datatype fp32 "
          "--check allg", "trn1.32xlarge", 1, 1, 32, "all_gather", "fp32",
          ((1024, 151), (8192, 149), (65536, 150), (524288, 179)),
          _TRN1_2023 + "; 32 ranks = every core of a trn1.32xlarge" + _RING_2023,
          algorithm="ring"),
    Block("allr64-2node", "4f641e78", "2023-04-27",
          "nccom-test -r 64 -N 2 -b 8 -e 1GB -f 2 -n 50 -w 5 -d fp32 allr --hosts ...",
          "trn1.32xlarge", 1, 2, 64, "all_reduce", "fp32",
          ((8, 520), (16, 520), (32, 523), (64, 525), (128, 553), (256, 709), (512, 782),
           (1024, 840), (2048, 881), (4096, 916), (8192, 1013), (16384, 1031),
           (32768, 1174), (65536, 1315), (131072, 1315), (262144, 1311), (524288, 1312),
           (1048576, 1328), (2097152, 1329), (4194304, 1378), (8388608, 1419),
           (16777216, 2138), (33554432, 2711), (67108864, 3963), (134217728, 6279),
           (268435456, 11954), (536870912, 21803), (1073741824, 41806)),
          _TRN1_2023 + "; the page says 32 ranks run on each of the 2 hosts: two "
          "trn1.32xlarge; no algorithm on the page: we take the hierarchical one, the "
          "runtime's default across nodes since collectives 2.12.22 (internode docs), "
          "whose 2-node bandwidth the rows >= 32 MiB follow",
          algorithm="hierarchical"),
    Block("allg32-io", "6b6ad292", "2025-06-24",
          "nccom-test -r 32 --minbytes 1kb --maxbytes 1mb --stepfactor 8 --datatype fp32 "
          "--check allg --show-input-output-size", "trn1.32xlarge", 1, 1, 32,
          "all_gather", "fp32",
          ((1024, 6.16), (8192, 6.48), (65536, 8.17), (524288, 23.16)),
          "the 2023 command again (32 ranks, fp32, 1 KiB..1 MiB) with a newer runtime; "
          "32 ranks fill a trn1.32xlarge (at LNC=2 a trn2.48xlarge has 64)" + _MESH_WHY,
          algorithm="mesh"),
    Block("allg32-json", "6b6ad292", "2025-06-24",
          "nccom-test -r 32 --minbytes 1kb --maxbytes 1mb --stepfactor 8 --datatype fp32 "
          "--check allg --report-to-json-file nccom-results.json", "trn1.32xlarge", 1, 1,
          32, "all_gather", "fp32",
          ((1024, 6.19), (8192, 6.55), (65536, 8.18), (524288, 23.11)),
          "same command and version as allg32-io" + _MESH_WHY, algorithm="mesh"),
    Block("permute8", "a0b8b3e7", "2025-11-03",
          "nccom-test -r 8 --custom-src-target-pairs pairs.json permute",
          "trn2.48xlarge", 2, 1, 8, "permute", "uint8", ((33554432, 894.24),),
          "permute arrived with the trn2 runtime (2025-11); at LNC=2 ranks 0-3 share "
          "chip 0, so pairs 0<->1 and 2<->3 stay on one chip and 4-7 keep their data",
          pairs=((0, 1), (1, 0), (2, 3), (3, 2), (4, 4), (5, 5), (6, 6), (7, 7))),
    Block("allg8-stats", "86a92868", "2026-02-25",
          "nccom-test -r 8 --minbytes 1kb --maxbytes 1mb --stepfactor 8 --datatype fp32 "
          "--stats avg p25 p50 p90 p99 --iters 1000 allg", "trn2.48xlarge", 2, 1, 8,
          "all_gather", "fp32",
          ((1024, 10.0), (8192, 10.22), (65536, 11.31), (524288, 14.83)),
          "2026 page beside the trn2 --show-algorithm example; 8 ranks = 2 Trainium2 "
          "chips at LNC=2"),
    Block("allr16-algo", "86a92868", "2026-02-25",
          "nccom-test -r 16 allr -b 4 -e 1gb -f 16 -d fp32 --show-algorithm",
          "trn2.48xlarge", 2, 1, 16, "all_reduce", "fp32",
          ((4, 299.91), (32, 299.69), (512, 299.82), (8192, 299.74), (131072, 574.15),
           (2097152, 686.32), (33554432, 2754.15), (536870912, 9689.51)),
          "its algorithm column names RDH and KangaRing, Trainium2-only algorithms; "
          "16 ranks = 4 chips at LNC=2",
          extra={"algorithms": ("mesh", "mesh", "mesh", "mesh", "mesh", "rdh", "kangaring",
                                "kangaring")}),
    Block("alltoallv-2node", "86a92868", "2026-02-25",
          "nccom-test -r 2 -N 2 -d fp32 alltoallv -b 1MB -e 1MB --hosts ... "
          "--variable-size-op-metadata alltoallv_metadata.json", "trn2.48xlarge", 2, 2, 2,
          "alltoallv", "fp32", ((1048608, 955.05),),
          "2026 page; one rank on each of 2 hosts; trn2 taken as the current "
          "instance (nothing on the page ties it to trn1)",
          send_counts=(512, 1024)),
    Block("allgv4", "43a89626", "2026-08-17",
          "nccom-test allgv -r 4 -N 1 -b 2048 -e 2048 -d fp16 --variable-size-op-metadata "
          "allgv_metadata.json", "trn2.48xlarge", 2, 1, 4, "all_gather_v", "fp16",
          ((2048, 16.28),),
          "the page says all-gather-v runs only on groups within one Trainium device: "
          "4 ranks = one Trainium2 chip at LNC=2", send_counts=(256,)),
    Block("stream0-allr16x4", "43a89626", "2026-08-17",
          "nccom-test allg -r 64 -c --streams-json streams_example.json (stream 0)",
          "trn2.48xlarge", 2, 1, 64, "all_reduce", "bf16",
          ((1024, 101.14), (2048, 101.93), (4096, 101.45), (8192, 101.84), (16384, 102.21),
           (32768, 102.36), (65536, 103.28), (131072, 105.03), (262144, 107.37),
           (524288, 110.07), (1048576, 117.67)),
          "64 ranks on one host = trn2.48xlarge at LNC=2; stream 0 runs the all-reduce "
          "on 4 replica groups of 16 consecutive ranks (4 chips each) at once" + _RING_WHY,
          groups=tuple(tuple(range(16 * k, 16 * k + 16)) for k in range(4)),
          concurrent="stream1-allg64", algorithm="ring"),
    Block("stream1-allg64", "43a89626", "2026-08-17",
          "nccom-test allg -r 64 -c --streams-json streams_example.json (stream 1)",
          "trn2.48xlarge", 2, 1, 64, "all_gather", "fp32",
          tuple((1024, t) for t in (257.65, 258.55, 257.86, 258.51, 259.04, 257.72, 258.24,
                                    258.33, 258.95, 259.09, 260.6)),
          "stream 1 of the same run: a 64-rank all-gather of 1 KiB, two per iteration, "
          "beside stream 0" + _RING_WHY, concurrent="stream0-allr16x4", algorithm="ring"),
)

LARGE = 32 << 20  # bytes: the split between large and small rows


def rows():
    """(block, size_B, published_us) for every row, in page order."""
    return [(b, s, t) for b in BLOCKS for s, t in b.rows]
