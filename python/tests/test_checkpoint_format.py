"""A checkpoint written by `bitparity arm --checkpoint-at` reads with h5py as
docs/checkpoint-format.md says: the counters, the recipe, and per parameter the fp32 master, the
bf16 weight as its 16 bits (equal to the master rounded to bf16 at the start of the next
iteration), and Adam's moments."""

from __future__ import annotations

import os
import subprocess

import h5py
import numpy as np
import pytest
import torch

RECIPE = """name = "tiny_checkpoint"
[model]
hidden = 32
heads = 4
layers = 2
first_k_dense = 1
experts = 4
topk = 2
moe_ffn = 32
ffn = 64
vocab = 64
seq_len = 16
[parallel]
ep = 2
[train]
micro_batch = 2
global_batch = 8
iterations = 3
[arms.reference]
engine = "reference"
"""

BINARY = os.environ.get("BITPARITY_BINARY", "")


@pytest.mark.skipif(not BINARY, reason="BITPARITY_BINARY is not set (ctest sets it)")
def test_a_checkpoint_reads_with_h5py(tmp_path):
    recipe = tmp_path / "tiny.toml"
    recipe.write_text(RECIPE)
    result = subprocess.run(
        [
            BINARY,
            "arm",
            str(recipe),
            "--out",
            str(tmp_path / "t.h5"),
            "--quiet",
            "--checkpoint-at",
            "2",
            "--checkpoint-dir",
            str(tmp_path / "ck"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for rank in range(2):
        with h5py.File(tmp_path / "ck" / "iteration_2" / f"rank_{rank}.h5", "r") as f:
            assert f.attrs["schema"] == "bitparity-checkpoint"
            assert int(f.attrs["schema_version"]) == 1
            assert int(f.attrs["rank"]) == rank
            assert int(f.attrs["world_size"]) == 2
            for counter in ("iteration", "optimizer_steps", "lr_steps", "data_batches"):
                assert int(f.attrs[counter]) == 2
            assert f.attrs["recipe"] == RECIPE
            names = [n.decode() if isinstance(n, bytes) else n for n in f["parameter_names"][()]]
            assert sorted(names) == sorted(f["parameters"].keys())
            bf16 = 0
            for name in names:
                group = f["parameters"][name]
                master = np.asarray(group["master"])
                assert master.dtype == np.float32
                assert group["exp_avg"].shape == master.shape == group["exp_avg_sq"].shape
                weight = group["weight"]
                if weight.attrs["dtype"] == "bfloat16":
                    bf16 += 1
                    bits = np.asarray(weight).astype(np.uint16)
                    rounded = torch.from_numpy(master).to(torch.bfloat16).view(torch.int16)
                    assert np.array_equal(bits.view(np.int16), rounded.numpy()), name
                else:
                    assert np.array_equal(
                        np.asarray(weight).view(np.uint32), master.view(np.uint32)
                    )
            assert bf16 > 0
