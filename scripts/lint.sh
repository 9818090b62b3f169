#!/usr/bin/env bash
# Static checks (CI runs this): ruff on the Python sources and mypy on the package.
# Needs the dev extra: pip install -e '.[dev]'. Rules and settings: [tool.ruff], [tool.mypy] in pyproject.toml.
set -uo pipefail
cd "$(dirname "$0")/.."
rc=0
echo "lint: ruff check (rules in pyproject.toml [tool.ruff.lint])"
ruff check src tests benchmarks scripts || rc=1
echo "lint: mypy src"
mypy || rc=1
exit "$rc"
