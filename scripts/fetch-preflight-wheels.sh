#!/usr/bin/env bash
# Download ansible-core and its dependencies as wheels for a GPU node that has Python but no
# network and no Ansible, for scripts/preflight-standalone.sh:
#   scripts/fetch-preflight-wheels.sh [PYTHON_VERSION]      # default 3.12 -> build/wheels/py312
# Binary wheels only, for manylinux x86_64 (any glibc >= 2.17, Ubuntu 20.04 and later).
set -euo pipefail
cd "$(dirname "$0")/.."
pyver=${1:-3.12}
dest=build/wheels/py${pyver//./}
# The controller's pin (requirements/base.txt pins ansible, which pins this ansible-core).
core=$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("ansible-core"))' 2>/dev/null || echo 2.19.14)
mkdir -p "$dest"
"${PIP:-.venv/bin/pip}" download --quiet --disable-pip-version-check --only-binary=:all: \
  --python-version "$pyver" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$dest" "ansible-core==$core"
echo "$dest: $(ls "$dest" | wc -l) wheels, $(du -sh "$dest" | cut -f1)"
