#!/usr/bin/python
"""Ansible module: record a Mooncake failover drill's timeline (run it with async, poll 0)."""

from __future__ import annotations

import os
import sys

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.mooncake_drill import Recorder
from ansible.module_utils.mooncake_store_client import client_config

DOCUMENTATION = r"""
module: mooncake_drill_recorder
short_description: Record leaders, etcd and a real store client's writes while a drill runs
description:
  - Starts a real Mooncake store client (mooncake.store.MooncakeDistributedStore) in a child
    process, writes seed keys, then one key every interval_s, while sampling every master's
    /health, the etcd master_view and every etcd member's status into run_dir/timeline.jsonl.
  - Runs until stop_file exists or max_s passes, then reads every seed key (and the last
    stream keys) back through the same client and returns what was lost.
  - Meant for C(async) with C(poll=0); mooncake_drill_wait reads the timeline meanwhile.
    Never deletes anything.
options:
  run_dir: {type: path, required: true, description: Directory for timeline.jsonl and the client's log.}
  stop_file: {type: path, required: true, description: The recording ends when this file exists.}
  max_s: {type: float, default: 300, description: Hard limit on the recording.}
  masters: {type: list, elements: dict, required: true, description: Masters (name, rpc_address, metrics_url).}
  etcd_endpoints: {type: list, elements: str, required: true, description: "host:port of every etcd member."}
  cluster_id: {type: str, required: true, description: The masters' --cluster_id (the client's MC_STORE_CLUSTER_ID).}
  master_address: {type: str, required: true, description: "What clients pass as master_server_addr (etcd://h1:p1;h2:p2)."}
  key_prefix: {type: str, required: true, description: Prefix of every key the drill writes.}
  client: {type: dict, default: {}, description: "Client knobs: python, seed_keys, interval_s, value_size, local_hostname, metadata_server, protocol, device_name, global_segment_size, local_buffer_size."}
  sample_interval_s: {type: float, default: 0.2, description: Seconds between leader samples.}
  hang_timeout_s: {type: float, default: 30, description: A client silent this long is killed and the drill marked failed.}
  ready_timeout_s: {type: float, default: 60, description: Seconds for setup and the seed keys.}
  verify_timeout_s: {type: float, default: 120, description: Seconds for the read-back.}
"""


CLIENT_KEYS = (
    "seed_keys",
    "interval_s",
    "value_size",
    "local_hostname",
    "metadata_server",
    "protocol",
    "device_name",
    "global_segment_size",
    "local_buffer_size",
    "verify_stream_max",
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "run_dir": {"type": "path", "required": True},
            "stop_file": {"type": "path", "required": True},
            "max_s": {"type": "float", "default": 300},
            "masters": {"type": "list", "elements": "dict", "required": True},
            "etcd_endpoints": {"type": "list", "elements": "str", "required": True},
            "cluster_id": {"type": "str", "required": True},
            "master_address": {"type": "str", "required": True},
            "key_prefix": {"type": "str", "required": True},
            "client": {"type": "dict", "default": {}},
            "sample_interval_s": {"type": "float", "default": 0.2},
            "hang_timeout_s": {"type": "float", "default": 30},
            "ready_timeout_s": {"type": "float", "default": 60},
            "verify_timeout_s": {"type": "float", "default": 120},
        },
        supports_check_mode=False,
    )
    p = module.params
    client = p["client"]
    unknown = sorted(set(client) - set(CLIENT_KEYS) - {"python"})
    if unknown:
        module.fail_json(msg=f"client: unknown key(s) {unknown}; allowed: python, {', '.join(CLIENT_KEYS)}")
    cfg = client_config(
        master_address=p["master_address"],
        cluster_id=p["cluster_id"],
        key_prefix=p["key_prefix"],
        **{k: v for k, v in client.items() if k in CLIENT_KEYS and v is not None},
    )
    recorder = Recorder(
        run_dir=p["run_dir"],
        masters=p["masters"],
        etcd_endpoints=p["etcd_endpoints"],
        cluster_id=p["cluster_id"],
        client_cfg=cfg,
        client_python=client.get("python") or sys.executable,
        sample_interval_s=p["sample_interval_s"],
        hang_timeout_s=p["hang_timeout_s"],
    )
    try:
        recorder.start(p["ready_timeout_s"])
    except RuntimeError as exc:
        recorder.timeline.add({"kind": "recorder_failed", "error": str(exc)})
        recorder.timeline.close()
        module.fail_json(msg=str(exc), timeline=recorder.timeline_path)
    try:
        recorder.watch(p["stop_file"], p["max_s"])
    finally:
        summary = recorder.finish(p["verify_timeout_s"])
    stopped_by_file = os.path.exists(p["stop_file"])
    module.exit_json(changed=False, stopped_by_file=stopped_by_file, **summary)


if __name__ == "__main__":
    main()
