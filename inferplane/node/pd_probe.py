"""Pinned PD requests: one prefill and one decode chosen by us, not by the gateway.

A recreated group is out of the gateway while it is verified, so it is asked directly, exactly as
SMG would ask it (runtime-interfaces.md S6): the same body, carrying ``bootstrap_host`` (the
prefill's host), ``bootstrap_port`` (the prefill's KV bootstrap port) and a fresh
``bootstrap_room``, POSTed to the prefill and the decode at the same moment. The decode's answer
is what a client would see. An HTTP 200 whose body is an error is a failure, as is an answer
without output.

Used for the golden prompts (deterministic at temperature 0, compared with a baseline recorded per
model revision) and for the KV-transfer test (the new group against every peer of the other role).

Stdlib only: Ansible ships it as ``ansible.module_utils.pd_probe``.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlparse

try:
    from ansible.module_utils.smg_api import http
except ImportError:  # on the controller, outside Ansible
    from inferplane.node.smg_api import http

# What must be identical between two runs of a golden prompt on the same model revision.
COMPARED = ("text", "output_ids", "prompt_tokens", "completion_tokens", "finish_reason")


@dataclass(frozen=True)
class Prefill:
    name: str
    url: str
    bootstrap_port: int


@dataclass(frozen=True)
class Decode:
    name: str
    url: str


@dataclass
class PairResult:
    prefill: str
    decode: str
    room: int
    ok: bool
    prefill_status: int
    decode_status: int
    output: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def generate_body(text: str, max_new_tokens: int) -> dict[str, Any]:
    # Greedy: the answer is a function of weights and prompt only, so it can be compared.
    return {"text": text, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0}, "stream": False}


def body_error(status: int, body: Any) -> str | None:
    """Why an answer is not a success, or None."""
    if status == 0:
        return f"no answer ({body})"
    if status != 200:
        return f"HTTP {status}: {str(body)[:200]}"
    if not isinstance(body, dict):
        return f"HTTP 200 with a body that is not a JSON object: {str(body)[:200]}"
    if "error" in body:
        return f"HTTP 200 with an error body: {str(body['error'])[:200]}"
    meta = body.get("meta_info") or {}
    reason = meta.get("finish_reason")
    if isinstance(reason, dict) and reason.get("type") == "abort":
        return f"HTTP 200 but aborted: {str(reason.get('message'))[:200]}"
    return None


def normalise(body: dict[str, Any]) -> dict[str, Any]:
    meta = body.get("meta_info") or {}
    return {
        "text": body.get("text"),
        "output_ids": body.get("output_ids"),
        "prompt_tokens": meta.get("prompt_tokens"),
        "completion_tokens": meta.get("completion_tokens"),
        "finish_reason": meta.get("finish_reason"),
    }


def pd_request(prefill: Prefill, decode: Decode, body: dict[str, Any], timeout: float = 60.0, room: int | None = None) -> PairResult:
    """Send ``body`` to ``prefill`` and ``decode`` concurrently with explicit bootstrap fields."""
    room = random.getrandbits(63) if room is None else room
    full = {**body, "bootstrap_host": urlparse(prefill.url).hostname, "bootstrap_port": prefill.bootstrap_port, "bootstrap_room": room}
    answers: dict[str, tuple[int, Any]] = {}

    def post(which: str, url: str) -> None:
        answers[which] = http("POST", url.rstrip("/") + "/generate", full, timeout=timeout)

    threads = [threading.Thread(target=post, args=(w, u)) for w, u in (("prefill", prefill.url), ("decode", decode.url))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (p_status, p_body), (d_status, d_body) = answers["prefill"], answers["decode"]
    result = PairResult(prefill.name, decode.name, room, ok=False, prefill_status=p_status, decode_status=d_status)
    p_err, d_err = body_error(p_status, p_body), body_error(d_status, d_body)
    if p_err:
        result.errors.append(f"prefill {prefill.name}: {p_err}")
    if d_err:
        result.errors.append(f"decode {decode.name}: {d_err}")
    if not d_err:
        result.output = normalise(d_body)
        if not result.output["output_ids"] and not result.output["text"]:
            result.errors.append(f"decode {decode.name}: answer without output")
    result.ok = not result.errors
    return result


# ---- golden prompts ----------------------------------------------------------------------------


def run_golden(prompts: Sequence[dict[str, Any]], prefill: Prefill, decode: Decode, timeout: float = 60.0) -> dict[str, PairResult]:
    """Each prompt ({name, text, max_new_tokens}) once through the pinned pair."""
    return {p["name"]: pd_request(prefill, decode, generate_body(p["text"], int(p["max_new_tokens"])), timeout) for p in prompts}


def baseline_document(
    prompts: Sequence[dict[str, Any]], results: dict[str, PairResult], model: str, revision: str, recorded_at: str
) -> dict[str, Any]:
    first = next(iter(results.values()))
    return {
        "model": model,
        "revision": revision,
        "recorded_at": recorded_at,
        "recorded_with": {"prefill": first.prefill, "decode": first.decode},
        "prompts": {
            p["name"]: {"text": p["text"], "max_new_tokens": int(p["max_new_tokens"]), "expected": results[p["name"]].output}
            for p in prompts
        },
    }


def compare_golden(baseline: dict[str, Any], prompts: Sequence[dict[str, Any]], results: dict[str, PairResult]) -> list[str]:
    """One line per difference between this run and the baseline recorded for the model revision."""
    problems: list[str] = []
    recorded = baseline.get("prompts") or {}
    for p in prompts:
        name = p["name"]
        got = results[name]
        if not got.ok:
            problems.append(f"golden '{name}' via {got.prefill}->{got.decode}: {'; '.join(got.errors)}")
            continue
        ref = recorded.get(name)
        if ref is None or ref.get("text") != p["text"] or int(ref.get("max_new_tokens", -1)) != int(p["max_new_tokens"]):
            problems.append(f"golden '{name}': the baseline holds no entry for this prompt and length; record it again on a known-good set")
            continue
        expected = ref.get("expected") or {}
        for key in COMPARED:
            if got.output.get(key) != expected.get(key):
                problems.append(
                    f"golden '{name}' via {got.prefill}->{got.decode}: {key} {_short(got.output.get(key))} "
                    f"differs from the baseline's {_short(expected.get(key))}"
                )
    return problems


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# ---- KV-transfer test --------------------------------------------------------------------------


def sample_peers(peers: Sequence[Any], limit: int, seed: str) -> list[Any]:
    """Every peer, or on a big pool ``limit`` of them chosen reproducibly per group (``seed``)."""
    if limit <= 0 or len(peers) <= limit:
        return list(peers)
    return sorted(random.Random(seed).sample(list(peers), limit), key=lambda p: p.name)


def kv_matrix(pairs: Sequence[tuple[Prefill, Decode]], body: dict[str, Any], timeout: float = 60.0) -> tuple[list[PairResult], list[str]]:
    """The same greedy request through every pair: each must complete and all must agree (a KV
    transfer that delivers wrong bytes to one peer shows as a different answer there)."""
    results = [pd_request(p, d, body, timeout) for p, d in pairs]
    problems = [f"KV transfer {r.prefill}->{r.decode} (room {r.room}): {'; '.join(r.errors)}" for r in results if not r.ok]
    good = [r for r in results if r.ok]
    if good:
        reference = good[0]
        for r in good[1:]:
            if r.output.get("output_ids") != reference.output.get("output_ids"):
                problems.append(
                    f"KV transfer {r.prefill}->{r.decode}: answer differs from {reference.prefill}->{reference.decode} for the same prompt"
                )
    return results, problems
