"""No YAML document makes the loaders raise anything but a clean ConfigError."""

from __future__ import annotations

import contextlib

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplane.errors import ConfigError
from inferplane.manifest import parse_release
from inferplane.spec import parse_platform

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20))
documents = st.recursive(scalars, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=12), c, max_size=5), max_leaves=25)
keys = st.sampled_from(["schema_version", "release", "runtime", "gpu_stack", "addons", "models", "roles", "pools", "mooncake", "namespace"])
shaped = st.dictionaries(keys, documents, max_size=8)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(documents, shaped))
def test_release_loader_only_raises_config_error(doc: object) -> None:
    try:
        parse_release(yaml.safe_dump(doc), "fuzz")
    except ConfigError as exc:
        assert exc.problems and all(isinstance(p, str) and "\n" not in p for p in exc.problems)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(documents, shaped))
def test_platform_loader_only_raises_config_error(doc: object) -> None:
    try:
        parse_platform(doc, "fuzz")
    except ConfigError as exc:
        assert exc.problems and all(isinstance(p, str) and "\n" not in p for p in exc.problems)


@settings(max_examples=200)
@given(st.text(max_size=200))
def test_arbitrary_text_is_a_clean_error(text: str) -> None:
    with contextlib.suppress(ConfigError):
        parse_release(text, "fuzz")
