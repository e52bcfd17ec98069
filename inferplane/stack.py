"""Stack assembly: config -> validated spec + release -> provider -> components in catalog order."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from inferplane.errors import ConfigError
from inferplane.manifest import load_release
from inferplane.spec import REPO_ROOT, parse_platform


def build_stack(stack: str, config: pulumi.Config) -> dict[str, Any]:
    try:
        spec = parse_platform(config.require_object("platform"), f"stacks/Pulumi.{stack}.yaml")
        release = load_release(REPO_ROOT / config.require("release"))
    except ConfigError as exc:
        # Pulumi prints this as the program's error: one line per problem, no traceback.
        raise pulumi.RunError(exc.render()) from None
    provider = k8s.Provider(
        f"{stack}-k8s",
        context=spec.cluster.context,
        kubeconfig=spec.cluster.kubeconfig,
        enable_server_side_apply=True,
    )
    ns = k8s.core.v1.Namespace(
        spec.namespace,
        metadata={"name": spec.namespace},
        opts=pulumi.ResourceOptions(provider=provider),
    )
    return {"namespace": ns.metadata["name"], "release": release.release}
