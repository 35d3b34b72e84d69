"""C library lookups (skald.adapters.libc): a function the C library has is callable with its
signature; one it lacks is None, so its callers fall back (no syncfs: fsync per file)."""

from __future__ import annotations

import ctypes
import os

from skald.adapters.libc import libc_function


def test_a_present_function_is_called_with_its_signature() -> None:
    getpid = libc_function("getpid", [], ctypes.c_int)
    assert getpid is not None and getpid() == os.getpid()


def test_a_missing_function_is_none() -> None:
    assert libc_function("skald_no_such_function", [ctypes.c_int], ctypes.c_int) is None
