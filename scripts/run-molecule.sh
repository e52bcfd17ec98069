#!/usr/bin/env bash
# Run every molecule scenario of every role (roles/<role>/molecule/<scenario>/molecule.yml).
set -euo pipefail
cd "$(dirname "$0")/.."
failed=()
for m in roles/*/molecule/*/molecule.yml; do
  [ -e "$m" ] || continue
  role_dir=${m%%/molecule/*}
  scenario=$(basename "$(dirname "$m")")
  echo "=== molecule test: ${role_dir#roles/} / $scenario"
  if ! (cd "$role_dir" && molecule test -s "$scenario"); then failed+=("${role_dir#roles/}/$scenario"); fi
done
if [ ${#failed[@]} -gt 0 ]; then echo "molecule failed: ${failed[*]}"; exit 1; fi
