"""InferencePools: one LeaderWorkerSet per role (encoder, prefill, decode).

Sizing knobs (``pools.<role>`` in the stack): ``groups`` = LWS replicas (independent serving
groups, each one SMG worker), ``nodes_per_group`` = LWS size (one pod per node), ``gpus_per_node``,
``tp``/``dp``/``ep``/``dp_attention`` (validated against the group's GPUs by the spec), and
``min_groups`` (the floor the PDB and the upgrade runbook keep serving).

Each group is gang-scheduled by Volcano (``schedulerName: volcano``, the queue annotation; LWS
creates one PodGroup per group) and recreated whole when any pod restarts
(``RecreateGroupOnPodRestart``): a multi-node engine cannot survive losing a rank. Pods run
``inferplane launch-worker``, which execs ``sglang serve`` with the role's flags from the
WorkerConfig in the pod template (inferplane/launch_worker.py). Only the leader (worker index 0)
serves HTTP, so only the leader template has ports and HTTP probes.

``spec.rolloutStrategy.rollingUpdateConfiguration.partition`` belongs to the upgrade runbook
(it walks it down group by group); the RUNBOOK_OWNED_FIELDS annotation makes Pulumi ignore it.
"""

from __future__ import annotations

from typing import Any

from inferplane import endpoints
from inferplane.builders.addons import GPU_NODE_LABEL, GPU_TOLERATION
from inferplane.builders.common import labels, metadata, service_account
from inferplane.catalog import RUNBOOK_OWNED_FIELDS, BuildContext, Built
from inferplane.errors import ConfigError
from inferplane.launch_worker import ENV_CONFIG, WorkerConfig, pod_env, worker_config
from inferplane.manifest import ReleaseManifest
from inferplane.spec import PlatformSpec, Pool

ENGINE_SERVICE_ACCOUNT = "sglang-engine"
PARTITION_PATH = "spec.rolloutStrategy.rollingUpdateConfiguration.partition"
QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_GROUP_KEY_LABEL = "leaderworkerset.sigs.k8s.io/group-key"
# Written by preflight (inferplane/node/report.py, prefix inferplane.io): a failing node gets no workers.
PREFLIGHT_LABEL = "inferplane.io/preflight"
PREFLIGHT_OK = ("pass", "warn")
RACK_LABEL = "inferplane.io/rack"


def build(ctx: BuildContext) -> Built:
    spec, release = ctx.spec, ctx.release
    problems = sorted(
        {p for role, _ in spec.pools.items() for p in _model_path_problems(spec, release.effective(role).model_name, release)}
    )
    if problems:
        raise ConfigError(f"release {release.release}", problems)
    objects: list[dict[str, Any]] = [service_account(ENGINE_SERVICE_ACCOUNT, spec.namespace, labels(endpoints.ENGINE_APP, "engine"))]
    for role, pool in spec.pools.items():
        cfg = worker_config(role, spec, release)
        objects.append(headless_service(spec, role, pool))
        objects.append(leader_worker_set(spec, role, pool, cfg, release.effective(role).sglang_image))
    return Built(objects=objects)


def _model_path_problems(spec: PlatformSpec, model_name: str, release: ReleaseManifest) -> list[str]:
    path = release.models[model_name].path
    mount = spec.model_cache.mount_path.rstrip("/")
    if not path.startswith(mount + "/"):
        return [f"models.{model_name}.path: '{path}' is not under the stack's model_cache.mount_path {mount}; the pods only see {mount}"]
    return []


def pool_labels(role: str) -> dict[str, str]:
    return {**labels(endpoints.ENGINE_APP, role), endpoints.ROLE_LABEL: role}


def ports(role: str, pool: Pool) -> list[dict[str, Any]]:
    out = [{"name": "http", "containerPort": pool.port, "protocol": "TCP"}]
    if role == "prefill":
        out.append({"name": "bootstrap", "containerPort": pool.bootstrap_port, "protocol": "TCP"})
    return out


def headless_service(spec: PlatformSpec, role: str, pool: Pool) -> dict[str, Any]:
    """``<role>``: the subdomain that gives group leaders their names (``<role>-<i>.<role>.<ns>``).

    LWS would create it without ports if absent; owning it keeps it reviewable and gives the ports names.
    """
    name = endpoints.pool_name(role)
    service_ports = [{"name": p["name"], "port": p["containerPort"], "targetPort": p["name"], "protocol": "TCP"} for p in ports(role, pool)]
    service_ports.append({"name": "dist", "port": endpoints.DIST_INIT_PORT, "targetPort": endpoints.DIST_INIT_PORT, "protocol": "TCP"})
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(name, spec.namespace, pool_labels(role)),
        "spec": {
            "clusterIP": "None",
            # Ranks of a group must resolve their leader before it is Ready (torch.distributed rendezvous).
            "publishNotReadyAddresses": True,
            "selector": {LWS_NAME_LABEL: name},
            "ports": service_ports,
        },
    }


def _resources(spec: PlatformSpec, pool: Pool) -> dict[str, Any]:
    extended = {"nvidia.com/gpu": str(pool.gpus_per_node)}
    if pool.rdma_resource:
        per_pod = next(r.per_pod for r in spec.rdma.resources if r.name == pool.rdma_resource)
        extended[f"rdma/{pool.rdma_resource}"] = str(per_pod)
    return {
        "requests": {"cpu": pool.cpu, "memory": pool.memory, **extended},
        "limits": {"memory": pool.memory, **extended},
    }


def _probes(pool: Pool) -> dict[str, Any]:
    # SGLang's /health runs a 1-token generation (SGLANG_HEALTH_CHECK_TIMEOUT 20 s): generous timeouts,
    # and a startup budget for weight loading before liveness can restart (and so recreate) the group.
    health = {"httpGet": {"path": "/health", "port": "http"}}
    period = 10
    return {
        "startupProbe": {
            **health,
            "periodSeconds": period,
            "timeoutSeconds": 25,
            "failureThreshold": -(-pool.startup_timeout_seconds // period),
        },
        "readinessProbe": {**health, "periodSeconds": period, "timeoutSeconds": 25, "failureThreshold": 3},
        "livenessProbe": {**health, "periodSeconds": 30, "timeoutSeconds": 25, "failureThreshold": 5},
    }


def _container(spec: PlatformSpec, role: str, pool: Pool, cfg: WorkerConfig, image: str, leader: bool) -> dict[str, Any]:
    env = [{"name": k, "value": v} for k, v in pod_env(cfg).items()]
    env.append({"name": ENV_CONFIG, "value": cfg.to_env()})
    if pool.ib_device:
        # The HiCache Mooncake store's client picks its RDMA devices from MOONCAKE_DEVICE.
        env.append({"name": "MOONCAKE_DEVICE", "value": pool.ib_device})
    container: dict[str, Any] = {
        "name": "sglang",
        "image": image,
        "command": ["inferplane", "launch-worker"],
        "env": env,
        "envFrom": [{"configMapRef": {"name": endpoints.MOONCAKE_ENV_CONFIGMAP}}],
        "resources": _resources(spec, pool),
        "volumeMounts": [
            {"name": "models", "mountPath": spec.model_cache.mount_path, "readOnly": True},
            {"name": "dshm", "mountPath": "/dev/shm"},
        ],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            # RDMA registers (pins) GPU and host memory: IPC_LOCK, nothing more.
            "capabilities": {"add": ["IPC_LOCK"]} if pool.rdma_resource else {"drop": ["ALL"]},
        },
    }
    if leader:
        container["ports"] = ports(role, pool)
        container.update(_probes(pool))
    return container


def _affinity(role: str, pool: Pool) -> dict[str, Any]:
    affinity: dict[str, Any] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": GPU_NODE_LABEL, "operator": "In", "values": ["true"]},
                            {"key": PREFLIGHT_LABEL, "operator": "In", "values": list(PREFLIGHT_OK)},
                        ]
                    }
                ]
            }
        }
    }
    if pool.nodes_per_group > 1:
        # A group's ranks exchange activations every layer: keep them in one rack (one leaf switch).
        affinity["podAffinity"] = {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "labelSelector": {"matchLabels": {LWS_NAME_LABEL: endpoints.pool_name(role)}},
                        "matchLabelKeys": [LWS_GROUP_KEY_LABEL],
                        "topologyKey": RACK_LABEL,
                    },
                }
            ]
        }
    return affinity


def _pod_template(spec: PlatformSpec, role: str, pool: Pool, cfg: WorkerConfig, image: str, leader: bool) -> dict[str, Any]:
    annotations = {}
    if role == "prefill":
        annotations[endpoints.BOOTSTRAP_PORT_ANNOTATION] = str(pool.bootstrap_port)
    meta: dict[str, Any] = {"labels": pool_labels(role)}
    if annotations:
        meta["annotations"] = annotations
    return {
        "metadata": meta,
        "spec": {
            "schedulerName": "volcano",
            "serviceAccountName": ENGINE_SERVICE_ACCOUNT,
            "automountServiceAccountToken": False,
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            # SGLang finishes in-flight requests on SIGTERM; the upgrade runbook drains first, this bounds the rest.
            "terminationGracePeriodSeconds": 600,
            "affinity": _affinity(role, pool),
            "tolerations": [GPU_TOLERATION],
            "containers": [_container(spec, role, pool, cfg, image, leader)],
            "volumes": [
                {"name": "models", "persistentVolumeClaim": {"claimName": spec.model_cache.pvc_name, "readOnly": True}},
                {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": pool.shm_size}},
            ],
        },
    }


def leader_worker_set(spec: PlatformSpec, role: str, pool: Pool, cfg: WorkerConfig, image: str) -> dict[str, Any]:
    annotations = {
        QUEUE_ANNOTATION: spec.volcano.queue,
        RUNBOOK_OWNED_FIELDS: PARTITION_PATH,
    }
    if role == "prefill":
        annotations[endpoints.BOOTSTRAP_PORT_ANNOTATION] = str(pool.bootstrap_port)
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": metadata(endpoints.pool_name(role), spec.namespace, pool_labels(role), annotations),
        "spec": {
            "replicas": pool.groups,
            "startupPolicy": "LeaderCreated",
            "networkConfig": {"subdomainPolicy": "Shared"},
            "rolloutStrategy": {
                "type": "RollingUpdate",
                # One group at a time and never a surge: every group holds whole GPU nodes.
                "rollingUpdateConfiguration": {"partition": 0, "maxUnavailable": 1, "maxSurge": 0},
            },
            "leaderWorkerTemplate": {
                "size": pool.nodes_per_group,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": _pod_template(spec, role, pool, cfg, image, leader=True),
                "workerTemplate": _pod_template(spec, role, pool, cfg, image, leader=False),
            },
        },
    }
