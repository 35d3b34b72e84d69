"""C library functions that Python's standard library does not wrap (syncfs, malloc_trim),
looked up once, in one way, in the C library the interpreter already runs on."""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from typing import Any, cast


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        # dlopen(NULL): the process's own symbols, the C library's among them; use_errno so
        # a failed call's errno can be read with ctypes.get_errno().
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def libc_function(name: str, argtypes: list[Any], restype: Any) -> Callable[..., int] | None:
    """The C function `name` with its signature set, or None where the C library lacks it
    (syncfs outside Linux, malloc_trim outside glibc)."""
    libc = _libc()
    if libc is None:
        return None
    try:
        fn = getattr(libc, name)
    except AttributeError:
        return None
    fn.argtypes = argtypes
    fn.restype = restype
    return cast(Callable[..., int], fn)
