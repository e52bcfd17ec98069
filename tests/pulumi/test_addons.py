"""What the poc and prod stacks provision, proven by running the real program under Pulumi mocks.

The Recorder (conftest) sees inputs; the registration options the mocks do not pass on
(parent, dependencies, ignore_changes, retain_on_delete) are read from the monitor's requests.
"""

from __future__ import annotations

import itertools
import json
import runpy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pulumi
import pytest
from pulumi.runtime.mocks import MockMonitor

from inferplane.catalog import COMPONENTS, RUNBOOK_OWNED_FIELDS, Built
from inferplane.components import COMPONENT_CLASSES, PlatformComponent
from inferplane.spec import load_stack_and_release
from tests.conftest import REPO_ROOT
from tests.pulumi.conftest import Recorder, stack_config

STACKS = ("poc", "prod")


@dataclass(frozen=True)
class Options:
    type_: str
    name: str
    parent: str
    dependencies: tuple[str, ...]
    ignore_changes: tuple[str, ...]
    retain_on_delete: bool


@pytest.fixture(scope="module")
def options() -> Iterator[dict[str, list[Options]]]:
    """Per stack, the resource options of every registration; filled while `program(...)` runs."""
    seen: dict[str, list[Options]] = {}
    original = MockMonitor.RegisterResource

    def spy(self: MockMonitor, request: Any) -> Any:
        seen.setdefault(pulumi.get_stack(), []).append(
            Options(
                request.type,
                request.name,
                request.parent,
                tuple(request.dependencies),
                tuple(request.ignoreChanges),
                bool(request.retainOnDelete),
            )
        )
        return original(self, request)

    MockMonitor.RegisterResource = spy  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        MockMonitor.RegisterResource = original  # type: ignore[method-assign]


@pytest.fixture(scope="module")
def run(program: Any, options: dict[str, list[Options]]) -> Any:
    def get(stack: str) -> tuple[Recorder, list[Options]]:
        return program(stack), options[stack]

    return get


def release_of(stack: str) -> Any:
    return load_stack_and_release(stack)


def helm_releases(rec: Recorder) -> dict[str, dict[str, Any]]:
    return {r.inputs["name"]: r.inputs for r in rec.of_type("kubernetes:helm.sh/v3:Release")}


def urn_type(urn: str) -> str:
    """The resource's own type from a URN (the last of its parent$child type chain)."""
    return urn.split("::")[2].split("$")[-1]


@pytest.mark.parametrize("stack", STACKS)
def test_every_catalog_component_is_registered_in_order(run: Any, stack: str) -> None:
    rec, _ = run(stack)
    tokens = [r.type_ for r in rec.resources if r.type_.startswith("inferplane:platform:")]
    assert tokens == [c.type_token for c in COMPONENTS]
    assert set(COMPONENT_CLASSES) == {c.name for c in COMPONENTS}


@pytest.mark.parametrize("stack", STACKS)
def test_components_wait_for_the_one_before(run: Any, stack: str) -> None:
    _, opts = run(stack)
    comps = [o for o in opts if o.type_.startswith("inferplane:platform:")]
    for before, after in itertools.pairwise(comps):
        # depends_on a component expands to all of its children.
        assert any(f"::{before.type_}$" in d for d in after.dependencies), f"{after.name} does not wait for {before.name}"


@pytest.mark.parametrize("stack", STACKS)
def test_every_kubernetes_resource_is_a_child_on_the_explicit_provider(run: Any, stack: str) -> None:
    rec, opts = run(stack)
    cfg, _ = release_of(stack)
    providers = rec.of_type("pulumi:providers:kubernetes")
    assert [p.name for p in providers] == [f"{stack}-k8s"]
    assert providers[0].inputs["context"] == cfg.platform.cluster.context
    assert providers[0].inputs["enableServerSideApply"] == "true"
    k8s_resources = [r for r in rec.resources if r.type_.startswith("kubernetes:")]
    assert k8s_resources
    for r in k8s_resources:
        assert r.provider, f"{r.type_} {r.name} has no explicit provider"
        assert urn_type(r.provider) == "pulumi:providers:kubernetes" and r.provider.split("::")[-2] == f"{stack}-k8s", r.provider
    for o in opts:
        if o.type_.startswith("kubernetes:"):
            assert urn_type(o.parent).startswith("inferplane:platform:"), f"{o.type_} {o.name} is not a component's child ({o.parent})"
    assert stack_config(stack)["kubernetes:strictMode"] == "true"


@pytest.mark.parametrize("stack", STACKS)
def test_chart_versions_come_only_from_the_release(run: Any, stack: str) -> None:
    rec, _ = run(stack)
    _, release = release_of(stack)
    rels = helm_releases(rec)
    expected = {
        "gpu-operator": release.addons.gpu_operator,
        "lws": release.addons.lws,
        "volcano": release.addons.volcano,
        "fluid": release.addons.fluid,
    }
    for name, chart in expected.items():
        assert rels[name]["version"] == chart.version
        if chart.repository.startswith("oci://"):
            assert rels[name]["chart"] == f"{chart.repository}/{chart.chart}"
            assert "repositoryOpts" not in rels[name]
        else:
            assert rels[name]["chart"] == chart.chart
            assert rels[name]["repositoryOpts"] == {"repo": chart.repository}
        assert rels[name]["createNamespace"] is False
        assert rels[name]["skipCrds"] is False


@pytest.mark.parametrize("stack", STACKS)
def test_lws_gang_schedules_through_volcano_and_its_crds_are_kept(run: Any, stack: str) -> None:
    rec, opts = run(stack)
    lws = helm_releases(rec)["lws"]
    assert lws["namespace"] == "lws-system"
    assert lws["values"]["gangSchedulingManagement"] == {"schedulerProvider": "volcano"}
    patches = {
        r.inputs["metadata"]["name"]: r.inputs for r in rec.of_type("kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinitionPatch")
    }
    for crd in ("leaderworkersets.leaderworkerset.x-k8s.io", "queues.scheduling.volcano.sh", "datasets.data.fluid.io"):
        assert patches[crd]["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    keep = {o.name: o for o in opts if o.type_.endswith("CustomResourceDefinitionPatch")}
    lws_keep = keep["cluster-addons:keep:leaderworkersets.leaderworkerset.x-k8s.io"]
    assert lws_keep.retain_on_delete, "removing the stack must not strip the keep annotation"
    release_urn = f"urn:pulumi:{stack}::inferplane::inferplane:platform:ClusterAddons$kubernetes:helm.sh/v3:Release::cluster-addons:lws"
    assert release_urn in lws_keep.dependencies


@pytest.mark.parametrize("stack", STACKS)
def test_volcano_has_the_gang_plugin_and_a_queue_sized_to_the_pools(run: Any, stack: str) -> None:
    rec, _ = run(stack)
    cfg, _ = release_of(stack)
    conf = helm_releases(rec)["volcano"]["values"]["custom"]["scheduler_config_override"]
    assert "- name: gang" in conf
    (queue,) = rec.of_type("kubernetes:scheduling.volcano.sh/v1beta1:Queue")
    gpus = sum(p.groups * p.gpus_per_group for _, p in cfg.platform.pools.items())
    assert queue.inputs["metadata"]["name"] == cfg.platform.volcano.queue == "inference"
    assert queue.inputs["spec"]["capability"] == {"nvidia.com/gpu": str(gpus)}
    assert gpus == {"poc": 10, "prod": 992}[stack]


@pytest.mark.parametrize("stack", STACKS)
def test_gpu_operator_values_follow_the_spec(run: Any, stack: str) -> None:
    rec, _ = run(stack)
    cfg, _ = release_of(stack)
    values = helm_releases(rec)["gpu-operator"]["values"]
    spec = cfg.platform
    assert values["driver"]["enabled"] is spec.gpu_operator.driver_managed is False
    assert "version" not in values["driver"], "a preinstalled driver must not be pinned in the operator"
    assert values["toolkit"] == {"enabled": True}
    assert values["mig"] == {"strategy": spec.gpu_operator.mig_strategy}
    sm = values["dcgmExporter"]["serviceMonitor"]
    assert sm["enabled"] is True and sm["additionalLabels"] == {"release": spec.observability.release_label}
    assert values["clusterPolicy"] == {"deployCR": True} and values["gpuCluster"] == {"deployCR": False}


@pytest.mark.parametrize("stack", STACKS)
def test_rdma_plugin_has_one_resource_per_fabric_and_the_manifest_digest(run: Any, stack: str) -> None:
    rec, _ = run(stack)
    cfg, release = release_of(stack)
    (cm,) = [r for r in rec.of_type("kubernetes:core/v1:ConfigMap") if r.inputs["metadata"]["name"] == "rdma-devices"]
    config = json.loads(cm.inputs["data"]["config.json"])
    assert [c["resourceName"] for c in config["configList"]] == [r.name for r in cfg.platform.rdma.resources]
    for entry, res in zip(config["configList"], cfg.platform.rdma.resources, strict=True):
        assert entry["selectors"]["ifNames"] == list(res.if_names)
        assert entry["rdmaHcaMax"] == res.hca_max
    (ds,) = rec.of_type("kubernetes:apps/v1:DaemonSet")
    (container,) = ds.inputs["spec"]["template"]["spec"]["containers"]
    assert container["image"] == release.addons.rdma_shared_device_plugin.image


def test_prod_runs_a_three_member_etcd_for_mooncake_ha(run: Any) -> None:
    rec, _ = run("prod")
    _, release = release_of("prod")
    (sts,) = [r for r in rec.of_type("kubernetes:apps/v1:StatefulSet") if r.inputs["metadata"]["name"] == "etcd"]
    spec = sts.inputs["spec"]
    assert spec["replicas"] == 3 and spec["podManagementPolicy"] == "Parallel"
    assert spec["template"]["spec"]["containers"][0]["image"] == release.addons.etcd.image
    anti = spec["template"]["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["topologyKey"] == "kubernetes.io/hostname"
    assert spec["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    (svc,) = [r for r in rec.of_type("kubernetes:core/v1:Service") if r.inputs["metadata"]["name"] == "etcd"]
    assert svc.inputs["spec"]["clusterIP"] == "None" and svc.inputs["spec"]["publishNotReadyAddresses"] is True
    (pdb,) = [r for r in rec.of_type("kubernetes:policy/v1:PodDisruptionBudget") if r.inputs["metadata"]["name"] == "etcd"]
    assert pdb.inputs["spec"]["minAvailable"] == 2


def test_poc_has_no_etcd(run: Any) -> None:
    rec, _ = run("poc")
    assert not [r for r in rec.of_type("kubernetes:apps/v1:StatefulSet") if r.inputs["metadata"]["name"] == "etcd"]


@pytest.mark.parametrize("stack", STACKS)
def test_model_store_caches_the_object_store_on_gpu_nodes(run: Any, stack: str) -> None:
    rec, _ = run(stack)
    cfg, release = release_of(stack)
    mc = cfg.platform.model_cache
    (dataset,) = rec.of_type("kubernetes:data.fluid.io/v1alpha1:Dataset")
    assert dataset.inputs["metadata"] == {
        "name": mc.pvc_name,
        "namespace": cfg.platform.namespace,
        "labels": dataset.inputs["metadata"]["labels"],
    }
    assert dataset.inputs["spec"]["mounts"][0]["mountPoint"] == f"s3://{mc.object_store.bucket}/{mc.object_store.prefix}"
    term = dataset.inputs["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]
    assert term["key"] == "nvidia.com/gpu.present"
    (runtime,) = rec.of_type("kubernetes:data.fluid.io/v1alpha1:AlluxioRuntime")
    assert runtime.inputs["metadata"]["name"] == mc.pvc_name and runtime.inputs["spec"]["replicas"] == mc.alluxio_replicas
    (load,) = rec.of_type("kubernetes:data.fluid.io/v1alpha1:DataLoad")
    model = release.models[cfg.platform.model_name]
    assert cfg.platform.model_cache.mount_path + load.inputs["spec"]["target"][0]["path"] == model.path


@pytest.mark.parametrize("stack", STACKS)
def test_custom_resources_wait_for_the_charts_that_install_their_crds(run: Any, stack: str) -> None:
    _, opts = run(stack)
    (queue,) = [o for o in opts if o.type_.endswith(":Queue")]
    assert any(d.endswith("::cluster-addons:volcano") for d in queue.dependencies)


@pytest.mark.parametrize("stack", STACKS)
def test_lws_rollout_partition_is_left_to_the_upgrade_runbook(run: Any, stack: str) -> None:
    _, opts = run(stack)
    lws = [o for o in opts if o.type_ == "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet"]
    assert lws, "no LeaderWorkerSet registered"
    for o in lws:
        assert o.ignore_changes == ("spec.rolloutStrategy.rollingUpdateConfiguration.partition",), o.name


def test_runbook_owned_fields_become_ignore_changes(options: dict[str, list[Options]]) -> None:
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {
            "name": "decode",
            "namespace": "inference",
            "annotations": {RUNBOOK_OWNED_FIELDS: "spec.rolloutStrategy.rollingUpdateConfiguration.partition"},
        },
        "spec": {"replicas": 2},
    }
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-01", "labels": {"inferplane.io/rack": "r1"}}}
    recorder = Recorder()
    pulumi.runtime.set_mocks(recorder, project="inferplane", stack="unit", preview=False)

    class Pools(PlatformComponent):
        component = "inference-pools"

    @pulumi.runtime.test
    def _register() -> None:
        Pools(Built(objects=[lws, node]))

    _register()
    (registered,) = [o for o in options["unit"] if o.type_.endswith(":LeaderWorkerSet")]
    assert registered.ignore_changes == ("spec.rolloutStrategy.rollingUpdateConfiguration.partition",)
    # Nodes belong to the cluster: labelled through a server-side-apply patch, never created.
    assert [r.type_ for r in recorder.resources if "Node" in r.type_] == ["kubernetes:core/v1:NodePatch"]


def test_bad_config_fails_with_one_line_problems_not_a_traceback() -> None:
    config = stack_config("poc")
    platform = json.loads(config["inferplane:platform"])
    platform["pools"]["decode"]["tp"] = 3
    config["inferplane:platform"] = json.dumps(platform)
    pulumi.runtime.set_mocks(Recorder(), project="inferplane", stack="poc", preview=False)
    pulumi.runtime.set_all_config(config)

    @pulumi.runtime.test
    def _run() -> None:
        runpy.run_path(str(REPO_ROOT / "__main__.py"), run_name="__main__")

    with pytest.raises(pulumi.RunError) as err:
        _run()
    assert "inferplane:platform.pools.decode.tp: tp*dp = 3*1 = 3 does not match" in str(err.value)


@pytest.mark.parametrize("stack", STACKS)
def test_monitoring_crds_come_before_the_gpu_operator_renders_its_dcgm_servicemonitor(run: Any, stack: str) -> None:
    rec, opts = run(stack)
    spec = release_of(stack)[0].platform
    releases = helm_releases(rec)
    assert releases[spec.observability.release_label]["chart"] == "kube-prometheus-stack"
    gpu_operator = next(o for o in opts if o.name == "cluster-addons:gpu-operator" and o.type_ == "kubernetes:helm.sh/v3:Release")
    kps_urn = (
        f"urn:pulumi:{stack}::inferplane::inferplane:platform:ClusterAddons$kubernetes:helm.sh/v3:Release"
        f"::cluster-addons:{spec.observability.release_label}"
    )
    assert kps_urn in gpu_operator.dependencies


@pytest.mark.parametrize("stack", STACKS)
def test_gateway_admin_key_secret_comes_from_the_pulumi_secret_and_precedes_the_gateway(run: Any, stack: str) -> None:
    from tests.pulumi.conftest import TEST_ADMIN_KEY

    rec, opts = run(stack)
    spec = release_of(stack)[0].platform
    (secret,) = [r for r in rec.of_type("kubernetes:core/v1:Secret") if r.inputs["metadata"]["name"] == spec.gateway.api_key_secret]
    assert secret.inputs["metadata"]["namespace"] == spec.namespace
    # The mock sees the data still wrapped as a Pulumi secret (it stays encrypted in state).
    data = secret.inputs["stringData"]
    assert data.get("value", data) == {"admin-key": TEST_ADMIN_KEY}
    deployment = next(
        o for o in opts if o.type_ == "kubernetes:apps/v1:Deployment" and urn_type(o.parent) == "inferplane:platform:ModelGateway"
    )
    assert any(
        d.endswith(f"kubernetes:core/v1:Secret::gateway:{spec.namespace}/{spec.gateway.api_key_secret}") for d in deployment.dependencies
    )


def test_missing_admin_key_secret_is_a_one_line_error() -> None:
    config = stack_config("poc")
    del config["inferplane:gateway_admin_key"]
    pulumi.runtime.set_mocks(Recorder(), project="inferplane", stack="poc", preview=False)
    pulumi.runtime.set_all_config(config)

    @pulumi.runtime.test
    def _run() -> None:
        runpy.run_path(str(REPO_ROOT / "__main__.py"), run_name="__main__")

    with pytest.raises(pulumi.RunError) as err:
        _run()
    assert "inferplane:gateway_admin_key: required; set it with `pulumi config set --secret gateway_admin_key" in str(err.value)
