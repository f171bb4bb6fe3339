#!/usr/bin/env bash
# The floors of the house: each folder includes only its own headers and those of the folders
# it may use (docs/design.md, "The parts and who may use whom"), so that no two folders include each other. A violation
# names the file, the line and the folder it may not include.
#   floors_test.sh SOURCE_DIR            check the tree
#   floors_test.sh --self-test           a tree with one upward include must fail, one without
#                                        must pass
set -uo pipefail

# folder: the folders it may include (besides itself).
declare -A may_use=(
  [core]=""
  [numerics]="core"
  [schedule]="core"
  [trace]="core numerics schedule"
  [config]="core numerics schedule trace"
  [comm]="core numerics schedule trace config"
  [model]="core numerics schedule trace config comm"
  [reference]="core numerics schedule trace config comm model"
  [overlap_impl]="core numerics schedule trace config comm model"
  [runtime]="core numerics schedule trace config comm model reference overlap_impl"
  [harness]="core numerics schedule trace config comm"
  [app]="core numerics schedule trace config comm harness runtime"
)

check_tree() {
  local root=$1 failures=0 folder line file included
  for folder in "${!may_use[@]}"; do
    [ -d "$root/$folder" ] || continue
    while IFS= read -r line; do
      file=${line%%:*}
      included=$(sed -E 's/.*#include "([a-z_]+)\/.*/\1/' <<<"${line#*:*:}")
      [ "$included" = "$folder" ] && continue
      [ -d "$root/$included" ] || continue  # not a folder of the project (tests/, generated)
      if ! grep -qw "$included" <<<"${may_use[$folder]}"; then
        echo "FAIL: ${line%%:#include*}: $folder/ may not include $included/ (${line##*#include })"
        failures=$((failures + 1))
      fi
    done < <(grep -rn --include='*.h' --include='*.cpp' -E '^#include "[a-z_]+/' "$root/$folder" |
             sed "s|^$root/||")
  done
  return $((failures > 0))
}

if [ "${1:-}" = "--self-test" ]; then
  tree=$(mktemp -d)
  trap 'rm -rf "$tree"' EXIT
  mkdir -p "$tree/core" "$tree/config"
  echo '#include "core/errors.h"' >"$tree/config/recipe.h"
  echo '#include "core/clock.h"' >"$tree/core/errors.h"
  check_tree "$tree" >/dev/null || { echo "FAIL: a tree within its floors was refused"; exit 1; }
  echo '#include "config/recipe.h"' >>"$tree/core/errors.h"
  if output=$(check_tree "$tree"); then
    echo "FAIL: core/ including config/ was not seen"
    exit 1
  fi
  grep -q "core/ may not include config/" <<<"$output" || { echo "FAIL: $output"; exit 1; }
  echo "self-test: an upward include is named: $output"
  exit 0
fi

root=${1:?usage: floors_test.sh SOURCE_DIR | --self-test}
if check_tree "$root"; then
  echo "every folder includes only its floors"
else
  exit 1
fi
