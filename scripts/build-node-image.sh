#!/usr/bin/env bash
# The Debian node image molecule scenarios run in, built from the machine's own apt sources
# (no mirror named). Cached: rebuilt only when missing.
set -euo pipefail
image=localhost/inferplane-node:bookworm
if podman image exists "$image"; then exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mmdebstrap --variant=minbase --include=python3,sudo,iproute2,procps,kmod bookworm "$tmp/node.tar"
podman import "$tmp/node.tar" "$image"
