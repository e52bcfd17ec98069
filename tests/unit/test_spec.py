"""PlatformSpec: the shipped stacks load; each documented mistake is rejected with its path."""

from __future__ import annotations

import copy

import pytest
import yaml

from inferplane.errors import ConfigError
from inferplane.spec import STACKS_DIR, load_stack_and_release, parse_platform

PROD = yaml.safe_load((STACKS_DIR / "Pulumi.prod.yaml").read_text())["config"]["inferplane:platform"]
POC = yaml.safe_load((STACKS_DIR / "Pulumi.poc.yaml").read_text())["config"]["inferplane:platform"]


def problems(doc: dict) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        parse_platform(doc, "stack")
    return exc.value.problems


@pytest.mark.parametrize("stack", sorted(p.name.split(".")[1] for p in STACKS_DIR.glob("Pulumi.*.yaml")))
def test_shipped_stacks_load_with_their_release(stack: str) -> None:
    cfg, release = load_stack_and_release(stack)
    assert cfg.platform.model_name in release.models


def test_tp_dp_not_matching_group_gpus_is_rejected() -> None:
    doc = copy.deepcopy(POC)
    doc["pools"]["decode"]["tp"] = 4  # 1 node x 2 GPUs
    (line,) = problems(doc)
    assert line.startswith("inferplane:platform.pools.decode.tp: tp*dp = 4*1 = 4 does not match the group's GPUs")


def test_dp_attention_requires_tp_to_span_the_group() -> None:
    doc = copy.deepcopy(PROD)
    doc["pools"]["prefill"]["tp"] = 8
    (line,) = problems(doc)
    assert line.startswith("inferplane:platform.pools.prefill.tp: tp=8 with dp_attention must equal the group's GPUs")


def test_dp_attention_valid_shape_is_accepted() -> None:
    parse_platform(PROD)


def test_metadata_server_on_master_rpc_port_is_rejected() -> None:
    doc = copy.deepcopy(POC)
    doc["mooncake"]["metadata_server"] = "http://mooncake-master:50051/metadata"
    (line,) = problems(doc)
    assert line.startswith("inferplane:platform.mooncake.metadata_server: port 50051 is the master's RPC port")
    assert ":8080/metadata" in line


def test_pools_with_different_models_are_rejected() -> None:
    doc = copy.deepcopy(POC)
    doc["pools"]["decode"]["model"] = "other-model"
    (line,) = problems(doc)
    assert line.startswith("inferplane:platform.pools: pools use different models")


def test_zero_decode_groups_is_rejected() -> None:
    doc = copy.deepcopy(POC)
    doc["pools"]["decode"]["groups"] = 0
    doc["pools"]["decode"]["min_groups"] = 0
    (line,) = problems(doc)
    assert line.startswith("inferplane:platform.pools.decode.groups: 0 decode groups")


def test_ha_without_oplog_is_rejected() -> None:
    doc = copy.deepcopy(PROD)
    doc["mooncake"]["oplog"] = False
    (line,) = problems(doc)
    assert line.startswith("inferplane:platform.mooncake.ha.oplog:") or line.startswith("inferplane:platform.mooncake.oplog:")


def test_unknown_rdma_resource_is_rejected() -> None:
    doc = copy.deepcopy(POC)
    doc["pools"]["prefill"]["rdma_resource"] = "rdma_typo"
    (line,) = problems(doc)
    assert line.startswith("inferplane:platform.pools.prefill.rdma_resource: 'rdma_typo' is not in rdma.resources")


def test_misspelt_key_is_rejected() -> None:
    doc = copy.deepcopy(POC)
    doc["gateway"]["replcas"] = 2
    assert problems(doc) == ["inferplane:platform.gateway.replcas: unknown field (got 2); check the spelling"]


def test_unknown_mooncake_mode_names_the_choices() -> None:
    doc = copy.deepcopy(POC)
    doc["mooncake"]["mode"] = "cluster"
    (line,) = problems(doc)
    assert line.startswith("inferplane:platform.mooncake:") and "'poc', 'ha'" in line
