"""The Python recorder of bitparity traces: an external arm's training loop records its losses,
gradient and parameter digests, dumps and node probes in the trace format the C++ tools read
(docs/trace-format.md, docs/external-arms.md)."""

from bitparity.digest import dtype_name, recipe_digest, tensor_digest
from bitparity.recorder import Recorder

__all__ = ["Recorder", "dtype_name", "recipe_digest", "tensor_digest"]
__version__ = "0.1.0"
