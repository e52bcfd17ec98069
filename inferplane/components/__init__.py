"""Pulumi ComponentResources, one per catalog entry; each registers exactly what its builder returns."""

from __future__ import annotations

from inferplane.components.base import PlatformComponent


class ClusterAddons(PlatformComponent):
    """GPU operator, RDMA device plugin, LWS + Volcano (queue), Fluid, etcd, namespaces, node labels."""

    component = "cluster-addons"


class ModelStore(PlatformComponent):
    """The /models volume: Fluid Dataset + AlluxioRuntime caching the object store, warm-up DataLoad."""

    component = "model-store"


class Mooncake(PlatformComponent):
    component = "mooncake"


class InferencePools(PlatformComponent):
    component = "inference-pools"


class ModelGateway(PlatformComponent):
    component = "gateway"


class Observability(PlatformComponent):
    component = "observability"


class Policies(PlatformComponent):
    component = "policies"


COMPONENT_CLASSES: dict[str, type[PlatformComponent]] = {
    cls.component: cls for cls in (ClusterAddons, ModelStore, Mooncake, InferencePools, ModelGateway, Observability, Policies)
}

__all__ = [
    "COMPONENT_CLASSES",
    "ClusterAddons",
    "InferencePools",
    "ModelGateway",
    "ModelStore",
    "Mooncake",
    "Observability",
    "PlatformComponent",
    "Policies",
]
