#!/usr/bin/python
"""Ansible module: the one-rollout-per-pool lease of the local backend (a file next to state.json)."""

from __future__ import annotations

from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.upgrade_lock import LockHeld, LockLost, acquire, controller_pid, read, release, renew, stale_reason

DOCUMENTATION = r"""
module: rollout_lock
short_description: Take, renew, check or release a pool's rollout lease (a file with owner, pid, time and TTL)
description:
  - C(state=acquired) takes the lease, or fails naming the run that holds it. A stale lease (TTL
    passed, or its ansible-playbook process on this host is gone) is taken over and reported.
  - C(state=renewed) pushes the expiry out; fails if this run no longer holds it.
  - C(state=released) drops the lease if this run holds it. C(state=checked) only reports.
  - The holder's pid is the ansible-playbook process the module runs under, so a run that crashes
    leaves a lease the next run can see is stale.
options:
  path: {type: path, required: true, description: Lease file.}
  state: {type: str, required: true, choices: [acquired, renewed, released, checked], description: What to do.}
  pool: {type: str, required: true, description: Pool (role) the lease guards.}
  run_id: {type: str, required: true, description: This run's id (same for every call of one run).}
  owner: {type: str, default: "", description: Who runs it (user@host and the playbook).}
  ttl_s: {type: float, default: 3600, description: Lease length; renewed at every step.}
"""

RETURN = r"""
holder: {description: The lease as written or found., type: dict, returned: always}
taken_over: {description: The stale lease this run replaced, with why it was stale., type: dict, returned: when a stale lease was taken over}
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "state": {"type": "str", "required": True, "choices": ["acquired", "renewed", "released", "checked"]},
            "pool": {"type": "str", "required": True},
            "run_id": {"type": "str", "required": True},
            "owner": {"type": "str", "default": ""},
            "ttl_s": {"type": "float", "default": 3600.0},
        },
        supports_check_mode=True,
    )
    p = module.params
    path = Path(p["path"])
    current = read(path)
    if p["state"] == "checked" or module.check_mode:
        import socket
        import time

        held = current is not None and current.run_id != p["run_id"] and stale_reason(current, time.time(), socket.gethostname()) is None
        if held and p["state"] == "acquired":
            module.fail_json(
                msg=f"refused: {current.describe()}. Wait for it, or if that run is dead remove {path}", holder=current.as_dict()
            )
        module.exit_json(changed=False, holder=current.as_dict() if current else {}, held_by_other=held)
    try:
        if p["state"] == "acquired":
            holder, taken = acquire(path, p["pool"], p["owner"] or "ansible", p["run_id"], p["ttl_s"], controller_pid())
            module.exit_json(changed=True, holder=holder.as_dict(), taken_over=taken or {})
        if p["state"] == "renewed":
            module.exit_json(changed=True, holder=renew(path, p["run_id"]).as_dict())
        dropped = release(path, p["run_id"])
        module.exit_json(changed=dropped, holder=current.as_dict() if current else {})
    except LockHeld as exc:
        module.fail_json(
            msg=f"refused: {exc}. Nothing was changed. Wait for that run, or if it is dead remove {path} after checking",
            holder=exc.holder.as_dict(),
        )
    except LockLost as exc:
        module.fail_json(msg=str(exc))


if __name__ == "__main__":
    main()
