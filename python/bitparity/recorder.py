"""The Recorder: what an external arm's training loop calls to produce its rank's trace part.

A loop looks like this (iterations are 1-based):

    recorder = Recorder.from_env()
    recorder.probe_modules(model)                  # no-op unless probes are on
    for iteration in range(1, recorder.iterations + 1):
        for m, batch in enumerate(microbatches):
            with recorder.microbatch(iteration, m):
                loss_of(batch).backward()
        recorder.loss(iteration, "loss", loss)     # the iteration's loss, not a microbatch's
        recorder.step(iteration, model, optimizer)  # instead of optimizer.step()
        if recorder.should_stop(iteration):
            break

The part file is written after the recipe's last iteration (or BITPARITY_STOP_AFTER's), or by
`finish()`; a process that ends earlier leaves no trace part, which the launcher reads as a
failed rank.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import math
import os
import sys
import time
import traceback
import weakref

import torch

from bitparity.digest import recipe_digest, tensor_digest
from bitparity.memory import MemoryMeter
from bitparity.probes import ProbeRecorder
from bitparity.provenance import provenance
from bitparity.request import (
    PROVENANCE_ONLY_VARIABLE,
    RunRequest,
    read_request,
    recipe_device,
)
from bitparity.trace_file import ITERATION_COLUMNS, RankPart, write_part

LOSS_NAMES = ("loss", "lm_loss", "mtp_loss", "aux_loss")


def _report_uncaught(kind, value, trace_back) -> None:
    """sys.excepthook: the traceback, then one `error: <Type>: <message>` line (exit code 1)."""
    traceback.print_exception(kind, value, trace_back)
    print(f"error: {kind.__name__}: {value}", file=sys.stderr, flush=True)


def _configure_torch(request: RunRequest) -> None:
    """Pins the intra-op (and, when still possible, inter-op) threads and, when requested,
    deterministic algorithms."""
    torch.set_num_threads(request.threads)
    try:
        torch.set_num_interop_threads(request.threads)
    except RuntimeError:
        pass  # inter-op threads can be set once, before any inter-op work
    if request.deterministic_algorithms:
        torch.use_deterministic_algorithms(True)


def _comm_transport(request: RunRequest) -> str:
    distributed = torch.distributed
    if distributed.is_available() and distributed.is_initialized():
        return str(distributed.get_backend())
    if request.world_size == 1:
        return "local"
    return "nccl" if request.device == "cuda" else "gloo"


def _as_float(value) -> float:
    return float(value.detach().item()) if isinstance(value, torch.Tensor) else float(value)


def _float32_gradient(parameter: torch.Tensor) -> torch.Tensor:
    if parameter.grad is None:
        return torch.zeros_like(parameter, dtype=torch.float32)
    return parameter.grad.detach().to(torch.float32)


def gradient_norm(parameters: list[torch.Tensor]) -> float:
    """sqrt of the sum of squares of every gradient, in float64 (missing gradients are zero)."""
    total = torch.zeros((), dtype=torch.float64)
    for parameter in parameters:
        if parameter.grad is not None:
            total += parameter.grad.detach().to(torch.float64).pow(2).sum().cpu()
    return math.sqrt(float(total))


def _report_provenance_and_exit() -> None:
    """BITPARITY_PROVENANCE_ONLY=1: bitparity asks what this process's ranks would record as
    their provenance (for the golden's fingerprint) before any rank trains. Prints one
    `@provenance key=value` line a fact and exits 0, before the training loop starts."""
    for key, value in provenance(recipe_device()).items():
        print(f"@provenance {key.removeprefix('provenance.')}={value}")
    sys.stdout.flush()
    sys.exit(0)


def _request_field(name: str, doc: str) -> property:
    """A read-only property of the Recorder that is the field `name` of its request."""
    return property(lambda recorder: getattr(recorder._request, name), doc=doc)


class Recorder:
    """One rank's recorder. Create it with `Recorder.from_env()`."""

    def __init__(self, request: RunRequest):
        self._request = request
        self._memory = MemoryMeter(request.device)
        self._probes = ProbeRecorder()
        self._param_names: list[str] | None = None
        self._param_shapes: list[tuple[int, ...]] = []
        self._columns: dict[str, list] = {name: [] for name, _ in ITERATION_COLUMNS}
        self._grad_digests: list[list[int]] = []
        self._param_digests: list[list[int]] = []
        self._grad_dumps: dict = {}
        self._losses: dict[int, dict[str, float]] = {}
        self._last_iteration = 0
        self._written_path: str | None = None
        self._window_started = time.perf_counter()

    @classmethod
    def from_env(cls, model_name: str | None = None) -> Recorder:
        """The recorder of the request in this process's environment (bitparity.request).

        Pins threads and determinism, installs the uncaught-exception hook, starts the first
        peak-memory window and prints `@rank rank=R pid=P pgid=G`. `model_name` names the arm
        when BITPARITY_ARM is unset. A bad request exits with code 2.
        """
        if os.environ.get(PROVENANCE_ONLY_VARIABLE, "") == "1":
            _report_provenance_and_exit()
        request = read_request(model_name)
        _configure_torch(request)
        sys.excepthook = _report_uncaught
        recorder = cls(request)
        print(f"@rank rank={request.rank} pid={os.getpid()} pgid={os.getpgid(0)}", flush=True)
        atexit.register(_warn_if_unwritten, weakref.ref(recorder))
        return recorder

    # -- the request ------------------------------------------------------------------------

    rank = _request_field("rank", "This rank (RANK).")
    world_size = _request_field("world_size", "The ranks of the run (WORLD_SIZE).")
    recipe = _request_field("recipe", "The recipe as parsed TOML (read once; never reread).")
    recipe_text = _request_field("recipe_text", "The recipe's text, as the launcher read it.")
    arm = _request_field("arm", "The arm's name (BITPARITY_ARM).")
    iterations = _request_field("iterations", "The recipe's [train] iterations (10 if absent).")
    probes_on = _request_field("probes", "Whether module probes are recorded.")

    @property
    def trace_path(self) -> str:
        """Where this rank's part goes: `<out dir>/rank_NNNNN.h5`."""
        return os.path.join(self._request.out_dir, f"rank_{self.rank:05d}.h5")

    @property
    def last_iteration(self) -> int:
        """The iteration after which the part is written: the recipe's last, or
        BITPARITY_STOP_AFTER's when earlier."""
        stop_after = self._request.stop_after
        return min(self.iterations, stop_after) if stop_after > 0 else self.iterations

    def should_stop(self, iteration: int) -> bool:
        """Whether the loop ends after `iteration`."""
        return iteration >= self.last_iteration

    # -- recording --------------------------------------------------------------------------

    def loss(self, iteration: int, name: str, value) -> None:
        """Records loss `name` (loss, lm_loss, mtp_loss or aux_loss) of `iteration`: a float or
        a 0-dim tensor. The last value given wins: pass the iteration's loss (over its
        microbatches), not each microbatch's. Unrecorded losses read 0."""
        if name not in LOSS_NAMES:
            raise ValueError(f"loss name {name!r} is not one of {', '.join(LOSS_NAMES)}")
        self._losses.setdefault(iteration, {})[name] = _as_float(value)

    @contextlib.contextmanager
    def microbatch(self, iteration: int, microbatch: int):
        """Keys the probe rows recorded inside the block with (iteration, microbatch)."""
        previous = (self._probes.iteration, self._probes.microbatch)
        self._probes.iteration, self._probes.microbatch = iteration, microbatch
        try:
            yield
        finally:
            self._probes.iteration, self._probes.microbatch = previous

    def probe_modules(self, model: torch.nn.Module) -> None:
        """Hooks every named submodule of `model` when probes are on (BITPARITY_PROBES=1 or the
        recipe's `[trace] probes = "nodes"`); otherwise does nothing."""
        if self.probes_on:
            self._probes.attach(model)

    def step(self, iteration: int, model: torch.nn.Module, optimizer, grad_norm=None) -> None:
        """Records `iteration` around `optimizer.step()`, which it calls: call it instead of
        the optimizer's step, after backward and any clipping.

        Before the step: each parameter's float32 gradient digest (model.named_parameters()
        order), the gradient norm (float64, unless `grad_norm` gives the global one) and the
        dumps of a dump iteration. After it: the float32 parameter digests, the first param
        group's learning rate, times and memory. Prints rank 0's `@progress` line, and writes
        the part after the last iteration.
        """
        self._check_iteration(iteration)
        started = time.perf_counter()
        names, parameters = self._parameters(model)
        gradients = [_float32_gradient(p) for p in parameters]
        self._grad_digests.append([tensor_digest(g) for g in gradients])
        norm = gradient_norm(parameters) if grad_norm is None else _as_float(grad_norm)
        if iteration in self._request.dump_at:
            self._grad_dumps[iteration] = {
                name: g.cpu().numpy().copy() for name, g in zip(names, gradients, strict=True)
            }
        del gradients
        record_seconds = time.perf_counter() - started
        optimizer.step()
        started = time.perf_counter()
        with torch.no_grad():
            self._param_digests.append([tensor_digest(p.detach().float()) for p in parameters])
        record_seconds += time.perf_counter() - started + self._probes.seconds
        self._probes.seconds = 0.0
        self._append_columns(iteration, norm, optimizer, record_seconds)
        self._print_progress(iteration)
        if iteration >= self.last_iteration:
            self.finish()

    def finish(self) -> str:
        """Writes this rank's part (atomically) and returns its path; a second call writes
        nothing."""
        if self._written_path is None:
            write_part(self.trace_path, self._part())
            self._written_path = self.trace_path
        return self._written_path

    # -- internals --------------------------------------------------------------------------

    def _check_iteration(self, iteration: int) -> None:
        if self._written_path is not None:
            raise RuntimeError(f"step({iteration}) after the trace part was written")
        if iteration <= self._last_iteration:
            raise ValueError(
                f"step({iteration}) after step({self._last_iteration}): iterations must increase"
            )
        self._last_iteration = iteration

    def _parameters(self, model: torch.nn.Module) -> tuple[list[str], list[torch.Tensor]]:
        named = list(model.named_parameters())
        names = [name for name, _ in named]
        if self._param_names is None:
            self._param_names = names
            self._param_shapes = [tuple(p.shape) for _, p in named]
        elif names != self._param_names:
            raise ValueError("the model's parameters changed between iterations")
        return names, [p for _, p in named]

    def _append_columns(self, iteration: int, norm: float, optimizer, record_seconds: float):
        peak_bytes, end_bytes = self._memory.read()
        self._memory.reset_peak()
        now = time.perf_counter()
        losses = self._losses.pop(iteration, {})
        values = {name: losses.get(name, 0.0) for name in LOSS_NAMES}
        values.update(
            iteration=iteration,
            grad_norm=norm,
            learning_rate=_as_float(optimizer.param_groups[0]["lr"]),
            peak_bytes=peak_bytes,
            end_bytes=end_bytes,
            step_seconds=now - self._window_started,
            record_seconds=record_seconds,
        )
        self._window_started = now
        for name, _ in ITERATION_COLUMNS:
            self._columns[name].append(values[name])

    def _print_progress(self, iteration: int) -> None:
        if self.rank != 0:
            return
        c = {name: column[-1] for name, column in self._columns.items()}
        print(
            f"@progress iteration={iteration} iterations={self.iterations} "
            f"loss={c['loss']:.6f} grad_norm={c['grad_norm']:.6g} lr={c['learning_rate']:.6g} "
            f"step_seconds={c['step_seconds']:.4f} peak_bytes={c['peak_bytes']}",
            flush=True,
        )

    def _file_attributes(self) -> dict[str, str]:
        request = self._request
        return {
            "recipe": request.recipe_text,
            "recipe_digest": recipe_digest(request.recipe_text),
            "recipe_path": request.recipe_path,
            "recipe_name": str(request.recipe.get("name", "")),
            "arm": request.arm,
            "engine": "external",
            "world_size": str(request.world_size),
            "threads_per_rank": str(request.threads),
            "device": request.device,
            "comm_transport": _comm_transport(request),
            "created_utc": datetime.datetime.now(datetime.timezone.utc).strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            ),
            "warnings": "",
        }

    def _rank_attributes(self) -> dict[str, str]:
        attributes = {
            "pid": str(os.getpid()),
            "rank_source": "launcher" if self._request.launched else "standalone",
        }
        if not self._memory.available:
            attributes["memory"] = "unavailable"
        attributes.update(provenance(self._request.device))
        return attributes

    def _part(self) -> RankPart:
        return RankPart(
            rank=self.rank,
            file_attributes=self._file_attributes(),
            rank_attributes=self._rank_attributes(),
            param_names=self._param_names or [],
            param_shapes=self._param_shapes,
            columns=self._columns,
            grad_digests=self._grad_digests,
            param_digests=self._param_digests,
            grad_dumps=self._grad_dumps,
            probes=self._probes.rows,
        )


def _warn_if_unwritten(reference) -> None:
    """At exit: says on stderr that a recorder wrote no part (it never writes one then)."""
    recorder = reference()
    if recorder is not None and recorder._written_path is None:
        print(
            f"warning: bitparity: rank {recorder.rank} wrote no trace part (training ended "
            f"after iteration {recorder._last_iteration} of {recorder.last_iteration})",
            file=sys.stderr,
            flush=True,
        )
