"""ClusterAddons: what every inference cluster needs before a single engine pod can run.

GPU operator (driver managed or preinstalled, toolkit, DCGM exporter + ServiceMonitor, MIG),
the RDMA shared device plugin with one resource per NIC/fabric (or the network operator's
NicClusterPolicy), LWS with Volcano as its gang scheduler, Volcano with the gang plugin and the
inference Queue, Fluid (Alluxio) for the model cache, a 3-member etcd for Mooncake HA, the
namespaces, and node topology labels. Pure: everything comes from the spec and the release.
Facts and chart keys: shared docs k8s-addons.md sections 2, 3, 5 to 8.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from inferplane.catalog import BuildContext, Built
from inferplane.errors import ConfigError
from inferplane.manifest import HelmChart, ReleaseManifest
from inferplane.spec import MooncakeHa, PlatformSpec, RdmaResource

PART_OF = "inferplane"
MONITORING_NAMESPACE = "monitoring"
# Grafana's dashboard sidecar loads ConfigMaps carrying this label (kube-prometheus-stack values).
DASHBOARD_LABEL = "grafana_dashboard"
GPU_NODE_LABEL = "nvidia.com/gpu.present"
GPU_NODE_SELECTOR = {GPU_NODE_LABEL: "true"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}

GPU_OPERATOR_NAMESPACE = "gpu-operator"
NETWORK_OPERATOR_NAMESPACE = "network-operator"
LWS_NAMESPACE = "lws-system"
VOLCANO_NAMESPACE = "volcano-system"
FLUID_NAMESPACE = "fluid-system"
RDMA_PLUGIN_NAMESPACE = "kube-system"
RDMA_CONFIGMAP = "rdma-devices"
RDMA_DAEMONSET = "rdma-shared-dp-ds"

ETCD_NAME = "etcd"
ETCD_MEMBERS = 3
ETCD_CLIENT_PORT = 2379
ETCD_PEER_PORT = 2380
ETCD_METRICS_PORT = 2381

# CRDs whose objects hold our state: a chart upgrade must never take them (and every object) away.
KEEP_CRDS = {
    "lws": ("leaderworkersets.leaderworkerset.x-k8s.io", "disaggregatedsets.disaggregatedset.x-k8s.io"),
    "volcano": ("queues.scheduling.volcano.sh", "podgroups.scheduling.volcano.sh"),
    "fluid": ("datasets.data.fluid.io", "alluxioruntimes.data.fluid.io", "dataloads.data.fluid.io"),
}

# Volcano's default tiers, written out so the gang plugin (all pods of an LWS group or none) is
# pinned by us rather than by a chart default that could change.
VOLCANO_SCHEDULER_CONF = """\
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
  - name: conformance
- plugins:
  - name: overcommit
  - name: drf
    enablePreemptable: false
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
"""


def labels(name: str, component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/component": component, "app.kubernetes.io/part-of": PART_OF}


def helm_release(name: str, namespace: str, chart: HelmChart, values: dict[str, Any], keep_crds: tuple[str, ...] = ()) -> dict[str, Any]:
    rel: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "chart": chart.chart,
        "repository": chart.repository,
        "version": chart.version,
        "values": values,
    }
    if keep_crds:
        rel["crds"] = "keep"
        rel["crd_names"] = list(keep_crds)
    return rel


def build(ctx: BuildContext) -> Built:
    spec, release = ctx.spec, ctx.release
    built = Built()
    built.objects.extend(namespaces(spec))
    built.objects.extend(node_topology_labels(spec))

    # kube-prometheus-stack first: its CRDs back the DCGM ServiceMonitor the GPU operator renders
    # and every monitor of the Observability component.
    built.objects.append(monitoring_namespace())
    monitoring = kube_prometheus_stack(spec, release)
    built.helm_releases.append(monitoring)
    built.helm_releases.append({**gpu_operator_release(spec, release), "after": [monitoring["name"]]})
    if spec.rdma.provider == "network_operator":
        built.helm_releases.append(network_operator_release(release))
        built.objects.append(nic_cluster_policy(spec, release))
    elif spec.rdma.resources:
        built.objects.extend(rdma_shared_device_plugin(spec, release))

    built.helm_releases.append(lws_release(release))
    built.helm_releases.append(volcano_release(release))
    built.objects.append(volcano_queue(spec))
    built.helm_releases.append(fluid_release(release))

    if in_cluster_etcd(spec):
        built.objects.extend(etcd(spec, release))
    return built


# --- monitoring -------------------------------------------------------------------------------------


def monitoring_namespace() -> dict[str, Any]:
    # node-exporter (RDMA port counters for the Fabric dashboard) needs host namespaces.
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": MONITORING_NAMESPACE,
            "labels": {"app.kubernetes.io/part-of": PART_OF, "pod-security.kubernetes.io/enforce": "privileged"},
        },
    }


def kube_prometheus_stack(spec: PlatformSpec, release: ReleaseManifest) -> dict[str, Any]:
    obs = spec.observability
    values = {
        "prometheus": {
            "prometheusSpec": {
                "scrapeInterval": obs.scrape_interval,
                "evaluationInterval": obs.scrape_interval,
                "retention": "15d",
                # Select only objects labelled release=<this release> (the chart's default), in every namespace.
                "ruleSelectorNilUsesHelmValues": True,
                "serviceMonitorSelectorNilUsesHelmValues": True,
                "podMonitorSelectorNilUsesHelmValues": True,
            }
        },
        "grafana": {"sidecar": {"dashboards": {"enabled": True, "label": DASHBOARD_LABEL, "labelValue": "1", "searchNamespace": "ALL"}}},
        # node-exporter's infiniband collector is on by default on Linux: RDMA port counters.
        "prometheus-node-exporter": {"enabled": True},
    }
    return helm_release(obs.release_label, MONITORING_NAMESPACE, release.addons.kube_prometheus_stack, values)


# --- namespaces and node labels -------------------------------------------------------------------


def namespaces(spec: PlatformSpec) -> list[dict[str, Any]]:
    # "privileged" where pods need host devices or IPC_LOCK: GPU/NIC operators, Fluid's CSI and FUSE
    # pods, and the engines (RDMA needs IPC_LOCK, which the baseline level forbids).
    wanted = {
        spec.namespace: "privileged",
        GPU_OPERATOR_NAMESPACE: "privileged",
        LWS_NAMESPACE: "baseline",
        VOLCANO_NAMESPACE: "baseline",
        FLUID_NAMESPACE: "privileged",
    }
    if spec.rdma.provider == "network_operator":
        wanted[NETWORK_OPERATOR_NAMESPACE] = "privileged"
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": name,
                "labels": {"app.kubernetes.io/part-of": PART_OF, "pod-security.kubernetes.io/enforce": level},
            },
        }
        for name, level in sorted(wanted.items())
    ]


def node_topology_labels(spec: PlatformSpec) -> list[dict[str, Any]]:
    """Rack and NUMA/NIC labels from preflight reports; applied as patches (nodes are the cluster's)."""
    return [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": dict(sorted(node_labels.items()))}}
        for node, node_labels in sorted(spec.topology.node_labels.items())
    ]


# --- GPU operator ---------------------------------------------------------------------------------


def gpu_operator_values(spec: PlatformSpec, release: ReleaseManifest) -> dict[str, Any]:
    gpu = spec.gpu_operator
    driver: dict[str, Any] = {"enabled": gpu.driver_managed}
    if gpu.driver_managed:
        driver.update(
            {
                "version": release.gpu_stack.driver_version,
                # GPUDirect RDMA (nvidia-peermem). MOFED/DOCA comes from the host unless the network
                # operator ships it in its driver container.
                "rdma": {"enabled": spec.rdma.gpudirect, "useHostMofed": spec.rdma.provider != "network_operator"},
                # Draining a GPU node ends every group on it: driver upgrades go node by node through
                # the upgrade runbook, never on the operator's own schedule.
                "upgradePolicy": {"autoUpgrade": False},
            }
        )
    mig = gpu.mig_strategy
    return {
        # One ClusterPolicy rendered by the chart; GPUCluster (DRA) is mutually exclusive with it.
        "clusterPolicy": {"deployCR": True},
        "gpuCluster": {"deployCR": False},
        "operator": {"upgradeCRD": True},
        "driver": driver,
        "toolkit": {"enabled": True},
        "devicePlugin": {"enabled": True},
        # The exporter embeds its own hostengine; a standalone one would only double the load.
        "dcgm": {"enabled": False},
        "dcgmExporter": {
            "enabled": True,
            "serviceMonitor": {
                "enabled": True,
                "interval": spec.observability.scrape_interval,
                "additionalLabels": {"release": spec.observability.release_label},
            },
        },
        "mig": {"strategy": mig},
        "migManager": {"enabled": mig != "none"},
        "gfd": {"enabled": True},
        # The network operator deploys NFD itself; two NFDs fight over the same labels.
        "nfd": {"enabled": spec.rdma.provider != "network_operator"},
        "cdi": {"enabled": True},
        "daemonsets": {"tolerations": [GPU_TOLERATION], "priorityClassName": "system-node-critical"},
    }


def gpu_operator_release(spec: PlatformSpec, release: ReleaseManifest) -> dict[str, Any]:
    return helm_release("gpu-operator", GPU_OPERATOR_NAMESPACE, release.addons.gpu_operator, gpu_operator_values(spec, release))


# --- RDMA ------------------------------------------------------------------------------------------


def rdma_device_config(resources: tuple[RdmaResource, ...]) -> str:
    """The device plugin's config.json: one resource per NIC/fabric, never all HCAs in one pool,
    so a pod asking for rdma/<name> lands on the NICs that name stands for."""
    config_list = []
    for r in resources:
        selectors: dict[str, list[str]] = {"vendors": list(r.vendors), "drivers": list(r.drivers)}
        if r.if_names:
            selectors["ifNames"] = list(r.if_names)
        config_list.append({"resourceName": r.name, "resourcePrefix": "rdma", "rdmaHcaMax": r.hca_max, "selectors": selectors})
    return json.dumps({"periodicUpdateInterval": 300, "configList": config_list}, indent=2, sort_keys=True)


def rdma_shared_device_plugin(spec: PlatformSpec, release: ReleaseManifest) -> list[dict[str, Any]]:
    plugin = release.addons.rdma_shared_device_plugin
    lbl = labels(RDMA_DAEMONSET, "rdma-device-plugin")
    selector = {"app.kubernetes.io/name": RDMA_DAEMONSET}
    config_json = rdma_device_config(spec.rdma.resources)
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": RDMA_CONFIGMAP, "namespace": RDMA_PLUGIN_NAMESPACE, "labels": lbl},
        "data": {"config.json": config_json},
    }
    host_paths = {
        "device-plugin": "/var/lib/kubelet/device-plugins",
        "plugins-registry": "/var/lib/kubelet/plugins_registry",
        "devs": "/dev",
    }
    daemon_set = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": RDMA_DAEMONSET, "namespace": RDMA_PLUGIN_NAMESPACE, "labels": lbl},
        "spec": {
            "selector": {"matchLabels": selector},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {
                "metadata": {
                    "labels": lbl,
                    # A config change must restart the plugin: it reads config.json at start only.
                    "annotations": {"inferplane.io/config-sha": _short_hash(config_json)},
                },
                "spec": {
                    "hostNetwork": True,
                    "priorityClassName": "system-node-critical",
                    "nodeSelector": GPU_NODE_SELECTOR,
                    "tolerations": [GPU_TOLERATION],
                    "containers": [
                        {
                            "name": "k8s-rdma-shared-dp-ds",
                            "image": plugin.image,
                            "imagePullPolicy": "IfNotPresent",
                            "securityContext": {"privileged": True},
                            "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
                            "volumeMounts": [
                                {"name": "device-plugin", "mountPath": host_paths["device-plugin"]},
                                {"name": "plugins-registry", "mountPath": host_paths["plugins-registry"]},
                                {"name": "config", "mountPath": "/k8s-rdma-shared-dev-plugin", "readOnly": True},
                                {"name": "devs", "mountPath": "/dev/"},
                            ],
                        }
                    ],
                    "volumes": [
                        *({"name": n, "hostPath": {"path": p}} for n, p in host_paths.items()),
                        {"name": "config", "configMap": {"name": RDMA_CONFIGMAP, "items": [{"key": "config.json", "path": "config.json"}]}},
                    ],
                },
            },
        },
    }
    return [config_map, daemon_set]


def network_operator_release(release: ReleaseManifest) -> dict[str, Any]:
    chart = release.addons.network_operator
    if chart is None:
        raise ConfigError(
            f"release {release.release}",
            ["addons.network_operator: required when the stack sets rdma.provider: network_operator; pin its chart in the release"],
        )
    # NFD from the network operator (the GPU operator's is switched off, see gpu_operator_values).
    return helm_release("network-operator", NETWORK_OPERATOR_NAMESPACE, chart, {"nfd": {"enabled": True}})


def nic_cluster_policy(spec: PlatformSpec, release: ReleaseManifest) -> dict[str, Any]:
    # The operator takes image, repository and version separately; the version is the manifest's digest.
    ref, _, digest = release.addons.rdma_shared_device_plugin.image.partition("@")
    repository, _, image = ref.rpartition("/")
    return {
        "apiVersion": "mellanox.com/v1alpha1",
        "kind": "NicClusterPolicy",
        # The operator reconciles only this singleton name.
        "metadata": {"name": "nic-cluster-policy", "labels": {"app.kubernetes.io/part-of": PART_OF}},
        "spec": {
            "rdmaSharedDevicePlugin": {
                "image": image,
                "repository": repository,
                "version": digest,
                "config": rdma_device_config(spec.rdma.resources),
            }
        },
    }


# --- LWS, Volcano, Fluid -----------------------------------------------------------------------------


def lws_release(release: ReleaseManifest) -> dict[str, Any]:
    values = {
        # LWS creates one Volcano PodGroup per group and revision: a group is placed whole or not at all.
        "gangSchedulingManagement": {"schedulerProvider": "volcano"},
        # Two replicas: the LWS webhook answers every LWS and pod admission in the namespace.
        "replicaCount": 2,
    }
    return helm_release("lws", LWS_NAMESPACE, release.addons.lws, values, KEEP_CRDS["lws"])


def volcano_release(release: ReleaseManifest) -> dict[str, Any]:
    values = {
        "custom": {
            "scheduler_config_override": VOLCANO_SCHEDULER_CONF,
            "scheduler_name": "volcano",
            "scheduler_replicas": 2,
            "leader_elect_enable": True,
        }
    }
    return helm_release("volcano", VOLCANO_NAMESPACE, release.addons.volcano, values, KEEP_CRDS["volcano"])


def queue_gpus(spec: PlatformSpec) -> int:
    if spec.volcano.queue_gpus:
        return spec.volcano.queue_gpus
    return sum(pool.groups * pool.gpus_per_group for _, pool in spec.pools.items())


def volcano_queue(spec: PlatformSpec) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": spec.volcano.queue, "labels": {"app.kubernetes.io/part-of": PART_OF}},
        "spec": {"weight": 1, "reclaimable": spec.volcano.reclaimable, "capability": {"nvidia.com/gpu": str(queue_gpus(spec))}},
    }


def fluid_release(release: ReleaseManifest) -> dict[str, Any]:
    return helm_release("fluid", FLUID_NAMESPACE, release.addons.fluid, {"runtime": {"alluxio": {"enabled": True}}}, KEEP_CRDS["fluid"])


# --- etcd for Mooncake HA ------------------------------------------------------------------------------


def in_cluster_etcd(spec: PlatformSpec) -> bool:
    return isinstance(spec.mooncake, MooncakeHa) and not spec.mooncake.etcd_endpoints


def etcd_endpoints(spec: PlatformSpec) -> tuple[str, ...]:
    """host:port of every etcd member Mooncake HA uses: the spec's, or the in-cluster StatefulSet's."""
    if isinstance(spec.mooncake, MooncakeHa) and spec.mooncake.etcd_endpoints:
        return spec.mooncake.etcd_endpoints
    return tuple(f"{ETCD_NAME}-{i}.{ETCD_NAME}.{spec.namespace}.svc:{ETCD_CLIENT_PORT}" for i in range(ETCD_MEMBERS))


def etcd(spec: PlatformSpec, release: ReleaseManifest) -> list[dict[str, Any]]:
    ns = spec.namespace
    lbl = labels(ETCD_NAME, "mooncake-ha-store")
    selector = {"app.kubernetes.io/name": ETCD_NAME, "app.kubernetes.io/component": "mooncake-ha-store"}
    peer = f"http://$(POD_NAME).{ETCD_NAME}.{ns}.svc:{ETCD_PEER_PORT}"
    initial_cluster = ",".join(f"{ETCD_NAME}-{i}=http://{ETCD_NAME}-{i}.{ETCD_NAME}.{ns}.svc:{ETCD_PEER_PORT}" for i in range(ETCD_MEMBERS))
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": ETCD_NAME, "namespace": ns, "labels": lbl},
        "spec": {
            "clusterIP": "None",
            # Members must resolve each other before any is Ready, or the first quorum never forms.
            "publishNotReadyAddresses": True,
            "selector": selector,
            "ports": [
                {"name": "client", "port": ETCD_CLIENT_PORT, "targetPort": ETCD_CLIENT_PORT},
                {"name": "peer", "port": ETCD_PEER_PORT, "targetPort": ETCD_PEER_PORT},
                {"name": "metrics", "port": ETCD_METRICS_PORT, "targetPort": ETCD_METRICS_PORT},
            ],
        },
    }
    container = {
        "name": "etcd",
        "image": release.addons.etcd.image,
        # The upstream image is distroless: flags as args, $(POD_NAME) expanded by the kubelet.
        "command": ["/usr/local/bin/etcd"],
        "args": [
            "--name=$(POD_NAME)",
            "--data-dir=/var/run/etcd/data",
            f"--listen-peer-urls=http://0.0.0.0:{ETCD_PEER_PORT}",
            f"--listen-client-urls=http://0.0.0.0:{ETCD_CLIENT_PORT}",
            f"--listen-metrics-urls=http://0.0.0.0:{ETCD_METRICS_PORT}",
            f"--initial-advertise-peer-urls={peer}",
            f"--advertise-client-urls=http://$(POD_NAME).{ETCD_NAME}.{ns}.svc:{ETCD_CLIENT_PORT}",
            f"--initial-cluster={initial_cluster}",
            "--initial-cluster-state=new",
            f"--initial-cluster-token={ns}-mooncake-etcd",
            "--auto-compaction-mode=periodic",
            "--auto-compaction-retention=1h",
        ],
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "ports": [
            {"name": "client", "containerPort": ETCD_CLIENT_PORT},
            {"name": "peer", "containerPort": ETCD_PEER_PORT},
            {"name": "metrics", "containerPort": ETCD_METRICS_PORT},
        ],
        # /readyz and /livez (etcd >= 3.5) on the metrics listener: ready means this member serves
        # linearizable reads, which needs a quorum.
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": ETCD_METRICS_PORT}, "periodSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {"httpGet": {"path": "/livez", "port": ETCD_METRICS_PORT}, "periodSeconds": 10, "failureThreshold": 6},
        "startupProbe": {"httpGet": {"path": "/livez", "port": ETCD_METRICS_PORT}, "periodSeconds": 5, "failureThreshold": 60},
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "4Gi"}},
        "securityContext": {"allowPrivilegeEscalation": False},
        "volumeMounts": [{"name": "data", "mountPath": "/var/run/etcd"}],
    }
    stateful_set = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": ETCD_NAME, "namespace": ns, "labels": lbl},
        "spec": {
            "serviceName": ETCD_NAME,
            "replicas": ETCD_MEMBERS,
            # All members must start together to form the initial quorum; OrderedReady would wait
            # forever for etcd-0 to become Ready alone.
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": lbl},
                "spec": {
                    "affinity": {
                        "podAntiAffinity": {
                            # One member per node: a node loss costs one vote, never the quorum.
                            "requiredDuringSchedulingIgnoredDuringExecution": [
                                {"labelSelector": {"matchLabels": selector}, "topologyKey": "kubernetes.io/hostname"}
                            ]
                        }
                    },
                    "terminationGracePeriodSeconds": 30,
                    "containers": [container],
                },
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data", "labels": lbl},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "8Gi"}}},
                }
            ],
        },
    }
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": ETCD_NAME, "namespace": ns, "labels": lbl},
        # A drain may take one member at a time: 2 of 3 keep the quorum Mooncake's leader election needs.
        "spec": {"minAvailable": ETCD_MEMBERS - 1, "selector": {"matchLabels": selector}},
    }
    return [service, stateful_set, pdb]


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]
