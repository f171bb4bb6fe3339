"""Writes and reads one rank's part of a bitparity trace (docs/trace-format.md).

The layout is the one trace/trace_reader.cpp reads: root attributes (vlen UTF-8 strings, but
`schema_version`, an int64), one group `rank_NNNNN` holding the rank's attributes, its parameters'
names and shapes, one dataset per iteration column (kIterationColumns in trace/trace_hdf5.h),
the digests, the group `grad_dumps` (always present) and, when rows were recorded, `probes`.
"""

from __future__ import annotations

import dataclasses
import os

import h5py
import numpy as np

SCHEMA = "bitparity.trace"
SCHEMA_VERSION = 1

# The iteration columns this recorder writes, in kIterationColumns order, with their element
# types. The reader checks each optional column on its own, so `record_seconds` may appear
# without the other optional ones (comm_*, p2p_*, gemm_flops_*), which read as zeros.
ITERATION_COLUMNS: tuple[tuple[str, type], ...] = (
    ("iteration", np.int64),
    ("loss", np.float32),
    ("lm_loss", np.float32),
    ("mtp_loss", np.float32),
    ("aux_loss", np.float32),
    ("grad_norm", np.float64),
    ("learning_rate", np.float64),
    ("peak_bytes", np.int64),
    ("end_bytes", np.int64),
    ("step_seconds", np.float64),
    ("record_seconds", np.float64),
)

# The probe table's columns (kProbeColumns, then "shape"): int64, uint64 or vlen strings.
PROBE_INTEGER_COLUMNS = ("iteration", "microbatch", "chunk", "slot")
PROBE_STRING_COLUMNS = ("layer", "node", "phase", "dtype", "shape")

_STRING = h5py.string_dtype("utf-8")


@dataclasses.dataclass
class ProbeRow:
    """One tensor that crossed a module boundary; `shape` is the joined dims ("2,8,64")."""

    iteration: int
    microbatch: int
    chunk: int
    slot: int
    digest: int
    layer: str
    node: str
    phase: str
    dtype: str
    shape: str


@dataclasses.dataclass
class RankPart:
    """Everything one rank's part file holds.

    `columns` maps every name of ITERATION_COLUMNS to one value per iteration; `grad_digests`
    and `param_digests` are [iterations][parameters]; `grad_dumps` maps an iteration to
    {parameter name: float32 array shaped like the parameter}.
    """

    rank: int
    file_attributes: dict[str, str]
    rank_attributes: dict[str, str]
    param_names: list[str]
    param_shapes: list[tuple[int, ...]]
    columns: dict[str, list]
    grad_digests: list[list[int]]
    param_digests: list[list[int]]
    grad_dumps: dict[int, dict[str, np.ndarray]]
    probes: list[ProbeRow]


def rank_group_name(rank: int) -> str:
    """`rank_00003`: the group of a rank (GroupNameForRank)."""
    return f"rank_{rank:05d}"


def iteration_group_name(iteration: int) -> str:
    """`iter_000007`: a dump iteration's group (GroupNameForIteration)."""
    return f"iter_{iteration:06d}"


def join_shape(shape) -> str:
    """Comma-joined dimensions ("2,8,64"); "" for a scalar."""
    return ",".join(str(int(d)) for d in shape)


def _string_attribute(node, name: str, value: str) -> None:
    node.attrs.create(name, str(value), dtype=_STRING)


def _int_attribute(node, name: str, value: int) -> None:
    node.attrs.create(name, np.int64(value), dtype=np.int64)


def _string_dataset(group, name: str, values) -> None:
    data = np.array([str(v) for v in values], dtype=object).reshape(-1)
    group.create_dataset(name, shape=(len(data),), dtype=_STRING, data=data if len(data) else None)


def _digest_dataset(group, name: str, rows: list[list[int]], parameters: int) -> None:
    data = np.array(rows, dtype=np.uint64).reshape(len(rows), parameters)
    group.create_dataset(name, data=data, dtype=np.uint64)


def _write_columns(group, part: RankPart, iterations: int) -> None:
    for name, element_type in ITERATION_COLUMNS:
        values = part.columns[name]
        if len(values) != iterations:
            raise ValueError(f"column {name} has {len(values)} values for {iterations} iterations")
        group.create_dataset(name, data=np.array(values, dtype=element_type).reshape(-1))


def _write_grad_dumps(group, part: RankPart) -> None:
    dumps = group.create_group("grad_dumps")
    shapes = dict(zip(part.param_names, part.param_shapes, strict=True))
    for iteration in sorted(part.grad_dumps):
        iteration_group = dumps.create_group(iteration_group_name(iteration))
        _int_attribute(iteration_group, "iteration", iteration)
        for name, values in part.grad_dumps[iteration].items():
            if "/" in name or name in (".", ""):
                raise ValueError(f"parameter name {name!r} cannot name an HDF5 dataset")
            array = np.ascontiguousarray(values, dtype=np.float32)
            if tuple(array.shape) != tuple(shapes[name]):
                raise ValueError(f"dump of {name} has shape {array.shape}, expected {shapes[name]}")
            options = {"compression": "gzip", "compression_opts": 4, "shuffle": True}
            iteration_group.create_dataset(name, data=array, **(options if array.size else {}))


def _write_probes(group, rows: list[ProbeRow]) -> None:
    if not rows:
        return
    probes = group.create_group("probes")
    for name in PROBE_INTEGER_COLUMNS:
        probes.create_dataset(name, data=np.array([getattr(r, name) for r in rows], np.int64))
    probes.create_dataset("digest", data=np.array([r.digest for r in rows], dtype=np.uint64))
    for name in PROBE_STRING_COLUMNS:
        _string_dataset(probes, name, [getattr(r, name) for r in rows])


def _write_part(file: h5py.File, part: RankPart) -> None:
    for name, value in part.file_attributes.items():
        _string_attribute(file, name, value)
    _string_attribute(file, "schema", SCHEMA)
    _int_attribute(file, "schema_version", SCHEMA_VERSION)
    group = file.create_group(rank_group_name(part.rank))
    _int_attribute(group, "rank", part.rank)
    for name, value in part.rank_attributes.items():
        _string_attribute(group, name, value)
    _string_dataset(group, "param_names", part.param_names)
    _string_dataset(group, "param_shapes", [join_shape(s) for s in part.param_shapes])
    iterations = len(part.columns["iteration"])
    _write_columns(group, part, iterations)
    parameters = len(part.param_names)
    _digest_dataset(group, "grad_digest", part.grad_digests, parameters)
    _digest_dataset(group, "param_digest", part.param_digests, parameters)
    _write_grad_dumps(group, part)
    _write_probes(group, part.probes)


def write_part(path: str, part: RankPart) -> None:
    """Writes `part` to `path` atomically: to `path.tmp.<pid>` in the same directory, then
    renamed over `path`, so a reader sees the whole file or none. The temporary file is removed
    when writing fails."""
    temporary = f"{path}.tmp.{os.getpid()}"
    try:
        with h5py.File(temporary, "w") as file:
            _write_part(file, part)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise


def _decode(value):
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray) and value.dtype == object:
        return [_decode(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _read_group_datasets(group) -> dict:
    out = {}
    for name, node in group.items():
        if isinstance(node, h5py.Dataset):
            out[name] = _decode(node[()]) if node.dtype == object else node[()]
    return out


def _read_rank(group) -> dict:
    rank = {"attributes": {k: _decode(v) for k, v in group.attrs.items()}}
    rank.update(_read_group_datasets(group))
    rank["grad_dumps"] = {
        int(iteration_group.attrs["iteration"]): _read_group_datasets(iteration_group)
        for iteration_group in group["grad_dumps"].values()
    }
    if "probes" in group:
        rank["probes"] = _read_group_datasets(group["probes"])
    return rank


def read_trace(path: str) -> dict:
    """A trace (or one part) as plain Python: {"attributes": {...}, "ranks": {rank: {...}}},
    each rank holding "attributes", every dataset as numpy (strings as lists of str),
    "grad_dumps" ({iteration: {parameter: array}}) and "probes" when present. For tests and
    scripts; the C++ reader remains the authority on validity."""
    with h5py.File(path, "r") as file:
        trace = {"attributes": {k: _decode(v) for k, v in file.attrs.items()}, "ranks": {}}
        for group in file.values():
            trace["ranks"][int(group.attrs["rank"])] = _read_rank(group)
    return trace
