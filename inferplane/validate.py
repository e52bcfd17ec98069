"""Offline validation of rendered objects: what the API server, the CRDs and the webhooks would say.

- Built-in kinds: the Kubernetes OpenAPI schema of the target version (kubernetes-validate's strict
  bundle: unknown fields are errors, as with `kubectl apply --validate=strict`).
- Custom resources: their CRD's ``openAPIV3Schema`` with unknown fields rejected. The API server
  would silently prune a typo'd field; here it is an error.
- LeaderWorkerSet: the rules only its admission webhook enforces; for built-in controllers, the
  API server's selector-matches-template rule the schema cannot express.
- Policy: images pinned by digest, GPU/RDMA resources in limits (requests == limits), RDMA pods
  with IPC_LOCK, LWS pods gang-scheduled by Volcano, every namespaced object in a namespace,
  names and labels the API server accepts.
- helm-releases.yaml: exact chart versions, known CRD names, GPU operator values against the
  ClusterPolicy schema they are copied into.

Each problem is one line ``file: kind/name: path: message``.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from jsonschema.exceptions import best_match
from packaging.version import Version

from inferplane.manifest import FLOATING_TAGS, IMAGE_RE
from inferplane.render import HELM_RELEASES, RENDER_INFO
from inferplane.spec import REPO_ROOT

DEFAULT_CRDS = REPO_ROOT.parent / "shared" / "schemas" / "crds"
DEFAULT_KUBERNETES_VERSION = "1.33"
MAX_INT32 = 2**31 - 1

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
PERCENT = re.compile(r"^([0-9]+)%$")

# Built-in kinds without a namespace (the rest of the built-ins are namespaced).
CLUSTER_SCOPED = {
    "APIService",
    "CSIDriver",
    "CSINode",
    "CertificateSigningRequest",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "FlowSchema",
    "IngressClass",
    "MutatingWebhookConfiguration",
    "Namespace",
    "Node",
    "PersistentVolume",
    "PriorityClass",
    "PriorityLevelConfiguration",
    "RuntimeClass",
    "StorageClass",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "ValidatingWebhookConfiguration",
    "VolumeAttachment",
}
# Names that become DNS labels (hostnames, Service DNS), not just subdomains.
LABEL_NAMED = {"Namespace", "Service"}
# Extended resources: the scheduler counts limits, and requests must equal them (or be left out).
EXTENDED_RESOURCE = re.compile(r"^(nvidia\.com/gpu|rdma/.+)$")
# Values the GPU operator chart copies into the ClusterPolicy spec: checked against that schema.
GPU_OPERATOR_CLUSTERPOLICY_KEYS = ("driver", "toolkit", "devicePlugin", "dcgm", "dcgmExporter", "mig", "migManager", "gfd", "daemonsets")


@dataclass(frozen=True)
class Problem:
    file: str
    ref: str
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.ref}: {self.path}: {self.message}"


@dataclass
class Report:
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    objects: int = 0
    files: int = 0
    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
    crds_checked: int = 0
    crds_skipped: int = 0


def dotted(path: Any) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(object)"


# --- schemas -----------------------------------------------------------------------------------------


def k8sify(schema: Any) -> Any:
    """A CRD openAPIV3Schema as JSON Schema with the API server's strictness (k8s-addons.md 1b)."""
    if isinstance(schema, list):
        return [k8sify(x) for x in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "description":
            continue
        if key == "properties":
            out[key] = {name: k8sify(prop) for name, prop in value.items()}
        elif key in ("default", "example", "enum", "x-kubernetes-validations"):
            out[key] = value
        else:
            out[key] = k8sify(value)
    # Go's RE2 takes a leading "(?i)" after "^"; Python only at the very start.
    if isinstance(out.get("pattern"), str):
        out["pattern"] = re.sub(r"^\^\(\?([imsU]+)\)", r"(?\1)^", out["pattern"])
    if out.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if out.get("x-kubernetes-int-or-string") and "type" not in out and "anyOf" not in out:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if (
        out.get("type") == "object"
        and "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@dataclass(frozen=True)
class CrdVersion:
    crd_name: str
    scope: str
    validator: jsonschema.protocols.Validator


class CrdIndex:
    """Every CRD in a directory, by (apiVersion, kind); validators built once, on first use."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._schemas: dict[tuple[str, str], tuple[str, str, dict[str, Any]]] = {}
        self.names: set[str] = set()
        for path in sorted(directory.glob("*.yaml")):
            for crd in yaml.load_all(path.read_text(), Loader=yaml.CSafeLoader):
                if not isinstance(crd, dict) or crd.get("kind") != "CustomResourceDefinition":
                    continue
                spec = crd["spec"]
                self.names.add(crd["metadata"]["name"])
                for ver in spec["versions"]:
                    if ver.get("served", True) and "schema" in ver:
                        key = (f"{spec['group']}/{ver['name']}", spec["names"]["kind"])
                        self._schemas[key] = (crd["metadata"]["name"], spec["scope"], ver["schema"]["openAPIV3Schema"])
        self._built: dict[tuple[str, str], CrdVersion] = {}

    def lookup(self, api_version: str, kind: str) -> CrdVersion | None:
        key = (api_version, kind)
        if key not in self._built:
            if key not in self._schemas:
                return None
            name, scope, schema = self._schemas[key]
            self._built[key] = CrdVersion(name, scope, _draft7(k8sify(schema)))
        return self._built[key]

    def kinds(self) -> list[str]:
        return sorted(f"{api}/{kind}" for api, kind in self._schemas)


def _draft7(schema: dict[str, Any]) -> jsonschema.protocols.Validator:
    return jsonschema.Draft7Validator(schema, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)


@functools.lru_cache(maxsize=4)
def crd_index(directory: str) -> CrdIndex:
    return CrdIndex(Path(directory))


def schema_version(desired: str) -> str:
    """The newest bundled Kubernetes schema not newer than `desired` (as the API would be)."""
    from kubernetes_validate.utils import all_versions

    versions = sorted(all_versions(), key=Version)
    want = Version(desired.lstrip("v"))
    usable = [v for v in versions if Version(".".join(v.split(".")[:2])) <= want]
    if not usable or want > Version(".".join(versions[-1].split(".")[:2])):
        raise ValueError(f"Kubernetes {desired} is outside kubernetes-validate's bundle ({versions[0]} to {versions[-1]})")
    return usable[-1]


@functools.lru_cache(maxsize=256)
def core_validator(version: str, api_version: str, kind: str) -> jsonschema.protocols.Validator | None:
    from kubernetes_validate.utils import schema_contents
    from referencing import Registry, Resource

    api = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    schema_dir = f"kubernetes-json-schema/v{version}-local-strict"
    try:
        schema = schema_contents(f"{schema_dir}/{kind.lower()}-{api}.json", version)
    except FileNotFoundError:
        return None
    # Both files carry a $id; the schema's $refs resolve against the definitions by that id.
    registry = Resource.from_contents(_definitions(schema_dir, version)) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


@functools.lru_cache(maxsize=4)
def _definitions(schema_dir: str, version: str) -> dict[str, Any]:
    from kubernetes_validate.utils import schema_contents

    return schema_contents(f"{schema_dir}/_definitions.json", version)  # type: ignore[no-any-return]


def schema_errors(validator: jsonschema.protocols.Validator, obj: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for err in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path))):
        # oneOf/anyOf (IntOrString, Quantity, ...) say only "not valid under any"; the best
        # sub-error names the real cause.
        best = best_match(err.context) if err.context else err
        yield dotted(best.absolute_path), best.message


# --- object rules -------------------------------------------------------------------------------------


def metadata_problems(obj: dict[str, Any], namespaced: bool | None) -> Iterator[tuple[str, str]]:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        yield "metadata", "required; every object needs metadata.name"
        return
    name = meta.get("name")
    kind = obj.get("kind", "")
    if not isinstance(name, str) or not name:
        yield "metadata.name", "required"
    elif kind in LABEL_NAMED:
        if len(name) > 63 or not DNS1123_LABEL.match(name):
            yield "metadata.name", f"'{name}' is not a DNS-1123 label (lowercase alphanumerics and '-', at most 63); rename it"
    elif len(name) > 253 or not DNS1123_SUBDOMAIN.match(name):
        yield "metadata.name", f"'{name}' is not a DNS-1123 subdomain (lowercase alphanumerics, '-' and '.'); rename it"
    ns = meta.get("namespace")
    if namespaced is True and not ns:
        yield "metadata.namespace", f"{kind} is namespaced; set the namespace explicitly rather than relying on the apply context"
    elif namespaced is False and ns:
        yield "metadata.namespace", f"{kind} is cluster-scoped; remove the namespace"
    for field_name in ("labels", "annotations"):
        for key, value in (meta.get(field_name) or {}).items():
            bad = _qualified_key_problem(key)
            if bad:
                yield f"metadata.{field_name}.{key}", bad
            if field_name == "labels" and (not isinstance(value, str) or len(value) > 63 or (value and not QUALIFIED_NAME.match(value))):
                yield f"metadata.labels.{key}", f"value {value!r} is not a valid label value (a string of at most 63 characters)"


def _qualified_key_problem(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
        return f"key prefix '{prefix}' is not a DNS-1123 subdomain"
    if not name or len(name) > 63 or not QUALIFIED_NAME.match(name):
        return f"key name '{name}' is not a qualified name (alphanumerics, '-', '_', '.', at most 63)"
    return None


def pod_specs(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Every pod spec in an object, wherever its kind keeps it (Deployment, LWS templates, ...)."""
    if isinstance(node, dict):
        if isinstance(node.get("containers"), list) and all(isinstance(c, dict) for c in node["containers"]):
            yield path, node
        for key, value in node.items():
            yield from pod_specs(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from pod_specs(value, (*path, i))


def policy_problems(obj: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for path, pod in pod_specs(obj):
        for group in ("initContainers", "containers", "ephemeralContainers"):
            for i, container in enumerate(pod.get(group) or []):
                where = (*path, group, i)
                image = container.get("image")
                if not isinstance(image, str) or not IMAGE_RE.match(image):
                    yield (
                        dotted((*where, "image")),
                        f"'{image}' is not pinned by digest; use repo@sha256:<64 hex> from the release manifest",
                    )
                yield from _extended_resource_problems(container, where)


def _extended_resource_problems(container: dict[str, Any], where: tuple[Any, ...]) -> Iterator[tuple[str, str]]:
    resources = container.get("resources") or {}
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    names = sorted({n for n in (*requests, *limits) if EXTENDED_RESOURCE.match(n)})
    for name in names:
        if name not in limits:
            yield (
                dotted((*where, "resources", "limits")),
                f"{name} requested without a limit; set limits.{name} (extended resources need requests == limits)",
            )
        elif name in requests and str(requests[name]) != str(limits[name]):
            yield (
                dotted((*where, "resources", "requests", name)),
                f"requests {requests[name]} != limits {limits[name]}; extended resources need requests == limits",
            )
    if any(n.startswith("rdma/") for n in names):
        sc = container.get("securityContext") or {}
        caps = (sc.get("capabilities") or {}).get("add") or []
        if not sc.get("privileged") and "IPC_LOCK" not in caps:
            yield (
                dotted((*where, "securityContext", "capabilities", "add")),
                "requests RDMA without IPC_LOCK; memory registration fails (add IPC_LOCK)",
            )


def selector_problems(obj: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """The API server's rule the OpenAPI schema cannot express: a controller's selector must match
    its own pod template, or the object is rejected at apply time."""
    if obj.get("apiVersion") not in ("apps/v1", "batch/v1") or obj.get("kind") not in (
        "Deployment",
        "StatefulSet",
        "DaemonSet",
        "ReplicaSet",
        "Job",
    ):
        return
    spec = obj.get("spec") or {}
    wanted = ((spec.get("selector") or {}).get("matchLabels")) or {}
    have = (((spec.get("template") or {}).get("metadata") or {}).get("labels")) or {}
    for key, value in sorted(wanted.items()):
        if have.get(key) != value:
            yield "spec.selector.matchLabels", f"{key}={value} is not a label of spec.template; the selector must match the pod template"


def _int_or_percent(value: Any, field_name: str) -> tuple[int | None, str | None]:
    """(value, None) for an int or 'N%'; (None, problem) otherwise. Percent 0..100 only."""
    if isinstance(value, bool):
        return None, f"{field_name} must be an integer or a percentage, got {value!r}"
    if isinstance(value, int):
        return (value, None) if value >= 0 else (None, f"{field_name} must be >= 0, got {value}")
    if isinstance(value, str):
        m = PERCENT.match(value)
        if not m:
            return None, f"{field_name} '{value}' must be an integer or a percentage like '25%'"
        pct = int(m.group(1))
        return (pct, None) if pct <= 100 else (None, f"{field_name} {value} must be at most 100%")
    return None, f"{field_name} must be an integer or a percentage, got {value!r}"


def lws_problems(obj: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """The LeaderWorkerSet admission webhook's rules (lws@v0.10.0 pkg/webhooks/leaderworkerset_webhook.go)."""
    spec = obj.get("spec") or {}
    tmpl = spec.get("leaderWorkerTemplate") or {}
    size = tmpl.get("size", 1)
    replicas = spec.get("replicas", 1)
    if isinstance(size, int) and size < 1:
        yield "spec.leaderWorkerTemplate.size", f"must be >= 1, got {size}"
    if isinstance(size, int) and isinstance(replicas, int) and replicas * size > MAX_INT32:
        yield "spec.replicas", f"replicas*size = {replicas * size} exceeds {MAX_INT32}"
    ru = ((spec.get("rolloutStrategy") or {}).get("rollingUpdateConfiguration")) or {}
    base = "spec.rolloutStrategy.rollingUpdateConfiguration"
    unavailable, bad_u = _int_or_percent(ru.get("maxUnavailable", 1), "maxUnavailable")
    surge, bad_s = _int_or_percent(ru.get("maxSurge", 0), "maxSurge")
    if bad_u:
        yield f"{base}.maxUnavailable", bad_u
    if bad_s:
        yield f"{base}.maxSurge", bad_s
    if unavailable == 0 and surge == 0:
        yield f"{base}.maxUnavailable", "must not be 0 when maxSurge is 0: the rollout could never make progress"
    sub = tmpl.get("subGroupPolicy") or {}
    sgs = sub.get("subGroupSize")
    if sgs is not None and isinstance(size, int) and isinstance(sgs, int):
        excluded = sub.get("subGroupPolicyType") == "LeaderExcluded"
        if sgs < 1 or sgs > size:
            yield "spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize", f"must be between 1 and size ({size}), got {sgs}"
        elif (excluded and (size - 1) % sgs) or (not excluded and size % sgs and (size - 1) % sgs):
            yield (
                "spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize",
                f"size {size} (or size-1{' only, LeaderExcluded' if excluded else ''}) must be divisible by {sgs}",
            )
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    if "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology" in annotations and sgs is None:
        yield "metadata.annotations", "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology needs subGroupPolicy.subGroupSize"
    # Our convention, not the webhook's: without Volcano as scheduler LWS groups are not gang-scheduled.
    for name in ("leaderTemplate", "workerTemplate"):
        pod = (tmpl.get(name) or {}).get("spec")
        if isinstance(pod, dict) and pod.get("schedulerName") != "volcano":
            yield f"spec.leaderWorkerTemplate.{name}.spec.schedulerName", "must be 'volcano' so each group is gang-scheduled"


# --- files --------------------------------------------------------------------------------------------


@dataclass
class Validator:
    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
    crds: CrdIndex | None = None
    report: Report = field(default_factory=Report)

    def __post_init__(self) -> None:
        self.schema_version = schema_version(self.kubernetes_version)
        self.report.kubernetes_version = self.kubernetes_version

    def check_object(self, file: str, obj: Any) -> None:
        self.report.objects += 1
        if not isinstance(obj, dict) or not isinstance(obj.get("apiVersion"), str) or not isinstance(obj.get("kind"), str):
            self._add(file, "(document)", "(object)", "not a Kubernetes object: apiVersion and kind are required")
            return
        kind, api_version = obj["kind"], obj["apiVersion"]
        ref = f"{kind}/{(obj.get('metadata') or {}).get('name', '?')}"
        problems: list[tuple[str, str]] = []
        namespaced: bool | None
        core = core_validator(self.schema_version, api_version, kind)
        if core is not None:
            namespaced = kind not in CLUSTER_SCOPED
            problems.extend(schema_errors(core, obj))
        elif self.crds is None:
            namespaced = None
            self.report.crds_skipped += 1
        else:
            crd = self.crds.lookup(api_version, kind)
            if crd is None:
                namespaced = None
                problems.append(("apiVersion", f"no CRD in {self.crds.directory} serves {api_version} {kind}; check apiVersion and kind"))
            else:
                namespaced = crd.scope == "Namespaced"
                self.report.crds_checked += 1
                problems.extend(schema_errors(crd.validator, obj))
        problems.extend(metadata_problems(obj, namespaced))
        if api_version == "leaderworkerset.x-k8s.io/v1" and kind == "LeaderWorkerSet":
            problems.extend(lws_problems(obj))
        problems.extend(selector_problems(obj))
        problems.extend(policy_problems(obj))
        for path, message in problems:
            self._add(file, ref, path, message)

    def check_helm_release(self, file: str, rel: Any) -> None:
        if not isinstance(rel, dict):
            self._add(file, "HelmRelease/?", "(document)", "expected a mapping")
            return
        ref = f"HelmRelease/{rel.get('name', '?')}"
        for key in ("name", "namespace", "chart", "repository", "version", "values"):
            if key not in rel:
                self._add(file, ref, key, "required")
        repo, version = str(rel.get("repository", "")), str(rel.get("version", ""))
        if repo and not repo.startswith(("https://", "oci://")):
            self._add(file, ref, "repository", f"'{repo}' must be https:// or oci://")
        if version in FLOATING_TAGS or not re.match(r"^v?[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.-]+)?$", version):
            self._add(file, ref, "version", f"'{version}' is not an exact chart version; pin one from the release manifest")
        if rel.get("crds") not in (None, "keep"):
            self._add(file, ref, "crds", f"'{rel['crds']}' unknown; the only policy is 'keep'")
        if self.crds is not None:
            for i, name in enumerate(rel.get("crd_names") or []):
                if name not in self.crds.names:
                    self._add(file, ref, f"crd_names[{i}]", f"no CRD named '{name}' in {self.crds.directory}")
            if rel.get("chart") == "gpu-operator" and isinstance(rel.get("values"), dict):
                self._check_gpu_operator_values(file, ref, rel["values"])

    def _check_gpu_operator_values(self, file: str, ref: str, values: dict[str, Any]) -> None:
        assert self.crds is not None
        crd = self.crds.lookup("nvidia.com/v1", "ClusterPolicy")
        if crd is None:
            return
        spec_schema = crd.validator.schema["properties"]["spec"]["properties"]
        for key in GPU_OPERATOR_CLUSTERPOLICY_KEYS:
            if key in values:
                for path, message in schema_errors(_draft7(spec_schema[key]), values[key]):
                    self._add(file, ref, f"values.{key}" + ("" if path == "(object)" else f".{path}"), message)

    def check_dir(self, directory: Path) -> Report:
        files = sorted(p for p in directory.glob("*.yaml"))
        for path in files:
            self.report.files += 1
            try:
                docs = [d for d in yaml.load_all(path.read_text(), Loader=yaml.CSafeLoader) if d is not None]
            except yaml.YAMLError as exc:
                self._add(path.name, "(file)", "(document)", f"not valid YAML: {exc}")
                continue
            for doc in docs:
                if path.name == HELM_RELEASES:
                    self.check_helm_release(path.name, doc)
                else:
                    self.check_object(path.name, doc)
        return self.report

    def _add(self, file: str, ref: str, path: str, message: str) -> None:
        self.report.problems.append(Problem(file, ref, path, message.replace("\n", " ")))


def validate_dir(directory: Path, crds_dir: Path | None = None, kubernetes_version: str | None = None) -> Report:
    """Validate a render output directory. `crds_dir` None means the default (../shared/schemas/crds)."""
    notes = []
    if kubernetes_version is None:
        info = directory / RENDER_INFO
        kubernetes_version = json.loads(info.read_text()).get("kubernetes_version") if info.exists() else None
        if kubernetes_version is None:
            kubernetes_version = DEFAULT_KUBERNETES_VERSION
            notes.append(f"no {RENDER_INFO} here: validating against Kubernetes {kubernetes_version} (set --kubernetes-version)")
    crds_dir = crds_dir or DEFAULT_CRDS
    crds = crd_index(str(crds_dir.resolve())) if crds_dir.is_dir() else None
    validator = Validator(kubernetes_version, crds)
    validator.report.notes.extend(notes)
    report = validator.check_dir(directory)
    if crds is None and report.crds_skipped:
        report.notes.append(
            f"custom resources NOT schema-checked ({report.crds_skipped}): no CRD directory at {crds_dir}; "
            "pass --crds DIR holding the CRD YAML of the charts the release pins"
        )
    return report
