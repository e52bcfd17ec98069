"""The one generic ComponentResource: registers exactly what a builder returned, as its children.

Builders decide *what* exists (pure dicts, inferplane/builders/); this class only decides *how*
Pulumi registers each dict: which resource type, which ordering edges, which resource options.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import pulumi
import pulumi_kubernetes as k8s

from inferplane.catalog import COMPONENTS, RUNBOOK_OWNED_FIELDS, Built, ComponentDef

# API groups that pulumi_kubernetes ships typed classes for: "" (core) and these, plus every
# "*.k8s.io" group. Anything else is a custom resource (volcano, fluid, monitoring, LWS ...);
# "scheduling.volcano.sh" must not be mistaken for "scheduling.k8s.io".
_BUILTIN_GROUPS = {"", "apps", "batch", "policy", "autoscaling"}

# Objects the cluster owns and we only label: patched with server-side apply, never created/deleted.
_PATCHED_KINDS = {("v1", "Node")}


def split_api_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


def is_builtin(api_version: str) -> bool:
    group, _ = split_api_version(api_version)
    return group in _BUILTIN_GROUPS or group.endswith(".k8s.io")


def typed_class(api_version: str, kind: str, patch: bool = False) -> type[pulumi.CustomResource] | None:
    """The pulumi_kubernetes class for a built-in kind (e.g. apps/v1 StatefulSet), or None."""
    if not is_builtin(api_version):
        return None
    group, version = split_api_version(api_version)
    package = "core" if group == "" else group.split(".")[0]
    try:
        module = importlib.import_module(f"pulumi_kubernetes.{package}.{version}")
    except ModuleNotFoundError:
        return None
    cls = getattr(module, kind + ("Patch" if patch else ""), None)
    return cls if isinstance(cls, type) else None


def _snake(key: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in key)


def child_name(component: str, obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    scope = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{component}:{scope}{meta['name']}"


def runbook_owned_fields(obj: dict[str, Any]) -> list[str]:
    value = (obj.get("metadata", {}).get("annotations") or {}).get(RUNBOOK_OWNED_FIELDS, "")
    return [p.strip() for p in value.split(",") if p.strip()]


def chart_ref(release: dict[str, Any]) -> tuple[str, k8s.helm.v3.RepositoryOptsArgs | None]:
    """Helm's two addressing schemes: `oci://registry/path/chart` or chart name + HTTPS repository."""
    repo = release["repository"].rstrip("/")
    if repo.startswith("oci://"):
        return f"{repo}/{release['chart']}", None
    return release["chart"], k8s.helm.v3.RepositoryOptsArgs(repo=repo)


@dataclass(frozen=True)
class SecretData:
    """A Secret whose values are Pulumi secrets (config), registered as a child of the component."""

    name: str
    namespace: str
    string_data: dict[str, pulumi.Input[str]]


class PlatformComponent(pulumi.ComponentResource):
    """Registers a Built: Namespaces first, then Helm releases, then every other object.

    Ordering edges (the Kubernetes provider applies in parallel otherwise):
    - a namespaced object and a Helm release wait for their Namespace when this component creates it;
    - a custom resource waits for this component's Helm releases (they install its CRD);
    - a chart whose release says ``crds: keep`` gets its CRDs annotated ``helm.sh/resource-policy: keep``.
    Later components wait for earlier ones through ``depends_on`` set by the stack.
    """

    component: ClassVar[str]

    def __init__(
        self,
        built: Built,
        opts: pulumi.ResourceOptions | None = None,
        secrets: Sequence[SecretData] = (),
    ) -> None:
        defn = component_def(self.component)
        super().__init__(defn.type_token, defn.name, None, opts)
        self.resources: dict[str, pulumi.CustomResource] = {}
        self.releases: dict[str, k8s.helm.v3.Release] = {}

        namespaces: dict[str, pulumi.CustomResource] = {}
        for obj in built.objects:
            if obj["kind"] == "Namespace":
                ns = self._register(obj, [])
                namespaces[obj["metadata"]["name"]] = ns

        for rel in built.helm_releases:
            # `after`: charts whose CRDs this chart's templates need (release order within the component).
            release_deps: list[pulumi.Resource] = [self.releases[name] for name in rel.get("after", ())]
            if rel["namespace"] in namespaces:
                release_deps.append(namespaces[rel["namespace"]])
            release = self._release(rel, release_deps)
            self.releases[rel["name"]] = release
            if rel.get("crds") == "keep":
                for crd in rel.get("crd_names", ()):
                    self._keep_crd(crd, release)

        # Secret values never pass through the pure builders (rendered YAML is reviewed in the
        # open): they arrive here as Pulumi secrets and everything else in the component waits.
        secret_resources = [self._secret(sd, namespaces) for sd in secrets]

        for obj in built.objects:
            if obj["kind"] == "Namespace":
                continue
            deps: list[pulumi.Resource] = list(secret_resources)
            ns_name = obj["metadata"].get("namespace")
            if ns_name in namespaces:
                deps.append(namespaces[ns_name])
            if not is_builtin(obj["apiVersion"]):
                deps.extend(self.releases.values())
            self._register(obj, deps)

        self.register_outputs({"objects": len(built.objects), "helm_releases": sorted(self.releases)})

    def _register(self, obj: dict[str, Any], depends_on: Sequence[pulumi.Resource]) -> pulumi.CustomResource:
        api_version, kind = obj["apiVersion"], obj["kind"]
        name = child_name(self.component, obj)
        ignored = runbook_owned_fields(obj)
        opts = pulumi.ResourceOptions(
            parent=self,
            depends_on=list(depends_on),
            # Fields a runbook drives at run time (e.g. the LWS rollout partition during an upgrade):
            # `pulumi up` in the middle of a rollout must not reset them.
            ignore_changes=ignored or None,
        )
        patch = (api_version, kind) in _PATCHED_KINDS
        cls = typed_class(api_version, kind, patch=patch)
        if cls is None:
            body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
            res: pulumi.CustomResource = k8s.apiextensions.CustomResource(
                name, api_version=api_version, kind=kind, metadata=obj["metadata"], opts=opts, **body
            )
        else:
            kwargs = {_snake(k): v for k, v in obj.items() if k not in ("apiVersion", "kind")}
            res = cls(name, opts=opts, **kwargs)
        self.resources[f"{kind}/{name}"] = res
        return res

    def _secret(self, sd: SecretData, namespaces: dict[str, pulumi.CustomResource]) -> k8s.core.v1.Secret:
        return k8s.core.v1.Secret(
            f"{self.component}:{sd.namespace}/{sd.name}",
            metadata={"name": sd.name, "namespace": sd.namespace},
            string_data=sd.string_data,
            type="Opaque",
            opts=pulumi.ResourceOptions(parent=self, depends_on=[namespaces[sd.namespace]] if sd.namespace in namespaces else []),
        )

    def _release(self, rel: dict[str, Any], depends_on: Sequence[pulumi.Resource]) -> k8s.helm.v3.Release:
        chart, repository_opts = chart_ref(rel)
        return k8s.helm.v3.Release(
            f"{self.component}:{rel['name']}",
            name=rel["name"],
            namespace=rel["namespace"],
            chart=chart,
            version=rel["version"],
            repository_opts=repository_opts,
            values=rel.get("values", {}),
            # Namespaces are objects of ours (labels, pod-security level), not Helm's.
            create_namespace=False,
            # CRDs in the chart's crds/ are installed on first install only; upgrades apply them
            # first by hand (README.md, "Upgrading a chart's CRDs").
            skip_crds=False,
            cleanup_on_fail=True,
            max_history=10,
            timeout=int(rel.get("timeout_seconds", 900)),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(depends_on)),
        )

    def _keep_crd(self, crd: str, release: k8s.helm.v3.Release) -> None:
        # A chart that once templated its CRD deletes it, and every object of that kind, on the
        # upgrade that moves it to crds/ (LWS < 0.8). `keep` makes Helm leave the CRD alone; the
        # patch only owns this annotation (server-side apply), never the schema, and stays on delete.
        k8s.apiextensions.v1.CustomResourceDefinitionPatch(
            f"{self.component}:keep:{crd}",
            metadata={"name": crd, "annotations": {"helm.sh/resource-policy": "keep"}},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[release], retain_on_delete=True),
        )


def component_def(name: str) -> ComponentDef:
    for defn in COMPONENTS:
        if defn.name == name:
            return defn
    raise KeyError(f"no component '{name}' in inferplane.catalog.COMPONENTS")
