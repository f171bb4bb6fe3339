"""Digests with the C++ side's definitions (trace/digest.cpp, config/recipe.cpp).

A digest is XXH3-64 with seed 0 over a tensor's bytes in its own dtype, row-major, on the host;
dtype names are c10's (`c10::toString(ScalarType)`), as the trace's probe rows store them.
"""

from __future__ import annotations

import torch
import xxhash


def _dtype_names() -> dict[torch.dtype, str]:
    names = {
        torch.float32: "Float",
        torch.float64: "Double",
        torch.float16: "Half",
        torch.bfloat16: "BFloat16",
        torch.int64: "Long",
        torch.int32: "Int",
        torch.int16: "Short",
        torch.int8: "Char",
        torch.uint8: "Byte",
        torch.bool: "Bool",
        torch.complex64: "ComplexFloat",
        torch.complex128: "ComplexDouble",
    }
    # Float8 types exist only in recent torch builds.
    for attribute, name in (
        ("float8_e4m3fn", "Float8_e4m3fn"),
        ("float8_e5m2", "Float8_e5m2"),
        ("float8_e8m0fnu", "Float8_e8m0fnu"),
    ):
        dtype = getattr(torch, attribute, None)
        if dtype is not None:
            names[dtype] = name
    return names


_DTYPE_NAMES = _dtype_names()


def dtype_name(dtype: torch.dtype) -> str:
    """c10's name of `dtype` ("Float", "BFloat16", "Char" for int8, ...).

    Raises ValueError naming the dtype when it has no name here.
    """
    try:
        return _DTYPE_NAMES[dtype]
    except KeyError:
        raise ValueError(f"dtype {dtype} has no c10 name known to bitparity") from None


def tensor_bytes(tensor: torch.Tensor):
    """The bytes of `tensor` (detached, on the host, contiguous, row-major) as a uint8 numpy
    array; an empty array for a tensor without elements."""
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    if flat.numel() == 0:
        return flat.new_empty(0, dtype=torch.uint8).numpy()
    return flat.view(torch.uint8).numpy()


def tensor_digest(tensor: torch.Tensor) -> int:
    """XXH3-64 (seed 0) of the bytes of `tensor` in its own dtype, as an unsigned 64-bit int."""
    return xxhash.xxh3_64_intdigest(tensor_bytes(tensor))


def recipe_digest(text: str) -> str:
    """16 lowercase hex digits of XXH3-64 over the UTF-8 bytes of a recipe's text: what the
    launcher hands over as BITPARITY_RECIPE_DIGEST and the trace stores as `recipe_digest`."""
    return f"{xxhash.xxh3_64_intdigest(text.encode('utf-8')):016x}"
