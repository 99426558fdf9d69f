"""The algorithm registry: every module of this package that defines ``ALGORITHM``
(an ``Algorithm``) is one algorithm. Selection, ``--algorithm`` choices and help,
fingerprint codes and the tests' lists are all read from here, so adding an
algorithm is one new file.

An ``Algorithm`` declares:
  name, summary      what ``--show-algorithm`` prints and a one-line description;
  ops                the operations it builds;
  applies(op, view)  None when it can run ``op`` on the group, else the reason
                     (an English phrase starting with "needs ..." or "is ...");
  prefer(op, view, nbytes)
                     the runtime's rule for choosing it, as the source text that
                     justifies it (a non-empty string), or None when the runtime
                     would not pick it for this call;
  priority           selection order: the first algorithm (lowest priority) that
                     applies and prefers the call runs it;
  build(op, view, sizes, avg, extra)
                     the schedule (see select.schedule_for for ``sizes``/``extra``).
"""
from __future__ import annotations

import functools
import importlib
import pkgutil
from dataclasses import dataclass
from typing import Callable, Optional

# every operation the communicator offers; an algorithm lists the ones it builds
NEURON_OPS = ("all_reduce", "reduce_scatter", "all_gather", "reduce_scatter_v",
              "all_gather_v", "all_to_all", "all_to_all_v", "permute", "broadcast", "barrier")
# not Neuron collectives: the front-ends' rooted operations (algorithms/rooted.py)
ROOTED_OPS = ("reduce", "gather", "scatter", "scan", "exscan")
OPS = NEURON_OPS + ROOTED_OPS


@dataclass(frozen=True)
class Algorithm:
    name: str
    summary: str
    ops: tuple
    build: Callable
    applies: Callable[[str, object], Optional[str]] = lambda op, view: None
    prefer: Callable[[str, object, Optional[int]], Optional[str]] = \
        lambda op, view, nbytes: None
    priority: int = 50

    def reason(self, op: str, view) -> str | None:
        """None when this algorithm can run ``op`` on ``view``, else why not."""
        if op not in self.ops:
            return f"does not apply to {op}"
        return self.applies(op, view)


@functools.lru_cache(maxsize=1)
def _load() -> tuple[Algorithm, ...]:
    from .. import algorithms as pkg

    found = []
    for info in pkgutil.iter_modules(pkg.__path__):
        mod = importlib.import_module(f"{pkg.__name__}.{info.name}")
        algo = getattr(mod, "ALGORITHM", None)
        if isinstance(algo, Algorithm):
            found.append(algo)
    names = [a.name for a in found]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise RuntimeError(f"two algorithm files register {sorted(dup)}")
    return tuple(sorted(found, key=lambda a: (a.priority, a.name)))


def algorithms() -> tuple[Algorithm, ...]:
    """Every registered algorithm, in selection order."""
    return _load()


def get(name: str) -> Algorithm | None:
    return next((a for a in _load() if a.name == name), None)


def names() -> tuple[str, ...]:
    """Algorithm names in selection order; a name's index is its fingerprint code."""
    return tuple(a.name for a in _load())


def applies_to(op: str) -> tuple[str, ...]:
    """Names of the algorithms that build ``op``, in selection order."""
    return tuple(a.name for a in _load() if op in a.ops)


def help_text() -> str:
    """One line per algorithm: name, the ops it builds and what it is."""
    return "; ".join(f"{a.name} ({a.summary})" for a in _load())


def add_argument(parser) -> None:
    """``--algorithm A`` for a command line, its choices and help from the registry."""
    parser.add_argument("--algorithm", metavar="A", choices=names(),
                        help="force an algorithm: " + help_text())
