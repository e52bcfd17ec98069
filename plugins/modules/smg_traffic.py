#!/usr/bin/python
"""Ansible module: what one SMG gateway has served, and whether a canary share went well."""

from __future__ import annotations

import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.engine_metrics import MetricsError, fetch_text, series

DOCUMENTATION = r"""
module: smg_traffic
short_description: Count the data-plane answers an SMG gateway gave, and judge a canary window
description:
  - Reads SMG's C(smg_http_responses_total) (per path and status code) from its metrics port and sums the
    data-plane paths (C(/generate), C(/v1/...)) into answers and server errors (5xx).
  - C(baseline) given, it judges the window since then; C(hold_s) waits that long first. Fails when the
    gateway answered fewer than C(min_requests) requests, or more than C(max_errors) with a 5xx, meanwhile.
options:
  metrics_url: {type: str, required: true, description: "The gateway's metrics URL (port 29000, /metrics)."}
  baseline: {type: dict, default: {}, description: A previous result's sample; empty to just sample.}
  hold_s: {type: float, default: 0, description: Seconds to wait before sampling (the canary window).}
  min_requests: {type: int, default: 1, description: Answers the window must contain.}
  max_errors: {type: int, default: 0, description: 5xx answers the window may contain.}
  name: {type: str, default: "", description: Gateway name for the messages.}
"""

RETURN = r"""
sample: {description: "{answers, errors} now.", type: dict, returned: always}
window: {description: "{answers, errors} since the baseline.", type: dict, returned: with a baseline}
"""


def sample(url: str) -> dict[str, float]:
    answers = errors = 0.0
    for name, labels, value in series(fetch_text(url)):
        if name != "smg_http_responses_total":
            continue
        path = labels.get("path", "")
        if path != "/generate" and not path.startswith("/v1/"):
            continue
        answers += value
        if labels.get("status_code", "").startswith("5"):
            errors += value
    return {"answers": answers, "errors": errors}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "metrics_url": {"type": "str", "required": True},
            "baseline": {"type": "dict", "default": {}},
            "hold_s": {"type": "float", "default": 0.0},
            "min_requests": {"type": "int", "default": 1},
            "max_errors": {"type": "int", "default": 0},
            "name": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    p = module.params
    name = p["name"] or p["metrics_url"]
    if p["hold_s"] > 0 and not module.check_mode:
        time.sleep(p["hold_s"])
    try:
        now = sample(p["metrics_url"])
    except MetricsError as exc:
        module.fail_json(msg=f"{name}: {exc}")
    if not p["baseline"]:
        module.exit_json(changed=False, sample=now)
    window = {k: now[k] - float(p["baseline"].get(k, 0.0)) for k in now}
    if window["answers"] < p["min_requests"]:
        module.fail_json(
            msg=f"{name} answered {window['answers']:.0f} request(s) in the window, fewer than {p['min_requests']}: the share never reached it",
            sample=now,
            window=window,
        )
    if window["errors"] > p["max_errors"]:
        module.fail_json(
            msg=f"{name} answered {window['errors']:.0f} of {window['answers']:.0f} request(s) with a 5xx in the window (at most {p['max_errors']})",
            sample=now,
            window=window,
        )
    module.exit_json(changed=False, sample=now, window=window)


if __name__ == "__main__":
    main()
