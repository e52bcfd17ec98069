#!/usr/bin/python
"""Ansible module: wait until an engine group holds no work, by its own metrics."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.engine_metrics import MetricsError, drain

DOCUMENTATION = r"""
module: engine_drain
short_description: Wait until a group leader's running, queued and PD-queue gauges are all 0 for a settle window
description:
  - Polls the leader's SGLang C(/metrics) (C(sglang:num_running_reqs), C(sglang:num_queue_reqs) and the
    PD queues) until every one is 0 and stays 0 for C(settle_s), or C(timeout_s) passes. SMG forgets a
    worker's load when it removes it, so the engine's own numbers are the truth.
  - With C(baseline) (the engine's metrics when the gateway showed the drain) it also counts requests
    that arrived afterwards and fails if there were any.
  - Fails at the deadline, naming what is still in flight; nothing is stopped or killed.
options:
  metrics_url: {type: str, required: true, description: The group leader's /metrics URL.}
  settle_s: {type: float, default: 5.0, description: Seconds every gauge must stay 0.}
  timeout_s: {type: float, required: true, description: Deadline for the drain.}
  poll_s: {type: float, default: 0.5, description: Seconds between scrapes.}
  baseline: {type: dict, default: {}, description: "Metrics sample taken when the drain became visible (smg_worker's baseline)."}
  group: {type: str, default: "", description: Group name for the messages.}
  unreachable_is_idle: {type: bool, default: false, description: "An engine that does not answer counts as idle (a group no gateway routes to, already down)."}
"""

RETURN = r"""
idle: {description: True when the group held no work for the settle window., type: bool, returned: always}
waited_s: {description: Seconds until idle (or until the deadline)., type: float, returned: always}
last: {description: The in-flight gauges at the last scrape., type: dict, returned: always}
peak: {description: The largest value each gauge showed while draining., type: dict, returned: always}
new_requests: {description: Requests that arrived after the baseline., type: int, returned: always}
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "metrics_url": {"type": "str", "required": True},
            "settle_s": {"type": "float", "default": 5.0},
            "timeout_s": {"type": "float", "required": True},
            "poll_s": {"type": "float", "default": 0.5},
            "baseline": {"type": "dict", "default": {}},
            "group": {"type": "str", "default": ""},
            "unreachable_is_idle": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    name = p["group"] or p["metrics_url"]
    if module.check_mode:
        module.exit_json(changed=False, idle=False, waited_s=0.0, last={}, peak={}, new_requests=0, skipped="check mode")
    try:
        result = drain(
            p["metrics_url"],
            p["settle_s"],
            p["timeout_s"],
            p["poll_s"],
            baseline=p["baseline"] or None,
            unreachable_is_idle=p["unreachable_is_idle"],
        )
    except MetricsError as exc:
        module.fail_json(msg=f"{name}: {exc}")
    out = result.as_dict()
    if result.new_requests:
        module.fail_json(
            msg=f"{name}: {result.new_requests} request(s) reached the engine after the gateway showed it draining; it stays out of traffic",
            **out,
        )
    if not result.idle:
        busy = ", ".join(f"{k}={v:g}" for k, v in result.last.items() if v) or "no successful scrape"
        module.fail_json(
            msg=f"{name}: still busy after the {p['timeout_s']:g}s drain deadline ({busy}); nothing was stopped",
            **out,
        )
    module.exit_json(changed=False, **out)


if __name__ == "__main__":
    main()
