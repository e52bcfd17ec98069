"""Pieces the workload builders share: labels, service accounts, security contexts, the monitoring namespace."""

from __future__ import annotations

from typing import Any

from inferplane.builders.addons import DASHBOARD_LABEL, MONITORING_NAMESPACE, PART_OF, labels

__all__ = [
    "DASHBOARD_LABEL",
    "MONITORING_NAMESPACE",
    "PART_OF",
    "labels",
    "metadata",
    "non_root_pod_security",
    "restricted_container_security",
    "selector",
    "service_account",
]

"""Where kube-prometheus-stack runs (inferplane/builders/observability.py); NetworkPolicies admit scrapes from it."""


def selector(name: str, component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/component": component}


def metadata(name: str, namespace: str, lbl: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(lbl)}
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def service_account(name: str, namespace: str, lbl: dict[str, str]) -> dict[str, Any]:
    """A workload identity with no API token: none of our workloads talks to the Kubernetes API
    (SMG gets its workers on the command line, not through discovery)."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(name, namespace, lbl),
        "automountServiceAccountToken": False,
    }


def non_root_pod_security(uid: int = 65532) -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "fsGroup": uid,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def restricted_container_security() -> dict[str, Any]:
    """Pod Security "restricted" for a container: what the gateway and the Mooncake masters run with."""
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
