"""ReleaseManifest: every rejection has its own test, and the shipped releases load."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from inferplane.errors import ConfigError
from inferplane.manifest import compatibility_problems, load_release, parse_release

REPO = Path(__file__).resolve().parents[2]
GOOD = yaml.safe_load((REPO / "releases" / "2026.11.0-vl.yaml").read_text())


def problems(doc: dict) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        parse_release(yaml.safe_dump(doc), "r.yaml")
    return exc.value.problems


def mutate(**paths: object) -> dict:
    doc = copy.deepcopy(GOOD)
    for dotted, value in paths.items():
        node = doc
        keys = dotted.split("__")
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = value
    return doc


@pytest.mark.parametrize("path", sorted((REPO / "releases").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_releases_load(path: Path) -> None:
    assert load_release(path).schema_version == 1


def test_latest_tag_is_rejected_with_the_promised_line() -> None:
    assert problems(mutate(runtime__sglang_image="lmsysorg/sglang:latest")) == [
        "runtime.sglang_image: tag 'latest' is not allowed; pin a digest (repo@sha256:...)"
    ]


def test_dev_tag_is_rejected() -> None:
    (line,) = problems(mutate(runtime__smg_image="lightseekorg/smg:dev"))
    assert line.startswith("runtime.smg_image: tag 'dev' is not allowed")


def test_specific_tag_without_digest_is_rejected() -> None:
    (line,) = problems(mutate(runtime__mooncake_image="inferplane/mooncake:v0.3.13"))
    assert "runtime.mooncake_image: tag 'v0.3.13' without a digest" in line


def test_image_without_tag_or_digest_is_rejected() -> None:
    (line,) = problems(mutate(addons__etcd__image="coreos/etcd"))
    assert line.startswith("addons.etcd.image: 'coreos/etcd' has no digest")


def test_short_digest_is_rejected() -> None:
    (line,) = problems(mutate(runtime__sglang_image="lmsysorg/sglang@sha256:abc"))
    assert line.startswith("runtime.sglang_image: digest 'sha256:abc'")


def test_branch_name_as_revision_is_rejected() -> None:
    doc = mutate()
    doc["models"]["qwen3-vl-8b"]["revision"] = "main"
    (line,) = problems(doc)
    assert line.startswith("models.qwen3-vl-8b.revision: 'main' is not a commit")


@pytest.mark.parametrize("field", ["config_sha256", "tokenizer_sha256", "weights_manifest_sha256"])
def test_malformed_sha256_is_rejected(field: str) -> None:
    doc = mutate()
    doc["models"]["qwen3-vl-8b"][field] = "ABCDEF" * 10 + "ABCD"  # uppercase: not what sha256sum prints
    (line,) = problems(doc)
    assert line.startswith(f"models.qwen3-vl-8b.{field}: ") and "is not a sha256" in line


def test_lora_hash_is_checked() -> None:
    doc = mutate()
    doc["models"]["qwen3-vl-8b"]["lora_adapters"][0]["sha256"] = "nope"
    (line,) = problems(doc)
    assert line.startswith("models.qwen3-vl-8b.lora_adapters[0].sha256:")


def test_floating_chart_version_is_rejected() -> None:
    (line,) = problems(mutate(addons__lws__version="latest"))
    assert line.startswith("addons.lws.version:")


def test_unknown_key_is_rejected_not_dropped() -> None:
    doc = mutate()
    doc["runtime"]["sglang_imgae"] = doc["runtime"]["sglang_image"]
    assert any(p.startswith("runtime.sglang_imgae: unknown field") for p in problems(doc))


def test_schema_version_is_required_and_exact() -> None:
    assert any(p.startswith("schema_version:") for p in problems(mutate(schema_version=2)))


def _second_model(**changes: object) -> dict:
    doc = mutate()
    other = copy.deepcopy(doc["models"]["qwen3-vl-8b"])
    other.update(changes)
    doc["models"]["other"] = other
    doc["roles"]["decode"] = {"model": "other"}
    return doc


@pytest.mark.parametrize(
    ("changes", "label"),
    [
        ({"revision": "0" * 40}, "model revision"),
        ({"tokenizer_sha256": "1" * 64}, "tokenizer"),
        ({"quantization": "fp8"}, "quantization"),
        ({"kv_layout": {"kv_cache_dtype": "fp8_e4m3", "page_size": 1, "num_layers": 36, "num_kv_heads": 8, "head_dim": 128}}, "KV layout"),
    ],
)
def test_prefill_decode_model_disagreement_is_rejected(changes: dict, label: str) -> None:
    (line,) = problems(_second_model(**changes))
    assert line.startswith(f"roles.decode: {label} ") and "differs from prefill's" in line


def test_lora_set_disagreement_is_rejected() -> None:
    doc = mutate()
    doc["roles"]["decode"] = {"model": "qwen3-vl-8b", "lora_adapters": []}
    (line,) = problems(doc)
    assert line.startswith("roles.decode: LoRA set [] differs from prefill's [support-agent]")


def test_sglang_version_disagreement_is_rejected() -> None:
    doc = mutate()
    doc["roles"]["encoder"] = {"model": "qwen3-vl-8b", "sglang_version": "0.5.24"}
    (line,) = problems(doc)
    assert line.startswith("roles.encoder: SGLang version 0.5.24 differs from prefill's 0.5.23")


def test_mooncake_abi_disagreement_is_rejected() -> None:
    doc = mutate()
    doc["roles"]["decode"] = {"model": "qwen3-vl-8b", "mooncake_te_abi": "te-0.4"}
    (line,) = problems(doc)
    assert line.startswith("roles.decode: Mooncake transfer-engine ABI te-0.4 differs")


def test_encoder_kv_layout_is_not_compared() -> None:
    """The encoder makes embeddings, not KV: a different KV layout there is not a conflict."""
    doc = mutate()
    other = copy.deepcopy(doc["models"]["qwen3-vl-8b"])
    other["kv_layout"]["page_size"] = 64
    doc["models"]["enc"] = other
    doc["roles"]["encoder"] = {"model": "enc"}
    parse_release(yaml.safe_dump(doc))


def test_role_naming_unknown_model_is_rejected() -> None:
    doc = mutate()
    doc["roles"]["decode"] = {"model": "nope"}
    (line,) = problems(doc)
    assert line.startswith("roles.decode.model: 'nope' is not in models")


def test_compatibility_problems_is_empty_for_matching_roles() -> None:
    release = parse_release(yaml.safe_dump(GOOD))
    assert compatibility_problems({r: release.effective(r) for r in release.roles}) == []
