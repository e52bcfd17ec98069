#!/usr/bin/env bash
# `make demo`: start the local platform (real etcd, Mooncake HA, SMG, Prometheus, S3; emulated
# SGLang engines), run load through the gateway, print a summary, and leave it running.
# `make deps venv` ran first (the Makefile's prerequisites), so every binary is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
INFERPLANE=.venv/bin/inferplane
RATE=${DEMO_RATE:-8}
DURATION=${DEMO_DURATION:-15}

echo "==> inferplane local up  (state, logs: .state/local)"
# Progress goes to stderr; the status table is printed once, after the load.
$INFERPLANE local up >/dev/null

echo
echo "==> inferplane load --through gateway --rate $RATE --duration $DURATION --stream"
load_rc=0
$INFERPLANE load --through gateway --rate "$RATE" --duration "$DURATION" --stream --prompt-tokens 128 --max-new-tokens 32 || load_rc=$?

echo
echo "==> inferplane local status"
# Give Prometheus two evaluation rounds so the alert list reflects the load that just ran.
sleep 2
$INFERPLANE local status || true

echo
echo "The platform keeps running: try '.venv/bin/inferplane local status', '.venv/bin/inferplane load --rate 20 --duration 10',"
echo "'.venv/bin/inferplane local proc kill mooncake-master-0' (failover drill), Prometheus at the URL above."
echo "Stop everything with: make demo-down"
exit "$load_rc"
