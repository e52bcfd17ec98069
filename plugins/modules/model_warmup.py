#!/usr/bin/python
"""Ansible module: copy and verify model weights into a node-local cache in one pass."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_warmup
short_description: Copy a model into a node-local cache and verify it against the release manifest
description:
  - Reads every file of the model once from an S3-compatible object store or a POSIX path (NFS, Alluxio FUSE),
    hashes it with sha256 while writing it to a temp name, fsyncs it, and renames it to its final name only
    once the hash matches the release (config.json, tokenizer.json, and the weights manifest recomputed
    from the per-file hashes).
  - Resumable and idempotent, through a verified record per file in C(DEST/.inferplane-warmup.json).
    C(changed) is true only when something was copied.
  - The engine is C(inferplane.node.warmup), the same code as C(inferplane warmup).
options:
  source: {type: str, required: true, description: "s3://BUCKET/PREFIX/ or an absolute POSIX path."}
  dest: {type: path, required: true, description: Node-local directory the engine loads.}
  model: {type: str, default: "", description: Model name, recorded in the state file.}
  release: {type: str, default: "", description: Release name, recorded in the state file.}
  config_sha256: {type: str, required: true, description: From the release manifest.}
  tokenizer_sha256: {type: str, required: true, description: From the release manifest.}
  weights_manifest_sha256: {type: str, required: true, description: From the release manifest.}
  s3_endpoint: {type: str, default: "", description: "S3 endpoint URL; default AWS_ENDPOINT_URL(_S3) on the node, or AWS."}
  s3_region: {type: str, default: "", description: Signing region.}
  s3_access_key: {type: str, default: "", description: Access key; default AWS_ACCESS_KEY_ID on the node.}
  s3_secret_key: {type: str, default: "", description: Secret key; default AWS_SECRET_ACCESS_KEY on the node.}
  s3_session_token: {type: str, default: "", description: Session token for temporary credentials.}
  s3_addressing: {type: str, default: auto, choices: [auto, path, virtual], description: Bucket in the path or in the host.}
  ca_file: {type: path, default: "", description: CA bundle for an HTTPS endpoint with a private CA.}
  workers: {type: int, default: 4, description: Files copied at once.}
  streams: {type: int, default: 0, description: "Concurrent reads per file; 0 = 4 for S3, 1 for POSIX."}
  chunk_mib: {type: int, default: 16, description: Buffer size in MiB.}
  max_mbps: {type: float, default: 0, description: "Cap reads at this many megabytes (10^6 bytes) per second; 0 = no cap."}
  preread: {type: bool, default: false, description: Read the final files once so the engine's load hits the page cache.}
  reserve_bytes: {type: int, default: 0, description: Bytes to leave free on the destination filesystem after the copy.}
  recheck: {type: bool, default: false, description: Rehash files already present instead of trusting their records.}
  exclude: {type: list, elements: str, default: [], description: fnmatch patterns of source paths not to copy.}
author: [inferplane]
"""

EXAMPLES = r"""
- name: Warm the release's model into the node-local cache
  model_warmup:
    source: s3://models/emu-tiny/
    dest: /models/emu-tiny
    model: emu-tiny
    release: local-2026.11.0
    config_sha256: "{{ model.config_sha256 }}"
    tokenizer_sha256: "{{ model.tokenizer_sha256 }}"
    weights_manifest_sha256: "{{ model.weights_manifest_sha256 }}"
    s3_endpoint: http://minio.minio:9000
    s3_access_key: "{{ vault_s3_access_key }}"
    s3_secret_key: "{{ vault_s3_secret_key }}"
"""

RETURN = r"""
copied: {description: Files copied by this run., returned: always, type: list, elements: str}
skipped: {description: Files already present with a matching verified record., returned: always, type: list, elements: str}
bytes_copied: {description: Bytes read, hashed and written by this run., returned: always, type: int}
seconds: {description: Wall time of the copy., returned: always, type: float}
gb_per_s: {description: bytes_copied / seconds in 10^9 bytes per second., returned: always, type: float}
weights_manifest_sha256: {description: Recomputed from the per-file hashes; equals the release's., returned: success, type: str}
state_file: {description: The per-file verified records on the node., returned: always, type: str}
kind: {description: "On failure: input, source, verify, space, busy or io.", returned: failure, type: str}
path: {description: On failure, the file the failure is about (when there is one)., returned: failure, type: str}
"""

# Ansible's module layout puts DOCUMENTATION/EXAMPLES/RETURN before the imports.
from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.warmup import Expected, Options, WarmupError, open_source, warm_up  # noqa: E402


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "source": {"type": "str", "required": True},
            "dest": {"type": "path", "required": True},
            "model": {"type": "str", "default": ""},
            "release": {"type": "str", "default": ""},
            "config_sha256": {"type": "str", "required": True},
            "tokenizer_sha256": {"type": "str", "required": True},
            "weights_manifest_sha256": {"type": "str", "required": True},
            "s3_endpoint": {"type": "str", "default": ""},
            "s3_region": {"type": "str", "default": ""},
            "s3_access_key": {"type": "str", "default": "", "no_log": True},
            "s3_secret_key": {"type": "str", "default": "", "no_log": True},
            "s3_session_token": {"type": "str", "default": "", "no_log": True},
            "s3_addressing": {"type": "str", "default": "auto", "choices": ["auto", "path", "virtual"]},
            "ca_file": {"type": "path", "default": ""},
            "workers": {"type": "int", "default": 4},
            "streams": {"type": "int", "default": 0},
            "chunk_mib": {"type": "int", "default": 16},
            "max_mbps": {"type": "float", "default": 0.0},
            "preread": {"type": "bool", "default": False},
            "reserve_bytes": {"type": "int", "default": 0},
            "recheck": {"type": "bool", "default": False},
            "exclude": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        source = open_source(
            p["source"],
            s3_endpoint=p["s3_endpoint"],
            s3_region=p["s3_region"],
            access_key=p["s3_access_key"],
            secret_key=p["s3_secret_key"],
            session_token=p["s3_session_token"],
            addressing=p["s3_addressing"],
            ca_file=p["ca_file"] or "",
        )
        options = Options(
            workers=p["workers"],
            streams=p["streams"],
            chunk_bytes=p["chunk_mib"] << 20,
            max_bytes_per_s=p["max_mbps"] * 1e6,
            preread=p["preread"] and not module.check_mode,
            reserve_bytes=p["reserve_bytes"],
            recheck=p["recheck"],
            check_only=module.check_mode,
            exclude=tuple(p["exclude"]),
        )
        expected = Expected(p["config_sha256"], p["tokenizer_sha256"], p["weights_manifest_sha256"])
        result = warm_up(source, p["dest"], expected, p["model"], p["release"], options)
    except WarmupError as exc:
        module.fail_json(msg=str(exc), kind=exc.kind, path=exc.path)
    except OSError as exc:
        module.fail_json(msg=f"{exc.filename or p['dest']}: {exc.strerror or exc}", kind="io", path=exc.filename or "")
    module.exit_json(**result.to_dict())


if __name__ == "__main__":
    main()
