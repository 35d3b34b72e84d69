#!/usr/bin/env bash
# Installs the peer systems the benchmark compares Skald against, each in its own venv under
# bench/peers/ (git-ignored). Idempotent: a finished install leaves a stamp file and is skipped
# next time; an interrupted one is resumed by pip.
#
#   bash bench/peers_setup.sh            # OpenViking (PyPI `openviking`, ~1.3 GB installed)
#   OPENVIKING_VERSION=0.5.2 bash bench/peers_setup.sh
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
peers="$here/peers"
version="${OPENVIKING_VERSION:-0.5.2}"
venv="$peers/openviking-venv"
stamp="$venv/.installed-$version"
# The same interpreter as the project's venv, so both servers run on the same Python.
python="${PEER_PYTHON:-$here/../.venv/bin/python}"
[ -x "$python" ] || python="python3"

mkdir -p "$peers"
if [ -f "$stamp" ]; then
    echo "openviking $version already installed in $venv"
    exit 0
fi
if [ ! -x "$venv/bin/python" ]; then
    # --copies would double the size; a symlinked venv is enough for a benchmark peer.
    "$(readlink -f "$python")" -m venv "$venv"
fi
# This machine's pip config lists local mirrors that may not exist: drop those warnings only.
quiet() { grep -v '^WARNING: Location' || true; }
"$venv/bin/pip" install -q --upgrade pip 2>&1 | quiet
"$venv/bin/pip" install -q "openviking==$version" 2>&1 | quiet
"$venv/bin/python" -c "import openviking; print('openviking', openviking.__version__)" \
    || "$venv/bin/pip" show openviking
touch "$stamp"
echo "openviking $version installed in $venv"
