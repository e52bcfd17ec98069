"""`inferplane render` + `inferplane validate`: both stacks pass, output is deterministic, and the
validator rejects what the API server, the CRDs or the LWS webhook would reject (or silently prune)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferplane.catalog import COMPONENTS
from inferplane.cli import main
from inferplane.render import HELM_RELEASES, RENDER_INFO, render_stack
from inferplane.validate import Validator, crd_index, validate_dir

STACKS = ("poc", "prod")
DIGEST = "sha256:" + "ab" * 32


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for stack in STACKS:
        out[stack] = tmp_path_factory.mktemp(f"render-{stack}")
        render_stack(stack, out[stack])
    return out


@pytest.fixture(scope="module")
def crds(shared_dir: Path) -> Path:
    return shared_dir / "schemas" / "crds"


@pytest.fixture()
def validator(crds: Path) -> Validator:
    return Validator("1.33", crd_index(str(crds.resolve())))


def objects(directory: Path, file: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((directory / file).read_text()) if d]


def find(directory: Path, kind: str, name: str) -> dict[str, Any]:
    for file in sorted(directory.glob("*.yaml")):
        if file.name == HELM_RELEASES:
            continue
        for obj in objects(directory, file.name):
            if obj["kind"] == kind and obj["metadata"]["name"] == name:
                return copy.deepcopy(obj)
    raise AssertionError(f"{kind}/{name} not rendered in {directory}")


def problems_of(validator: Validator, obj: dict[str, Any]) -> list[str]:
    validator.report.problems.clear()
    validator.check_object("test.yaml", obj)
    return [str(p) for p in validator.report.problems]


def lws(**rollout: Any) -> dict[str, Any]:
    """A minimal LeaderWorkerSet the validator accepts, to break one field at a time."""
    pod = {
        "schedulerName": "volcano",
        "containers": [
            {
                "name": "engine",
                "image": f"lmsysorg/sglang@{DIGEST}",
                "resources": {"limits": {"nvidia.com/gpu": 8}, "requests": {"nvidia.com/gpu": 8}},
            }
        ],
    }
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "decode", "namespace": "inference"},
        "spec": {
            "replicas": 2,
            "rolloutStrategy": {"type": "RollingUpdate", "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0, **rollout}},
            "leaderWorkerTemplate": {"size": 2, "workerTemplate": {"spec": pod}},
        },
    }


# --- both stacks ----------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", STACKS)
def test_rendered_stack_validates(rendered: dict[str, Path], crds: Path, stack: str) -> None:
    report = validate_dir(rendered[stack], crds)
    assert [str(p) for p in report.problems] == []
    assert report.crds_checked >= 4 and report.crds_skipped == 0
    assert report.kubernetes_version == "1.33"


@pytest.mark.parametrize("stack", STACKS)
def test_render_writes_one_file_per_component_and_the_helm_releases(rendered: dict[str, Path], stack: str) -> None:
    names = sorted(p.name for p in rendered[stack].iterdir())
    assert names == sorted([*(f"{c.name}.yaml" for c in COMPONENTS), HELM_RELEASES, RENDER_INFO])
    releases = {r["name"]: r for r in objects(rendered[stack], HELM_RELEASES)}
    assert {"gpu-operator", "lws", "volcano", "fluid"} <= set(releases)
    assert releases["lws"]["crds"] == "keep"
    assert json.loads((rendered[stack] / RENDER_INFO).read_text())["stack"] == stack


@pytest.mark.parametrize("stack", STACKS)
def test_render_is_byte_identical_twice(rendered: dict[str, Path], tmp_path: Path, stack: str) -> None:
    render_stack(stack, tmp_path)
    for path in sorted(rendered[stack].iterdir()):
        assert (tmp_path / path.name).read_bytes() == path.read_bytes(), f"{path.name} differs between two renders"


def test_cli_render_then_validate(tmp_path: Path, crds: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "--stack", "prod", "--out", str(tmp_path / "prod")]) == 0
    assert main(["validate", str(tmp_path / "prod"), "--crds", str(crds)]) == 0
    assert ": ok" in capsys.readouterr().out


def test_render_refuses_a_directory_it_did_not_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "mine.yaml").write_text("keep: me\n")
    assert main(["render", "--stack", "poc", "--out", str(tmp_path)]) == 2
    assert "--out: holds YAML that `inferplane render` did not write" in capsys.readouterr().err
    assert (tmp_path / "mine.yaml").exists()


# --- broken objects are rejected ------------------------------------------------------------------


def test_minimal_lws_is_valid(validator: Validator) -> None:
    assert problems_of(validator, lws()) == []


def test_typo_in_a_core_field_is_rejected(validator: Validator, rendered: dict[str, Path]) -> None:
    svc = find(rendered["prod"], "Service", "etcd")
    svc["spec"]["publishNotReadyAdresses"] = svc["spec"].pop("publishNotReadyAddresses")
    assert problems_of(validator, svc) == [
        "test.yaml: Service/etcd: spec: Additional properties are not allowed ('publishNotReadyAdresses' was unexpected)"
    ]


def test_typo_in_a_custom_resource_field_is_rejected(validator: Validator, rendered: dict[str, Path]) -> None:
    # The API server would prune this silently and the LWS would roll out with no template change.
    obj = lws()
    obj["spec"]["leaderWorkerTemplate"]["workerTemplte"] = obj["spec"]["leaderWorkerTemplate"].pop("workerTemplate")
    problems = problems_of(validator, obj)
    assert any("'workerTemplte' was unexpected" in p for p in problems), problems
    load = next(o for o in objects(rendered["prod"], "model-store.yaml") if o["kind"] == "DataLoad")
    load["spec"]["loadMetdata"] = load["spec"].pop("loadMetadata")
    assert any("spec: Additional properties are not allowed ('loadMetdata' was unexpected)" in p for p in problems_of(validator, load))


def test_wrong_enum_is_rejected(validator: Validator, rendered: dict[str, Path]) -> None:
    runtime = find(rendered["prod"], "AlluxioRuntime", "models")
    runtime["spec"]["tieredstore"]["levels"][0]["mediumtype"] = "NVME"
    assert problems_of(validator, runtime) == [
        "test.yaml: AlluxioRuntime/models: spec.tieredstore.levels[0].mediumtype: 'NVME' is not one of ['MEM', 'SSD', 'HDD']"
    ]
    obj = lws()
    obj["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "RecreateGroup"
    assert any("restartPolicy: 'RecreateGroup' is not one of" in p for p in problems_of(validator, obj))


def test_selector_that_misses_its_pod_template_is_rejected(validator: Validator, rendered: dict[str, Path]) -> None:
    sts = find(rendered["prod"], "StatefulSet", "etcd")
    sts["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] = "etcd-ha"
    assert problems_of(validator, sts) == [
        "test.yaml: StatefulSet/etcd: spec.selector.matchLabels: app.kubernetes.io/name=etcd-ha is not a label of spec.template; "
        "the selector must match the pod template"
    ]


def test_image_without_digest_is_rejected(validator: Validator, rendered: dict[str, Path]) -> None:
    sts = find(rendered["prod"], "StatefulSet", "etcd")
    sts["spec"]["template"]["spec"]["containers"][0]["image"] = "quay.io/coreos/etcd:v3.6.4"
    assert problems_of(validator, sts) == [
        "test.yaml: StatefulSet/etcd: spec.template.spec.containers[0].image: 'quay.io/coreos/etcd:v3.6.4' is not pinned by digest; "
        "use repo@sha256:<64 hex> from the release manifest"
    ]


@pytest.mark.parametrize(
    ("rollout", "message"),
    [
        ({"maxUnavailable": 0, "maxSurge": 0}, "maxUnavailable: must not be 0 when maxSurge is 0"),
        ({"maxUnavailable": "0%", "maxSurge": "0%"}, "maxUnavailable: must not be 0 when maxSurge is 0"),
        ({"maxUnavailable": "150%"}, "maxUnavailable: maxUnavailable 150% must be at most 100%"),
        ({"maxSurge": "two"}, "maxSurge: maxSurge 'two' must be an integer or a percentage"),
    ],
)
def test_lws_webhook_rules(validator: Validator, rollout: dict[str, Any], message: str) -> None:
    problems = problems_of(validator, lws(**rollout))
    assert any(f"spec.rolloutStrategy.rollingUpdateConfiguration.{message}" in p for p in problems), problems


def test_lws_subgroup_size_must_divide_the_group(validator: Validator) -> None:
    obj = lws()
    obj["spec"]["leaderWorkerTemplate"].update(size=5, subGroupPolicy={"subGroupSize": 3})
    assert any("subGroupSize: size 5 (or size-1) must be divisible by 3" in p for p in problems_of(validator, obj))


def test_lws_pods_must_be_gang_scheduled_by_volcano(validator: Validator) -> None:
    obj = lws()
    del obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["schedulerName"]
    assert any("workerTemplate.spec.schedulerName: must be 'volcano'" in p for p in problems_of(validator, obj))


def test_gpu_pod_without_limits_is_rejected(validator: Validator) -> None:
    obj = lws()
    obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["resources"] = {"requests": {"nvidia.com/gpu": 8}}
    assert problems_of(validator, obj) == [
        "test.yaml: LeaderWorkerSet/decode: spec.leaderWorkerTemplate.workerTemplate.spec.containers[0].resources.limits: "
        "nvidia.com/gpu requested without a limit; set limits.nvidia.com/gpu (extended resources need requests == limits)"
    ]
    obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": 4}
    assert any("requests 8 != limits 4" in p for p in problems_of(validator, obj))


def test_rdma_pod_without_ipc_lock_is_rejected(validator: Validator) -> None:
    obj = lws()
    container = obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    container["resources"]["limits"]["rdma/rdma_rail"] = 1
    assert any("requests RDMA without IPC_LOCK" in p for p in problems_of(validator, obj))
    container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    assert problems_of(validator, obj) == []


def test_namespaced_object_without_namespace_is_rejected(validator: Validator, rendered: dict[str, Path]) -> None:
    cm = find(rendered["prod"], "ConfigMap", "rdma-devices")
    del cm["metadata"]["namespace"]
    assert problems_of(validator, cm) == [
        "test.yaml: ConfigMap/rdma-devices: metadata.namespace: ConfigMap is namespaced; set the namespace explicitly "
        "rather than relying on the apply context"
    ]
    queue = find(rendered["prod"], "Queue", "inference")
    queue["metadata"]["namespace"] = "inference"
    assert problems_of(validator, queue) == [
        "test.yaml: Queue/inference: metadata.namespace: Queue is cluster-scoped; remove the namespace"
    ]
    obj = lws()
    del obj["metadata"]["namespace"]
    assert any("LeaderWorkerSet is namespaced" in p for p in problems_of(validator, obj))


def test_bad_names_and_labels_are_rejected(validator: Validator) -> None:
    obj = lws()
    obj["metadata"]["name"] = "Decode_Pool"
    obj["metadata"]["labels"] = {"inferplane.io/role": "x" * 64}
    problems = problems_of(validator, obj)
    assert any("metadata.name: 'Decode_Pool' is not a DNS-1123 subdomain" in p for p in problems), problems
    assert any("metadata.labels.inferplane.io/role: value" in p for p in problems), problems


def test_unknown_custom_resource_kind_is_rejected(validator: Validator) -> None:
    obj = lws()
    obj["apiVersion"] = "leaderworkerset.x-k8s.io/v2"
    assert any(
        "apiVersion: no CRD in" in p and "serves leaderworkerset.x-k8s.io/v2 LeaderWorkerSet" in p for p in problems_of(validator, obj)
    )


def test_helm_release_problems(validator: Validator, rendered: dict[str, Path]) -> None:
    releases = {r["name"]: r for r in objects(rendered["prod"], HELM_RELEASES)}
    gpu = copy.deepcopy(releases["gpu-operator"])
    gpu["values"]["dcgmExporter"]["serviceMonitor"]["intervall"] = "15s"
    gpu["values"]["mig"]["strategy"] = "all"
    lws_rel = copy.deepcopy(releases["lws"])
    lws_rel["version"] = "latest"
    lws_rel["crd_names"] = ["leaderworkerset.x-k8s.io"]
    validator.report.problems.clear()
    validator.check_helm_release(HELM_RELEASES, gpu)
    validator.check_helm_release(HELM_RELEASES, lws_rel)
    lines = [str(p) for p in validator.report.problems]
    assert lines == [
        "helm-releases.yaml: HelmRelease/gpu-operator: values.dcgmExporter.serviceMonitor: "
        "Additional properties are not allowed ('intervall' was unexpected)",
        "helm-releases.yaml: HelmRelease/gpu-operator: values.mig.strategy: 'all' is not one of ['none', 'single', 'mixed']",
        "helm-releases.yaml: HelmRelease/lws: version: 'latest' is not an exact chart version; pin one from the release manifest",
        f"helm-releases.yaml: HelmRelease/lws: crd_names[0]: no CRD named 'leaderworkerset.x-k8s.io' in {validator.crds.directory}",  # type: ignore[union-attr]
    ]


def test_cli_reports_each_problem_on_one_line_and_exits_2(
    rendered: dict[str, Path], crds: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    for path in rendered["prod"].iterdir():
        (broken / path.name).write_bytes(path.read_bytes())
    bad = lws(maxUnavailable=0)
    bad["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["image"] = "lmsysorg/sglang:latest"
    (broken / "extra.yaml").write_text(yaml.safe_dump(bad))
    assert main(["validate", str(broken), "--crds", str(crds)]) == 2
    out = capsys.readouterr()
    assert out.out.splitlines() == [
        "extra.yaml: LeaderWorkerSet/decode: spec.rolloutStrategy.rollingUpdateConfiguration.maxUnavailable: "
        "must not be 0 when maxSurge is 0: the rollout could never make progress",
        "extra.yaml: LeaderWorkerSet/decode: spec.leaderWorkerTemplate.workerTemplate.spec.containers[0].image: "
        "'lmsysorg/sglang:latest' is not pinned by digest; use repo@sha256:<64 hex> from the release manifest",
    ]
    assert "2 problem(s)" in out.err


def test_without_crds_custom_resources_are_reported_as_not_checked(rendered: dict[str, Path], tmp_path: Path) -> None:
    report = validate_dir(rendered["prod"], tmp_path / "no-such-dir")
    assert report.problems == []
    assert report.crds_checked == 0 and report.crds_skipped >= 4
    assert any("custom resources NOT schema-checked" in n and "--crds DIR" in n for n in report.notes)
