"""Byte sizes with units and the size sweep, as nccom-test / nccl-tests take them;
the command-line helpers the bench, model and ``neuron-mpi`` commands share (usage
errors, JSON arguments).

Units are binary, as nccom-test's: ``8``, ``8b``, ``2kb`` = ``2k`` = ``2KiB`` = 2048,
``1MB`` = ``1M`` = 1048576, ``1GB`` = 2**30 (case-insensitive).
Pure (no MPI): the model's command line uses it too.
"""
from __future__ import annotations

import argparse
import json
import os
import re

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
          "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
          "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
          "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+)\s*([a-z]*)\s*$", re.IGNORECASE)


def parse_size(text) -> int:
    """Bytes from ``8``, ``2kb``, ``1MB``, ``64M``...; ValueError with the reason."""
    m = _SIZE.match(str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"invalid size {text!r}: expected a whole number of bytes with "
                         "an optional unit (b, k/kb, m/mb, g/gb; 1kb = 1024), e.g. 8, 2kb, "
                         "1MB, 64M")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def human(nbytes: int) -> str:
    for unit, k in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if nbytes >= k and nbytes % k == 0:
            return f"{nbytes // k}{unit}"
    return f"{nbytes}B"


def sweep(minbytes: int, maxbytes: int, stepfactor: int | None = None,
          stepbytes: int | None = None) -> list[int]:
    """Sizes from minbytes to maxbytes: times ``stepfactor`` (default 2), or plus
    ``stepbytes`` when given. ValueError for an empty or endless sweep."""
    if minbytes < 1:
        raise ValueError(f"minbytes: expected at least 1 byte, got {minbytes}")
    if maxbytes < minbytes:
        raise ValueError(f"maxbytes ({maxbytes}) is smaller than minbytes ({minbytes})")
    if stepfactor is not None and stepbytes is not None:
        raise ValueError("give either a step factor (-f) or a step size (-i), not both")
    out = []
    if stepbytes is not None:
        if stepbytes < 1:
            raise ValueError(f"stepbytes: expected >= 1, got {stepbytes}")
        s = minbytes
        while s <= maxbytes:
            out.append(s)
            s += stepbytes
        return out
    f = 2 if stepfactor is None else stepfactor
    if f < 2:
        raise ValueError(f"stepfactor: expected an integer >= 2, got {f}")
    s = minbytes
    while s <= maxbytes:
        out.append(s)
        s *= f
    return out


class UsageError(Exception):
    """A bad command line: one line on stderr, exit status 2 (bench and model CLIs)."""


class UsageParser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of printing usage and exiting."""

    def error(self, message):
        raise UsageError(f"{message} (see '{self.prog} --help')")


def output_path(text):
    """argparse type for a file the command will write (a report, a plot, a trace;
    missing folders are made): checked when the command line is read, so that a path
    that cannot be written fails before any work, not after it."""
    path = os.path.abspath(os.path.expanduser(text))
    if os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"{text!r} is a directory, not a file")
    folder = os.path.dirname(path)
    while not os.path.exists(folder):  # the folders the writer will make
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: {folder!r} is not a "
                                         "directory")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: permission denied")
    try:  # (os.access says yes to root, and to folders such as /proc)
        if os.path.exists(path):
            with open(path, "a"):
                pass
        elif folder == os.path.dirname(path):
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            except FileExistsError:  # (another rank's probe)
                pass
            else:
                os.unlink(path)
    except OSError as e:
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: {e.strerror}") from None
    return text


#: the formats matplotlib's savefig writes (a --plot file's extension)
PLOT_FORMATS = ("png", "pdf", "svg", "svgz", "eps", "ps", "jpg", "jpeg", "tif", "tiff",
                "webp", "pgf", "raw", "rgba")


def plot_path(text):
    """argparse type for --plot: a file ``output_path`` takes, of a format matplotlib
    writes (png when it has no extension)."""
    text = output_path(text)
    ext = os.path.splitext(text)[1].lower().lstrip(".")
    if ext and ext not in PLOT_FORMATS:
        raise argparse.ArgumentTypeError(f"{text!r}: matplotlib writes "
                                         + ", ".join(PLOT_FORMATS) + f", not {ext!r}")
    return text


def json_arg(text: str, flag: str):
    """The JSON of a command-line argument that is a file's path or the JSON itself."""
    if os.path.exists(text):
        try:
            with open(text) as f:
                src = f.read()
        except OSError as e:
            raise UsageError(f"{flag}: cannot read {text!r}: {e.strerror}") from None
        where = f"file {text!r}"
    else:
        src, where = text, "inline JSON"
    try:
        return json.loads(src)
    except ValueError as e:
        msg = getattr(e, "msg", str(e))
        pos = f" at line {e.lineno} column {e.colno}" if hasattr(e, "lineno") else ""
        if where == "inline JSON" and not src.lstrip().startswith(("[", "{")):
            raise UsageError(f"{flag}: {text!r} is neither an existing file nor JSON text "
                             f"({msg}{pos})") from None
        raise UsageError(f"{flag}: {where} is not valid JSON ({msg}{pos})") from None


def json_list(data, key: str, flag: str) -> list:
    """A list from nccom-test's files, which wrap it as {key: [list]} (or {key: list});
    a plain list is taken as is."""
    if isinstance(data, dict):
        if key not in data:
            raise UsageError(f"{flag}: expected a {key!r} entry")
        data = data[key]
        if isinstance(data, list) and len(data) == 1 and isinstance(data[0], list) \
                and data[0] and isinstance(data[0][0], list):
            data = data[0]
    if not isinstance(data, list):
        raise UsageError(f"{flag}: expected a list, got {type(data).__name__}")
    return data


def replica_groups_arg(text: str, flag: str) -> list[list[int]]:
    """Replica groups from a JSON file path or inline JSON (a list of lists of ranks,
    or nccom-test's {"replica_groups": ...}), all of one size; the ranks' range is the
    caller's to check."""
    groups = json_list(json_arg(text, flag), "replica_groups", flag)
    if (not groups or not all(isinstance(g, list) and g for g in groups)
            or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0
                       for g in groups for x in g)):
        raise UsageError(f"{flag}: expected a non-empty list of non-empty lists of ranks, "
                         f"e.g. [[0,1,2,3],[4,5,6,7]], got {json.dumps(groups)[:80]}")
    if len({len(g) for g in groups}) != 1:
        raise UsageError(f"{flag}: every group must have the same size, got sizes "
                         + ", ".join(str(len(g)) for g in groups))
    return groups


def size_arg(text):
    """argparse type for a size with units (8, 2kb, 1MB, 64M)."""
    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_size_arguments(p, minbytes: int, maxbytes: int, stepfactor: int) -> None:
    """nccom-test's sweep options -b -e -f -i on ``p`` (a parser or a group), with
    these defaults (-f is left None when not given: ``sweep`` applies the default)."""
    p.add_argument("-b", "--minbytes", type=size_arg, default=minbytes, metavar="SIZE",
                   help=f"smallest size (default {human(minbytes)})")
    p.add_argument("-e", "--maxbytes", type=size_arg, default=maxbytes, metavar="SIZE",
                   help=f"largest size (default {human(maxbytes)})")
    p.add_argument("-f", "--stepfactor", type=int, metavar="F",
                   help=f"multiply the size by F (default {stepfactor})")
    p.add_argument("-i", "--stepbytes", type=size_arg, metavar="SIZE",
                   help="add SIZE to the size (instead of -f)")
