#!/usr/bin/python
"""Ansible module: act on one process of the local platform through `inferplane local proc`."""

from __future__ import annotations

import json
import os

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: local_platform_process
short_description: Kill, stop, start, pause, resume, restart or revive one local-platform process
description:
  - Runs C(inferplane local proc ACTION NAME --state-dir DIR), the local platform's own process
    control (SIGKILL, SIGTERM and wait, start again, SIGSTOP, SIGCONT), so the platform's
    state.json stays the one record of what runs.
  - C(revive) brings a failed process back whatever happened to it (resume if frozen, start if
    gone) and does nothing to a running one. C(restart) is stop then start.
  - Reports the process state before and after (running, frozen, gone).
options:
  name: {type: str, required: true, description: "Process name in state.json, e.g. mooncake-master-0, etcd-2."}
  action: {type: str, required: true, choices: [kill, stop, start, pause, resume, restart, revive], description: What to do.}
  state_dir: {type: path, required: true, description: The local platform's state dir (holds state.json).}
  inferplane: {type: path, required: true, description: The inferplane command.}
  unresponsive: {type: bool, default: false, description: For revive, the caller found it not answering, so a running one is restarted.}
"""


def process_state(state_dir: str, name: str) -> tuple[str, int | None]:
    """(running|frozen|gone, pid) from state.json and /proc: a SIGSTOPped process shows 'T'."""
    with open(os.path.join(state_dir, "state.json")) as fh:
        state = json.load(fh)
    proc = state.get("processes", {}).get(name)
    if proc is None:
        raise KeyError(f"no process '{name}' in {state_dir}/state.json; known: {', '.join(sorted(state.get('processes', {})))}")
    pid = proc.get("pid")
    if not pid:
        return "gone", None
    try:
        with open(f"/proc/{pid}/stat") as fh:
            raw = fh.read()
    except OSError:
        return "gone", pid
    letter = raw[raw.rfind(")") + 2 :].split()[0]
    if letter in ("Z", "X"):
        return "gone", pid
    return ("frozen" if letter in ("T", "t") else "running"), pid


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "action": {"type": "str", "required": True, "choices": ["kill", "stop", "start", "pause", "resume", "restart", "revive"]},
            "state_dir": {"type": "path", "required": True},
            "inferplane": {"type": "path", "required": True},
            "unresponsive": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        before, pid = process_state(p["state_dir"], p["name"])
    except (OSError, ValueError, KeyError) as exc:
        module.fail_json(msg=f"{p['name']}: cannot read the local platform's state: {exc}")
    wanted = {
        "kill": ["kill"] if before != "gone" else [],
        "stop": ["stop"] if before != "gone" else [],
        "start": ["start"] if before == "gone" else [],
        "pause": ["pause"] if before == "running" else [],
        "resume": ["resume"] if before == "frozen" else [],
        "restart": (["resume"] if before == "frozen" else []) + (["stop"] if before != "gone" else []) + ["start"],
        "revive": {"frozen": ["resume"], "gone": ["start"], "running": ["stop", "start"] if p["unresponsive"] else []}[before],
    }[p["action"]]
    if module.check_mode or not wanted:
        module.exit_json(changed=bool(wanted), before=before, after=before, pid=pid, commands=wanted)
    runs = []
    for action in wanted:
        argv = [p["inferplane"], "local", "proc", action, p["name"], "--state-dir", p["state_dir"]]
        rc, out, err = module.run_command(argv)
        runs.append({"action": action, "rc": rc, "stdout": out.strip(), "stderr": err.strip()})
        if rc != 0:
            module.fail_json(msg=f"`{' '.join(argv)}` failed (rc {rc}): {(err or out).strip()[-400:]}", before=before, runs=runs)
    after, pid = process_state(p["state_dir"], p["name"])
    module.exit_json(changed=True, before=before, after=after, pid=pid, commands=wanted, runs=runs)


if __name__ == "__main__":
    main()
