"""Build every component of a stack and write it as YAML, without the Pulumi engine.

`inferplane render --stack prod --out build/prod` writes one multi-document file per component
(``<component>.yaml``), ``helm-releases.yaml`` (each chart with repository, version and values)
and ``render.json`` (stack, release, Kubernetes version: what `inferplane validate` checks against).
The same builders feed Pulumi (inferplane/stack.py), so what is reviewed here is what is applied.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from inferplane.catalog import COMPONENTS, BuildContext, Built, ComponentDef
from inferplane.errors import ConfigError
from inferplane.spec import load_stack_and_release

RENDER_INFO = "render.json"
HELM_RELEASES = "helm-releases.yaml"

# Helm's install order (pkg/releaseutil/kind_sorter.go), so a reviewer reads a file top-down in the
# order a cluster needs it; custom resources come last, then by namespace and name.
KIND_ORDER = (
    "PriorityClass",
    "Namespace",
    "NetworkPolicy",
    "ResourceQuota",
    "LimitRange",
    "PodSecurityPolicy",
    "PodDisruptionBudget",
    "ServiceAccount",
    "Secret",
    "SecretList",
    "ConfigMap",
    "StorageClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleList",
    "ClusterRoleBinding",
    "ClusterRoleBindingList",
    "Role",
    "RoleList",
    "RoleBinding",
    "RoleBindingList",
    "Service",
    "DaemonSet",
    "Pod",
    "ReplicationController",
    "ReplicaSet",
    "Deployment",
    "HorizontalPodAutoscaler",
    "StatefulSet",
    "Job",
    "CronJob",
    "IngressClass",
    "Ingress",
    "APIService",
)
_RANK = {kind: i for i, kind in enumerate(KIND_ORDER)}


@dataclass(frozen=True)
class RenderedComponent:
    defn: ComponentDef
    built: Built


def load_builder(defn: ComponentDef) -> Callable[[BuildContext], Built]:
    module = importlib.import_module(defn.builder)
    build = getattr(module, "build", None)
    if not callable(build):
        raise TypeError(f"{defn.builder} has no build(ctx) -> Built")
    return build  # type: ignore[no-any-return]


def build_all(ctx: BuildContext) -> list[RenderedComponent]:
    """Every catalog component's Built, in catalog (dependency) order."""
    return [RenderedComponent(defn, load_builder(defn)(ctx)) for defn in COMPONENTS]


def object_sort_key(obj: dict[str, Any]) -> tuple[int, str, str, str]:
    meta = obj.get("metadata", {})
    return (_RANK.get(obj.get("kind", ""), len(KIND_ORDER)), obj.get("kind", ""), meta.get("namespace", ""), meta.get("name", ""))


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (config files in ConfigMaps, scheduler configs) as literal blocks, so a
    reviewer reads them as files rather than one escaped line."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value and not any(line != line.rstrip() for line in value.splitlines()):
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_Dumper.add_representer(str, _str)
# Builders share dicts (labels, selectors) between objects; anchors and aliases would only confuse a reader.
_Dumper.ignore_aliases = lambda self, data: True  # type: ignore[method-assign]


def dump_documents(docs: list[dict[str, Any]]) -> str:
    # sort_keys: the same objects always give the same bytes, whatever order a builder filled a dict.
    return "".join(
        "---\n" + yaml.dump(doc, Dumper=_Dumper, sort_keys=True, default_flow_style=False, allow_unicode=True, width=120) for doc in docs
    )


def helm_release_documents(rendered: list[RenderedComponent]) -> list[dict[str, Any]]:
    docs = []
    for rc in rendered:
        for rel in rc.built.helm_releases:
            docs.append({"component": rc.defn.name, **rel})
    return docs


def render_stack(stack: str, out_dir: Path, stacks_dir: Path | None = None) -> list[Path]:
    cfg, release = load_stack_and_release(stack, stacks_dir)
    ctx = BuildContext(stack=stack, spec=cfg.platform, release=release)
    rendered = build_all(ctx)
    _prepare(out_dir)
    header = f"# inferplane render --stack {stack} (release {release.release}). Generated: change the builders, not this file.\n"
    written = []
    for rc in rendered:
        path = out_dir / f"{rc.defn.name}.yaml"
        path.write_text(header + dump_documents(sorted(rc.built.objects, key=object_sort_key)))
        written.append(path)
    path = out_dir / HELM_RELEASES
    path.write_text(header + dump_documents(helm_release_documents(rendered)))
    written.append(path)
    info = {
        "stack": stack,
        "release": release.release,
        "kubernetes_version": cfg.platform.cluster.kubernetes_version,
        "files": [p.name for p in written],
    }
    (out_dir / RENDER_INFO).write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    return written


def _prepare(out_dir: Path) -> None:
    """Empty an earlier render's output, so a removed component leaves no stale file behind."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(str(out_dir), ["--out: exists and is not a directory; pass a directory"])
    out_dir.mkdir(parents=True, exist_ok=True)
    info = out_dir / RENDER_INFO
    yamls = sorted(out_dir.glob("*.yaml"))
    if yamls and not info.exists():
        raise ConfigError(
            str(out_dir),
            [f"--out: holds YAML that `inferplane render` did not write ({yamls[0].name}, ...); pass an empty or new directory"],
        )
    for old in yamls:
        old.unlink()
