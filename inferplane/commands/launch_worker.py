"""`inferplane launch-worker`: the engine pods' entry point; execs `sglang serve` with the role's flags.

In a pod: the worker config comes from INFERPLANE_WORKER_CONFIG (set by the pool's pod template)
and the pod's facts from ROLE, MODEL_PATH, NODE_RANK, NNODES, DIST_INIT_ADDR, RDMA_DEVICE.
For review: `--stack prod --role decode --node-rank 1 --dry-run` builds the same config from the
stack file and fills in the environment an LWS pod of group `--group` would have.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dry-run", action="store_true", help="print the argv as JSON instead of exec'ing it")
    parser.add_argument("--stack", help="build the worker config from stacks/Pulumi.<stack>.yaml instead of INFERPLANE_WORKER_CONFIG")
    parser.add_argument("--role", choices=("prefill", "decode", "encoder"), help="with --stack: the pool")
    parser.add_argument("--group", type=int, default=0, help="with --stack: LWS group index for the sample environment")
    parser.add_argument("--node-rank", type=int, default=0, help="with --stack: pod index in the group for the sample environment")


def run(args: argparse.Namespace) -> int:
    from inferplane.errors import ConfigError
    from inferplane.launch_worker import ENV_CONFIG, ENV_KEYS, argv_for, parse_config, sample_env, worker_config

    env = dict(os.environ)
    if args.stack:
        if not args.role:
            raise ConfigError("launch-worker", ["--role: required with --stack (prefill, decode or encoder)"])
        from inferplane.spec import load_stack_and_release

        cfg_stack, release = load_stack_and_release(args.stack)
        cfg = worker_config(args.role, cfg_stack.platform, release)
        sample = sample_env(cfg, node_rank=args.node_rank, group=args.group, namespace=cfg_stack.platform.namespace)
        # Variables set in the shell win over the sample, so a reviewer can try a bad one.
        env = {**sample, **{k: v for k, v in os.environ.items() if k in ENV_KEYS}}
    else:
        cfg = parse_config(os.environ.get(ENV_CONFIG))
    argv = argv_for(cfg, env)
    if args.dry_run:
        print(json.dumps(argv))
        return 0
    if shutil.which(argv[0]) is None:
        print(f"launch-worker: `{argv[0]}` is not on PATH; the engine image must ship SGLang {cfg.sglang_version}", file=sys.stderr)
        return 2
    sys.stdout.flush()
    os.execvp(argv[0], argv)
    return 0  # not reached: execvp replaces this process
