"""Stack assembly: config -> validated spec + release -> provider -> components in catalog order."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from inferplane.builders.gateway import ADMIN_KEY_SECRET_KEY
from inferplane.catalog import BuildContext
from inferplane.components import COMPONENT_CLASSES, PlatformComponent
from inferplane.components.base import SecretData
from inferplane.errors import ConfigError
from inferplane.manifest import ReleaseManifest, load_release
from inferplane.render import build_all
from inferplane.spec import PROJECT, REPO_ROOT, PlatformSpec, parse_platform, stack_file

# Pulumi config secret holding the SMG control-plane admin key (`pulumi config set --secret`).
ADMIN_KEY_CONFIG = "gateway_admin_key"


def load_config(stack: str, config: pulumi.Config) -> tuple[PlatformSpec, ReleaseManifest]:
    """The stack's spec and release, checked against each other, or one line per problem."""
    source = str(stack_file(stack).relative_to(REPO_ROOT))
    try:
        spec = parse_platform(config.require_object("platform"), source)
        release = load_release(REPO_ROOT / config.require("release"))
        problems = spec.check_against(release)
        if problems:
            raise ConfigError(source, problems)
    except ConfigError as exc:
        # Pulumi prints a RunError as the program's error: our lines, no traceback.
        raise pulumi.RunError(exc.render()) from None
    return spec, release


def kubernetes_provider(stack: str, spec: PlatformSpec) -> k8s.Provider:
    """The one provider every resource uses: never whatever kubeconfig/context the shell has."""
    return k8s.Provider(
        f"{stack}-k8s",
        kubeconfig=spec.cluster.kubeconfig,
        context=spec.cluster.context,
        # Server-side apply: field ownership lets runbooks (LWS partition) and controllers share
        # objects with Pulumi, and Patch resources (node labels, CRD keep) need it.
        enable_server_side_apply=True,
    )


def gateway_admin_key_secret(spec: PlatformSpec, config: pulumi.Config) -> SecretData:
    """The SMG control-plane admin key, from a Pulumi config secret.

    Builders are pure and rendered YAML is reviewed in the open, so the key never passes through
    them: it lives encrypted in the stack file and only this Secret carries it into the cluster.
    """
    key = config.get_secret(ADMIN_KEY_CONFIG)
    if key is None:
        raise pulumi.RunError(
            f'{PROJECT}:{ADMIN_KEY_CONFIG}: required; set it with `pulumi config set --secret {ADMIN_KEY_CONFIG} "$(openssl rand -hex 32)"`'
        )
    return SecretData(spec.gateway.api_key_secret, spec.namespace, {ADMIN_KEY_SECRET_KEY: key})


def build_stack(stack: str, config: pulumi.Config) -> dict[str, Any]:
    spec, release = load_config(stack, config)
    if spec.cluster.context is None and spec.environment != "local":
        # Never deploy to whatever context the operator's shell happens to point at.
        raise pulumi.RunError(
            f"{PROJECT}:platform.cluster.context: required for environment {spec.environment}; "
            "name the kubeconfig context of the target cluster"
        )
    provider = kubernetes_provider(stack, spec)
    ctx = BuildContext(stack=stack, spec=spec, release=release)

    rendered = build_all(ctx)
    secrets = {"gateway": [gateway_admin_key_secret(spec, config)]}
    components: list[PlatformComponent] = []
    for rc in rendered:
        cls = COMPONENT_CLASSES[rc.defn.name]
        # Catalog order is dependency order: the add-ons' namespaces and CRDs before the workloads.
        opts = pulumi.ResourceOptions(provider=provider, depends_on=list(components[-1:]))
        components.append(cls(rc.built, opts, secrets=secrets.get(rc.defn.name, ())))

    # Few, stable, snake_case: runbooks and the Ansible inventory read these.
    return {
        "namespace": spec.namespace,
        "release": release.release,
        "model": spec.model_name,
        "components": [rc.defn.name for rc in rendered],
        "helm_releases": {rel["name"]: f"{rel['chart']}@{rel['version']}" for rc in rendered for rel in rc.built.helm_releases},
    }
