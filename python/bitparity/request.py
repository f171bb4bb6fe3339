"""The request a launcher hands an external arm's rank process through its environment
(ExternalRankVariables in comm/rank_protocol.cpp), read and checked once.

Every problem with the request is a SystemExit with code 2 and a message naming the variable or
file, as the C++ worker fails on a bad request (an input error, not a crash).
"""

from __future__ import annotations

import dataclasses
import os
import sys

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, as tomli
    import tomli as tomllib

from bitparity.digest import recipe_digest

RECIPE_VARIABLE = "BITPARITY_RECIPE"
RECIPE_DIGEST_VARIABLE = "BITPARITY_RECIPE_DIGEST"
ARM_VARIABLE = "BITPARITY_ARM"
OUT_DIR_VARIABLE = "BITPARITY_OUT_DIR"
TRACE_DIR_VARIABLE = "BITPARITY_TRACE_DIR"
DUMP_AT_VARIABLE = "BITPARITY_DUMP_AT"
STOP_AFTER_VARIABLE = "BITPARITY_STOP_AFTER"
PROBES_VARIABLE = "BITPARITY_PROBES"
THREADS_VARIABLE = "BITPARITY_THREADS"
DETERMINISTIC_VARIABLE = "BITPARITY_DETERMINISTIC_ALGORITHMS"
PROVENANCE_ONLY_VARIABLE = "BITPARITY_PROVENANCE_ONLY"

STANDALONE_TRACE_DIR = "bitparity-trace"


class RequestError(SystemExit):
    """A bad request: exits with code 2; `message` is the line printed to stderr."""

    def __init__(self, message: str):
        super().__init__(2)
        self.message = message

    def __str__(self) -> str:
        return self.message


def fail(message: str) -> RequestError:
    """The RequestError of a bad request, its message ("error: ...") already printed to stderr
    (a SystemExit with an int code prints nothing itself)."""
    error = RequestError(f"error: {message}")
    print(error.message, file=sys.stderr, flush=True)
    return error


@dataclasses.dataclass
class RunRequest:
    """What one rank trains and records.

    `out_dir` is where `rank_NNNNN.h5` goes; `launched` tells whether a launcher set it
    (BITPARITY_OUT_DIR) or the process runs standalone. `dump_at` holds the recipe's
    `[trace] dump_grads_at` and BITPARITY_DUMP_AT together; `stop_after` is 0 for "run every
    iteration".
    """

    recipe_path: str
    recipe_text: str
    recipe: dict
    arm: str
    out_dir: str
    launched: bool
    rank: int
    world_size: int
    local_rank: int
    iterations: int
    dump_at: frozenset[int]
    stop_after: int
    probes: bool
    threads: int
    deterministic_algorithms: bool
    device: str


def _integer(variable: str, text: str, minimum: int) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise fail(f"{variable}={text!r} is not an integer") from None
    if value < minimum:
        raise fail(f"{variable}={text!r} is below {minimum}")
    return value


def _environment_integer(variable: str, default: int, minimum: int) -> int:
    text = os.environ.get(variable, "")
    return default if text.strip() == "" else _integer(variable, text, minimum)


def _read_recipe() -> tuple[str, str, dict]:
    path = os.environ.get(RECIPE_VARIABLE, "")
    if not path:
        raise fail(f"{RECIPE_VARIABLE} is not set: it names the recipe (TOML) this rank trains")
    try:
        with open(path, "rb") as file:
            text = file.read().decode("utf-8")
    except OSError as error:
        raise fail(f"{RECIPE_VARIABLE}={path}: cannot read the recipe: {error.strerror}") from None
    expected = os.environ.get(RECIPE_DIGEST_VARIABLE, "")
    actual = recipe_digest(text)
    if expected and expected != actual:
        raise fail(
            f"{RECIPE_VARIABLE}={path} (digest {actual}) differs from the recipe the launcher "
            f"read ({RECIPE_DIGEST_VARIABLE}={expected}); the recipe changed after the run started"
        )
    try:
        recipe = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise fail(f"{path}: not valid TOML: {error}") from None
    return path, text, recipe


def _dump_iterations(recipe: dict, iterations: int) -> frozenset[int]:
    listed = recipe.get("trace", {}).get("dump_grads_at", [])
    requested = [
        _integer(DUMP_AT_VARIABLE, part, 1)
        for part in os.environ.get(DUMP_AT_VARIABLE, "").split(",")
        if part.strip()
    ]
    for iteration in requested:
        if iteration > iterations:
            raise fail(f"{DUMP_AT_VARIABLE} {iteration} is outside [1, {iterations}]")
    return frozenset(int(i) for i in listed) | frozenset(requested)


def _out_dir(rank: int) -> tuple[str, bool]:
    launched_dir = os.environ.get(OUT_DIR_VARIABLE, "")
    if launched_dir:
        if not os.path.isdir(launched_dir):
            raise fail(f"{OUT_DIR_VARIABLE}={launched_dir}: output directory does not exist")
        return launched_dir, True
    standalone_dir = os.environ.get(TRACE_DIR_VARIABLE, "") or STANDALONE_TRACE_DIR
    os.makedirs(standalone_dir, exist_ok=True)
    return os.path.abspath(standalone_dir), False


def read_request(model_name: str | None = None) -> RunRequest:
    """The request of this process's environment (see the module's docstring for failures).

    `model_name` names the arm when BITPARITY_ARM is unset (standalone runs); "external" when
    both are absent.
    """
    path, text, recipe = _read_recipe()
    rank = _environment_integer("RANK", 0, 0)
    world_size = _environment_integer("WORLD_SIZE", 1, 1)
    if rank >= world_size:
        raise fail(f"RANK={rank} is not below WORLD_SIZE={world_size}")
    iterations = int(recipe.get("train", {}).get("iterations", 10))
    parallel = recipe.get("parallel", {})
    out_dir, launched = _out_dir(rank)
    return RunRequest(
        recipe_path=os.path.abspath(path),
        recipe_text=text,
        recipe=recipe,
        arm=os.environ.get(ARM_VARIABLE, "") or model_name or "external",
        out_dir=out_dir,
        launched=launched,
        rank=rank,
        world_size=world_size,
        local_rank=_environment_integer("LOCAL_RANK", 0, 0),
        iterations=iterations,
        dump_at=_dump_iterations(recipe, iterations),
        stop_after=_environment_integer(STOP_AFTER_VARIABLE, 0, 0),
        probes=os.environ.get(PROBES_VARIABLE, "") == "1"
        or recipe.get("trace", {}).get("probes", "off") == "nodes",
        threads=_environment_integer(THREADS_VARIABLE, int(parallel.get("threads", 1)), 1),
        deterministic_algorithms=os.environ.get(DETERMINISTIC_VARIABLE, "") == "1",
        device=str(parallel.get("device", "cpu")),
    )


def recipe_device() -> str:
    """The recipe's `[parallel] device` ("cpu" when absent), read without any other request."""
    _, _, recipe = _read_recipe()
    return str(recipe.get("parallel", {}).get("device", "cpu"))
