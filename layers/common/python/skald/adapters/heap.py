"""Handing freed heap pages back to the operating system.

glibc keeps the pages a large transient allocation freed, so the resident size stays at its
high-water mark. Two loads leave that much behind: building an ONNX session (the optimiser
frees its intermediates, more of them when it folds the bundled model's weights into float32
copies than when they are multiplied as int8) and loading the embedded index's columns.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable

from skald.adapters.libc import libc_function


@functools.cache
def _trim() -> Callable[..., int] | None:
    return libc_function("malloc_trim", [ctypes.c_size_t], ctypes.c_int)  # glibc only


def release_freed_memory() -> None:
    """malloc_trim(0) where the C library has it; nothing elsewhere."""
    trim = _trim()
    if trim is not None:
        trim(0)
