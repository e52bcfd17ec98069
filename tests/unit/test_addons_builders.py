"""The add-ons and model-store builders are pure functions of (spec, release): variants of the
real stacks, one knob at a time."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

from inferplane.builders import addons, model_store
from inferplane.catalog import BuildContext
from inferplane.errors import ConfigError
from inferplane.manifest import load_release, parse_release
from inferplane.spec import REPO_ROOT, parse_platform


def stack_doc(stack: str) -> dict[str, Any]:
    return yaml.safe_load((REPO_ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"]


def ctx(stack: str = "prod", release_text: str | None = None, **changes: Any) -> BuildContext:
    """The stack's context with top-level spec sections replaced or merged (dicts merge one level)."""
    config = stack_doc(stack)
    platform = copy.deepcopy(config["inferplane:platform"])
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(platform.get(key), dict):
            platform[key] = {**platform[key], **value}
        else:
            platform[key] = value
    release_path = REPO_ROOT / config["inferplane:release"]
    release = parse_release(release_text) if release_text else load_release(release_path)
    return BuildContext(stack=stack, spec=parse_platform(platform), release=release)


def by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def releases(built: Any) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in built.helm_releases}


def test_builders_are_pure_and_repeatable() -> None:
    c = ctx()
    before = c.spec.model_dump()
    first, second = addons.build(c), addons.build(c)
    assert json.dumps(first.objects, sort_keys=True) == json.dumps(second.objects, sort_keys=True)
    assert first.helm_releases == second.helm_releases
    assert c.spec.model_dump() == before


def test_rdma_device_plugin_gets_one_resource_per_nic_never_one_pool() -> None:
    c = ctx(
        rdma={
            "resources": [
                {"name": "rdma_rail", "if_names": ["ens1f0np0"], "hca_max": 32},
                {"name": "rdma_rail2", "if_names": ["ens2f0np0"], "hca_max": 32},
            ]
        }
    )
    built = addons.build(c)
    (cm,) = [o for o in by_kind(built.objects, "ConfigMap") if o["metadata"]["name"] == "rdma-devices"]
    config = json.loads(cm["data"]["config.json"])
    assert [(e["resourceName"], e["selectors"]["ifNames"]) for e in config["configList"]] == [
        ("rdma_rail", ["ens1f0np0"]),
        ("rdma_rail2", ["ens2f0np0"]),
    ]
    (ds,) = by_kind(built.objects, "DaemonSet")
    # The plugin reads its config at start only: a config change must roll the DaemonSet.
    other = addons.build(ctx(rdma={"resources": [{"name": "rdma_rail", "if_names": ["ens1f0np0"], "hca_max": 64}]}))
    (ds2,) = by_kind(other.objects, "DaemonSet")
    key = "inferplane.io/config-sha"
    assert ds["spec"]["template"]["metadata"]["annotations"][key] != ds2["spec"]["template"]["metadata"]["annotations"][key]


def test_no_rdma_resources_means_no_device_plugin() -> None:
    c = ctx(
        "poc",
        rdma={"resources": []},
        pools={
            **stack_doc("poc")["inferplane:platform"]["pools"],
            "prefill": {**stack_doc("poc")["inferplane:platform"]["pools"]["prefill"], "rdma_resource": None},
            "decode": {**stack_doc("poc")["inferplane:platform"]["pools"]["decode"], "rdma_resource": None},
        },
    )
    built = addons.build(c)
    assert not by_kind(built.objects, "DaemonSet")
    assert not [o for o in built.objects if o["metadata"]["name"] == "rdma-devices"]


def test_network_operator_provider_uses_a_nic_cluster_policy_and_one_nfd() -> None:
    built = addons.build(ctx(rdma={"provider": "network_operator"}))
    assert not by_kind(built.objects, "DaemonSet"), "the network operator runs the device plugin"
    (policy,) = by_kind(built.objects, "NicClusterPolicy")
    assert policy["metadata"]["name"] == "nic-cluster-policy"
    plugin = policy["spec"]["rdmaSharedDevicePlugin"]
    release = ctx().release
    assert f"{plugin['repository']}/{plugin['image']}@{plugin['version']}" == release.addons.rdma_shared_device_plugin.image
    assert json.loads(plugin["config"])["configList"][0]["resourceName"] == "rdma_rail"
    rels = releases(built)
    assert rels["network-operator"]["version"] == release.addons.network_operator.version  # type: ignore[union-attr]
    assert rels["network-operator"]["values"]["nfd"]["enabled"] is True
    assert rels["gpu-operator"]["values"]["nfd"]["enabled"] is False
    assert "network-operator" in {o["metadata"]["name"] for o in by_kind(built.objects, "Namespace")}


def test_network_operator_provider_needs_the_chart_in_the_release() -> None:
    text = (REPO_ROOT / "releases" / "2026.11.0.yaml").read_text()
    text = "\n".join(line for line in text.splitlines() if not line.strip().startswith("network_operator:"))
    with pytest.raises(ConfigError) as err:
        addons.build(ctx(release_text=text, rdma={"provider": "network_operator"}))
    assert err.value.problems == [
        "addons.network_operator: required when the stack sets rdma.provider: network_operator; pin its chart in the release"
    ]


def test_managed_driver_is_pinned_from_the_release_with_gpudirect() -> None:
    c = ctx(gpu_operator={"driver_managed": True, "mig_strategy": "mixed"})
    values = releases(addons.build(c))["gpu-operator"]["values"]
    assert values["driver"]["enabled"] is True
    assert values["driver"]["version"] == c.release.gpu_stack.driver_version
    assert values["driver"]["rdma"] == {"enabled": True, "useHostMofed": True}
    assert values["driver"]["upgradePolicy"] == {"autoUpgrade": False}
    assert values["mig"] == {"strategy": "mixed"} and values["migManager"] == {"enabled": True}


def test_queue_capacity_can_be_set_explicitly() -> None:
    (queue,) = by_kind(addons.build(ctx(volcano={"queue": "llm", "queue_gpus": 128})).objects, "Queue")
    assert queue["metadata"]["name"] == "llm"
    assert queue["spec"]["capability"] == {"nvidia.com/gpu": "128"}


def test_topology_labels_become_node_objects() -> None:
    built = addons.build(ctx(topology={"node_labels": {"gpu-b": {"inferplane.io/rack": "r2"}, "gpu-a": {"inferplane.io/rack": "r1"}}}))
    nodes = by_kind(built.objects, "Node")
    assert [(n["metadata"]["name"], n["metadata"]["labels"]) for n in nodes] == [
        ("gpu-a", {"inferplane.io/rack": "r1"}),
        ("gpu-b", {"inferplane.io/rack": "r2"}),
    ]


def test_etcd_endpoints_follow_the_statefulset_or_the_spec() -> None:
    c = ctx()
    assert addons.etcd_endpoints(c.spec) == (
        "etcd-0.etcd.inference.svc:2379",
        "etcd-1.etcd.inference.svc:2379",
        "etcd-2.etcd.inference.svc:2379",
    )
    sts = next(o for o in addons.build(c).objects if o["kind"] == "StatefulSet")
    args = sts["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--initial-cluster=" + ",".join(f"etcd-{i}=http://etcd-{i}.etcd.inference.svc:2380" for i in range(3)) in args
    external = ctx(mooncake={"etcd_endpoints": ["10.0.0.1:2379", "10.0.0.2:2379", "10.0.0.3:2379"]})
    assert addons.etcd_endpoints(external.spec) == ("10.0.0.1:2379", "10.0.0.2:2379", "10.0.0.3:2379")
    assert not by_kind(addons.build(external).objects, "StatefulSet"), "an external etcd needs no in-cluster one"


def test_model_store_without_object_store_is_the_node_local_cache() -> None:
    c = ctx(model_cache={"object_store": None})
    assert model_store.build(c).objects == []
    assert model_store.models_volume(c.spec) == {"name": "models", "hostPath": {"path": "/var/lib/inferplane/models", "type": "Directory"}}
    assert model_store.models_volume_mount(c.spec) == {"name": "models", "mountPath": "/models", "readOnly": True}
    assert model_store.models_volume(ctx().spec)["persistentVolumeClaim"] == {"claimName": "models", "readOnly": True}


def test_model_outside_the_cached_prefix_is_a_config_error() -> None:
    c = ctx(model_cache={"object_store": {"endpoint": "https://s3.example.internal", "bucket": "models", "prefix": "Qwen/"}})
    with pytest.raises(ConfigError) as err:
        model_store.build(c)
    assert err.value.problems == [
        "models.deepseek-v3.source: s3://models/deepseek-ai/DeepSeek-V3-0324/ is outside the model cache s3://models/Qwen/ "
        "(stack model_cache.object_store); move the model under the cached prefix or change model_cache.object_store.prefix"
    ]


def test_model_path_must_be_where_the_cache_serves_it() -> None:
    c = ctx(model_cache={"mount_path": "/weights"})
    with pytest.raises(ConfigError) as err:
        model_store.build(c)
    assert err.value.problems == [
        "models.deepseek-v3.path: /models/DeepSeek-V3-0324 but the cache serves s3://models/deepseek-ai/DeepSeek-V3-0324/ "
        "at /weights/DeepSeek-V3-0324; set path: /weights/DeepSeek-V3-0324"
    ]


def test_a_new_model_revision_gets_a_new_dataload() -> None:
    text = (REPO_ROOT / "releases" / "2026.11.0.yaml").read_text()
    old = ctx().release.models["deepseek-v3"].revision
    newer = ctx(release_text=text.replace(old, "f" * 40))
    names = [
        o["metadata"]["name"] for o in (model_store.build(ctx()).objects + model_store.build(newer).objects) if o["kind"] == "DataLoad"
    ]
    assert names == [f"models-warmup-{old[:12]}", "models-warmup-ffffffffffff"]
