"""Policies: who may talk to whom, how much may be disrupted at once, what runbooks may change.

NetworkPolicies (ingress; the namespace denies by default):
- engines: their HTTP port only from the gateway and Prometheus (metrics share the port), plus
  the language-only prefill to the encoders (EPD ``--encoder-urls``); every other port (KV
  bootstrap, transfer engine, torch.distributed/NCCL rendezvous) only from other engines;
- Mooncake masters: RPC and metadata only from engines, metrics from Prometheus;
- etcd (in-cluster): clients only from Mooncake (the masters, and the engines' store clients when
  the HiCache store is on), peers from etcd, metrics from Prometheus;
- gateway: its HTTP port from anywhere (it is the front door), metrics from Prometheus.
kubelet probes are not subject to NetworkPolicy. Runbooks reach an engine directly through
``kubectl port-forward`` or go through the gateway.

PDBs: a pool may lose ``groups - min_groups`` groups to voluntary disruption at once (any pod of
a group takes the whole group down, ``RecreateGroupOnPodRestart``); with ``groups == min_groups``
nothing may be evicted and node maintenance goes through the upgrade runbook.

RBAC: workloads have token-less service accounts (their builders); the runbooks' identity
``inferplane-runbooks`` may read pods, patch the LWS rollout partition and delete engine pods, in
this namespace only.
"""

from __future__ import annotations

from typing import Any

from inferplane import endpoints
from inferplane.builders.addons import ETCD_CLIENT_PORT, ETCD_METRICS_PORT, ETCD_NAME, ETCD_PEER_PORT, in_cluster_etcd
from inferplane.builders.common import MONITORING_NAMESPACE, labels, metadata, selector, service_account
from inferplane.builders.mooncake import COMPONENT as MOONCAKE_COMPONENT
from inferplane.builders.mooncake import ports as mooncake_ports
from inferplane.catalog import BuildContext, Built
from inferplane.spec import MooncakeHa, PlatformSpec

COMPONENT = "policies"
RUNBOOK_IDENTITY = "inferplane-runbooks"


def build(ctx: BuildContext) -> Built:
    spec = ctx.spec
    objects = network_policies(spec) + disruption_budgets(spec) + runbook_rbac(spec)
    return Built(objects=objects)


def _np(spec: PlatformSpec, name: str, pod_selector: dict[str, str], ingress: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(name, spec.namespace, labels(name, COMPONENT)),
        "spec": {"podSelector": {"matchLabels": pod_selector}, "policyTypes": ["Ingress"], "ingress": ingress},
    }


def _pods(match: dict[str, str]) -> dict[str, Any]:
    return {"podSelector": {"matchLabels": match}}


_PROMETHEUS = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": MONITORING_NAMESPACE}}}
_ENGINES = {"app.kubernetes.io/name": endpoints.ENGINE_APP}
_GATEWAY = {"app.kubernetes.io/name": endpoints.GATEWAY_APP}
_MOONCAKE = {"app.kubernetes.io/name": endpoints.MOONCAKE_MASTER}


def _tcp(port: int, end_port: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"protocol": "TCP", "port": port}
    if end_port is not None and end_port > port:
        out["endPort"] = end_port
    return out


def _all_ports_except(excluded: set[int]) -> list[dict[str, Any]]:
    """TCP and UDP ranges covering 1..65535 minus ``excluded`` (NetworkPolicy has no 'except port')."""
    ranges: list[tuple[int, int]] = []
    start = 1
    for port in sorted(excluded):
        if port > start:
            ranges.append((start, port - 1))
        start = port + 1
    if start <= 65535:
        ranges.append((start, 65535))
    out = []
    for lo, hi in ranges:
        for proto in ("TCP", "UDP"):
            entry: dict[str, Any] = {"protocol": proto, "port": lo}
            if hi > lo:
                entry["endPort"] = hi
            out.append(entry)
    return out


def network_policies(spec: PlatformSpec) -> list[dict[str, Any]]:
    http_ports = {pool.port for _, pool in spec.pools.items()}
    policies = [
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": metadata("default-deny-ingress", spec.namespace, labels("default-deny-ingress", COMPONENT)),
            "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
        },
        _np(
            spec,
            "sglang-engines",
            _ENGINES,
            [
                # The HTTP API (and /metrics on the same port): the gateway and Prometheus.
                {"from": [_pods(_GATEWAY), _PROMETHEUS], "ports": [_tcp(p) for p in sorted(http_ports)]},
                # Everything else an engine listens on is for other engines only.
                {"from": [_pods(_ENGINES)], "ports": _all_ports_except(http_ports)},
            ],
        ),
    ]
    encoder = spec.pools.encoder
    if encoder is not None:
        policies.append(
            _np(
                spec,
                "sglang-encoders-from-prefill",
                {**_ENGINES, endpoints.ROLE_LABEL: "encoder"},
                [{"from": [_pods({**_ENGINES, endpoints.ROLE_LABEL: "prefill"})], "ports": [_tcp(encoder.port)]}],
            )
        )
    mc_ports = dict(mooncake_ports(spec))
    policies.append(
        _np(
            spec,
            endpoints.MOONCAKE_MASTER,
            _MOONCAKE,
            [
                {"from": [_pods(_ENGINES)], "ports": [_tcp(p) for n, p in mc_ports.items() if n != "metrics"]},
                {"from": [_PROMETHEUS], "ports": [_tcp(mc_ports["metrics"])]},
            ],
        )
    )
    policies.append(
        _np(
            spec,
            endpoints.GATEWAY_APP,
            _GATEWAY,
            [
                {"ports": [_tcp(spec.gateway.port)]},
                {"from": [_PROMETHEUS], "ports": [_tcp(spec.gateway.metrics_port)]},
            ],
        )
    )
    if in_cluster_etcd(spec):
        etcd_pods = {"app.kubernetes.io/name": ETCD_NAME}
        clients = [_pods(_MOONCAKE)]
        store = spec.mooncake.store
        if store is not None and store.enabled:
            # HiCache's Mooncake store clients (in the engines) look the leader up in etcd (MOONCAKE_MASTER=etcd://...).
            clients.append(_pods(_ENGINES))
        policies.append(
            _np(
                spec,
                ETCD_NAME,
                etcd_pods,
                [
                    {"from": clients, "ports": [_tcp(ETCD_CLIENT_PORT)]},
                    {"from": [_pods(etcd_pods)], "ports": [_tcp(ETCD_CLIENT_PORT), _tcp(ETCD_PEER_PORT)]},
                    {"from": [_PROMETHEUS], "ports": [_tcp(ETCD_METRICS_PORT)]},
                ],
            )
        )
    return policies


def _pdb(spec: PlatformSpec, name: str, match: dict[str, str], max_unavailable: int) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(name, spec.namespace, labels(name, COMPONENT)),
        "spec": {"maxUnavailable": max_unavailable, "selector": {"matchLabels": match}},
    }


def disruption_budgets(spec: PlatformSpec) -> list[dict[str, Any]]:
    out = []
    for role, pool in spec.pools.items():
        if pool.groups == 0:
            continue
        spare_groups = pool.groups - pool.min_groups
        out.append(
            _pdb(spec, f"{endpoints.pool_name(role)}-groups", {**_ENGINES, endpoints.ROLE_LABEL: role}, spare_groups * pool.nodes_per_group)
        )
    if isinstance(spec.mooncake, MooncakeHa):
        # One master at a time: the other keeps (or takes over) the leadership.
        out.append(_pdb(spec, endpoints.MOONCAKE_MASTER, selector(endpoints.MOONCAKE_MASTER, MOONCAKE_COMPONENT), 1))
    if spec.gateway.replicas > 1:
        out.append(_pdb(spec, endpoints.GATEWAY_APP, _GATEWAY, 1))
    return out


def runbook_rbac(spec: PlatformSpec) -> list[dict[str, Any]]:
    ns = spec.namespace
    lbl = labels(RUNBOOK_IDENTITY, COMPONENT)
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": metadata(RUNBOOK_IDENTITY, ns, lbl),
        "rules": [
            # Observe: pods, their logs and events, services and endpoints.
            {
                "apiGroups": [""],
                "resources": ["pods", "pods/log", "services", "endpoints", "events", "configmaps"],
                "verbs": ["get", "list", "watch"],
            },
            # Upgrade: walk the LWS rollout partition down group by group; recreate a stuck group.
            {"apiGroups": ["leaderworkerset.x-k8s.io"], "resources": ["leaderworkersets"], "verbs": ["get", "list", "watch", "patch"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]},
            # Reach an engine or a master directly (drain checks, KV-transfer test, failover drill).
            {"apiGroups": [""], "resources": ["pods/portforward"], "verbs": ["create"]},
            {"apiGroups": ["apps"], "resources": ["statefulsets", "deployments"], "verbs": ["get", "list", "watch"]},
            # One rollout per pool at a time: the upgrade and switch runbooks hold a Lease per pool.
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
            },
            # Blue/green (playbooks/switch-model.yml, ADR 0090): a temporary set of LWS, headless Services and
            # an SMG Deployment; the gateway Service's selector moves clients, the gateway left behind restarts.
            {"apiGroups": ["leaderworkerset.x-k8s.io"], "resources": ["leaderworkersets"], "verbs": ["create", "delete"]},
            {"apiGroups": [""], "resources": ["services"], "verbs": ["create", "patch", "delete"]},
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["create", "patch", "delete"]},
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": metadata(RUNBOOK_IDENTITY, ns, lbl),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": RUNBOOK_IDENTITY},
        "subjects": [{"kind": "ServiceAccount", "name": RUNBOOK_IDENTITY, "namespace": ns}],
    }
    sa = service_account(RUNBOOK_IDENTITY, ns, lbl)
    # Runbooks authenticate with a token they request for this account (kubectl create token); none is mounted.
    return [sa, role, binding]
