"""The rank attributes `provenance.<key>` (docs/trace-format.md) of a Python rank process, as far
as Python can tell them; a fact it cannot find reads "unknown"."""

from __future__ import annotations

import os
import platform
import re
import socket

import torch

RECORDER = "bitparity-python 0.1.0"


def libtorch_version() -> str:
    """torch's version without its local suffix ("2.11.0", not "2.11.0+cpu")."""
    return torch.__version__.split("+", 1)[0]


def _build_configuration() -> str:
    try:
        return torch.__config__.show()
    except Exception:  # a torch without the summary: its facts read "unknown"
        return ""


def blas(configuration: str) -> str:
    """`mkl <version>` when torch carries MKL, else `BLAS_INFO`'s value, else "unknown"."""
    mkl = re.search(r"Math Kernel Library Version (\S+)", configuration)
    if mkl:
        return f"mkl {mkl.group(1).split('-')[0]}"
    info = re.search(r"BLAS_INFO=([^,\s]+)", configuration)
    return info.group(1) if info else "unknown"


def onednn_version(configuration: str) -> str:
    """oneDNN's version from torch's build summary ("3.10.2"), else "unknown"."""
    found = re.search(r"(?:MKL-DNN|oneDNN) v(\S+)", configuration)
    return found.group(1) if found else "unknown"


def provenance(device: str) -> dict[str, str]:
    """`provenance.<key>` attributes of this process for a rank on `device`."""
    configuration = _build_configuration()
    facts = {
        "libtorch_version": libtorch_version(),
        "blas": blas(configuration),
        "onednn_version": onednn_version(configuration),
        "cpu_isa": os.environ.get("ATEN_CPU_CAPABILITY", "") or "native",
        "compiler": "python " + platform.python_version(),
        "device": device,
        "intra_op_threads": str(torch.get_num_threads()),
        "host": socket.gethostname(),
        "recorder": RECORDER,
    }
    return {f"provenance.{key}": value for key, value in facts.items()}
