"""The components of a stack, in dependency order: the one list Pulumi, render and tests share.

Each builder module exposes a pure ``build(ctx: BuildContext) -> Built``: plain Kubernetes
objects as dicts and Helm releases as dicts. Pulumi components register exactly these; `inferplane
render` writes exactly these; tests validate exactly these. No object is described twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from inferplane.manifest import ReleaseManifest
from inferplane.spec import PlatformSpec


@dataclass(frozen=True)
class BuildContext:
    stack: str
    spec: PlatformSpec
    release: ReleaseManifest


RUNBOOK_OWNED_FIELDS = "inferplane.io/runbook-owned-fields"
"""Annotation a builder puts on an object whose fields a runbook changes at run time (comma-separated
property paths, e.g. ``spec.rolloutStrategy.rollingUpdateConfiguration.partition``, which the upgrade
runbook walks down group by group). Components turn it into ``ignore_changes`` so `pulumi up` never
rolls such a field back; the annotation also tells whoever reads the live object who owns the field."""


@dataclass
class Built:
    """What one component provisions. ``helm_releases`` entries: name, namespace, chart,
    repository, version, values (dict), and optionally ``crds: keep``."""

    objects: list[dict[str, Any]] = field(default_factory=list)
    helm_releases: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class ComponentDef:
    name: str  # render file name and Pulumi resource name
    type_token: str  # Pulumi ComponentResource type
    builder: str  # module with build(ctx) -> Built


COMPONENTS: tuple[ComponentDef, ...] = (
    ComponentDef("cluster-addons", "inferplane:platform:ClusterAddons", "inferplane.builders.addons"),
    ComponentDef("model-store", "inferplane:platform:ModelStore", "inferplane.builders.model_store"),
    ComponentDef("mooncake", "inferplane:platform:Mooncake", "inferplane.builders.mooncake"),
    ComponentDef("inference-pools", "inferplane:platform:InferencePools", "inferplane.builders.pools"),
    ComponentDef("gateway", "inferplane:platform:ModelGateway", "inferplane.builders.gateway"),
    ComponentDef("observability", "inferplane:platform:Observability", "inferplane.builders.observability"),
    ComponentDef("policies", "inferplane:platform:Policies", "inferplane.builders.policies"),
)
