"""ModelGateway: SMG 1.13 in PD mode in front of the pools.

One ``--prefill URL BOOTSTRAP_PORT`` per prefill group leader and one ``--decode URL`` per decode
group leader, addressed by their LWS names (``<role>-<i>.<role>.<ns>``, stable across group
recreation), policies, health checks, circuit breaker, retries and timeouts from the stack: the
argv is :func:`inferplane.gateway_args.smg_argv`'s, the same the local platform runs. EPD stays PD
here (SMG's own EPD mode needs gRPC workers): encoders sit behind the language-only prefill.

The control-plane admin key (worker add/remove/drain) comes from the Secret
``gateway.api_key_secret`` (key ``admin-key``) through an env var the kubelet expands into the argv,
so neither the rendered YAML nor the pod spec holds it.
"""

from __future__ import annotations

from typing import Any

from inferplane import endpoints
from inferplane.builders.common import labels, metadata, non_root_pod_security, restricted_container_security, selector, service_account
from inferplane.catalog import BuildContext, Built
from inferplane.errors import ConfigError
from inferplane.gateway_args import ControlPlaneKey, smg_argv
from inferplane.spec import PlatformSpec

NAME = endpoints.GATEWAY_APP
COMPONENT = "gateway"
ADMIN_KEY_ENV = "SMG_CONTROL_PLANE_ADMIN_KEY"
ADMIN_KEY_SECRET_KEY = "admin-key"


def build(ctx: BuildContext) -> Built:
    spec = ctx.spec
    lbl = labels(NAME, COMPONENT)
    return Built(
        objects=[
            service_account(NAME, spec.namespace, lbl),
            deployment(spec, ctx.release.runtime.smg_image),
            service(spec),
        ]
    )


def gateway_argv(spec: PlatformSpec) -> list[str]:
    problems = [
        f"pools.{role}.groups: 0; the gateway needs at least one {role} group to route to"
        for role, pool in (("prefill", spec.pools.prefill), ("decode", spec.pools.decode))
        if pool.groups == 0
    ]
    if problems:
        raise ConfigError("gateway", problems)
    try:
        return smg_argv(
            spec.gateway,
            endpoints.prefill_workers(spec),
            endpoints.decode_workers(spec),
            host="0.0.0.0",
            metrics_host="0.0.0.0",
            control_plane_keys=[ControlPlaneKey("inferplane-admin", "inferplane", "admin", f"$({ADMIN_KEY_ENV})")],
            # SMG drops a startup worker it cannot reach in this time: cover the slowest weight load.
            worker_startup_timeout_secs=max(pool.startup_timeout_seconds for _, pool in spec.pools.items()),
            log_json=True,
        )
    except ValueError as exc:
        raise ConfigError("gateway", [str(exc)]) from None


def deployment(spec: PlatformSpec, image: str) -> dict[str, Any]:
    gw = spec.gateway
    argv = gateway_argv(spec)
    container = {
        "name": "smg",
        "image": image,
        "command": argv[:1],
        "args": argv[1:],
        "env": [
            {
                "name": ADMIN_KEY_ENV,
                "valueFrom": {"secretKeyRef": {"name": gw.api_key_secret, "key": ADMIN_KEY_SECRET_KEY, "optional": False}},
            }
        ],
        "ports": [
            {"name": "http", "containerPort": gw.port, "protocol": "TCP"},
            {"name": "metrics", "containerPort": gw.metrics_port, "protocol": "TCP"},
        ],
        # /liveness never calls a worker; /readiness is 503 until a prefill and a decode are healthy,
        # and from the first moment of SIGTERM, so the Service stops sending new clients at once.
        "livenessProbe": {"httpGet": {"path": "/liveness", "port": "http"}, "periodSeconds": 10, "failureThreshold": 3},
        "readinessProbe": {"httpGet": {"path": "/readiness", "port": "http"}, "periodSeconds": 5, "failureThreshold": 2},
        "resources": {"requests": {"cpu": gw.cpu, "memory": gw.memory}, "limits": {"memory": gw.memory}},
        "securityContext": restricted_container_security(),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(NAME, spec.namespace, labels(NAME, COMPONENT)),
        "spec": {
            "replicas": gw.replicas,
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "selector": {"matchLabels": selector(NAME, COMPONENT)},
            "template": {
                "metadata": {"labels": labels(NAME, COMPONENT)},
                "spec": {
                    "serviceAccountName": NAME,
                    "automountServiceAccountToken": False,
                    "securityContext": non_root_pod_security(),
                    # In-flight requests finish after SIGTERM (SMG keeps proxying); bound by the request timeout.
                    "terminationGracePeriodSeconds": min(gw.request_timeout_secs, 3600),
                    "topologySpreadConstraints": [
                        {
                            "maxSkew": 1,
                            "topologyKey": "kubernetes.io/hostname",
                            "whenUnsatisfiable": "ScheduleAnyway",
                            "labelSelector": {"matchLabels": selector(NAME, COMPONENT)},
                        }
                    ],
                    "containers": [container],
                },
            },
        },
    }


def service(spec: PlatformSpec) -> dict[str, Any]:
    gw = spec.gateway
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(NAME, spec.namespace, labels(NAME, COMPONENT)),
        "spec": {
            "selector": selector(NAME, COMPONENT),
            "ports": [
                {"name": "http", "port": gw.port, "targetPort": "http", "protocol": "TCP"},
                {"name": "metrics", "port": gw.metrics_port, "targetPort": "metrics", "protocol": "TCP"},
            ],
        },
    }
