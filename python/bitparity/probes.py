"""Node probes of a PyTorch model: the digest, dtype and shape of every tensor that leaves a
submodule's forward (phase "forward", or "replay" when activation checkpointing recomputes it
during backward) and of the gradient of every input it was given (phase "backward")."""

from __future__ import annotations

import time

import torch

from bitparity.digest import dtype_name, tensor_digest
from bitparity.trace_file import ProbeRow, join_shape


def in_backward() -> bool:
    """Whether the autograd engine is running a backward pass on this thread: a forward run then
    is a checkpoint's recompute (reentrant or not)."""
    return torch._C._current_graph_task_id() != -1


def _tensors(value) -> list[tuple[int, torch.Tensor]]:
    """(slot, tensor) of a module's output: slot 0 for a tensor, each element's index for a tuple
    or list (non-tensor elements are skipped, keeping the other slots)."""
    if isinstance(value, torch.Tensor):
        return [(0, value)]
    if isinstance(value, (tuple, list)):
        return [(i, v) for i, v in enumerate(value) if isinstance(v, torch.Tensor)]
    return []


class ProbeRecorder:
    """Collects ProbeRow records from hooks on a model's submodules.

    `iteration` and `microbatch` are the keys of the rows recorded now (the recorder's
    microbatch context sets them); `seconds` accumulates the time the hooks spent.
    """

    def __init__(self) -> None:
        self.rows: list[ProbeRow] = []
        self.iteration = 0
        self.microbatch = 0
        self.seconds = 0.0
        self._handles: list = []

    def _record(self, layer: str, node: str, phase: str, slot: int, tensor: torch.Tensor) -> None:
        started = time.perf_counter()
        self.rows.append(
            ProbeRow(
                iteration=self.iteration,
                microbatch=self.microbatch,
                chunk=0,
                slot=slot,
                digest=tensor_digest(tensor),
                layer=layer,
                node=node,
                phase=phase,
                dtype=dtype_name(tensor.dtype),
                shape=join_shape(tensor.shape),
            )
        )
        self.seconds += time.perf_counter() - started

    def _forward_hook(self, layer: str, node: str):
        def hook(module, inputs, output):
            phase = "replay" if in_backward() else "forward"
            for slot, tensor in _tensors(output):
                self._record(layer, node, phase, slot, tensor)

        return hook

    def _input_gradient_hooks(self, layer: str, node: str):
        """A forward pre-hook that hooks each input tensor the backward will reach: its gradient,
        summed over every use, is recorded when the autograd engine has it (phase "backward").

        Tensor hooks leave the graph as it is. A module's full backward hook would not: it wraps
        the inputs in an identity node, so a gradient whose contributions come from inside and
        outside the module is summed in another grouping, and the probes would change the bits
        of the training they watch."""

        def record(slot: int):
            def hook(gradient: torch.Tensor) -> None:
                self._record(layer, node, "backward", slot, gradient)

            return hook

        def pre_hook(module, inputs):
            if not torch.is_grad_enabled():
                return  # a reentrant checkpoint's first pass: its replay builds the graph
            for slot, tensor in _tensors(tuple(inputs)):
                if tensor.requires_grad:
                    tensor.register_hook(record(slot))

        return pre_hook

    def attach(self, model: torch.nn.Module) -> None:
        """Hooks every submodule of `model` with a non-empty qualified name: its outputs going
        forward, and the gradients of its inputs coming back."""
        for layer, module in model.named_modules():
            if not layer:
                continue
            node = type(module).__name__
            self._handles.append(module.register_forward_hook(self._forward_hook(layer, node)))
            self._handles.append(
                module.register_forward_pre_hook(self._input_gradient_hooks(layer, node))
            )

    def detach(self) -> None:
        """Removes every hook `attach` registered."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
