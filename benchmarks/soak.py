"""Soak: many random collectives, every result checked, memory watched.

    neuron-mpirun -n 64 python benchmarks/soak.py [--calls 3000] [--seed 1]
        [--max-elems 256] [--warmup 200] [--timeout 120] [--json out.json]
        [--sizes-pool K] [--tracemalloc FRAMES] [--drain] [--probe-every K]
    mpiexec -n 4 python -m mpi4py benchmarks/soak.py --calls 100
    mpiexec -n 8 python -m mpi4py benchmarks/soak.py --check-overhead 2000

Every rank draws the same sequence from ``--seed``: per call an operation, dtype,
element count, partition of the world into groups (the world, halves, quarters, ...
down to pairs, as far as the topology accepts them), algorithm (the default or any
other that applies to the group), reduce op and sync/async. Each group runs the call
with its members' inputs; every member checks its result against a NumPy reference
and that its input was not written.

Inputs are small integers chosen so that every partial sum in any order is exact in
the dtype (for sum/avg only a few ranks per element are non-zero when the group is
large; integers wrap alike in any order), so every algorithm must give the
reference's bits exactly.

Reports (rank 0): calls, failures (wrong results, modified inputs, exceptions) summed
over ranks, wall time, calls/s, resident memory per rank after the warm-up and at the
end (/proc/self/statm: resident, and resident minus shared = anonymous) and the growth
in between (also split at the half-way call, to tell a filling cache from a leak),
max and mean over ranks, and peak RSS (getrusage ru_maxrss), max over
ranks. Exit status 0 if nothing failed. No pickle:
the metrics are gathered with neuron_mpi's own all_gather.

Memory tooling: the report's ``memory_mib`` splits each figure by holder (``probe``:
C heap in use and free from glibc mallinfo2, pymalloc arenas and blocks, tracemalloc's
total) and ``census_*`` counts the entries of every per-rank structure that lives
across calls (``census``). ``--tracemalloc FRAMES``: rank 0 prints the allocation
sites that grew after the warm-up (tracing starts there) and in each half.
``--drain``: empty the plan and schedule caches and collect cycles before the
warm-up and end measurements, and count tracked objects and anonymous bytes by kind
of mapping (/proc/self/smaps). ``--probe-every K``: rank 0 prints its figures every
K calls. docs/reliability.md ("Soak") reads them.

``--check-overhead N`` instead times N all_reduces of 8 fp32 elements with the
argument agreement on (NEURON_MPI_CHECK=1) and N with it off, in alternating blocks
of 100 within one run, and reports the median per-call times (max over ranks of each
block) and their ratio.
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import resource
import sys
import tempfile
import time
import tracemalloc

import ml_dtypes
import numpy as np

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "all_gather_v",
       "reduce_scatter_v", "all_to_all_v", "permute", "broadcast", "barrier")
DTYPES = {
    "fp32": np.dtype(np.float32), "bf16": np.dtype(ml_dtypes.bfloat16),
    "fp16": np.dtype(np.float16), "fp8_e4m3": np.dtype(ml_dtypes.float8_e4m3fn),
    "fp64": np.dtype(np.float64), "int32": np.dtype(np.int32), "int8": np.dtype(np.int8),
    "uint16": np.dtype(np.uint16),
}
# integers up to which a float dtype holds every value exactly
EXACT = {"fp32": 2 ** 24, "bf16": 256, "fp16": 2048, "fp8_e4m3": 16, "fp64": 2 ** 53}
SMALL_FLOATS = {"bf16", "fp16", "fp8_e4m3"}
REDUCING = ("all_reduce", "reduce_scatter", "reduce_scatter_v")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=1000, help="collective calls (default 1000)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-elems", type=int, default=256,
                   help="largest element count per rank (per block for blocked ops)")
    p.add_argument("--warmup", type=int, default=None,
                   help="calls before the memory baseline (default: 10%% of --calls)")
    p.add_argument("--timeout", type=float, default=120.0, help="deadline of each call (s)")
    p.add_argument("--json", help="write the report (rank 0) to this file")
    p.add_argument("--sizes-pool", type=int, default=0, metavar="K",
                   help="draw counts, v-count patterns, permutations and roots from K "
                        "fixed choices (bounds the distinct schedules, hence the caches: "
                        "a 64-member schedule holds ~4000 transfers, ~1 MB; default: "
                        "a fresh draw per call)")
    p.add_argument("--verbose", action="store_true", help="rank 0 prints progress")
    p.add_argument("--check-overhead", type=int, metavar="N", default=0,
                   help="time N small all_reduces with the agreement on and N off")
    p.add_argument("--tracemalloc", type=int, metavar="FRAMES", default=0,
                   help="trace Python allocations (tracemalloc, FRAMES deep) on every "
                        "rank from the end of the warm-up; rank 0 prints the allocation "
                        "sites that grew after the warm-up and in each half (default 0: "
                        "off)")
    p.add_argument("--probe-every", type=int, metavar="K", default=0,
                   help="rank 0 prints its memory figures (probe) and structure counts "
                        "(census) every K calls after the warm-up: the growth curve")
    p.add_argument("--drain", action="store_true",
                   help="at the warm-up and at the end, empty the bounded caches (plans, "
                        "schedules) and collect cycles before measuring: what then remains "
                        "above the warm-up is memory no cache accounts for")
    p.add_argument("--top", type=int, default=12,
                   help="with --tracemalloc: how many growing sites to print (default 12)")
    return p.parse_args(argv)


def rss_bytes() -> tuple[int, int]:
    """(resident, resident minus shared) in bytes, from /proc/self/statm. The second
    (anonymous memory: heaps, arrays, caches) is what a leak grows; the first also
    counts mapped library pages, which the kernel may drop and re-read at will."""
    with open("/proc/self/statm") as f:
        fields = f.read().split()
    page = os.sysconf("SC_PAGE_SIZE")
    return int(fields[1]) * page, (int(fields[1]) - int(fields[2])) * page


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _mallinfo2():
    try:
        fn = ctypes.CDLL(None).mallinfo2  # glibc >= 2.33
    except (AttributeError, OSError):
        return None
    fn.restype = _MallInfo2
    fn.argtypes = []
    return fn


_MALLINFO2 = _mallinfo2()

# per-rank memory figures at a checkpoint (probe()), in this order
PROBE = ("rss", "anon", "malloc_used", "malloc_free", "pymalloc_arenas", "pymalloc_blocks",
         "traced", "gc_objects", "anon_heap", "anon_exec", "anon_other")


def anon_by_mapping() -> list[int]:
    """Anonymous resident bytes (/proc/self/smaps "Anonymous:") by kind of mapping:
    the main C heap ([heap]); executable mappings without a file (numba's compiled
    code, loaded by LLVM); the rest (pymalloc's arenas, the heaps malloc gives other
    threads, its large blocks, stacks, private copies of file pages: the kernel
    merges neighbouring anonymous mappings, so these cannot be told apart). Zeros
    where smaps cannot be read."""
    out = [0, 0, 0]
    try:
        with open("/proc/self/smaps") as f:
            text = f.read()
    except OSError:
        return out
    kind = 2
    for line in text.splitlines():
        head = line.split(None, 5)
        if head and "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
            name = head[5] if len(head) > 5 else ""
            if name == "[heap]":
                kind = 0
            elif not name and "x" in head[1]:
                kind = 1
            else:
                kind = 2
        elif line.startswith("Anonymous:"):
            out[kind] += int(line.split()[1]) * 1024
    return out


def pymalloc_arena_bytes() -> int:
    """Bytes of the arenas pymalloc holds now (sys._debugmallocstats, which prints to
    the C stderr: read through a temporary file); an arena goes back to the system
    only once every object in it is freed. 0 if unavailable."""
    try:
        with tempfile.TemporaryFile() as f:
            sys.stderr.flush()
            saved = os.dup(2)
            os.dup2(f.fileno(), 2)
            try:
                sys._debugmallocstats()
            finally:
                os.dup2(saved, 2)
                os.close(saved)
            f.seek(0)
            text = f.read().decode(errors="replace")
    except (AttributeError, OSError):
        return 0
    for line in text.splitlines():
        if "bytes/arena" in line:
            return int(line.rsplit("=", 1)[1].replace(",", ""))
    return 0


def probe(detail: bool = False) -> list[float]:
    """Memory of this process, split by who holds it: resident and anonymous bytes
    (rss_bytes); C heap bytes in use (glibc mallinfo2: uordblks + hblkhd, every
    arena: numba/LLVM, MPI, NumPy's buffers) and free bytes the C heap keeps
    (fordblks: freed but not returned, i.e. fragmentation); bytes of pymalloc's
    arenas and its blocks in use (sys.getallocatedblocks: small Python objects); bytes traced by tracemalloc
    (Python objects and NumPy buffers; 0 when off); with ``detail``, the objects
    tracked by the cycle collector and the anonymous bytes by kind of mapping
    (anon_by_mapping) (else 0: the list of all objects, ~1 MB, and the text of
    /proc/self/smaps stay in the C heap once freed and would show as growth)."""
    rss, anon = rss_bytes()
    if _MALLINFO2 is not None:
        mi = _MALLINFO2()
        used, free = mi.uordblks + mi.hblkhd, mi.fordblks
    else:
        used = free = 0
    traced = tracemalloc.get_traced_memory()[0] if tracemalloc.is_tracing() else 0
    return [rss, anon, used, free, pymalloc_arena_bytes(), sys.getallocatedblocks(), traced,
            len(gc.get_objects()) if detail else 0] + (anon_by_mapping() if detail
                                                       else [0, 0, 0])


# structures that hold entries across calls, counted by census()
CENSUS = ("inbox", "outq", "active", "plans", "p2p", "recorder", "schedules",
          "next_hops", "boards", "numba_overloads")


def census(world, comms) -> list[int]:
    """Entries in every per-rank structure that lives across calls: the engine's
    inbox, queue of pieces waiting for room and executions in flight; the plans of
    every communicator and their point-to-point counters; the flight recorder; the
    schedule cache; the next-hop cache; the agreement boards; the compiled
    specialisations of every numba function of neuron_mpi. A leak shows as a count
    that grows with the calls."""
    from neuron_mpi.algorithms.select import schedule_for
    eng = world._engine
    cs = [world] + [c for c in comms if c is not world]
    from numba.core.dispatcher import Dispatcher
    overloads = 0
    for name, mod in list(sys.modules.items()):
        if name.startswith("neuron_mpi") and mod is not None:
            overloads += sum(len(obj.overloads) for obj in vars(mod).values()
                             if isinstance(obj, Dispatcher))
    boards = len(eng.shm._boards) if eng.shm is not None else 0
    return [len(eng.inbox), len(eng.outq), len(eng.active),
            sum(len(c._plans) for c in cs),
            sum(len(c._p2p_sent) + len(c._p2p_recv) for c in cs),
            len(world._recorder.entries), schedule_for.cache_info().currsize,
            len(eng.hops._cache), boards, overloads]


def top_growth(first, second, limit: int, key: str) -> list[str]:
    """The allocation sites (tracemalloc ``key``: lineno or traceback) that grew
    most from snapshot ``first`` to ``second``, as text lines."""
    ignore = [tracemalloc.Filter(False, tracemalloc.__file__),
              tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
              tracemalloc.Filter(False, "<unknown>")]
    a, b = first.filter_traces(ignore), second.filter_traces(ignore)
    lines = []
    grown = sorted((st for st in b.compare_to(a, key) if st.size_diff > 0),
                   key=lambda st: -st.size_diff)
    for st in grown[:limit]:
        lines.append(f"  {st.size_diff / 1024:+9.1f} KiB {st.count_diff:+7d} blocks "
                     f"(now {st.size / 1024:.1f} KiB in {st.count})")
        frames = list(st.traceback)[::-1]  # most recent first
        for fr in frames[:8 if key == "traceback" else 1]:
            lines.append(f"      {_short(fr.filename)}:{fr.lineno}")
    return lines


def _short(path: str) -> str:
    for mark in ("/site-packages/", "/neuron_mpi/", "/kernels/", "/benchmarks/"):
        i = path.rfind(mark)
        if i >= 0:
            return path[i + 1:] if mark != "/site-packages/" else path[i + len(mark):]
    return path


def values(rng_seed: int, rank: int, count: int, g: int, dname: str, op: str) -> np.ndarray:
    """int64 values of one member: every partial sum over the group stays exact."""
    rng = np.random.default_rng([rng_seed, rank])
    dt = DTYPES[dname]
    if dt.kind in "iu":
        lo = 0 if dt.kind == "u" else -50
        return rng.integers(lo, 50, count)
    bound = EXACT[dname]
    if op in ("sum", "avg"):
        m = max(1, min(bound // g, 20))
        active_max = max(1, bound // m)  # members per element that may be non-zero
        k = -(-g // active_max)
        v = rng.integers(-m, m + 1, count)
        return np.where((np.arange(count) + rank) % k == 0, v, 0)
    return rng.integers(-min(bound, 100), min(bound, 100) + 1, count)


def to_dtype(ints: np.ndarray, dname: str) -> np.ndarray:
    dt = DTYPES[dname]
    return ints.astype(dt) if dt.kind in "iu" else ints.astype(np.float64).astype(dt)


def reduce_ref(rows: list[np.ndarray], op: str, dname: str) -> np.ndarray:
    """Reduce the members' int64 rows exactly, round once to the dtype."""
    dt = DTYPES[dname]
    a = np.stack(rows) if rows else np.zeros((0, 0), np.int64)
    acc = {"sum": a.sum(0), "avg": a.sum(0), "max": a.max(0), "min": a.min(0),
           "prod": a.prod(0)}[op]
    res = to_dtype(acc, dname)
    if op != "avg":
        return res
    g = len(rows)
    if dname in SMALL_FLOATS:
        return (res.astype(np.float32) / np.float32(g)).astype(dt)
    if dt.kind == "f":
        return (res / dt.type(g)).astype(dt)
    w = res.astype(np.int64)
    return (np.sign(w) * (np.abs(w) // g)).astype(dt)


def partitions(topo, n: int) -> list[list[list[int]]]:
    """The world, halves, quarters ... pairs: the ones the topology accepts."""
    from neuron_mpi import groups as G
    from neuron_mpi.errors import TopologyError
    out = []
    size = n
    while size >= 2:
        if n % size == 0:
            part = [list(range(s, s + size)) for s in range(0, n, size)]
            try:
                for g in part:
                    G.check_group(topo, g, True)
                out.append(part)
            except TopologyError:
                pass
        size //= 2
    return out or [[list(range(n))]]


class Soak:
    def __init__(self, world, args):
        self.w = world
        self.args = args
        self.n = world.size
        self.parts = partitions(world.topology, self.n)
        self.comms = []  # per partition: this rank's communicator
        for part in self.parts:
            if len(part) == 1:
                self.comms.append(world)
            else:
                self.comms.append(world.split(part, timeout=args.timeout))
        from neuron_mpi.algorithms.select import _APPLIES
        self.applies = _APPLIES
        self.failures: list[str] = []
        self.calls = 0

    def draw(self, i: int) -> dict:
        rng = np.random.default_rng([self.args.seed, i])
        op = OPS[rng.integers(len(OPS))]
        dname = list(DTYPES)[rng.integers(len(DTYPES))]
        if op in REDUCING and dname == "fp8_e4m3" and rng.random() < 0.5:
            dname = "bf16"
        hi = self.args.max_elems
        count = int(rng.integers(0, 4)) if rng.random() < 0.15 else \
            int(np.exp(rng.uniform(0, np.log(hi + 1))))
        k = self.args.sizes_pool
        if k:
            j = int(rng.integers(k))
            pool = np.random.default_rng([self.args.seed, 999, j])
            count = int(pool.integers(0, hi + 1)) if j else 1
        pi = int(rng.integers(len(self.parts)))
        choices = (None,) + tuple(self.applies.get(op, ()))
        algo = choices[rng.integers(len(choices))]
        redop = ("sum", "max", "min", "avg", "prod")[rng.integers(5)]
        if redop == "prod" and dname in EXACT:  # floats: products round
            redop = "sum"
        return {"i": i, "op": op, "dtype": dname, "count": count, "part": pi,
                "algorithm": algo, "redop": redop, "async": bool(rng.random() < 0.25),
                "seed": int(rng.integers(1 << 31)),
                "vcounts_seed": (1000 + j) if k else int(rng.integers(1 << 31)),
                "root_u": ((j + 0.5) / k) if k else float(rng.random())}

    def one(self, i: int) -> None:
        d = self.draw(i)
        comm = self.comms[d["part"]]
        g, me = comm.size, comm.rank
        op, dname, count, redop = d["op"], d["dtype"], d["count"], d["redop"]
        dt = DTYPES[dname]
        algo = d["algorithm"]
        if algo is not None:
            from neuron_mpi.errors import AlgorithmError
            try:
                comm.algorithm_for(op, algo)
            except AlgorithmError:
                algo = None  # the same decision on every member of the group
        vr = np.random.default_rng([d["vcounts_seed"], g])
        kw = {"timeout": self.args.timeout}
        if op not in ("barrier",):
            kw["algorithm"] = algo
            kw["async_op"] = d["async"]
        red = redop if op in REDUCING else "sum"

        def member_ints(q, cnt):
            return values(d["seed"], q, cnt, g, dname, red)

        want = None
        if op == "all_reduce":
            rows = [member_ints(q, count) for q in range(g)]
            x = to_dtype(rows[me], dname)
            want = reduce_ref(rows, redop, dname)
            call = lambda: comm.all_reduce(x, op=redop, **kw)  # noqa: E731
        elif op in ("reduce_scatter", "reduce_scatter_v"):
            counts = ([count] * g if op == "reduce_scatter"
                      else [int(v) for v in vr.integers(0, count + 1, g)])
            total = sum(counts)
            rows = [member_ints(q, total) for q in range(g)]
            x = to_dtype(rows[me], dname)
            off = sum(counts[:me])
            want = reduce_ref(rows, redop, dname)[off:off + counts[me]]
            if op == "reduce_scatter":
                call = lambda: comm.reduce_scatter(x, op=redop, **kw)  # noqa: E731
            else:
                call = lambda: comm.reduce_scatter_v(x, counts, op=redop, **kw)  # noqa: E731
        elif op in ("all_gather", "all_gather_v"):
            counts = ([count] * g if op == "all_gather"
                      else [int(v) for v in vr.integers(0, count + 1, g)])
            parts = [to_dtype(member_ints(q, counts[q]), dname) for q in range(g)]
            x = parts[me]
            want = np.concatenate(parts)
            if op == "all_gather":
                call = lambda: comm.all_gather(x, **kw)  # noqa: E731
            else:
                call = lambda: comm.all_gather_v(x, counts, **kw)  # noqa: E731
        elif op in ("all_to_all", "all_to_all_v"):
            if op == "all_to_all":
                m = [[count] * g for _ in range(g)]
            else:
                m = [[int(v) for v in vr.integers(0, count + 1, g)] for _ in range(g)]
            ins = [to_dtype(member_ints(q, sum(m[q])), dname) for q in range(g)]
            x = ins[me]
            want = np.concatenate([ins[q][sum(m[q][:me]):sum(m[q][:me + 1])]
                                   for q in range(g)])
            if op == "all_to_all":
                call = lambda: comm.all_to_all(x, **kw)  # noqa: E731
            else:
                sc = m[me]
                rc = [m[q][me] for q in range(g)]
                call = lambda: comm.all_to_all_v(x, sc, rc, **kw)  # noqa: E731
        elif op == "permute":
            perm = [int(v) for v in vr.permutation(g)]
            pairs = [(s, perm[s]) for s in range(g) if vr.random() < 0.8]
            ins = [to_dtype(member_ints(q, count), dname) for q in range(g)]
            x = ins[me]
            src = [s for s, t in pairs if t == me]
            want = ins[src[0]] if src else np.zeros(count, dt)
            call = lambda: comm.permute(x, pairs, **kw)  # noqa: E731
        elif op == "broadcast":
            root = min(g - 1, int(d["root_u"] * g))
            ins = [to_dtype(member_ints(q, count), dname) for q in range(g)]
            x = ins[me]
            want = ins[root]
            call = lambda: comm.broadcast(x, root=root, **kw)  # noqa: E731
        else:
            x = np.zeros(0, np.uint8)
            call = lambda: comm.barrier(**kw)  # noqa: E731
        before = x.copy()
        try:
            res = call()
            if d["async"] and op != "barrier":
                res = res.wait()
        except Exception as e:  # noqa: BLE001 - every error is a failure here
            self.fail(d, f"raised {type(e).__name__}: {e}")
            return
        finally:
            self.calls += 1
        if x.tobytes() != before.tobytes():
            self.fail(d, "the input changed")
        if want is not None:
            res = np.asarray(res)
            if res.dtype != want.dtype or res.shape != want.shape or \
                    res.tobytes() != want.tobytes():
                self.fail(d, f"wrong result: got {res.dtype}{res.shape} "
                             f"{res.ravel()[:4]}, want {want.dtype}{want.shape} "
                             f"{want.ravel()[:4]}")

    def fail(self, d, what):
        self.failures.append(f"call {d['i']} rank {self.w.rank} {d}: {what}")
        if len(self.failures) <= 5:
            print(f"soak: FAIL {self.failures[-1]}", file=sys.stderr, flush=True)


def check_overhead(world, calls: int, timeout: float) -> dict:
    """Per-call time of an 8-element fp32 all_reduce, agreement on vs off."""
    x = np.arange(8, dtype=np.float32)
    block = 100
    times = {"1": [], "0": []}
    for _ in range(50):  # warm-up: plans, kernels
        world.all_reduce(x, timeout=timeout)
    for b in range(max(1, calls // block)):
        for mode in ("1", "0") if b % 2 == 0 else ("0", "1"):
            os.environ["NEURON_MPI_CHECK"] = mode
            world.barrier(timeout=timeout)
            t0 = time.perf_counter()
            for _ in range(block):
                world.all_reduce(x, timeout=timeout)
            dt = (time.perf_counter() - t0) / block
            os.environ["NEURON_MPI_CHECK"] = "1"
            worst = world.all_reduce(np.array([dt]), op="max", timeout=timeout)
            times[mode].append(float(worst[0]))
    on, off = float(np.median(times["1"])), float(np.median(times["0"]))
    return {"ranks": world.size, "calls_each": len(times["1"]) * block, "elements": 8,
            "dtype": "fp32", "check_on_us": round(on * 1e6, 1),
            "check_off_us": round(off * 1e6, 1), "ratio": round(on / off, 3)}


def main(argv=None) -> int:
    args = parse_args(argv)
    import neuron_mpi as nm

    world = nm.init()
    if args.check_overhead:
        rep = check_overhead(world, args.check_overhead, args.timeout)
        if world.rank == 0:
            print("check-overhead: " + json.dumps(rep), flush=True)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(rep, f, indent=1)
        return 0
    warmup = args.warmup if args.warmup is not None else max(1, args.calls // 10)
    warmup = min(warmup, args.calls)
    soak = Soak(world, args)
    snaps = tempfile.mkdtemp(prefix="soak-tm-") if args.tracemalloc and world.rank == 0 \
        else None
    world.barrier(timeout=args.timeout)
    t0 = time.perf_counter()
    half = (warmup + args.calls) // 2
    marks: dict[str, list] = {}  # checkpoint -> (probe, census)

    def drain():
        from neuron_mpi.algorithms.select import schedule_for
        for c in soak.comms:
            c._plans.clear()
        schedule_for.cache_clear()
        gc.collect()

    def checkpoint(name):
        if args.drain:
            drain()
        if name == "warm" and args.tracemalloc:
            # from here on: what the calls allocate and keep (started earlier, the
            # tracing slows numba's loading of compiled code past the deadlines)
            tracemalloc.start(args.tracemalloc)
        marks[name] = (probe(args.drain), census(world, soak.comms))
        if snaps is not None:  # on disk: a snapshot kept in memory would count as growth
            tracemalloc.take_snapshot().dump(os.path.join(snaps, name))
            gc.collect()

    if warmup == 0 or warmup >= args.calls:
        checkpoint("warm")
    for i in range(args.calls):
        if i == warmup and "warm" not in marks:
            world.barrier(timeout=args.timeout)
            checkpoint("warm")
            t_warm = time.perf_counter()
        if i == half:
            checkpoint("half")
        soak.one(i)
        if args.probe_every and world.rank == 0 and i >= warmup and \
                (i + 1 - warmup) % args.probe_every == 0:
            pr, ce = probe(args.drain), census(world, soak.comms)
            print("soak: probe " + json.dumps(
                {"call": i + 1, **{k: round(v / 2 ** 20, 3) if k not in (
                    "pymalloc_blocks", "gc_objects") else int(v) for k, v in zip(PROBE, pr)},
                 **dict(zip(CENSUS, ce))}), flush=True)
        if args.verbose and world.rank == 0 and (i + 1) % 500 == 0:
            print(f"soak: {i + 1} calls, {time.perf_counter() - t0:.1f} s", flush=True)
    world.barrier(timeout=args.timeout)
    wall = time.perf_counter() - t0
    if warmup >= args.calls or warmup == 0:
        t_warm = t0 if warmup == 0 else time.perf_counter()
    wall_after = time.perf_counter() - t_warm
    checkpoint("end")
    marks.setdefault("half", marks["end"])
    (p0, c0), (ph, ch), (p1, c1) = marks["warm"], marks["half"], marks["end"]
    rss0, rssh, rss1 = p0[:2], ph[:2], p1[:2]
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    mine = np.array([soak.calls, len(soak.failures), rss0[0], rss1[0], rss1[0] - rss0[0],
                     maxrss, wall, rss0[1], rss1[1], rss1[1] - rss0[1],
                     rssh[1] - rss0[1], rss1[1] - rssh[1]] + p0 + ph + p1 + c0 + c1,
                    np.float64)
    table = world.all_gather(mine.reshape(1, -1), timeout=args.timeout)
    report = {
        "ranks": world.size, "seed": args.seed, "calls_per_rank": args.calls,
        "calls": int(table[:, 0].sum()), "failures": int(table[:, 1].sum()),
        "warmup_calls": warmup, "wall_s": round(float(table[:, 6].max()), 3),
        "calls_per_s_per_rank": round(args.calls / max(float(table[:, 6].max()), 1e-9), 1),
        "wall_after_warmup_s": round(wall_after, 3),
        "rss_after_warmup_mib_max": round(float(table[:, 2].max()) / 2 ** 20, 2),
        "rss_end_mib_max": round(float(table[:, 3].max()) / 2 ** 20, 2),
        "rss_growth_mib_max": round(float(table[:, 4].max()) / 2 ** 20, 3),
        "rss_growth_mib_mean": round(float(table[:, 4].mean()) / 2 ** 20, 3),
        "anon_after_warmup_mib_max": round(float(table[:, 7].max()) / 2 ** 20, 2),
        "anon_end_mib_max": round(float(table[:, 8].max()) / 2 ** 20, 2),
        "anon_growth_mib_max": round(float(table[:, 9].max()) / 2 ** 20, 3),
        "anon_growth_mib_mean": round(float(table[:, 9].mean()) / 2 ** 20, 3),
        "anon_growth_first_half_mib_max": round(float(table[:, 10].max()) / 2 ** 20, 3),
        "anon_growth_second_half_mib_max": round(float(table[:, 11].max()) / 2 ** 20, 3),
        "maxrss_mib_max": round(float(table[:, 5].max()) / 2 ** 20, 2),
        "partitions": [len(p) for p in soak.parts],
        "max_elems": args.max_elems,
    }
    k, m = len(PROBE), len(CENSUS)
    base = 12
    w0, wh, w1 = (table[:, base + j * k:base + (j + 1) * k] for j in range(3))
    mib = {"pymalloc_blocks", "gc_objects"}  # counts, not bytes
    memory = {}
    for j, name in enumerate(PROBE):
        scale = 1 if name in mib else 2 ** 20
        memory[name] = {
            "after_warmup_max": round(float(w0[:, j].max()) / scale, 3),
            "growth_max": round(float((w1[:, j] - w0[:, j]).max()) / scale, 3),
            "growth_mean": round(float((w1[:, j] - w0[:, j]).mean()) / scale, 3),
            "growth_first_half_max": round(float((wh[:, j] - w0[:, j]).max()) / scale, 3),
            "growth_second_half_max": round(float((w1[:, j] - wh[:, j]).max()) / scale, 3)}
    report["memory_mib"] = memory  # counts for pymalloc_blocks and gc_objects
    cb = base + 3 * k
    report["census_after_warmup_max"] = dict(zip(
        CENSUS, table[:, cb:cb + m].max(0).astype(int).tolist()))
    report["census_end_max"] = dict(zip(
        CENSUS, table[:, cb + m:cb + 2 * m].max(0).astype(int).tolist()))
    if snaps is not None:
        tracemalloc.stop()
        load = {name: tracemalloc.Snapshot.load(os.path.join(snaps, name))
                for name in ("warm", "half", "end") if os.path.exists(os.path.join(snaps, name))}
        for a, b in (("warm", "end"), ("warm", "half"), ("half", "end")):
            if a in load and b in load:
                key = "traceback" if (a, b) == ("warm", "end") else "lineno"
                print(f"soak: rank 0 tracemalloc growth {a} -> {b} by {key}:", flush=True)
                print("\n".join(top_growth(load[a], load[b], args.top, key)), flush=True)
        for name in os.listdir(snaps):
            os.unlink(os.path.join(snaps, name))
        os.rmdir(snaps)
    if world.rank == 0:
        print("soak: " + json.dumps(report), flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(report, f, indent=1)
    return 0 if report["failures"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
