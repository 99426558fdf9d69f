"""The data plane (transport/plane.py), the atomics (kernels/atomic_ops.py) and the
byte-wise reductions (kernels/bytes.py) built ahead of time by ``numba.pycc`` into
one extension module, which ranks load instead of numba: no numba import, no
compiler in memory (about 0.3 CPU s and 50 MiB per rank at launch, measured in
docs/benchmarks.md).

``build()`` makes it (``kernels.warm()`` runs it in a child beside its own
compiles, ``build_aside()``; neuron-mpirun warms before every launch) in the numba
cache's ``aot`` folder, named by a digest of the sources it is made from, so a
changed source is never served by an old build. ``load()`` returns
it, or None: none built for this source, NEURON_MPI_AOT=0, or a build that could
not be made (no C compiler, no numba.pycc, not x86-64); the callers then compile
with numba as before. The build is generic x86-64 code, as numba.pycc makes it;
the copies are libc's memmove either way.

Its functions take exactly the argument types of ``EXPORTS`` and, unlike numba's
dispatchers, do not check them (a non-contiguous array is read as if it were
contiguous): every caller in the package passes C-contiguous arrays of these types.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sysconfig
from pathlib import Path

from .. import env

_PKG = Path(__file__).resolve().parent.parent
_SOURCES = ("kernels/aot.py", "kernels/atomic_ops.py", "kernels/bf16.py", "kernels/bytes.py",
            "kernels/codes.py", "kernels/fp16.py", "kernels/fp8.py", "kernels/llvm_ops.py",
            "kernels/native.py", "transport/native.py", "transport/plane.py")

_U8, _I64, _I32, _M = "uint8[::1]", "int64[::1]", "int32[::1]", "int64[:, ::1]"
# exec_pass's arguments, which exec_run takes with a claim word and a deadline
_RUN = (_U8, _I64, _I64, _I64, _I64, _U8, _U8, _U8, _U8,
        "int64", "int64", "int64", _I32, _M, "int64", "int64", _I64, "int64", _I64, _M)


def _sig(ret: str, *args: str) -> str:
    return f"{ret}({', '.join(args)})"


#: exported name -> (module, function, signature)
EXPORTS = {
    "read_remote": ("plane", "read_remote", _sig("int64", "int64", _U8, "int64", "int64", "int64")),
    "ring": ("plane", "ring", _sig("void", _U8, _I64, "int64", "int64")),
    "ring_piece": ("plane", "ring_piece", _sig("void", _U8, _I64, "int64")),
    "ring_many": ("plane", "ring_many", _sig("void", _U8, _I64, _I64)),
    "post": ("plane", "post", _sig("boolean", _U8, _I64, _I64, "int64", _I64, _U8, _I64,
                                    "int64", "int64")),
    "post_read": ("plane", "post_read", _sig("int64", _U8, _I64, _I64, "int64", _I64, _U8,
                                              "int64", "int64", _I64, "int64", "int64")),
    "release": ("plane", "release", _sig("void", _U8, _I64, "int64")),
    "read_slot": ("plane", "read_slot", _sig("int64", _U8, _I64, "int64", _U8, "int64",
                                              "int64")),
    "find": ("plane", "find", _sig("int64", _U8, _I64, "int64", "int64", "int64", "int64")),
    "passing": ("plane", "passing", _sig("int64", _U8, _I64, _I64)),
    "stuck": ("plane", "stuck", _sig("int64", _U8, _I64, _I64)),
    "drop": ("plane", "drop", _sig("int64", _U8, _I64, _I64)),
    "any_want": ("plane", "any_want", _sig("boolean", _U8, _I64)),
    "exec_pass": ("plane", "exec_pass", _sig("Tuple((int64, boolean))", *_RUN)),
    "take_back": ("plane", "take_back", _sig("int64", _U8, _I64, _M, _M, _I64, _U8, _M)),
    "exec_run": ("plane", "exec_run", _sig("int64", *_RUN, _I32, "int64")),
    "add_many": ("atomic_ops", "add_many", _sig("void", _I64, _I64, _I64)),
    # the Python path's reductions (pieces over MPI): no numba in a rank at all
    "reduce_bytes": ("bytes", "reduce_bytes", _sig("void", "int64", _U8, _U8)),
    "divide_bytes": ("bytes", "divide_bytes", _sig("void", "int64", _U8, "int64")),
}
for _w, _a in (("i32", _I32), ("i64", _I64)):
    _t = "int32" if _w == "i32" else "int64"
    EXPORTS[f"fetch_add_{_w}"] = ("atomic_ops", "fetch_add", _sig(_t, _a, "int64", "int64"))
    EXPORTS[f"compare_exchange_{_w}"] = ("atomic_ops", "compare_exchange",
                                         _sig(_t, _a, "int64", "int64", "int64"))
    EXPORTS[f"load_{_w}"] = ("atomic_ops", "load", _sig(_t, _a, "int64"))
    EXPORTS[f"store_{_w}"] = ("atomic_ops", "store", _sig("void", _a, "int64", "int64"))


def _digest(h, files) -> str:
    """``h`` (a hashlib object) updated with the bytes of ``files``: its first 16 hex
    digits."""
    for f in files:
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _folder() -> Path:
    """The numba cache's ``aot`` folder: the module and warm()'s stamp."""
    return Path(env.numba_cache_dir() or env.default_numba_cache()) / "aot"


def name() -> str:
    """The module's name: a digest of the sources it is built from."""
    return "_neuron_mpi_plane_" + _digest(hashlib.sha256(), (_PKG / rel for rel in _SOURCES))


def path() -> Path:
    return _folder() / (name() + sysconfig.get_config_var("EXT_SUFFIX"))


def warm_stamp() -> Path:
    """The file ``kernels.warm()`` leaves in the cache once it has compiled (or
    loaded) everything for this source: named by a digest of every module of
    kernels/ and transport/, this Python and the installed numba, so that any
    change there makes it absent. neuron-mpirun's warm-up looks for it first and
    then spares itself the import of numba and the loads from the cache (about 1.5
    CPU s per launch)."""
    import sys
    from importlib import metadata

    h = hashlib.sha256(sys.version.encode())
    try:
        h.update(metadata.version("numba").encode())
    except metadata.PackageNotFoundError:
        pass
    sources = [src for folder in ("kernels", "transport")
               for src in sorted((_PKG / folder).glob("*.py"))]
    return _folder() / ("warm_" + _digest(h, sources))


_LOADED: list = []


def load():
    """The module built for this source, or None (loaded once per process)."""
    if not _LOADED:
        mod = None
        p = path()
        if env.aot() and p.is_file():
            try:
                spec = importlib.util.spec_from_file_location(p.name.split(".")[0], p)
                mod = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(mod)
            except (ImportError, OSError):  # a damaged build: numba compiles instead
                mod = None
        _LOADED.append(mod)
    return _LOADED[0]


def build_aside():
    """Start ``build()`` in a child process, to run beside the numba compiles of
    ``kernels.warm()`` on another core (each is single-threaded: on 2 cores this
    takes the build's half minute off a cold warm-up); the child's Popen, or None
    when there is nothing to build here or this process has started MPI (no fork
    after MPI_Init). The caller waits for it and then calls ``build()``, which
    finds the module built (or, had the child failed, builds it in this process)."""
    import subprocess
    import sys

    from ..transport import native

    if path().is_file() or not native.SUPPORTED or "mpi4py.MPI" in sys.modules:
        return None
    # the same package as this process's, wherever it was imported from
    path_ = os.pathsep.join(p for p in (str(_PKG.parent), env.python_path()) if p)
    child_env = env.for_children({"PYTHONPATH": path_})
    try:
        return subprocess.Popen(
            [sys.executable, "-c", "from neuron_mpi.kernels import aot; aot.build()"],
            env=child_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        return None


def build() -> Path | None:
    """Build the module for this source unless it exists; its path, or None where
    it cannot be built here."""
    from ..transport import native

    target = path()
    if target.is_file():
        return target
    if not native.SUPPORTED:
        return None
    try:
        from numba.pycc import CC
        from numba.pycc import compiler as pycc
    except ImportError:
        return None
    import tempfile

    from ..transport import plane
    from . import atomic_ops, bytes

    modules = {"plane": plane, "atomic_ops": atomic_ops, "bytes": bytes}
    flags = pycc.Flags

    class Flags(flags):  # as the JIT compiles them: without the GIL, numpy's errors
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.release_gil = True
            self.error_model = "numpy"

    target.parent.mkdir(parents=True, exist_ok=True)
    pycc.Flags = Flags
    try:
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            cc = CC(target.name.split(".")[0])
            cc.output_dir = tmp
            cc.verbose = False
            for exported, (mod, fn, sig) in EXPORTS.items():
                cc.export(exported, sig)(getattr(modules[mod], fn).py_func)
            cc.compile()
            built = Path(tmp) / target.name
            os.replace(built, target)  # (atomic: a rank never sees half a file)
    except Exception:  # no C compiler or Python headers, a pycc of another numba
        return None
    finally:
        pycc.Flags = flags
    return target
