#!/usr/bin/env bash
# Entry point: ./run.sh <command> [<name>] [key=value ...]   (./run.sh --help lists them)
# On first use it makes .venv, installs torch==2.13.0 (the CPU build), then this project with
# every extra (report, export, wandb, trees, parquet, cluster; pyproject.toml) and the test
# tools, with constraints.txt (the tested versions), and leaves a stamp keyed on pyproject.toml
# and constraints.txt so later calls start at once.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="$ROOT/.venv"
KEY="$(cat "$ROOT/pyproject.toml" "$ROOT/constraints.txt" | cksum | cut -d' ' -f1)"
STAMP="$VENV/.installed-$KEY"

find_python() {
  for candidate in python3.11 python3.12 python3.13 python3; do
    if command -v "$candidate" >/dev/null 2>&1 &&
      "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      echo "$candidate"
      return 0
    fi
  done
  echo "error: Python >= 3.11 is needed (python3.11 or python3 on PATH)" >&2
  return 1
}

setup() {
  [ -f "$STAMP" ] && return 0
  echo "run.sh: setting up $VENV (first use; a few minutes)" >&2
  if [ ! -x "$VENV/bin/python" ]; then
    "$(find_python)" -m venv "$VENV"
  fi
  # torch first and pinned exactly: any other spec pulls gigabytes of CUDA wheels.
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "torch==2.13.0"
  # constraints.txt: the versions the tests passed with, for a reproducible environment.
  # pyproject.toml's core needs none of the extras; the commands and the tests use them all.
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
    -c "$ROOT/constraints.txt" -e "$ROOT[dev,report,export,wandb,trees,parquet,cluster,tabular]"
  rm -f "$VENV"/.installed-*
  touch "$STAMP"
  echo "run.sh: setup done" >&2
}

setup
# Runs and the parsed-data cache live in the checkout (an installed package uses ./runs and
# ./.cache/letor of the working directory instead); the variables win when set.
export LTR_RUNS_DIR="${LTR_RUNS_DIR:-$ROOT/runs}"
export LTR_CACHE_DIR="${LTR_CACHE_DIR:-$ROOT/.cache/letor}"
# OpenMP threads that spin while waiting make runs sharing the cores many times slower. The
# package sets the same default itself when imported (__init__.py); this keeps it for anything
# run.sh starts before the package (the test tools); a value already set wins either way.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
case "${1:-}" in
  test)
    shift
    cd "$ROOT"
    exec "$VENV/bin/python" -m pytest "$@"
    ;;
  *)
    exec "$VENV/bin/scarce-ltr" "$@"
    ;;
esac
