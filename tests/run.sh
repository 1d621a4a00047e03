#!/usr/bin/env bash
# Install everything the tests need and run them all: the README's test command and what CI runs.
#   bash tests/run.sh [PYTEST ARGS...]     e.g. bash tests/run.sh -k samples -x
# Works on a fresh machine, as root or not. Test artifacts (screenshots, logs) go to ./test-output.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$(pwd)"

export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 # browser tests use Debian's chromium, never a download

echo "== python packages"
# torch first and pinned: the CPU build; an unpinned torch would pull a multi-GB CUDA build.
python3 -m pip install -q torch==2.13.0
python3 -m pip install -q -e ".[test,samples]"

echo "== chromium (browser tests) and node (frontend unit tests)"
mkdir -p "$ROOT/test-output"
CHROMIUM=/usr/bin/chromium
APT_LOG="$ROOT/test-output/apt.log"
missing=()
[ -x "$CHROMIUM" ] || missing+=(chromium)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
if [ "${#missing[@]}" -gt 0 ]; then
  SUDO=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
      SUDO=(sudo -n)
    else
      SUDO=(none)
    fi
  fi
  echo "installing ${missing[*]} with apt-get (output in $APT_LOG)"
  if [ "${SUDO[0]:-}" != none ] && command -v apt-get >/dev/null 2>&1 &&
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q </dev/null >"$APT_LOG" 2>&1 &&
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" </dev/null >>"$APT_LOG" 2>&1; then
    echo "installed ${missing[*]}"
  elif [ "${CI:-}" = true ] || [ "$(id -u)" -eq 0 ]; then
    echo "ERROR: could not install ${missing[*]} with apt-get (see $APT_LOG)" >&2
    exit 1
  else
    echo "WARNING: ${missing[*]} missing and cannot be installed here (not root, no sudo, or no apt-get)." >&2
    echo "WARNING: browser / frontend unit tests will be skipped. Install with: sudo apt-get install -y ${missing[*]}" >&2
  fi
fi
if [ -x "$CHROMIUM" ]; then
  export STEPSCOPE_CHROMIUM="$CHROMIUM"
fi

export STEPSCOPE_TEST_OUTPUT="$ROOT/test-output"

echo "== ruff"
lint_rc=0
python3 -m ruff check plugin tests benchmarks samples || lint_rc=$?

# The suite once more against the lowest versions setup.py allows (tests/floor-requirements.txt),
# without the browser and torch tests (they don't depend on these floors). Only for a full run.
floor_rc=0
if [ "$#" -eq 0 ] && [ "${STEPSCOPE_SKIP_FLOOR:-}" != 1 ]; then
  echo "== pytest against the dependency floors (tests/floor-requirements.txt)"
  FLOOR_VENV="$ROOT/.venv-floor"
  python3 -m venv "$FLOOR_VENV"
  "$FLOOR_VENV/bin/python" -m pip install -q -r tests/floor-requirements.txt pytest hypothesis psutil
  "$FLOOR_VENV/bin/python" -m pip install -q --no-deps -e .
  "$FLOOR_VENV/bin/python" -m pytest -q -p no:cacheprovider -m "not browser and not torch" \
    --ignore=tests/test_install.py \
    -o addopts="" || floor_rc=$?
  echo "floor run exit status: $floor_rc"
fi

# pytest runs last so its summary line closes the output (CI reads it).
echo "== pytest"
test_rc=0
python3 -m pytest -q "$@" || test_rc=$?
if [ "$floor_rc" -ne 0 ]; then
  echo "the suite failed against the dependency floors (exit $floor_rc)" >&2
  exit "$floor_rc"
fi
if [ "$lint_rc" -ne 0 ]; then
  echo "ruff found problems (exit $lint_rc)" >&2
  exit "$lint_rc"
fi
exit "$test_rc"
