"""Observability: kube-prometheus-stack, our scrape monitors, alert rules and the six dashboards.

- kube-prometheus-stack (Helm release named ``observability.release_label``, namespace
  ``monitoring``): it selects monitors and rules labelled ``release: <that name>``, and its Grafana
  sidecar loads ConfigMaps labelled ``grafana_dashboard: "1"`` from every namespace.
- Monitors set ``job`` to the names the rules select on (inferplane/observability/metrics.py
  SCRAPE_JOBS): a PodMonitor ``sglang`` on engine leaders only (workers serve no HTTP), and
  ServiceMonitors ``smg``, ``mooncake-master`` and, with the in-cluster etcd, ``etcd``. DCGM is
  scraped by the GPU operator's own ServiceMonitor (ClusterAddons, ``dcgmExporter.serviceMonitor``).
- The PrometheusRule's groups are inferplane/observability/rules.py's, the same file the local
  platform's Prometheus loads.
"""

from __future__ import annotations

import json
from typing import Any

from inferplane import endpoints
from inferplane.builders.addons import ETCD_NAME, in_cluster_etcd
from inferplane.builders.common import DASHBOARD_LABEL, MONITORING_NAMESPACE, labels, metadata
from inferplane.builders.pools import LWS_WORKER_INDEX_LABEL
from inferplane.catalog import BuildContext, Built
from inferplane.observability.dashboards import DASHBOARDS
from inferplane.observability.rules import rule_groups
from inferplane.spec import PlatformSpec

COMPONENT = "observability"


def build(ctx: BuildContext) -> Built:
    spec = ctx.spec
    # The monitoring namespace and kube-prometheus-stack are cluster add-ons: the GPU operator's
    # DCGM ServiceMonitor needs the monitoring CRDs before anything here exists.
    objects: list[dict[str, Any]] = monitors(spec)
    objects.append(prometheus_rule(spec))
    objects += dashboard_config_maps(spec)
    return Built(objects=objects)


def _job(name: str) -> dict[str, Any]:
    return {"action": "replace", "targetLabel": "job", "replacement": name}


def _monitor_meta(spec: PlatformSpec, name: str) -> dict[str, Any]:
    return metadata(name, spec.namespace, {**labels(name, COMPONENT), "release": spec.observability.release_label})


def monitors(spec: PlatformSpec) -> list[dict[str, Any]]:
    interval = spec.observability.scrape_interval
    out: list[dict[str, Any]] = [
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PodMonitor",
            "metadata": _monitor_meta(spec, "sglang"),
            "spec": {
                "selector": {"matchLabels": {"app.kubernetes.io/name": endpoints.ENGINE_APP, LWS_WORKER_INDEX_LABEL: "0"}},
                "namespaceSelector": {"matchNames": [spec.namespace]},
                "podMetricsEndpoints": [
                    {
                        "port": "http",
                        "path": "/metrics",
                        "interval": interval,
                        "relabelings": [
                            _job("sglang"),
                            {
                                "action": "replace",
                                "sourceLabels": ["__meta_kubernetes_pod_label_inferplane_io_role"],
                                "targetLabel": "role",
                            },
                            {
                                "action": "replace",
                                "sourceLabels": ["__meta_kubernetes_pod_label_leaderworkerset_sigs_k8s_io_group_index"],
                                "targetLabel": "group",
                            },
                        ],
                    }
                ],
            },
        }
    ]
    services = [
        ("smg", {"app.kubernetes.io/name": endpoints.GATEWAY_APP}),
        ("mooncake-master", {"app.kubernetes.io/name": endpoints.MOONCAKE_MASTER}),
    ]
    if in_cluster_etcd(spec):
        services.append(("etcd", {"app.kubernetes.io/name": ETCD_NAME}))
    for job, match in services:
        out.append(
            {
                "apiVersion": "monitoring.coreos.com/v1",
                "kind": "ServiceMonitor",
                "metadata": _monitor_meta(spec, job),
                "spec": {
                    "selector": {"matchLabels": match},
                    "namespaceSelector": {"matchNames": [spec.namespace]},
                    "endpoints": [{"port": "metrics", "path": "/metrics", "interval": interval, "relabelings": [_job(job)]}],
                },
            }
        )
    return out


def prometheus_rule(spec: PlatformSpec) -> dict[str, Any]:
    groups = rule_groups(spec.observability.thresholds, kv_over_rdma=spec.mooncake.protocol == "rdma")
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": _monitor_meta(spec, "inferplane-alerts"),
        "spec": {"groups": groups},
    }


def dashboard_config_maps(spec: PlatformSpec) -> list[dict[str, Any]]:
    out = []
    for dash in DASHBOARDS:
        name = f"dashboard-{spec.namespace}-{dash.slug}"
        out.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": metadata(name, MONITORING_NAMESPACE, {**labels("dashboards", COMPONENT), DASHBOARD_LABEL: "1"}),
                "data": {f"{dash.slug}.json": json.dumps(dash.model(), indent=2, sort_keys=True)},
            }
        )
    return out
