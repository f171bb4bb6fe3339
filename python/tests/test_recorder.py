"""Tests of the Python recorder: digests, names and the layout of the part file it writes
(docs/trace-format.md, as trace/trace_reader.cpp reads it)."""

from __future__ import annotations

import os
import sys

import h5py
import numpy as np
import pytest
import torch
import xxhash
from bitparity import Recorder, dtype_name, recipe_digest, tensor_digest
from bitparity.trace_file import ITERATION_COLUMNS, read_trace
from torch.utils.checkpoint import checkpoint

RECIPE = """name = "tiny"

[train]
iterations = 3
lr = 0.1

[parallel]
threads = 1

[trace]
dump_grads_at = [1]
"""

# Every variable the recorder reads: each test starts without them.
ENVIRONMENT = """BITPARITY_RECIPE BITPARITY_RECIPE_DIGEST BITPARITY_ARM BITPARITY_OUT_DIR
BITPARITY_TRACE_DIR BITPARITY_DUMP_AT BITPARITY_STOP_AFTER BITPARITY_PROBES BITPARITY_THREADS
BITPARITY_DETERMINISTIC_ALGORITHMS BITPARITY_CPU_MEMORY_LIBRARY
RANK WORLD_SIZE LOCAL_RANK""".split()

# The file attributes that are variable-length UTF-8 strings.
STRING_FILE_ATTRIBUTES = """recipe recipe_digest recipe_path recipe_name arm engine world_size
threads_per_rank device comm_transport created_utc warnings schema""".split()


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.act = torch.nn.Tanh()

    def forward(self, x):
        return self.act(self.fc(x))


class TinyModel(torch.nn.Module):
    """Two blocks, the first under (reentrant) activation checkpointing, then a head."""

    def __init__(self, recompute: bool = False):
        super().__init__()
        self.layers = torch.nn.ModuleList([Block(), Block()])
        self.head = torch.nn.Linear(4, 1)
        self.recompute = recompute

    def forward(self, x):
        first = self.layers[0]
        x = checkpoint(first, x, use_reentrant=True) if self.recompute else first(x)
        return self.head(self.layers[1](x))


@pytest.fixture
def run_dir(tmp_path, monkeypatch):
    """A clean request: the recipe in tmp_path, launched into tmp_path/out, cwd tmp_path."""
    for name in ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(RECIPE)
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setenv("BITPARITY_RECIPE", str(recipe))
    monkeypatch.setenv("BITPARITY_RECIPE_DIGEST", recipe_digest(RECIPE))
    monkeypatch.setenv("BITPARITY_ARM", "python")
    monkeypatch.setenv("BITPARITY_OUT_DIR", str(out))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def train(recorder: Recorder, recompute: bool = False, microbatches: int = 2) -> TinyModel:
    torch.manual_seed(0)
    model = TinyModel(recompute)
    recorder.probe_modules(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for iteration in range(1, recorder.iterations + 1):
        optimizer.zero_grad()
        total = 0.0
        for m in range(microbatches):
            with recorder.microbatch(iteration, m):
                x = torch.randn(2, 4, requires_grad=recompute)
                loss = model(x).pow(2).mean() / microbatches
                loss.backward()
                total += loss.item()
        recorder.loss(iteration, "loss", total)
        recorder.loss(iteration, "lm_loss", torch.tensor(total))
        recorder.step(iteration, model, optimizer)
        if recorder.should_stop(iteration):
            break
    return model


def test_tensor_digest_is_xxh3_of_the_bytes():
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    expected = xxhash.xxh3_64_intdigest(values.tobytes())
    assert tensor_digest(torch.from_numpy(values)) == expected
    assert tensor_digest(torch.from_numpy(values.T.copy()).t()) == expected  # non-contiguous
    assert tensor_digest(torch.tensor([True, False])) == xxhash.xxh3_64_intdigest(b"\x01\x00")
    assert tensor_digest(torch.zeros(0)) == xxhash.xxh3_64_intdigest(b"")
    bf16 = torch.tensor([1.0, -2.0], dtype=torch.bfloat16)
    assert tensor_digest(bf16) == xxhash.xxh3_64_intdigest(b"\x80\x3f\x00\xc0")


def test_recipe_digest_is_sixteen_hex_digits():
    assert recipe_digest("abc") == f"{xxhash.xxh3_64_intdigest(b'abc'):016x}"
    assert len(recipe_digest("")) == 16


def test_dtype_names_are_c10s():
    assert dtype_name(torch.float32) == "Float"
    assert dtype_name(torch.bfloat16) == "BFloat16"
    assert dtype_name(torch.int8) == "Char"
    assert dtype_name(torch.uint8) == "Byte"
    assert dtype_name(torch.bool) == "Bool"
    assert dtype_name(torch.int64) == "Long"
    assert dtype_name(torch.float8_e4m3fn) == "Float8_e4m3fn"
    with pytest.raises(ValueError, match="complex32"):
        dtype_name(torch.complex32)


def test_trace_layout(run_dir, capsys):
    recorder = Recorder.from_env()
    assert not os.path.exists(recorder.trace_path)
    model = train(recorder)
    path = run_dir / "out" / "rank_00000.h5"
    assert recorder.trace_path == str(path)
    assert sorted(os.listdir(run_dir / "out")) == ["rank_00000.h5"]  # no temporary left
    stdout = capsys.readouterr().out.splitlines()
    assert stdout[0] == f"@rank rank=0 pid={os.getpid()} pgid={os.getpgid(0)}"
    assert [line.split()[1] for line in stdout[1:]] == [f"iteration={i}" for i in (1, 2, 3)]

    with h5py.File(path, "r") as file:
        assert list(file) == ["rank_00000"]
        assert file.attrs["schema"] == "bitparity.trace"
        assert file.attrs["schema_version"].dtype == np.int64 and file.attrs["schema_version"] == 1
        for name in STRING_FILE_ATTRIBUTES:
            type_id = file.attrs.get_id(name).get_type()
            assert type_id.is_variable_str() and type_id.get_cset() == h5py.h5t.CSET_UTF8, name
            assert file.attrs.get_id(name).shape == (), name
        group = file["rank_00000"]
        assert group.attrs["rank"].dtype == np.int64
        assert group.attrs["rank_source"] == "launcher"
        assert group.attrs["memory"] == "unavailable"
        assert group.attrs["provenance.recorder"] == "bitparity-python 0.1.0"
        assert "+" not in group.attrs["provenance.libtorch_version"]
        for name, element_type in ITERATION_COLUMNS:
            assert group[name].dtype == np.dtype(element_type) and group[name].shape == (3,), name
        for name in ("param_names", "param_shapes"):
            assert h5py.check_string_dtype(group[name].dtype).encoding == "utf-8"
        assert group["grad_digest"].dtype == np.uint64 and group["grad_digest"].shape == (3, 6)
        assert group["param_digest"].dtype == np.uint64
        assert list(group["grad_dumps"]) == ["iter_000001"]
        dump = group["grad_dumps/iter_000001"]
        assert dump.attrs["iteration"] == 1 and dump.attrs["iteration"].dtype == np.int64
        assert dump["layers.0.fc.weight"].dtype == np.float32
        assert "probes" not in group

    trace = read_trace(str(path))
    assert trace["attributes"]["engine"] == "external"
    assert trace["attributes"]["recipe"] == RECIPE
    assert trace["attributes"]["recipe_name"] == "tiny"
    assert trace["attributes"]["world_size"] == "1"
    rank = trace["ranks"][0]
    names = [name for name, _ in model.named_parameters()]
    assert rank["param_names"] == names
    assert rank["param_shapes"][:2] == ["4,4", "4"]
    assert list(rank["iteration"]) == [1, 2, 3]
    assert np.all(rank["peak_bytes"] == -1) and np.all(rank["learning_rate"] == 0.1)
    assert rank["loss"][0] == np.float32(rank["lm_loss"][0]) and np.all(rank["aux_loss"] == 0)
    assert np.all(rank["record_seconds"] >= 0) and np.all(rank["grad_norm"] > 0)
    final = [tensor_digest(p.detach().float()) for p in model.parameters()]
    assert list(rank["param_digest"][-1]) == final
    assert recorder.finish() == str(path)  # a second write is a no-op


def test_grad_dump_matches_its_digest(run_dir, monkeypatch):
    monkeypatch.setenv("BITPARITY_DUMP_AT", "2")
    recorder = Recorder.from_env()
    train(recorder)
    rank = read_trace(recorder.trace_path)["ranks"][0]
    assert sorted(rank["grad_dumps"]) == [1, 2]
    for iteration in (1, 2):
        for index, name in enumerate(rank["param_names"]):
            dumped = rank["grad_dumps"][iteration][name]
            assert dumped.dtype == np.float32
            digest = xxhash.xxh3_64_intdigest(dumped.tobytes())
            assert digest == rank["grad_digest"][iteration - 1][index]


def test_probes_record_forward_replay_and_backward(run_dir, monkeypatch):
    monkeypatch.setenv("BITPARITY_PROBES", "1")
    recorder = Recorder.from_env()
    assert recorder.probes_on
    train(recorder, recompute=True)
    probes = read_trace(recorder.trace_path)["ranks"][0]["probes"]
    with h5py.File(recorder.trace_path, "r") as file:
        group = file["rank_00000/probes"]
        assert group["digest"].dtype == np.uint64 and group["slot"].dtype == np.int64
        assert h5py.check_string_dtype(group["shape"].dtype).encoding == "utf-8"
    keys = ("iteration", "microbatch", "layer", "phase")
    rows = list(zip(*(probes[key] for key in keys), strict=True))
    phases = {phase for *_, phase in rows}
    assert phases == {"forward", "replay", "backward"}
    assert (1, 1, "layers.0.fc", "replay") in rows and (3, 0, "head", "backward") in rows
    assert ("layers.1", "forward") in {(layer, phase) for _, _, layer, phase in rows}
    first = probes["layer"].index("layers.0.fc")
    assert probes["node"][first] == "Linear" and probes["dtype"][first] == "Float"
    assert probes["shape"][first] == "2,4"


def test_stop_after_writes_the_part_early(run_dir, monkeypatch):
    monkeypatch.setenv("BITPARITY_STOP_AFTER", "2")
    recorder = Recorder.from_env()
    assert not recorder.should_stop(1) and recorder.should_stop(2)
    train(recorder)
    assert list(read_trace(recorder.trace_path)["ranks"][0]["iteration"]) == [1, 2]


def test_standalone_writes_into_the_trace_dir(run_dir, monkeypatch):
    monkeypatch.delenv("BITPARITY_OUT_DIR")
    recorder = Recorder.from_env(model_name="mine")
    train(recorder)
    assert recorder.trace_path == str(run_dir / "bitparity-trace" / "rank_00000.h5")
    trace = read_trace(recorder.trace_path)
    assert trace["attributes"]["arm"] == "python"
    assert trace["ranks"][0]["attributes"]["rank_source"] == "standalone"


def test_unfinished_run_leaves_no_part(run_dir):
    recorder = Recorder.from_env()
    model = TinyModel()
    model(torch.randn(1, 4)).sum().backward()
    recorder.step(1, model, torch.optim.SGD(model.parameters(), lr=0.1))
    assert os.listdir(run_dir / "out") == []


def test_recipe_digest_mismatch_exits_2(run_dir, monkeypatch, capsys):
    monkeypatch.setenv("BITPARITY_RECIPE_DIGEST", "0123456789abcdef")
    with pytest.raises(SystemExit) as caught:
        Recorder.from_env()
    assert caught.value.code == 2
    assert "differs from the recipe the launcher read" in capsys.readouterr().err


def test_missing_recipe_variable_exits_2(run_dir, monkeypatch, capsys):
    monkeypatch.delenv("BITPARITY_RECIPE")
    with pytest.raises(SystemExit) as caught:
        Recorder.from_env()
    assert caught.value.code == 2
    assert "BITPARITY_RECIPE is not set" in capsys.readouterr().err


def test_unknown_loss_name_is_refused(run_dir):
    recorder = Recorder.from_env()
    with pytest.raises(ValueError, match="total_loss"):
        recorder.loss(1, "total_loss", 1.0)


class FakeMemoryLibrary:
    """Stands in for the C library of BITPARITY_CPU_MEMORY_LIBRARY: peak 1000 + window, live 10."""

    def __init__(self):
        self.bitparity_cpu_memory_install = lambda: None
        self.bitparity_cpu_memory_current_bytes = lambda: 10
        self.bitparity_cpu_memory_peak_bytes = lambda: 1000 + self.resets
        self.resets = 0

        def reset_peak():
            self.resets += 1

        self.bitparity_cpu_memory_reset_peak = reset_peak


def test_cpu_memory_library_fills_the_memory_columns(run_dir, monkeypatch):
    monkeypatch.setenv("BITPARITY_CPU_MEMORY_LIBRARY", str(run_dir / "recipe.toml"))
    monkeypatch.setattr("bitparity.memory.ctypes.CDLL", lambda path: FakeMemoryLibrary())
    recorder = Recorder.from_env()
    train(recorder)
    rank = read_trace(recorder.trace_path)["ranks"][0]
    assert list(rank["peak_bytes"]) == [1001, 1002, 1003]  # one reset at start, one per step
    assert list(rank["end_bytes"]) == [10, 10, 10]
    assert "memory" not in rank["attributes"]


def test_missing_cpu_memory_library_exits_2(run_dir, monkeypatch, capsys):
    monkeypatch.setenv("BITPARITY_CPU_MEMORY_LIBRARY", str(run_dir / "absent.so"))
    with pytest.raises(SystemExit) as caught:
        Recorder.from_env()
    assert caught.value.code == 2
    assert "BITPARITY_CPU_MEMORY_LIBRARY" in capsys.readouterr().err


def test_provenance_only_prints_the_facts_and_exits_before_training(run_dir, monkeypatch, capsys):
    monkeypatch.setenv("BITPARITY_PROVENANCE_ONLY", "1")
    with pytest.raises(SystemExit) as caught:
        Recorder.from_env()
    assert caught.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    facts = dict(line.removeprefix("@provenance ").split("=", 1) for line in lines)
    assert all(line.startswith("@provenance ") for line in lines)
    assert facts["libtorch_version"] == torch.__version__.split("+")[0]
    assert {"blas", "onednn_version", "cpu_isa", "compiler", "device"} <= facts.keys()
    assert os.listdir(run_dir / "out") == [], "it wrote a part"
