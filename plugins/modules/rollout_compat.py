#!/usr/bin/python
"""Ansible module (controller): may these roles be rolled to the target release while their peers serve?"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.smg_api import http

DOCUMENTATION = r"""
module: rollout_compat
short_description: Check a target release against the running peers of the roles to upgrade (P/D compatibility)
description:
  - Validates the target release manifest, then compares each role to upgrade with every running
    group of the other roles, described by the release it was deployed from and corrected by its
    own C(/server_info) (inferplane.rollout.peer_problems; the rule of inferplane.manifest.compatibility_problems,
    with the SGLang version allowed to differ in its patch level).
  - Runs on the controller with the inferplane package importable (the playbook's interpreter).
options:
  target_release: {type: path, required: true, description: Target release manifest.}
  roles: {type: list, elements: str, required: true, description: Roles whose groups will be upgraded.}
  groups: {type: list, elements: dict, required: true, description: "Every group: {name, role, direct_url, release_file}; each is asked for /server_info."}
  timeout_s: {type: float, default: 10.0, description: Seconds per /server_info.}
"""

RETURN = r"""
problems: {description: One line per incompatibility (or manifest problem); empty when the rollout may proceed., type: list, returned: always}
silent: {description: Groups that did not answer /server_info., type: list, returned: always}
target: {description: "Per role to upgrade: sglang_version, sglang_image, model, revision, mooncake_te_abi.", type: dict, returned: success}
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "target_release": {"type": "path", "required": True},
            "roles": {"type": "list", "elements": "str", "required": True},
            "groups": {"type": "list", "elements": "dict", "required": True},
            "timeout_s": {"type": "float", "default": 10.0},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        from inferplane.errors import ConfigError
        from inferplane.manifest import load_release
        from inferplane.rollout import RunningGroup, peer_problems
    except ImportError as exc:
        module.fail_json(
            msg=f"the inferplane package is not importable by {__import__('sys').executable} ({exc}); run the playbook from the project's venv"
        )
    with ThreadPoolExecutor(max_workers=min(16, max(1, len(p["groups"])))) as pool:
        answers = list(
            pool.map(lambda g: http("GET", str(g["direct_url"]).rstrip("/") + "/server_info", timeout=p["timeout_s"]), p["groups"])
        )
    running = [
        RunningGroup(g["name"], g["role"], g["release_file"], body)
        for g, (status, body) in zip(p["groups"], answers, strict=True)
        if status == 200 and isinstance(body, dict)
    ]
    silent = [g["name"] for g, (status, _) in zip(p["groups"], answers, strict=True) if status != 200]
    try:
        target = load_release(p["target_release"])
        problems = peer_problems(target, p["roles"], running)
    except ConfigError as exc:
        module.exit_json(changed=False, invalid=True, problems=[f"{exc.source}: {line}" for line in exc.problems], target={}, silent=silent)
    summary = {}
    for role in p["roles"]:
        if role in target.roles:
            eff = target.effective(role)
            summary[role] = {
                "release": target.release,
                "sglang_version": eff.sglang_version,
                "sglang_image": eff.sglang_image,
                "model": eff.model_name,
                "revision": eff.model.revision,
                "mooncake_te_abi": eff.mooncake_te_abi,
            }
    module.exit_json(changed=False, invalid=False, problems=problems, target=summary, silent=silent, answering=[g.name for g in running])


if __name__ == "__main__":
    main()
