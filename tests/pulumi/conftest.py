"""Run the real Pulumi program (__main__.py) for a stack under pulumi.runtime.set_mocks.

No Pulumi CLI or engine is needed: the mocks record every registered resource with its inputs,
so tests assert what each stack provisions and how it is wired.
"""

from __future__ import annotations

import asyncio
import json
import runpy
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pytest
import yaml

from tests.conftest import REPO_ROOT


@dataclass
class Registered:
    type_: str
    name: str
    inputs: dict[str, Any]
    provider: str | None = None
    parent: str | None = None


@dataclass
class Recorder(pulumi.runtime.Mocks):
    resources: list[Registered] = field(default_factory=list)

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.resources.append(Registered(args.typ, args.name, dict(args.inputs), args.provider or None))
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        return {}, None

    def of_type(self, type_: str) -> list[Registered]:
        return [r for r in self.resources if r.type_ == type_]

    def named(self, name: str) -> Registered:
        matches = [r for r in self.resources if r.name == name]
        assert matches, f"no resource named {name}; have {[r.name for r in self.resources]}"
        return matches[0]


# Operators set this with `pulumi config set --secret`; it is never committed in a stack file.
TEST_ADMIN_KEY = "test-admin-key-not-a-secret"


def stack_config(stack: str) -> dict[str, str]:
    doc = yaml.safe_load((REPO_ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())
    config = {k: v if isinstance(v, str) else json.dumps(v) for k, v in doc["config"].items()}
    config.setdefault("inferplane:gateway_admin_key", TEST_ADMIN_KEY)
    return config


def run_program(stack: str) -> Recorder:
    """Execute __main__.py for `stack` and return every resource it registered."""
    recorder = Recorder()
    pulumi.runtime.set_mocks(recorder, project="inferplane", stack=stack, preview=False)
    pulumi.runtime.set_all_config(stack_config(stack))

    @pulumi.runtime.test
    def _run() -> None:
        runpy.run_path(str(REPO_ROOT / "__main__.py"), run_name="__main__")

    _run()
    return recorder


@pytest.fixture(autouse=True)
def _main_thread_event_loop() -> None:
    """Pulumi's runtime asks for the main thread's event loop; a test elsewhere that ran
    ``asyncio.run()`` leaves none behind, so give every Pulumi test a live one."""
    try:
        loop = asyncio.get_event_loop()
        if loop.is_closed():
            raise RuntimeError("closed")
    except RuntimeError:
        asyncio.set_event_loop(asyncio.new_event_loop())


@pytest.fixture(scope="module")
def program() -> Any:
    """`program("prod")` -> Recorder; cached per module so each stack runs once."""
    cache: dict[str, Recorder] = {}

    def get(stack: str) -> Recorder:
        if stack not in cache:
            cache[stack] = run_program(stack)
        return cache[stack]

    return get
