"""The rules under the upgrade and blue/green runbooks, without a platform: P/D compatibility with
running peers, the engine-metrics drain and arrival arithmetic, golden comparison, the rollout
lease, the rollout order and pairs, and the Kubernetes templates and set objects."""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferplane.manifest import load_release, parse_release
from inferplane.node import engine_metrics as em
from inferplane.node import pd_probe, upgrade_lock
from inferplane.rollout import RunningGroup, lws_template, peer_problems
from inferplane.spec import REPO_ROOT, load_stack

sys.path.insert(0, str(REPO_ROOT / "plugins" / "filter"))
import rollout as filters

LOCAL = REPO_ROOT / "releases" / "local.yaml"


def variant(tmp_path: Path, **changes: Any) -> Path:
    data = yaml.safe_load(LOCAL.read_text())
    for dotted, value in changes.items():
        node = data
        *parents, leaf = dotted.split("__")
        for part in parents:
            node = node[part]
        node[leaf] = value
    path = tmp_path / f"r{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def running(role: str, release: Path, **info: Any) -> RunningGroup:
    base = {"version": "0.5.23", "revision": None, "model_path": "/models/emu-tiny", "page_size": 1}
    return RunningGroup(f"{role}-0", role, str(release), base | info)


# ---- P/D compatibility with running peers --------------------------------------------------------


def test_a_patch_release_may_pair_with_running_peers(tmp_path: Path) -> None:
    target = load_release(variant(tmp_path, runtime__sglang_version="0.5.24"))
    assert peer_problems(target, ["prefill"], [running("decode", LOCAL), running("prefill", LOCAL)]) == []


@pytest.mark.parametrize(
    ("change", "aspect"),
    [
        ({"runtime__sglang_version": "0.6.0"}, "another minor release"),
        ({"runtime__mooncake_te_abi": "te-0.4.0"}, "Mooncake transfer-engine ABI"),
        ({"models__emu-tiny__revision": "9a" * 20}, "model revision"),
        ({"models__emu-tiny__kv_layout__page_size": 16}, "KV layout"),
    ],
)
def test_what_cannot_pair_with_the_running_peers_is_refused_toward_blue_green(tmp_path: Path, change: dict[str, Any], aspect: str) -> None:
    target = load_release(variant(tmp_path, **change))
    problems = peer_problems(target, ["decode"], [running("prefill", LOCAL)])
    assert problems and any(aspect in p for p in problems), problems
    assert all("switch-model.yml" in p for p in problems)
    assert all("prefill-0" in p for p in problems)


def test_a_peer_reporting_other_weights_than_its_release_is_drift(tmp_path: Path) -> None:
    target = load_release(variant(tmp_path, runtime__sglang_version="0.5.24"))
    problems = peer_problems(target, ["decode"], [running("prefill", LOCAL, revision="0" * 40)])
    assert any("serves model revision" in p and "prefill-0" in p for p in problems), problems


def test_groups_of_the_upgraded_role_are_not_peers(tmp_path: Path) -> None:
    target = load_release(variant(tmp_path, runtime__mooncake_te_abi="te-0.4.0"))
    assert peer_problems(target, ["prefill"], [running("prefill", LOCAL)]) == []


# ---- engine metrics --------------------------------------------------------------------------------

METRICS = """# HELP sglang:num_running_reqs x
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{dp_rank="0",engine_type="decode",model_name="m"} 2.0
sglang:num_running_reqs{dp_rank="1",engine_type="decode",model_name="m"} 1.0
sglang:num_queue_reqs{engine_type="decode",model_name="m"} 0.0
sglang:num_decode_transfer_queue_reqs{engine_type="decode",model_name="m"} 1.0
sglang:num_requests_total{is_streaming="false",model_name="m"} 40.0
sglang:num_requests_total{is_streaming="true",model_name="m"} 2.0
sglang:num_aborted_requests_total{model_name="m"} 1.0
"""


def test_metrics_are_summed_over_ranks_and_label_sets() -> None:
    sample = em.parse(METRICS)
    assert em.in_flight(sample) == {"num_running_reqs": 3.0, "num_queue_reqs": 0.0, "num_decode_transfer_queue_reqs": 1.0}
    assert em.finished(sample) == 43.0


def test_label_values_may_hold_braces_spaces_and_quotes() -> None:
    (name, labels, value), *_ = em.series('m{a="x} y 1.0",b="q\\"z"} 7\n')
    assert (name, labels, value) == ("m", {"a": "x} y 1.0", "b": 'q"z'}, 7.0)


def test_new_arrivals_count_completions_beyond_what_was_in_flight() -> None:
    before = em.parse(METRICS)  # 4 in flight, 43 finished
    idle_after_in_flight_done = {**before, "sglang:num_running_reqs": 0.0, "sglang:num_decode_transfer_queue_reqs": 0.0}
    assert em.new_arrivals(before, idle_after_in_flight_done | {"sglang:num_requests_total": 46.0}) == 0
    assert em.new_arrivals(before, idle_after_in_flight_done | {"sglang:num_requests_total": 48.0}) == 2


class FakeEngine:
    """Scrapes answered from a script of in-flight counts, on a fake clock."""

    def __init__(self, running: list[float]) -> None:
        self.running = running
        self.now = 0.0

    def scrape(self, _url: str) -> dict[str, float]:
        value = self.running.pop(0) if len(self.running) > 1 else self.running[0]
        return {"sglang:num_running_reqs": value, "sglang:num_queue_reqs": 0.0, "sglang:num_requests_total": 10.0}

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_drain_waits_for_a_whole_settle_window_of_zeros() -> None:
    engine = FakeEngine([2, 1, 0, 1, 0, 0, 0, 0, 0, 0])
    result = em.drain("x", settle_s=2.0, timeout_s=60, poll_s=0.5, scraper=engine.scrape, clock=lambda: engine.now, sleep=engine.sleep)
    assert result.idle and result.peak["num_running_reqs"] == 2
    # The 0 at t=1.0 was interrupted at t=1.5; the window that counts starts at t=2.0.
    assert result.waited_s == pytest.approx(4.0)


def test_drain_gives_up_at_the_deadline_and_says_what_runs() -> None:
    engine = FakeEngine([3])
    result = em.drain("x", settle_s=1.0, timeout_s=5.0, poll_s=0.5, scraper=engine.scrape, clock=lambda: engine.now, sleep=engine.sleep)
    assert not result.idle and result.last["num_running_reqs"] == 3 and result.waited_s >= 5.0


def test_an_unreachable_engine_is_idle_only_when_allowed() -> None:
    def down(url: str) -> dict[str, float]:
        raise em.MetricsError(f"{url}: connection refused")

    clock = iter(range(100))
    assert em.drain("x", 1.0, 3.0, scraper=down, clock=lambda: next(clock), sleep=lambda _s: None, unreachable_is_idle=True).idle
    clock = iter(range(100))
    assert not em.drain("x", 1.0, 3.0, scraper=down, clock=lambda: next(clock), sleep=lambda _s: None).idle


# ---- golden answers ---------------------------------------------------------------------------------


def answer(tokens: list[int], reason: str = "length") -> dict[str, Any]:
    return {
        "text": " ".join(map(str, tokens)),
        "output_ids": tokens,
        "meta_info": {"prompt_tokens": 5, "completion_tokens": len(tokens), "finish_reason": {"type": reason, "length": len(tokens)}},
    }


def test_a_200_with_an_error_body_is_a_failure() -> None:
    assert pd_probe.body_error(200, {"error": {"message": "boom"}}) == "HTTP 200 with an error body: {'message': 'boom'}"
    assert "aborted" in (pd_probe.body_error(200, {"meta_info": {"finish_reason": {"type": "abort", "message": "x"}}}) or "")
    assert pd_probe.body_error(200, answer([1, 2])) is None


def test_golden_comparison_names_the_prompt_the_pair_and_the_field() -> None:
    prompts = [{"name": "short", "text": "t", "max_new_tokens": 2}]
    good = pd_probe.PairResult("p0", "d0", 1, True, 200, 200, output=pd_probe.normalise(answer([1, 2])))
    baseline = pd_probe.baseline_document(prompts, {"short": good}, "m", "rev", "now")
    assert pd_probe.compare_golden(baseline, prompts, {"short": good}) == []
    other = pd_probe.PairResult("p1", "d0", 2, True, 200, 200, output=pd_probe.normalise(answer([1, 3])))
    problems = pd_probe.compare_golden(baseline, prompts, {"short": other})
    assert any("golden 'short' via p1->d0: output_ids" in p for p in problems), problems
    changed_prompt = [{"name": "short", "text": "another", "max_new_tokens": 2}]
    assert "record it again" in pd_probe.compare_golden(baseline, changed_prompt, {"short": good})[0]


def test_peer_samples_are_reproducible_per_group() -> None:
    peers = [pd_probe.Decode(f"decode-{i}", f"http://d{i}") for i in range(10)]
    a = pd_probe.sample_peers(peers, 3, "prefill-4")
    assert a == pd_probe.sample_peers(peers, 3, "prefill-4") and len(a) == 3
    assert pd_probe.sample_peers(peers, 0, "x") == peers


# ---- the rollout lease --------------------------------------------------------------------------------


def test_a_live_lease_refuses_and_names_its_holder(tmp_path: Path) -> None:
    path = tmp_path / "rollout-decode.json"
    upgrade_lock.acquire(path, "decode", "alice", "run-1", 3600, os.getpid(), now=1000.0)
    with pytest.raises(upgrade_lock.LockHeld) as exc:
        upgrade_lock.acquire(path, "decode", "bob", "run-2", 3600, os.getpid(), now=1001.0)
    assert "alice" in str(exc.value) and "run-1" in str(exc.value) and f"pid {os.getpid()}" in str(exc.value)
    holder, _ = upgrade_lock.acquire(path, "decode", "alice", "run-1", 3600, os.getpid(), now=1500.0)
    assert holder.acquired_at == 1000.0 and holder.renewed_at == 1500.0


def test_an_expired_or_orphaned_lease_is_taken_over_and_reported(tmp_path: Path) -> None:
    path = tmp_path / "rollout-prefill.json"
    upgrade_lock.acquire(path, "prefill", "alice", "run-1", 60, os.getpid(), now=1000.0)
    _, taken = upgrade_lock.acquire(path, "prefill", "bob", "run-2", 60, os.getpid(), now=1100.0)
    assert taken is not None and taken["run_id"] == "run-1" and "expired" in taken["stale_because"]
    dead = 2**22 + 12345  # beyond pid_max: no such process
    upgrade_lock.acquire(tmp_path / "other.json", "prefill", "carol", "run-3", 3600, dead, now=2000.0)
    _, taken = upgrade_lock.acquire(tmp_path / "other.json", "prefill", "dave", "run-4", 3600, os.getpid(), now=2001.0)
    assert taken is not None and "is gone" in taken["stale_because"]


def test_renew_and_release_belong_to_the_holder(tmp_path: Path) -> None:
    path = tmp_path / "l.json"
    upgrade_lock.acquire(path, "decode", "alice", "run-1", 60, os.getpid(), now=1000.0)
    with pytest.raises(upgrade_lock.LockLost):
        upgrade_lock.renew(path, "run-2")
    assert not upgrade_lock.release(path, "run-2") and path.exists()
    assert upgrade_lock.release(path, "run-1") and not path.exists()


# ---- order, pairs, plan (the Ansible filters) ----------------------------------------------------------


def group(name: str, **extra: Any) -> dict[str, Any]:
    role, _, index = name.rpartition("-")
    url = f"http://127.0.0.1:{30000 + int(index) + (100 if role == 'decode' else 0)}"
    return {
        "name": name,
        "role": role,
        "index": int(index),
        "url": url,
        "direct_url": url,
        "bootstrap_port": 9000 if role == "prefill" else None,
    } | extra


GROUPS = [group(n) for n in ("prefill-0", "prefill-1", "prefill-2", "decode-0", "decode-1")]


def test_the_order_is_prefill_then_decode_each_from_the_highest_index() -> None:
    assert [g["name"] for g in filters.rollout_order(GROUPS, ["decode", "prefill"])] == [
        "prefill-2",
        "prefill-1",
        "prefill-0",
        "decode-1",
        "decode-0",
    ]
    assert [g["name"] for g in filters.rollout_order(GROUPS, ["decode"], "decode-0")] == ["decode-0"]
    with pytest.raises(Exception, match="not a group of pool"):
        filters.rollout_order(GROUPS, ["decode"], "prefill-0")


def test_kv_pairs_join_a_group_with_every_peer_of_the_other_role() -> None:
    pairs = filters.kv_pairs(GROUPS[0], GROUPS)
    assert [(p["prefill"]["name"], p["decode"]["name"]) for p in pairs] == [("prefill-0", "decode-0"), ("prefill-0", "decode-1")]
    pairs = filters.kv_pairs(GROUPS[4], GROUPS, sample=2, seed="s")
    assert len(pairs) == 2 and {p["decode"]["name"] for p in pairs} == {"decode-1"}


def test_the_plan_skips_only_groups_on_the_target_and_serving(tmp_path: Path) -> None:
    target = {"prefill": {"sglang_version": "0.5.24", "release": "r"}, "decode": {"sglang_version": "0.5.24", "release": "r"}}
    release = str(tmp_path / "r.yaml")
    groups = [
        group("prefill-0", version="0.5.24", release_file=release, image=""),
        group("prefill-1", version="0.5.24", release_file=release, image=""),
        group("decode-0", version="0.5.23", release_file=str(LOCAL), image=""),
    ]
    plan = {g["name"]: g for g in filters.rollout_plan(groups, target, release, [groups[0]["url"], groups[2]["url"]])}
    assert plan["prefill-0"]["action"] == "skip"
    assert plan["prefill-1"]["action"] == "upgrade" and "out of traffic" in plan["prefill-1"]["plan_line"]
    assert plan["decode-0"]["action"] == "upgrade" and "0.5.23 -> 0.5.24" in plan["decode-0"]["plan_line"]


def test_a_partition_step_may_not_rebuild_a_higher_group_not_yet_done() -> None:
    pool = [group("decode-0"), group("decode-1", on_target=False), group("decode-2", on_target=True)]
    assert filters.lws_behind(pool, pool[0]) == ["decode-1"]
    assert filters.lws_behind(pool, pool[1]) == []


def pod(uid: str, revision: str, ready: bool, leader: bool = True) -> dict[str, Any]:
    labels = {filters.LWS_HASH: revision, filters.LWS_WORKER_INDEX: "0" if leader else "1"}
    return {
        "metadata": {"uid": uid, "labels": labels},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def test_a_group_counts_as_rebuilt_only_when_every_pod_is_new_on_one_new_revision_and_ready() -> None:
    before = [pod("a", "old", True), pod("b", "old", True, leader=False)]
    assert filters.lws_group_rebuilt([pod("c", "new", True), pod("d", "new", True, leader=False)], before, 2)
    assert not filters.lws_group_rebuilt([pod("c", "new", True), pod("b", "old", True, leader=False)], before, 2)
    assert not filters.lws_group_rebuilt([pod("c", "new", True), pod("d", "new", False, leader=False)], before, 2)
    assert not filters.lws_group_rebuilt([pod("c", "new", True)], before, 2)


# ---- Kubernetes: the LWS template and the blue/green set ------------------------------------------------


@pytest.fixture(scope="module")
def prod() -> tuple[dict[str, Any], Path]:
    stack = load_stack("prod")
    return stack.platform.model_dump(mode="json"), stack.release_path


def test_the_lws_template_is_the_builders_and_follows_the_release(prod: tuple[dict[str, Any], Path], tmp_path: Path) -> None:
    platform, release_path = prod
    release = load_release(release_path)
    current = lws_template(platform, release, "decode")
    data = yaml.safe_load(release_path.read_text())
    data["runtime"]["sglang_version"] = "0.5.24"
    data["runtime"]["sglang_image"] = data["runtime"]["sglang_image"].split("@")[0] + "@sha256:" + "ef" * 32
    nxt = lws_template(platform, parse_release(yaml.safe_dump(data)), "decode")
    assert current != nxt
    images = {c["image"] for t in ("leaderTemplate", "workerTemplate") for c in nxt[t]["spec"]["containers"]}
    assert images == {data["runtime"]["sglang_image"]}
    # Only the image and the version inside the worker config differ.
    scrub = (
        json.dumps(current).replace(release.runtime.sglang_image, data["runtime"]["sglang_image"]).replace('\\"0.5.23\\"', '\\"0.5.24\\"')
    )
    assert json.loads(scrub) == nxt


def test_a_blue_green_set_points_only_into_itself_and_validates(prod: tuple[dict[str, Any], Path], shared_dir: Path) -> None:
    from inferplane.bluegreen import front_selectors, set_objects
    from inferplane.validate import Validator, crd_index

    platform, release_path = prod
    objects = set_objects(platform, load_release(release_path), "green")
    names = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert {("LeaderWorkerSet", "prefill-green"), ("LeaderWorkerSet", "decode-green"), ("Deployment", "smg-green")} <= names
    text = json.dumps(objects)
    ns = platform["namespace"]
    for role in ("prefill", "decode"):
        assert f"{role}-0.{role}.{ns}" not in text  # no stack leader URL is left
        assert f"{role}-green-0.{role}-green.{ns}" in text
    smg = next(o for o in objects if o["kind"] == "Deployment")
    labels = smg["spec"]["template"]["metadata"]["labels"]
    selectors = front_selectors("green")
    assert all(labels.get(k) == v for k, v in selectors["green"].items())
    assert all(labels.get(k) == v for k, v in selectors["canary"].items())
    assert not all(labels.get(k) == v for k, v in selectors["blue"].items())
    validator = Validator("1.33", crd_index(str((shared_dir / "schemas" / "crds").resolve())))
    for obj in copy.deepcopy(objects):
        validator.check_object("set.yaml", obj)
    assert [str(p) for p in validator.report.problems] == []
    with pytest.raises(ValueError, match="set name"):
        set_objects(platform, load_release(release_path), "Green!")


def test_the_front_selector_patch_removes_the_component_for_the_canary() -> None:
    assert filters.front_selector("green", "canary") == {"app.kubernetes.io/name": "smg", "app.kubernetes.io/component": None}
    assert filters.front_selector("green", "green")["app.kubernetes.io/component"] == "gateway-green"
