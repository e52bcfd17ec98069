"""The rules of an in-place rolling upgrade, shared by the upgrade runbook and its tests.

During a rollout a group on the target release pairs with peers that still run their old one
(SMG pairs any registered prefill with any registered decode). So the target of each upgraded
role must be P/D-compatible with every running peer of the other roles, by the same rule that
makes a release consistent (:func:`inferplane.manifest.compatibility_problems`: model revision,
tokenizer, quantization, KV layout, LoRA set, Mooncake transfer-engine ABI), with one difference
tolerated: the SGLang version may differ in its patch level only, because a rollout always has a
mixed stretch; the disaggregation protocol is only assumed stable within a minor release. Anything
else needs a complete new set: playbooks/switch-model.yml (blue/green).

A running peer is described by the release it was deployed from, corrected by what the engine
itself reports in ``/server_info`` (version, revision when set, page size, KV dtype, model path;
the emulator also reports the whole KV layout). A peer that reports something its release does
not pin has drifted, and the rollout refuses to start until that is understood.

Also here: the LWS leader-worker template a pool gets on a release, built by the same builder
Pulumi uses, so the runbook's patch and the next ``pulumi up`` agree byte for byte.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from inferplane.manifest import EffectiveRole, KvLayout, ReleaseManifest, compatibility_problems, load_release

SWITCH_HINT = "use playbooks/switch-model.yml (blue/green) for this change"


@dataclass(frozen=True)
class RunningGroup:
    name: str
    role: str
    release_file: str
    server_info: dict[str, Any]


def minor(version: str) -> tuple[int, ...] | None:
    numbers = re.findall(r"\d+", version.lstrip("v").split("+", 1)[0])
    return tuple(int(n) for n in numbers[:2]) if len(numbers) >= 2 else None


def version_step_problem(peer: str, peer_version: str, role: str, target_version: str) -> str | None:
    """SGLang versions of a mixed P/D pair may differ in the patch level only."""
    if peer_version == target_version:
        return None
    a, b = minor(peer_version), minor(target_version)
    if a is not None and a == b:
        return None
    return (
        f"{peer}: runs SGLang {peer_version}; the target {role} runs {target_version}, another minor release, "
        f"and the two would pair during the rollout; {SWITCH_HINT}"
    )


def running_role(group: RunningGroup, release: ReleaseManifest) -> tuple[EffectiveRole, list[str]]:
    """The group's role as its release pins it, corrected by its engine's report; and any drift."""
    if group.role not in release.roles:
        return release.effective(next(iter(release.roles))), [f"{group.name}: its release {release.release} pins no {group.role} role"]
    eff = release.effective(group.role)
    info = group.server_info
    drift: list[str] = []
    model = eff.model
    revision = info.get("revision") or (info.get("emulator") or {}).get("revision")
    if revision and revision != model.revision:
        drift.append(f"{group.name}: serves model revision {revision}, its release {release.release} pins {model.revision}")
        model = model.model_copy(update={"revision": revision})
    path = info.get("model_path")
    if path and path != model.path:
        drift.append(f"{group.name}: loads {path}, its release {release.release} names {model.path}")
    if "page_size" in info and info["page_size"] is not None and int(info["page_size"]) != model.kv_layout.page_size:
        drift.append(f"{group.name}: KV page size {info['page_size']}, its release pins {model.kv_layout.page_size}")
        model = model.model_copy(update={"kv_layout": model.kv_layout.model_copy(update={"page_size": int(info["page_size"])})})
    reported_layout = (info.get("emulator") or {}).get("kv_layout")
    if isinstance(reported_layout, dict):
        live = KvLayout.model_validate(reported_layout)
        if live != model.kv_layout:
            drift.append(f"{group.name}: KV layout {live.model_dump()} differs from its release's {model.kv_layout.model_dump()}")
            model = model.model_copy(update={"kv_layout": live})
    version = str(info.get("version") or eff.sglang_version)
    if version != eff.sglang_version:
        drift.append(f"{group.name}: runs SGLang {version}, its release {release.release} pins {eff.sglang_version}")
    return eff.model_copy(update={"model": model, "sglang_version": version}), drift


def peer_problems(target: ReleaseManifest, roles: list[str], running: list[RunningGroup]) -> list[str]:
    """Why the groups of ``roles`` may not be rolled to ``target`` while ``running`` keep serving."""
    problems = [
        f"roles.{r}: the target release {target.release} pins no {r} role; add it or {SWITCH_HINT}" for r in roles if r not in target.roles
    ]
    if problems:
        return problems
    releases: dict[str, ReleaseManifest] = {}
    described: list[tuple[RunningGroup, EffectiveRole]] = []
    for group in running:
        if group.release_file not in releases:
            releases[group.release_file] = load_release(group.release_file)
        eff, drift = running_role(group, releases[group.release_file])
        problems += drift
        described.append((group, eff))
    for role in roles:
        want = target.effective(role)
        for group, peer in described:
            if group.role == role:
                continue  # groups of one role never pair with each other
            # The version is judged by the patch-level rule below; every other aspect as in a release.
            same_version_peer = peer.model_copy(update={"sglang_version": want.sglang_version})
            for problem in compatibility_problems({role: want, group.role: same_version_peer}):
                aspect = problem.split(": ", 1)[1].split("; P/D/E must match", 1)[0]
                problems.append(
                    f"{group.name} ({group.role}, running {releases[group.release_file].release}) vs target {role}: {aspect}; {SWITCH_HINT}"
                )
            step = version_step_problem(f"{group.name} ({group.role})", peer.sglang_version, role, want.sglang_version)
            if step:
                problems.append(step)
    return list(dict.fromkeys(problems))


def lws_template(platform: dict[str, Any], release: ReleaseManifest, role: str) -> dict[str, Any]:
    """``spec.leaderWorkerTemplate`` of the role's LWS on ``release``: what Pulumi will render."""
    from inferplane.builders.pools import leader_worker_set
    from inferplane.launch_worker import worker_config
    from inferplane.spec import parse_platform

    spec = parse_platform(platform)
    pools = dict(spec.pools.items())
    lws = leader_worker_set(spec, role, pools[role], worker_config(role, spec, release), release.effective(role).sglang_image)
    template: dict[str, Any] = lws["spec"]["leaderWorkerTemplate"]
    return template
