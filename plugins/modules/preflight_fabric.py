#!/usr/bin/python
"""Ansible module: one step of the fabric pair tests on one node."""

from __future__ import annotations

DOCUMENTATION = r"""
module: preflight_fabric
short_description: Start pair-test servers, run pair-test clients, or collect the servers, on one node.
description:
  - C(action=serve) starts the ib_write_bw servers and Mooncake transfer_engine_bench targets the plan gives this
    node (detached, with a timeout) and returns each target's segment id; C(action=run) runs this node's clients
    against its peers; C(action=collect) stops the servers, parses their logs and removes the session directory.
  - Only measures; leaves no process or file behind. Supports check mode (the tests run in check mode too).
options:
  action: {description: which step., type: str, required: true, choices: [serve, run, collect]}
  node: {description: this node's inventory name., type: str, required: true}
  tests: {description: the plan's tests for this node (serve or run list)., type: list, elements: dict, default: []}
  endpoints: {description: "run: every peer's serve result, keyed by node.", type: dict, default: {}}
  session: {description: session directory for server logs., type: str, required: true}
  gid_index: {description: RoCE GID index for ib_write_bw -x., type: int}
  duration_s: {description: seconds per test., type: int, default: 5}
  gpudirect_method: {description: "peermem or dmabuf (adds --use_cuda_dmabuf).", type: str}
  ib_write_bw: {description: perftest binary., type: str, default: ib_write_bw}
  ib_write_bw_args: {description: extra ib_write_bw arguments., type: list, elements: str, default: []}
  te_bench: {description: Mooncake transfer_engine_bench binary., type: str, default: transfer_engine_bench}
  te_bench_args: {description: extra transfer_engine_bench arguments., type: list, elements: str, default: []}
  kv_auto_discovery: {description: let the transfer engine discover HCAs itself (what SGLang does without ib_device)., type: bool, default: true}
  ready_timeout_s: {description: seconds to wait for servers to listen., type: float, default: 15}
  server_timeout_s: {description: seconds after which an unused server exits., type: int, default: 300}
"""

RETURN = r"""
session: {description: the session directory (serve)., type: str, returned: serve}
servers: {description: "per test id: tool, segment (Mooncake target), error.", type: dict, returned: serve}
client: {description: "per test id: parsed client results (run).", type: dict, returned: run}
server: {description: "per test id: parsed server results (collect).", type: dict, returned: collect}
"""

# Ansible's module layout puts DOCUMENTATION/RETURN before the imports.
from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.fabric_runner import Options, collect, run_clients, serve  # noqa: E402


def main():
    module = AnsibleModule(
        argument_spec={
            "action": {"type": "str", "required": True, "choices": ["serve", "run", "collect"]},
            "node": {"type": "str", "required": True},
            "tests": {"type": "list", "elements": "dict", "default": []},
            "endpoints": {"type": "dict", "default": {}},
            "session": {"type": "str", "required": True},
            "gid_index": {"type": "int"},
            "duration_s": {"type": "int", "default": 5},
            "gpudirect_method": {"type": "str"},
            "ib_write_bw": {"type": "str", "default": "ib_write_bw"},
            "ib_write_bw_args": {"type": "list", "elements": "str", "default": []},
            "te_bench": {"type": "str", "default": "transfer_engine_bench"},
            "te_bench_args": {"type": "list", "elements": "str", "default": []},
            "kv_auto_discovery": {"type": "bool", "default": True},
            "ready_timeout_s": {"type": "float", "default": 15.0},
            "server_timeout_s": {"type": "int", "default": 300},
        },
        supports_check_mode=True,
    )
    p = module.params
    options = Options(
        ib_write_bw=p["ib_write_bw"],
        ib_write_bw_args=list(p["ib_write_bw_args"]),
        te_bench=p["te_bench"],
        te_bench_args=list(p["te_bench_args"]),
        kv_auto_discovery=p["kv_auto_discovery"],
        gid_index=p["gid_index"],
        duration_s=p["duration_s"],
        gpudirect_method=p["gpudirect_method"],
        ready_timeout_s=p["ready_timeout_s"],
        server_timeout_s=p["server_timeout_s"],
    )
    if p["action"] == "serve":
        result = serve(p["tests"], p["node"], p["session"], options)
    elif p["action"] == "run":
        result = run_clients(p["tests"], p["node"], p["endpoints"], options)
    else:
        result = collect(p["session"])
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
