#!/usr/bin/python
"""Ansible module: take one engine group out of (or back into) every SMG replica."""

from __future__ import annotations

import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.engine_metrics import MetricsError, in_flight, new_arrivals, scrape
from ansible.module_utils.smg_api import Gateway, SmgError, add, find, http, start_drain

DOCUMENTATION = r"""
module: smg_worker
short_description: Drain an engine group out of every SMG replica, or register it back and prove it gets traffic
description:
  - C(state=drained) raises the worker's C(drain_settle_secs) above the longest request, DELETEs it
    on every gateway that lists it, waits until each lists it C(draining), then watches the engine's
    own counters for C(verify_window_s) and fails if any request arrived after the drain was visible.
  - C(state=ready) waits until a pending removal has happened (a drain cannot be cancelled), POSTs
    the worker with its C(worker_type) and, for a prefill, C(bootstrap_port), waits for C(ready) on
    every gateway, and sends probe requests through each gateway until the engine counts one.
  - Workers are looked up by URL: SMG gives a worker a new id on every add.
options:
  gateways:
    type: list
    elements: dict
    required: true
    description: "Every SMG replica: {name, url, headers}; headers carry the control-plane admin key."
  url: {type: str, required: true, description: The engine group's URL as SMG lists it.}
  state: {type: str, required: true, choices: [drained, ready], description: Where the worker should end up.}
  worker_type: {type: str, choices: [prefill, decode, regular], description: "Needed for state=ready (SMG does not discover it)."}
  bootstrap_port: {type: int, description: "A prefill's KV bootstrap port, needed for state=ready."}
  only_on: {type: list, elements: str, description: "state=ready: gateway names to register on (default all)."}
  settle_s: {type: int, default: 600, description: drain_settle_secs set before the DELETE; above the longest request.}
  engine_metrics_url: {type: str, description: "The engine's /metrics, for the no-new-request check and the traffic probe."}
  verify_window_s: {type: float, default: 2.0, description: How long to watch the engine for new requests after the drain is visible.}
  timeout_s: {type: float, default: 30.0, description: Time for SMG to show the worker draining.}
  ready_timeout_s: {type: float, default: 60.0, description: Time for SMG to show the re-added worker ready.}
  removal_timeout_s: {type: float, default: 900.0, description: Time to wait for a pending drain to remove the worker before re-adding.}
  probe_requests: {type: int, default: 12, description: "Most probe requests per gateway before traffic must have reached the worker (0: no probe)."}
"""

RETURN = r"""
drains: {description: "Per gateway: {gateway, url, worker_id, spec, deleted_at, settle_s}.", type: list, returned: state=drained}
baseline: {description: "Engine metrics when the drain was visible everywhere (for group_drain).", type: dict, returned: state=drained}
new_requests: {description: Requests that reached the engine after the drain was visible., type: int, returned: state=drained}
registered: {description: "Per gateway the worker as SMG lists it once ready.", type: list, returned: state=ready}
probe: {description: "Per gateway: probes sent and the engine's finished-request count before and after.", type: list, returned: state=ready}
"""


def gateways_of(params: dict) -> list[Gateway]:
    out = []
    for g in params["gateways"]:
        if not g.get("url"):
            raise SmgError(f"gateway entry {g!r} has no url")
        out.append(Gateway(str(g["url"]).rstrip("/"), dict(g.get("headers") or {}), str(g.get("name") or g["url"])))
    return out


def drained(module: AnsibleModule, gws: list[Gateway]) -> None:
    p = module.params
    listed = [gw.label for gw in gws if find(gw, p["url"]) is not None]
    if module.check_mode:
        module.exit_json(changed=bool(listed), listed_on=listed, drains=[], baseline={}, new_requests=0)
    drains = []
    for gw in gws:
        d = start_drain(gw, p["url"], p["settle_s"], timeout=p["timeout_s"])
        if d is not None:
            drains.append(d.__dict__)
    baseline: dict = {}
    new = 0
    if p["engine_metrics_url"]:
        # Sampled after every gateway shows the drain: a request finishing beyond what was in
        # flight now was routed after the drain was visible.
        baseline = scrape(p["engine_metrics_url"])
        time.sleep(p["verify_window_s"])
        new = new_arrivals(baseline, scrape(p["engine_metrics_url"]))
        if new:
            module.fail_json(
                msg=f"{p['url']}: {new} request(s) reached the engine after every gateway showed it draining; "
                f"the group stays out of traffic. Check for a gateway replica this run does not know about, or a client bypassing SMG.",
                drains=drains,
                baseline=baseline,
                new_requests=new,
            )
    module.exit_json(
        changed=bool(drains), drains=drains, listed_on=listed, baseline=baseline, new_requests=new, in_flight=in_flight(baseline)
    )


def ready(module: AnsibleModule, gws: list[Gateway]) -> None:
    p = module.params
    if not p["worker_type"]:
        module.fail_json(
            msg=f"{p['url']}: worker_type is required to register a worker (SMG defaults to regular, which a PD router ignores)"
        )
    spec = {"url": p["url"], "worker_type": p["worker_type"]}
    if p["worker_type"] == "prefill":
        spec["bootstrap_port"] = p["bootstrap_port"]
    targets = [gw for gw in gws if not p["only_on"] or gw.label in p["only_on"]]
    missing = [gw.label for gw in targets if (w := find(gw, p["url"])) is None or w.get("status") != "ready"]
    if module.check_mode:
        module.exit_json(changed=bool(missing), would_register_on=missing, registered=[], probe=[])
    registered = [add(gw, spec, p["ready_timeout_s"], p["removal_timeout_s"]) for gw in targets]
    probes = []
    if p["engine_metrics_url"] and p["probe_requests"] > 0:
        for gw in targets:
            before = scrape(p["engine_metrics_url"])
            sent = 0
            after = before
            while sent < p["probe_requests"]:
                body = {"text": f"upgrade probe {sent}", "sampling_params": {"max_new_tokens": 1, "temperature": 0}}
                status, answer = http("POST", gw.url + "/generate", body, timeout=60)
                sent += 1
                if status != 200 or (isinstance(answer, dict) and "error" in answer):
                    module.fail_json(msg=f"{gw.label}: probe request after adding {p['url']} failed: HTTP {status} {str(answer)[:200]}")
                after = scrape(p["engine_metrics_url"])
                if new_arrivals(before, after) > 0:
                    break
            reached = new_arrivals(before, after)
            probes.append({"gateway": gw.label, "sent": sent, "reached": reached})
            if reached == 0:
                module.fail_json(
                    msg=f"{gw.label}: {p['url']} is ready but none of {sent} probe requests reached it; check the gateway's policy and circuit breaker",
                    registered=registered,
                    probe=probes,
                )
    module.exit_json(changed=bool(missing), registered=registered, probe=probes)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "gateways": {"type": "list", "elements": "dict", "required": True},
            "url": {"type": "str", "required": True},
            "state": {"type": "str", "required": True, "choices": ["drained", "ready"]},
            "worker_type": {"type": "str", "choices": ["prefill", "decode", "regular"]},
            "bootstrap_port": {"type": "int"},
            "only_on": {"type": "list", "elements": "str", "default": []},
            "settle_s": {"type": "int", "default": 600},
            "engine_metrics_url": {"type": "str"},
            "verify_window_s": {"type": "float", "default": 2.0},
            "timeout_s": {"type": "float", "default": 30.0},
            "ready_timeout_s": {"type": "float", "default": 60.0},
            "removal_timeout_s": {"type": "float", "default": 900.0},
            "probe_requests": {"type": "int", "default": 12},
        },
        supports_check_mode=True,
    )
    module.params["url"] = module.params["url"].rstrip("/")
    try:
        gws = gateways_of(module.params)
        if module.params["state"] == "drained":
            drained(module, gws)
        else:
            ready(module, gws)
    except (SmgError, MetricsError) as exc:
        module.fail_json(msg=str(exc))


if __name__ == "__main__":
    main()
