#!/usr/bin/env bash
# Debian packages the tests and the local platform run for real: podman/runc/mmdebstrap (molecule),
# etcd, prometheus/promtool, libibverbs (mooncake wheels link it), perftest/ibverbs-utils (preflight tools).
set -euo pipefail
pkgs=(podman runc mmdebstrap etcd-server etcd-client prometheus libibverbs1 ibverbs-utils perftest uidmap fuse-overlayfs)
missing=()
for p in "${pkgs[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p"); done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
# Package scripts must not start etcd/prometheus as services: the local platform runs its own.
printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null && $SUDO chmod +x /usr/sbin/policy-rc.d
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
