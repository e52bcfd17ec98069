"""Mooncake: the master(s) and the ``sglang-mooncake-env`` ConfigMap every engine pod reads.

poc: one ``mooncake_master`` (Deployment) with its embedded HTTP metadata server; a ClusterIP
Service carries RPC (50051), metadata (8080) and metrics/health (9003).
ha: ``masters`` replicas (StatefulSet) with ``--enable_ha`` on etcd (the add-ons' etcd StatefulSet,
or the stack's endpoints), ``--enable_oplog`` (without it every key is lost on failover, measured),
``--cluster_id``, and ``--rpc_address`` = the pod IP (the leader publishes it in etcd; clients dial
it). Clients find the leader through ``MOONCAKE_MASTER=etcd://...``; the headless Service only
gives each master a name for metrics and probes.

PD KV transfer itself does not go through the master (P2P handshake); the master serves the
optional Mooncake store that SGLang's HiCache uses as L3, and the metadata server in poc.
Flags are mooncake_master 0.3.13.post1's (gflags); tests/unit/test_workloads_mooncake.py starts
the real binary with :func:`master_args` (and real etcd for HA).
"""

from __future__ import annotations

from typing import Any

from inferplane import endpoints
from inferplane.builders.common import labels, metadata, non_root_pod_security, restricted_container_security, selector, service_account
from inferplane.catalog import BuildContext, Built
from inferplane.spec import MooncakeHa, MooncakePoc, PlatformSpec

NAME = endpoints.MOONCAKE_MASTER
COMPONENT = "kv-store"
POD_IP = "$(POD_IP)"


def build(ctx: BuildContext) -> Built:
    spec = ctx.spec
    ns = spec.namespace
    lbl = labels(NAME, COMPONENT)
    objects: list[dict[str, Any]] = [service_account(NAME, ns, lbl), env_config_map(spec), service(spec)]
    if isinstance(spec.mooncake, MooncakeHa):
        objects.append(ha_stateful_set(spec, ctx.release.runtime.mooncake_image))
    else:
        objects.append(poc_deployment(spec, ctx.release.runtime.mooncake_image))
    return Built(objects=objects)


def master_args(spec: PlatformSpec, rpc_address: str = POD_IP) -> list[str]:
    """mooncake_master's flags for this stack (``rpc_address`` is the pod IP in HA)."""
    mc = spec.mooncake
    args = [
        f"--rpc_port={mc.rpc_port}",
        f"--metrics_port={mc.metrics_port}",
        "--metrics_host=0.0.0.0",
        "--enable_metric_reporting=true",
        # glog writes files under /tmp by default; the root filesystem is read-only and kubectl logs reads stderr.
        "--logtostderr=true",
    ]
    if isinstance(mc, MooncakeHa):
        args += [
            "--enable_ha=true",
            "--ha_backend_type=etcd",
            "--ha_backend_connstring=" + ";".join(endpoints.mooncake_etcd_endpoints(spec)),
            f"--rpc_address={rpc_address}",
            f"--cluster_id={mc.cluster_id}",
            f"--enable_oplog={str(mc.oplog).lower()}",
        ]
    else:
        args += [
            "--rpc_address=0.0.0.0",
            "--enable_http_metadata_server=true",
            "--http_metadata_server_host=0.0.0.0",
            f"--http_metadata_server_port={mc.metadata_port}",
        ]
    return args


def env_config_map(spec: PlatformSpec) -> dict[str, Any]:
    """``sglang-mooncake-env``: what SGLang's Mooncake transfer engine and HiCache store read (envFrom)."""
    mc = spec.mooncake
    data = {
        "MOONCAKE_MASTER": endpoints.mooncake_master_address(spec),
        "MOONCAKE_TE_META_DATA_SERVER": endpoints.mooncake_metadata_server(spec),
        "MOONCAKE_PROTOCOL": mc.protocol,
        "MOONCAKE_MASTER_METRICS_PORT": str(mc.metrics_port),
        # Clients resolve the leader under this namespace in etcd; it must equal the masters' --cluster_id.
        "MC_STORE_CLUSTER_ID": endpoints.mooncake_cluster_id(spec),
    }
    if mc.store is not None and mc.store.enabled:
        data["MOONCAKE_GLOBAL_SEGMENT_SIZE"] = mc.store.global_segment_size
    # Set only when chosen: SGLang treats an empty SGLANG_MOONCAKE_CUSTOM_MEM_POOL as set.
    if mc.custom_mem_pool:
        data["SGLANG_MOONCAKE_CUSTOM_MEM_POOL"] = mc.custom_mem_pool
    if mc.intranode_nvlink:
        data["MC_INTRANODE_NVLINK"] = "1"
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(endpoints.MOONCAKE_ENV_CONFIGMAP, spec.namespace, labels(endpoints.MOONCAKE_ENV_CONFIGMAP, COMPONENT)),
        "data": data,
    }


def ports(spec: PlatformSpec) -> list[tuple[str, int]]:
    mc = spec.mooncake
    out = [("rpc", mc.rpc_port), ("metrics", mc.metrics_port)]
    if isinstance(mc, MooncakePoc):
        out.insert(1, ("metadata", mc.metadata_port))
    return out


def service(spec: PlatformSpec) -> dict[str, Any]:
    ha = isinstance(spec.mooncake, MooncakeHa)
    body: dict[str, Any] = {
        "selector": selector(NAME, COMPONENT),
        "ports": [{"name": n, "port": p, "targetPort": n, "protocol": "TCP"} for n, p in ports(spec)],
    }
    if ha:
        # One DNS name per master (metrics, probes); clients reach the leader by the address in etcd.
        body.update({"clusterIP": "None", "publishNotReadyAddresses": True})
    return {"apiVersion": "v1", "kind": "Service", "metadata": metadata(NAME, spec.namespace, labels(NAME, COMPONENT)), "spec": body}


def _container(spec: PlatformSpec, image: str) -> dict[str, Any]:
    mc = spec.mooncake
    health = {"httpGet": {"path": "/health", "port": "metrics"}}
    container: dict[str, Any] = {
        "name": "master",
        "image": image,
        "command": ["mooncake_master"],
        "args": master_args(spec),
        "ports": [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in ports(spec)],
        # /health answers 200 on the leader and on a standby (role in the body): it says the process serves.
        "startupProbe": {**health, "periodSeconds": 2, "failureThreshold": 30},
        "readinessProbe": {**health, "periodSeconds": 5, "timeoutSeconds": 2, "failureThreshold": 3},
        # A hung master (accepts connections, never answers) holds its clients' in-flight RPCs
        # until it is restarted: the leader_stop drill measured that, so the budget is 20 s, not 60.
        "livenessProbe": {**health, "periodSeconds": 5, "timeoutSeconds": 2, "failureThreshold": 4},
        "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "8Gi"}},
        "securityContext": restricted_container_security(),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    if isinstance(mc, MooncakeHa):
        container["env"] = [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    return container


def _pod_template(spec: PlatformSpec, image: str) -> dict[str, Any]:
    lbl = labels(NAME, COMPONENT)
    pod: dict[str, Any] = {
        "serviceAccountName": NAME,
        "automountServiceAccountToken": False,
        "securityContext": non_root_pod_security(),
        # A master that stops gets its lease revoked by etcd within 5 s; nothing to drain.
        "terminationGracePeriodSeconds": 15,
        # The pause container becomes PID 1, so mooncake_master is an ordinary process: the
        # failover drill's SIGSTOP/SIGKILL reach it (a namespace's init ignores them).
        "shareProcessNamespace": True,
        "containers": [_container(spec, image)],
        "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}],
    }
    if isinstance(spec.mooncake, MooncakeHa):
        # Masters on different nodes: one node loss must never take the leader and its standby together.
        pod["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": selector(NAME, COMPONENT)}, "topologyKey": "kubernetes.io/hostname"}
                ]
            }
        }
    return {"metadata": {"labels": lbl}, "spec": pod}


def poc_deployment(spec: PlatformSpec, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(NAME, spec.namespace, labels(NAME, COMPONENT)),
        "spec": {
            "replicas": 1,
            # Two masters side by side would be two independent stores: never overlap them.
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": selector(NAME, COMPONENT)},
            "template": _pod_template(spec, image),
        },
    }


def ha_stateful_set(spec: PlatformSpec, image: str) -> dict[str, Any]:
    mc = spec.mooncake
    assert isinstance(mc, MooncakeHa)
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": metadata(NAME, spec.namespace, labels(NAME, COMPONENT)),
        "spec": {
            "serviceName": NAME,
            "replicas": mc.masters,
            # Masters elect through etcd, not through start order.
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": selector(NAME, COMPONENT)},
            "template": _pod_template(spec, image),
        },
    }
