#!/usr/bin/env bash
# harness/ never includes LibTorch, and the build enforces it: a source wired as harness/'s are
# (the torch-free part of core, nlohmann_json, pugixml, toml++) does not compile when it includes
# <ATen/ATen.h>, and does with torch-free headers only (the control: the probe fails for the
# include, not for its wiring).
#   harness_torch_free_test.sh BUILD_DIR
set -uo pipefail
build=$1
if ! control=$(cmake --build "$build" --target bitparity_harness_probe_torch_free 2>&1); then
  echo "FAIL: the control probe (torch-free headers) does not build:"
  echo "$control"
  exit 1
fi
if output=$(cmake --build "$build" --target bitparity_harness_probe_torch 2>&1); then
  echo "FAIL: a harness source that includes <ATen/ATen.h> compiled: harness/ sees LibTorch"
  exit 1
fi
if ! grep -q "ATen/ATen.h" <<<"$output"; then
  echo "FAIL: the probe that includes <ATen/ATen.h> failed for another reason:"
  echo "$output"
  exit 1
fi
echo "harness/ cannot include LibTorch: $(grep -m1 'ATen/ATen.h' <<<"$output")"
