#!/usr/bin/python
"""Ansible module: wait on a drill's timeline until the client is ready or the recovery shows."""

from __future__ import annotations

import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.mooncake_drill import read_timeline, wait_for_recovery

DOCUMENTATION = r"""
module: mooncake_drill_wait
short_description: Wait until a Mooncake drill's timeline shows readiness or the expected recovery
description:
  - C(until=ready) waits for the recorder's store client to have written its seed keys.
  - C(until=recovered) measures from fault_at (epoch seconds) on - time to a new serving leader,
    time until client writes succeed again, samples with two serving leaders, the etcd leader
    change; returns when the drill's expected recovery is visible or timeout_s passes (then fails).
options:
  timeline: {type: path, required: true, description: The recorder's timeline.jsonl.}
  until: {type: str, choices: [ready, recovered], default: recovered, description: What to wait for.}
  drill: {type: str, default: leader_kill, description: The drill whose recovery is expected.}
  fault_at: {type: float, default: 0, description: Epoch seconds of the injection (until=recovered).}
  previous_leader: {type: str, default: "", description: Master name that led before the fault.}
  previous_etcd_leader: {type: str, default: "", description: etcd member id that led before the fault.}
  hold_s: {type: float, default: 0, description: Observe at least this long after the fault.}
  timeout_s: {type: float, default: 60, description: Give up (and fail) after this long.}
  need_writes: {type: bool, default: true, description: "Leader drills: also wait for client writes to succeed again (false: a new serving leader is enough)."}
"""


def wait_ready(module: AnsibleModule, path: str, timeout_s: float) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        events = read_timeline(path)
        failed = next((e for e in events if e.get("kind") == "recorder_failed"), None)
        if failed:
            module.fail_json(msg=f"the drill's store client failed: {failed.get('error')}")
        ready = next((e for e in events if e.get("kind") == "ready"), None)
        if ready:
            seeds = [e for e in events if e.get("kind") == "seed"]
            bad = [e for e in seeds if e.get("rc") != 0]
            if bad:
                module.fail_json(
                    msg=f"{len(bad)} of {len(seeds)} seed keys could not be written (first rc {bad[0]['rc']}); the platform is not healthy enough to drill"
                )
            module.exit_json(changed=False, ready=True, seed_keys=len(seeds))
        time.sleep(0.2)
    module.fail_json(msg=f"the drill's store client was not ready within {timeout_s} s; see the client log next to {path}")


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "timeline": {"type": "path", "required": True},
            "until": {"type": "str", "choices": ["ready", "recovered"], "default": "recovered"},
            "drill": {"type": "str", "default": "leader_kill"},
            "fault_at": {"type": "float", "default": 0},
            "previous_leader": {"type": "str", "default": ""},
            "previous_etcd_leader": {"type": "str", "default": ""},
            "hold_s": {"type": "float", "default": 0},
            "timeout_s": {"type": "float", "default": 60},
            "need_writes": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    if p["until"] == "ready":
        wait_ready(module, p["timeline"], p["timeout_s"])
    if p["fault_at"] <= 0:
        module.fail_json(msg="fault_at: pass the epoch seconds of the injection")
    done, progress = wait_for_recovery(
        p["timeline"],
        drill=p["drill"],
        fault_at=p["fault_at"],
        previous_leader=p["previous_leader"] or None,
        previous_etcd_leader=p["previous_etcd_leader"] or None,
        hold_s=p["hold_s"],
        timeout_s=p["timeout_s"],
        need_writes=p["need_writes"],
    )
    if not done:
        module.fail_json(msg=f"{p['drill']}: expected recovery not seen within {p['timeout_s']} s after the fault", progress=progress)
    module.exit_json(changed=False, progress=progress)


if __name__ == "__main__":
    main()
