"""Cross-rank agreement: every collective call's fingerprint, compared across the
group before any data moves.

A fingerprint is a fixed int64 vector (buffer-based, never pickled): status (0 ok,
1 the rank rejected its own arguments), operation, sequence number, element count,
dtype, reduce op, root, a digest of permute pairs / v-counts, and the algorithm.
All members all-gather them (a non-blocking MPI all-gather on the group's MPI
communicator, waited on by the engine so forwarding goes on) and every member runs
the same comparison on the same table, so all raise the same error or none does.
"""
from __future__ import annotations

import functools
import hashlib

import numpy as np

from .algorithms.select import ALGORITHMS, OPS
from .errors import CollectiveMismatchError, InvalidArgumentError
from .kernels import DTYPES, dtype_name

FIELDS = ("status", "operation", "sequence number", "count", "dtype", "reduce op", "root",
          "layout", "algorithm")
STATUS, OP, SEQ, COUNT, DTYPE, REDOP, ROOT, DIGEST, ALGO = range(len(FIELDS))
from .vocab import REDUCE_OPS as _REDOPS  # noqa: E402  (index = fingerprint code)
_OPS = OPS + ("split",)
_DTYPE_NAMES = list(DTYPES)


def digest(*parts) -> int:
    """A 62-bit digest of integers (pairs, counts) that all ranks compute alike."""
    try:
        return _digest_cached(parts)
    except TypeError:  # a list among the parts: not hashable, not cached
        return _digest(parts)


@functools.lru_cache(maxsize=256)
def _digest_cached(parts) -> int:
    return _digest(parts)


def _digest(parts) -> int:
    h = hashlib.blake2b(digest_size=8)
    for p in parts:
        h.update(np.asarray(p, np.int64).tobytes())
        h.update(b"|")
    return int.from_bytes(h.digest(), "little") & ((1 << 62) - 1)


def fingerprint(op, seq, count=0, dtype=None, reduce_op=None, root=-1, dig=0,
                algorithm=None, status=0) -> np.ndarray:
    return np.array((status, _OP_CODE.get(op, -1), seq, count,
                     -1 if dtype is None else _dtype_code(dtype),
                     _REDOP_CODE.get(reduce_op, -1), root, dig,
                     _ALGO_CODE.get(algorithm, -1)), np.int64)


_OP_CODE = {name: i for i, name in enumerate(_OPS)}
_REDOP_CODE = {name: i for i, name in enumerate(_REDOPS)}
_ALGO_CODE = {name: i for i, name in enumerate(ALGORITHMS)}
_DTYPE_CODE: dict = {}


def _dtype_code(dtype) -> int:
    code = _DTYPE_CODE.get(dtype)
    if code is None:
        code = _DTYPE_CODE[dtype] = _DTYPE_NAMES.index(dtype_name(dtype))
    return code


def _show(field: int, v: int) -> str:
    if field == OP:
        return _OPS[v] if 0 <= v < len(_OPS) else f"op#{v}"
    if field == DTYPE:
        return _DTYPE_NAMES[v] if 0 <= v < len(_DTYPE_NAMES) else "none"
    if field == REDOP:
        return _REDOPS[v] if 0 <= v < len(_REDOPS) else "none"
    if field == ALGO:
        return ALGORITHMS[v] if 0 <= v < len(ALGORITHMS) else "none"
    if field == DIGEST:
        return f"row shape/pairs/counts digest {v:016x}"
    return str(v)


def ranks_text(ranks) -> str:
    """[0,1,2,5,7,8] -> '0-2,5,7-8'."""
    ranks = sorted(ranks)
    out, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        out.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return ",".join(out)


def compare(table: np.ndarray, op: str, seq: int) -> None:
    """table: (group size, len(FIELDS)). Raise the same error on every member."""
    if (table == table[0]).all() and not table[0, STATUS]:
        return  # the common case, in one comparison
    bad = np.nonzero(table[:, STATUS])[0]
    if bad.size:
        e = InvalidArgumentError(
            f"{op}: rank(s) {ranks_text(bad.tolist())} of the group rejected their arguments "
            "(their own error says why); no data moved")
        e.agreed = True
        raise e
    diffs = []
    # different operations differ in everything else too: name the operation alone
    fields = [OP] if not (table[:, OP] == table[0, OP]).all() else range(1, len(FIELDS))
    for f in fields:
        col = table[:, f]
        if (col == col[0]).all():
            continue
        holders: dict[int, list[int]] = {}
        for r, v in enumerate(col.tolist()):
            holders.setdefault(v, []).append(r)
        shown = "; ".join(f"rank {ranks_text(rs)}: {_show(f, v)}"
                          for v, rs in sorted(holders.items(), key=lambda kv: kv[1][0]))
        diffs.append((FIELDS[f], shown))
    if diffs:
        names = ", ".join(d[0] for d in diffs)
        detail = " | ".join(f"{name}: {shown}" for name, shown in diffs)
        err = CollectiveMismatchError(
            f"{op} (call {seq} on this communicator): ranks disagree on {names}; "
            f"{detail}; no data moved")
        err.fields = [d[0] for d in diffs]
        raise err


def _mix(pair: np.ndarray, count: np.ndarray) -> np.ndarray:
    """A 64-bit hash of (pair index, count) per element (splitmix64's finalizer);
    uint64 arithmetic wraps, as the sums over it must."""
    z = pair * np.uint64(0x9E3779B97F4A7C15) + count * np.uint64(0xD1B54A32D192ED03)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def pair_share(me: int, send, recv) -> int:
    """Member ``me``'s share of the all-to-all-v count check, one int64: the hashes
    of (me -> j, send[j]) less those of (j -> me, recv[j]), summed mod 2**64. Summed
    over the group the shares are 0 when every member sends each other what it
    expects: each pair's hash is added by its sender and taken away by its receiver.
    Any disagreement leaves a sum other than 0 (but for a 2**-64 chance), so the
    common case needs no exchange of the count rows (``pairs_agree``)."""
    n = len(send)
    j = np.arange(n, dtype=np.uint64)
    out = _mix(np.uint64(me) * np.uint64(n) + j, np.asarray(send, np.int64).astype(np.uint64))
    into = _mix(j * np.uint64(n) + np.uint64(me), np.asarray(recv, np.int64).astype(np.uint64))
    d = np.array([out.sum()], np.uint64) - np.array([into.sum()], np.uint64)  # wraps
    return int(d.view(np.int64)[0])


def pairs_agree(shares: np.ndarray) -> bool:
    """Do the members' pair_share values (one column of the agreement table) sum to 0?"""
    return int(np.ascontiguousarray(shares, np.int64).view(np.uint64).sum()) == 0


def check_all_to_all_v(rows: np.ndarray, op: str) -> None:
    """rows[i] = rank i's send_counts followed by its recv_counts: what i sends to j
    must be what j expects from i."""
    n = rows.shape[0]
    send, recv = rows[:, :n], rows[:, n:]
    wrong = np.argwhere(send != recv.T).tolist()  # (i, j) in row order
    if wrong:
        i, j = wrong[0]
        err = CollectiveMismatchError(
            f"{op}: send_counts and recv_counts disagree at {len(wrong)} pair(s); first: "
            f"rank {i} sends {send[i, j]} rows to rank {j}, which expects {recv[j, i]}; "
            "no data moved")
        err.fields = ["send_counts/recv_counts"]
        raise err


def counts_disagree(op: str, seq: int) -> CollectiveMismatchError:
    """The all-to-all-v error when the shares did not sum to 0 but the pair is not
    known (the count rows were not all-gathered)."""
    err = CollectiveMismatchError(
        f"{op} (call {seq}): send_counts and recv_counts disagree between ranks; "
        "no data moved")
    err.fields = ["send_counts/recv_counts"]
    return err
