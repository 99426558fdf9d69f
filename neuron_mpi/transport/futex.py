"""Sleeping and waking on a 32-bit word of memory, through Linux's futex(2).

A waiter passes the value it last saw; the kernel puts it to sleep only if the word
still holds that value (checked atomically), so a wake that happens between the
waiter's last look and its sleep is never lost: the writer changes the word first
(an atomic add), then wakes. The word may live in a shared mapping (every process
that maps it can wait and wake) or in private memory. A sleeping waiter costs no CPU;
ctypes releases the GIL for the call.
"""
from __future__ import annotations

import ctypes
import errno
import os
import platform

FUTEX_WAIT = 0
FUTEX_WAKE = 1
WAKE_ALL = 0x7FFFFFFF

_SYSCALL_NUMBERS = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _load():
    machine = platform.machine().lower()
    number = _SYSCALL_NUMBERS.get(machine)
    if number is None or not platform.system() == "Linux":
        return None, None
    libc = ctypes.CDLL(None, use_errno=True)
    fn = libc.syscall
    fn.restype = ctypes.c_long
    fn.argtypes = [ctypes.c_long, ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                   ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    return fn, number


_SYSCALL, _NR = _load()


def available() -> bool:
    return _SYSCALL is not None


def wait(addr: int, expected: int, timeout: float | None = None) -> bool:
    """Sleep while the int32 at ``addr`` equals ``expected`` (its low 32 bits), at
    most ``timeout`` seconds (None: no limit). Returns False on a timeout, True
    otherwise (woken, the value already differed, or a signal arrived): the caller
    re-checks its condition either way."""
    expected = ctypes.c_int32(expected).value
    if timeout is None:
        ts = None
    else:
        timeout = max(0.0, timeout)
        sec = int(timeout)
        ts = ctypes.byref(_Timespec(sec, int((timeout - sec) * 1e9)))
    r = _SYSCALL(_NR, addr, FUTEX_WAIT, expected, ts, None, 0)
    if r == 0:
        return True
    err = ctypes.get_errno()
    if err == errno.ETIMEDOUT:
        return False
    if err in (errno.EAGAIN, errno.EINTR):
        return True
    raise OSError(err, f"futex wait: {os.strerror(err)}")


def wake(addr: int, count: int = WAKE_ALL) -> int:
    """Wake up to ``count`` waiters sleeping on the word at ``addr``."""
    r = _SYSCALL(_NR, addr, FUTEX_WAKE, count, None, None, 0)
    if r < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"futex wake: {os.strerror(err)}")
    return r
