"""The environment of the processes the tests start."""
from __future__ import annotations

import os


def child_env(unset=(), **extra) -> dict:
    """This process's environment less the variables ``unset``, with a shared
    NUMBA_CACHE_DIR unless one is set, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env.setdefault("NUMBA_CACHE_DIR", "/tmp/numba_cache_dev")
    env.update(extra)
    return env
