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

echo "== chromium (browser tests)"
CHROMIUM=/usr/bin/chromium
if [ ! -x "$CHROMIUM" ]; then
  SUDO=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
      SUDO=(sudo -n)
    else
      SUDO=(none)
    fi
  fi
  if [ "${SUDO[0]:-}" != none ] && command -v apt-get >/dev/null 2>&1 &&
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q </dev/null &&
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium </dev/null; then
    echo "installed $CHROMIUM"
  elif [ "${CI:-}" = true ] || [ "$(id -u)" -eq 0 ]; then
    echo "ERROR: could not install chromium with apt-get; browser tests need $CHROMIUM" >&2
    exit 1
  else
    echo "WARNING: $CHROMIUM is missing and cannot be installed here (not root, no sudo, or no apt-get)." >&2
    echo "WARNING: browser tests will be skipped. Install it with: sudo apt-get install -y chromium" >&2
  fi
fi
if [ -x "$CHROMIUM" ]; then
  export STEPSCOPE_CHROMIUM="$CHROMIUM"
fi

mkdir -p "$ROOT/test-output"
export STEPSCOPE_TEST_OUTPUT="$ROOT/test-output"

echo "== ruff"
lint_rc=0
python3 -m ruff check plugin tests benchmarks samples || lint_rc=$?

# pytest runs last so its summary line closes the output (CI reads it).
echo "== pytest"
test_rc=0
python3 -m pytest -q "$@" || test_rc=$?
if [ "$lint_rc" -ne 0 ]; then
  echo "ruff found problems (exit $lint_rc)" >&2
  exit "$lint_rc"
fi
exit "$test_rc"
