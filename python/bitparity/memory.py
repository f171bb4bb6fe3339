"""Peak and live tensor bytes of a rank over an iteration (the `peak_bytes` and `end_bytes`
columns).

On `cuda`: the caching allocator's allocated bytes. On the CPU: the counters of the C library
that BITPARITY_CPU_MEMORY_LIBRARY names (it exports bitparity_cpu_memory_install,
..._current_bytes, ..._peak_bytes and ..._reset_peak); without it the CPU's bytes are unknown
and read -1.
"""

from __future__ import annotations

import ctypes
import os

import torch

from bitparity.request import fail

CPU_MEMORY_LIBRARY_VARIABLE = "BITPARITY_CPU_MEMORY_LIBRARY"
UNKNOWN_BYTES = -1


class MemoryMeter:
    """Reads the bytes of one peak window: from construction or the last `reset_peak()` to
    `read()`."""

    def __init__(self, device: str):
        self._device = device
        self._library = None
        if device != "cuda":
            self._library = _load_cpu_library()
        self.reset_peak()

    @property
    def available(self) -> bool:
        """Whether `read()` measures anything (else it returns -1, -1)."""
        return self._device == "cuda" or self._library is not None

    def reset_peak(self) -> None:
        """Starts a new peak window at the bytes live now."""
        if self._device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        elif self._library is not None:
            self._library.bitparity_cpu_memory_reset_peak()

    def read(self) -> tuple[int, int]:
        """(peak bytes of the window, bytes live now); (-1, -1) when unavailable."""
        if self._device == "cuda":
            return int(torch.cuda.max_memory_allocated()), int(torch.cuda.memory_allocated())
        if self._library is not None:
            peak = self._library.bitparity_cpu_memory_peak_bytes()
            return int(peak), int(self._library.bitparity_cpu_memory_current_bytes())
        return UNKNOWN_BYTES, UNKNOWN_BYTES


def _load_cpu_library():
    """The CPU memory library, installed, or None when the variable is unset. A variable that
    names no loadable library is a request error (exit code 2)."""
    path = os.environ.get(CPU_MEMORY_LIBRARY_VARIABLE, "")
    if not path:
        return None
    if not os.path.isfile(path):
        raise fail(f"{CPU_MEMORY_LIBRARY_VARIABLE}={path}: no such file")
    try:
        library = ctypes.CDLL(path)
        for name in ("bitparity_cpu_memory_current_bytes", "bitparity_cpu_memory_peak_bytes"):
            getattr(library, name).restype = ctypes.c_int64
        library.bitparity_cpu_memory_install.restype = None
        library.bitparity_cpu_memory_reset_peak.restype = None
    except (OSError, AttributeError) as error:
        raise fail(f"{CPU_MEMORY_LIBRARY_VARIABLE}={path}: cannot load it: {error}") from None
    library.bitparity_cpu_memory_install()
    return library
