#!/usr/bin/python
"""Ansible module: find (and, only when confirmed, delete) stale Mooncake transfer-engine metadata."""

from __future__ import annotations

import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.mooncake_ha import ProbeError, assess, etcd_delete_if_unchanged, etcd_range, first_answer, snapshot

DOCUMENTATION = r"""
module: mooncake_stale_metadata
short_description: Stale transfer-engine segment descriptors in etcd, deleted only when confirmed and consistent
description:
  - Transfer engines that use etcd as their metadata server register C(mooncake/ram/<segment>)
    and C(mooncake/rpc_meta/<segment>) without a lease; a client that crashed leaves them behind,
    and peers keep trying to open a segment that no longer exists.
  - A descriptor is stale when its segment is not mounted on the serving leader in two
    observations settle_s apart (longer than the masters' client_ttl) and the key did not change
    in between.
  - Runs the consistency check first (the diagnosis must be healthy - etcd quorum, one serving
    leader that holds master_view, standbys in sync); if it fails nothing is listed or deleted.
  - Deletes only when confirm equals C(delete-stale-metadata), and then each key with a
    compare-and-delete on its mod_revision, so a key re-registered meanwhile survives.
    Never touches master_view, the oplog or any other key.
options:
  etcd_endpoints: {type: list, elements: str, required: true, description: "host:port of every etcd member."}
  masters: {type: list, elements: dict, required: true, description: Masters (name, rpc_address, metrics_url).}
  cluster_id: {type: str, required: true, description: The masters' --cluster_id.}
  expected_masters: {type: int, default: 2, description: Masters the inventory runs.}
  expected_etcd_members: {type: int, default: 3, description: etcd members the inventory runs.}
  prefixes: {type: list, elements: str, default: ["mooncake/ram/", "mooncake/rpc_meta/"], description: Descriptor key prefixes.}
  settle_s: {type: float, default: 15, description: Seconds between the two observations.}
  consistency_wait_s: {type: float, default: 15, description: How long a transient inconsistency (a re-campaigning standby) may take to clear before the check fails.}
  confirm: {type: str, default: "", no_log: false, description: "Must be exactly delete-stale-metadata to delete."}
"""


CONFIRM_PHRASE = "delete-stale-metadata"


def consistent(module: AnsibleModule, p: dict) -> tuple[dict, dict]:
    # A standby passes through `candidate` for a moment whenever it re-campaigns (seen right after
    # drills and restarts): look again for a bounded while before calling the platform inconsistent.
    deadline = time.monotonic() + p["consistency_wait_s"]
    while True:
        snap = snapshot(p["etcd_endpoints"], p["masters"], p["cluster_id"])
        result = assess(snap, expected_masters=p["expected_masters"], expected_etcd_members=p["expected_etcd_members"])
        if (result["verdict"] == "healthy" and snap.get("segments") is not None) or time.monotonic() >= deadline:
            break
        time.sleep(1.0)
    if result["verdict"] != "healthy" or snap.get("segments") is None:
        why = "; ".join(r["what"] for r in result["reasons"]) or snap.get("segments_error", "the leader did not list its segments")
        module.fail_json(
            msg=f"consistency check did not pass ({result['verdict']}): {why}. Nothing was deleted; fix that first ({result['next_step']})",
            verdict=result["verdict"],
        )
    return snap, result


def candidates(p: dict, snap: dict) -> dict[str, dict]:
    mounted = {s["name"] for s in snap["segments"]}
    answering = [r["endpoint"] for r in snap["etcd"]["endpoints"] if r["ok"]]
    found: dict[str, dict] = {}
    for prefix in p["prefixes"]:
        _, kvs = first_answer(answering, lambda ep, timeout, prefix=prefix: etcd_range(ep, prefix, prefix=True, timeout=timeout))
        for kv in kvs:
            segment = kv["key"][len(prefix) :]
            if kv["lease"] == 0 and segment not in mounted:
                found[kv["key"]] = {"key": kv["key"], "segment": segment, "mod_revision": kv["mod_revision"]}
    return found


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "etcd_endpoints": {"type": "list", "elements": "str", "required": True},
            "masters": {"type": "list", "elements": "dict", "required": True},
            "cluster_id": {"type": "str", "required": True},
            "expected_masters": {"type": "int", "default": 2},
            "expected_etcd_members": {"type": "int", "default": 3},
            "prefixes": {"type": "list", "elements": "str", "default": ["mooncake/ram/", "mooncake/rpc_meta/"]},
            "settle_s": {"type": "float", "default": 15},
            "consistency_wait_s": {"type": "float", "default": 15},
            "confirm": {"type": "str", "default": "", "no_log": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    bad = [x for x in p["prefixes"] if not x.startswith("mooncake/") or x.startswith("mooncake-store/") or len(x) < len("mooncake/x/")]
    if bad:
        module.fail_json(
            msg=f"prefixes: {bad} are not transfer-engine descriptor prefixes (mooncake/<kind>/); master_view and the oplog are never cleaned"
        )
    try:
        snap, _ = consistent(module, p)
        first = candidates(p, snap)
        if first:
            time.sleep(p["settle_s"])
            snap, _ = consistent(module, p)
            second = candidates(p, snap)
            stale = [v for k, v in first.items() if k in second and second[k]["mod_revision"] == v["mod_revision"]]
        else:
            stale = []
    except ProbeError as exc:
        module.fail_json(msg=f"etcd did not answer during the check: {exc}. Nothing was deleted")
    if not stale or module.check_mode or p["confirm"] != CONFIRM_PHRASE:
        note = "" if not stale or p["confirm"] == CONFIRM_PHRASE else f"dry run: pass confirm={CONFIRM_PHRASE} to delete"
        module.exit_json(changed=bool(stale) and p["confirm"] == CONFIRM_PHRASE, stale=stale, deleted=[], note=note)
    answering = [r["endpoint"] for r in snap["etcd"]["endpoints"] if r["ok"]]
    deleted, kept = [], []
    for item in stale:
        _, ok = first_answer(
            answering, lambda ep, timeout, item=item: etcd_delete_if_unchanged(ep, item["key"], item["mod_revision"], timeout)
        )
        (deleted if ok else kept).append(item["key"])
    module.exit_json(changed=bool(deleted), stale=stale, deleted=deleted, kept_changed_meanwhile=kept, note="")


if __name__ == "__main__":
    main()
