"""The fixtures stay honest: the GPU template is the real capture's derivation, the fixture release is a valid
gpu_stack, every variant names real checks, and the inventories set only variables the roles declare."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import yaml

from inferplane.manifest import GpuStack
from inferplane.node import fabric_checks, gpu_checks, host_checks, rdma_checks, topology_checks

from .conftest import FIXTURES

REPO = Path(__file__).resolve().parents[3]


def test_gpu_template_is_derived_from_the_real_capture(h200: Path):
    spec = importlib.util.spec_from_file_location("preflight_derive", FIXTURES / "derive.py")
    assert spec and spec.loader
    derive = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(derive)
    assert (FIXTURES / "h200" / "gpu.xml").read_text() == derive.derive((h200 / "nvidia-smi-q.xml").read_text())


def test_fixture_release_is_a_valid_gpu_stack():
    doc = yaml.safe_load((FIXTURES / "release-gpu-stack.yaml").read_text())
    stack = GpuStack.model_validate(doc["gpu_stack"])
    assert (stack.gpu_model, stack.gpu_memory_mib, stack.driver_version) == ("NVIDIA H200", 143771, "580.159.04")


def test_variants_name_known_checks():
    known = set(gpu_checks.NAMES + topology_checks.NAMES + rdma_checks.NAMES + host_checks.NAMES)
    known |= {fabric_checks.check_name(k) for k in fabric_checks.KINDS}
    variants = {k: v for k, v in json.loads((FIXTURES / "variants.json").read_text()).items() if not k.startswith("_")}
    assert variants["healthy"]["expect_fail"] == []
    for name, variant in variants.items():
        assert set(variant["expect_fail"]) <= known, name


def test_inventories_set_only_declared_role_variables():
    declared: set[str] = set()
    for spec in REPO.glob("roles/preflight_*/meta/argument_specs.yml"):
        declared |= set(yaml.safe_load(spec.read_text())["argument_specs"]["main"]["options"])
    for env in ("poc", "prod"):
        values = yaml.safe_load((REPO / "inventories" / env / "group_vars" / "all" / "preflight.yml").read_text())
        unknown = {k for k in values if k.startswith("preflight_") and k != "preflight_become"} - declared
        assert not unknown, f"{env}: {unknown}"
