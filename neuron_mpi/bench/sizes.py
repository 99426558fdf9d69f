"""Byte sizes with units and the size sweep, as nccom-test / nccl-tests take them.

Units are binary, as nccom-test's: ``8``, ``8b``, ``2kb`` = ``2k`` = ``2KiB`` = 2048,
``1MB`` = ``1M`` = 1048576, ``1GB`` = 2**30 (case-insensitive).
Pure (no MPI): the model's command line uses it too.
"""
from __future__ import annotations

import argparse
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
