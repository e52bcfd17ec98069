"""Pure builders: the command line, environment and config files of every local process.

Nothing here starts anything; :mod:`inferplane.local.platform` runs what these return. SMG's
argv comes from :func:`inferplane.gateway_args.smg_argv` and the alert rules from
:mod:`inferplane.observability.rules`, the same functions the Kubernetes builders use.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from inferplane.gateway_args import ControlPlaneKey, smg_argv
from inferplane.local.config import LocalPlatformConfig
from inferplane.local.layout import HOST, GroupSlot, Layout
from inferplane.local.state import Group, ProcKind

# Program -> what to install when it is missing.
INSTALL_HINTS = {
    "etcd": "the Debian package etcd-server (scripts/install-deps.sh, or `make deps`)",
    "prometheus": "the Debian package prometheus (scripts/install-deps.sh, or `make deps`)",
    "mooncake_master": "the Python package mooncake-transfer-engine-non-cuda into .venv (`make venv`)",
    "mooncake_http_metadata_server": "the Python package mooncake-transfer-engine-non-cuda into .venv (`make venv`)",
    "smg": "the Python package smg==1.13.0 into .venv (`make venv`)",
    "moto_server": 'the Python package "moto[server]" into .venv (`make venv`)',
}


class MissingBinary(Exception):
    def __init__(self, program: str) -> None:
        self.program = program
        super().__init__(f"{program}: not found in .venv/bin or on PATH; install {INSTALL_HINTS.get(program, 'it')}")


def binary(program: str) -> str:
    """The venv's copy first (the one `make venv` pinned), then PATH."""
    venv = Path(sys.executable).parent / program
    if venv.is_file():
        return str(venv)
    found = shutil.which(program)
    if not found:
        raise MissingBinary(program)
    return found


@dataclass(frozen=True)
class ProcSpec:
    name: str
    kind: ProcKind
    argv: list[str]
    ports: dict[str, int]
    health_url: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    # Written before the process starts: path -> content, or a writer (the alert rules' own).
    files: dict[str, str | Callable[[Path], None]] = field(default_factory=dict)


def etcd_member(layout: Layout, i: int, state_dir: Path, cluster_token: str) -> ProcSpec:
    name = f"etcd-{i}"
    client, peer = layout.etcd_client(i), layout.etcd_peer(i)
    initial = ",".join(f"etcd-{j}=http://{HOST}:{layout.etcd_peer(j)}" for j in range(layout.etcd_members))
    argv = [
        binary("etcd"),
        "--name",
        name,
        "--data-dir",
        str(state_dir / "etcd" / name),
        "--listen-client-urls",
        f"http://{HOST}:{client}",
        "--advertise-client-urls",
        f"http://{HOST}:{client}",
        "--listen-peer-urls",
        f"http://{HOST}:{peer}",
        "--initial-advertise-peer-urls",
        f"http://{HOST}:{peer}",
        "--initial-cluster",
        initial,
        # Unique per state dir: members of two local platforms can never join each other.
        "--initial-cluster-token",
        cluster_token,
        "--initial-cluster-state",
        "new",
    ]
    return ProcSpec(name, "etcd", argv, {"client": client, "peer": peer}, f"http://{HOST}:{client}/health")


def etcd_endpoints(layout: Layout) -> list[str]:
    return [f"{HOST}:{layout.etcd_client(i)}" for i in range(layout.etcd_members)]


def master_address(layout: Layout) -> str:
    """What store clients pass as master_server_addr to find the current leader."""
    return "etcd://" + ";".join(etcd_endpoints(layout))


def mooncake_master(layout: Layout, i: int, cfg: LocalPlatformConfig) -> ProcSpec:
    rpc, metrics = layout.master_rpc(i), layout.master_metrics(i)
    argv = [
        binary("mooncake_master"),
        "--enable_ha=true",
        "--ha_backend_type=etcd",
        "--ha_backend_connstring=" + ";".join(etcd_endpoints(layout)),
        "--enable_oplog=true",  # without it a failover loses every key (measured)
        f"--cluster_id={cfg.mooncake.cluster_id}",
        f"--rpc_address={HOST}",
        f"--rpc_port={rpc}",
        f"--metrics_host={HOST}",
        f"--metrics_port={metrics}",
    ]
    return ProcSpec(f"mooncake-master-{i}", "mooncake-master", argv, {"rpc": rpc, "metrics": metrics}, f"http://{HOST}:{metrics}/health")


def metadata_url(layout: Layout) -> str:
    return f"http://{HOST}:{layout.metadata}/metadata" if layout.metadata_server else "P2PHANDSHAKE"


def mooncake_metadata(layout: Layout) -> ProcSpec:
    port = layout.metadata
    argv = [binary("mooncake_http_metadata_server"), "--host", HOST, "--port", str(port), "--log-level", "WARNING"]
    # No /health route on the Python server: a 404 for an unknown key proves it answers.
    return ProcSpec("mooncake-metadata", "mooncake-metadata", argv, {"http": port}, f"http://{HOST}:{port}/metadata?key=inferplane-probe")


def s3(layout: Layout) -> ProcSpec:
    port = layout.s3
    return ProcSpec("s3", "s3", [binary("moto_server"), "-H", HOST, "-p", str(port)], {"http": port}, f"http://{HOST}:{port}/")


def engine(slot: GroupSlot, group: Group, layout: Layout, cfg: LocalPlatformConfig, encoder_urls: list[str]) -> ProcSpec:
    argv = [
        sys.executable,
        "-m",
        "inferplane.cli",
        "emulator",
        "--role",
        slot.role,
        "--host",
        HOST,
        "--port",
        str(slot.port),
    ]
    if slot.bootstrap_port:
        argv += ["--bootstrap-port", str(slot.bootstrap_port)]
    argv += [
        "--release",
        group.release,
        "--model",
        group.model,
        "--engine-version",
        group.version,
        "--mooncake-master",
        master_address(layout),
        "--mooncake-metadata",
        metadata_url(layout),
    ]
    if slot.role == "prefill" and encoder_urls:
        argv += ["--encoder-urls", *encoder_urls]
    argv += cfg.emulator.argv()
    ports = {"http": slot.port} | ({"bootstrap": slot.bootstrap_port} if slot.bootstrap_port else {})
    # The store client takes its cluster namespace from the environment, not from an argument.
    env = {"MC_STORE_CLUSTER_ID": cfg.mooncake.cluster_id}
    return ProcSpec(slot.name, "engine", argv, ports, f"{slot.url}/health", env)


def smg(
    layout: Layout,
    cfg: LocalPlatformConfig,
    admin_key: str | None,
    *,
    name: str = "smg",
    ports: tuple[int, int] | None = None,
    groups: Sequence[GroupSlot] | None = None,
) -> ProcSpec:
    """The platform's gateway, or (``name``, ``ports``, ``groups``) an extra one for another set of groups."""
    slots = layout.groups if groups is None else groups
    prefills = [(s.url, s.bootstrap_port) for s in slots if s.role == "prefill"]
    decodes = [s.url for s in slots if s.role == "decode"]
    port, metrics_port = ports or (layout.smg, layout.smg_metrics)
    keys = [ControlPlaneKey("local-admin", "LocalAdmin", "admin", admin_key)] if admin_key else []
    argv = smg_argv(
        cfg.gateway,
        prefills,
        decodes,
        host=HOST,
        port=port,
        metrics_host=HOST,
        metrics_port=metrics_port,
        control_plane_keys=keys,
        worker_startup_timeout_secs=cfg.startup_timeout_seconds,
        # Engines are up before SMG starts; a slow one is retried every second, not every 30.
        worker_startup_check_interval_secs=1,
        program=binary("smg"),
    )
    return ProcSpec(name, "smg", argv, {"http": port, "metrics": metrics_port}, f"http://{HOST}:{port}/liveness")


def front_targets(weights: dict[str, int], urls: dict[str, str]) -> str:
    """The front's targets file: gateway name -> {url, weight}."""
    return (
        json.dumps({"targets": {name: {"url": urls[name], "weight": weight} for name, weight in sorted(weights.items())}}, indent=2) + "\n"
    )


def front(layout: Layout, targets_file: Path, targets: str) -> ProcSpec:
    argv = [sys.executable, "-m", "inferplane.cli", "local", "front", "serve"]
    argv += ["--host", HOST, "--port", str(layout.front), "--targets-file", str(targets_file)]
    files: dict[str, str | Callable[[Path], None]] = {str(targets_file): targets}
    return ProcSpec("front", "front", argv, {"http": layout.front}, f"http://{HOST}:{layout.front}/front/health", files=files)


_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_seconds(text: str) -> float:
    """A Prometheus duration ('90s', '1m', '1h30m') in seconds."""
    total, number = 0.0, ""
    i = 0
    while i < len(text):
        c = text[i]
        if c.isdigit():
            number += c
            i += 1
            continue
        unit = "ms" if text.startswith("ms", i) else c
        if unit not in _UNIT_SECONDS or not number:
            raise ValueError(f"not a Prometheus duration: {text!r}")
        total += int(number) * _UNIT_SECONDS[unit]
        number = ""
        i += len(unit)
    if number or not text:
        raise ValueError(f"not a Prometheus duration (unit missing): {text!r}")
    return total


def cap_for(doc: dict[str, Any], max_for: str) -> dict[str, Any]:
    """Shorten every rule's ``for`` to at most ``max_for``: the expressions stay the ones production
    runs, only the waiting is compressed so a drill shows the alert firing within seconds."""
    limit = duration_seconds(max_for)
    for group in doc.get("groups", []):
        for rule in group.get("rules", []):
            if "for" in rule and duration_seconds(str(rule["for"])) > limit:
                rule["for"] = max_for
    return doc


def prometheus_config(layout: Layout, cfg: LocalPlatformConfig, rules_file: Path) -> dict[str, Any]:
    """Scrape jobs named as the Kubernetes ServiceMonitors name them, so the same rules match."""
    obs = cfg.observability
    engines = [{"targets": [f"{HOST}:{s.port}"], "labels": {"role": s.role, "group": s.name, "pod": s.name}} for s in layout.groups]
    masters = [
        {"targets": [f"{HOST}:{layout.master_metrics(i)}"], "labels": {"pod": f"mooncake-master-{i}"}} for i in range(layout.masters)
    ]
    etcd = [{"targets": [f"{HOST}:{layout.etcd_client(i)}"], "labels": {"pod": f"etcd-{i}"}} for i in range(layout.etcd_members)]
    return {
        "global": {
            "scrape_interval": obs.scrape_interval,
            "scrape_timeout": obs.scrape_interval,
            "evaluation_interval": obs.evaluation_interval,
        },
        "rule_files": [str(rules_file)],
        "scrape_configs": [
            {"job_name": "sglang", "static_configs": engines},
            {"job_name": "smg", "static_configs": [{"targets": [f"{HOST}:{layout.smg_metrics}"], "labels": {"pod": "smg"}}]},
            {"job_name": "mooncake-master", "static_configs": masters},
            {"job_name": "etcd", "static_configs": etcd},
        ],
    }


def prometheus(layout: Layout, cfg: LocalPlatformConfig, state_dir: Path) -> ProcSpec:
    obs = cfg.observability

    def write_rules(path: Path) -> None:
        from inferplane.observability.rules import write_rules_file

        # KV moves over TCP here, so the RDMA-only "slow means TCP fallback" alert is left out,
        # exactly as on a TCP stack.
        write_rules_file(path, obs.thresholds, kv_over_rdma=False)
        path.write_text(yaml.safe_dump(cap_for(yaml.safe_load(path.read_text()), obs.max_for), sort_keys=False, width=1000))

    pdir = state_dir / "prometheus"
    config_file, rules_file = pdir / "prometheus.yml", pdir / "rules.yml"
    argv = [
        binary("prometheus"),
        f"--config.file={config_file}",
        f"--storage.tsdb.path={pdir / 'data'}",
        f"--web.listen-address={HOST}:{layout.prometheus}",
        "--storage.tsdb.retention.time=1d",
        "--web.enable-lifecycle",
    ]
    files: dict[str, str | Callable[[Path], None]] = {
        str(config_file): yaml.safe_dump(prometheus_config(layout, cfg, rules_file), sort_keys=False),
        str(rules_file): write_rules,
    }
    return ProcSpec(
        "prometheus", "prometheus", argv, {"http": layout.prometheus}, f"http://{HOST}:{layout.prometheus}/-/ready", files=files
    )
