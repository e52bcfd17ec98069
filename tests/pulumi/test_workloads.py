"""The workloads each stack registers (Mooncake, pools, gateway, observability, policies) and how
they are wired, proven on the real program under Pulumi mocks: the gateway's worker URLs are the
pools' group leaders, the ConfigMap's addresses are Mooncake's Services, monitors select what runs.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlparse

import pytest

from inferplane.builders.addons import ETCD_CLIENT_PORT, ETCD_NAME
from inferplane.launch_worker import ENV_CONFIG, argv_for, parse_config, sample_env
from inferplane.observability.dashboards import DASHBOARDS
from inferplane.observability.rules import rule_groups
from inferplane.spec import MooncakeHa, PlatformSpec, load_stack_and_release
from tests.pulumi.conftest import Recorder

STACKS = ("poc", "prod")
LWS = "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet"


def spec_of(stack: str) -> PlatformSpec:
    return load_stack_and_release(stack)[0].platform


def ints(value: Any) -> Any:
    """The mock monitor carries numbers as floats (protobuf Struct); compare them as the builders wrote them."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [ints(v) for v in value]
    return value


def objects(rec: Recorder, type_: str, name: str | None = None) -> list[dict[str, Any]]:
    out = [ints(r.inputs) for r in rec.of_type(type_)]
    return [o for o in out if name is None or o["metadata"]["name"] == name]


def one(rec: Recorder, type_: str, name: str) -> dict[str, Any]:
    found = objects(rec, type_, name)
    assert len(found) == 1, f"expected one {type_} named {name}, got {len(found)}"
    return found[0]


def service_ports(svc: dict[str, Any]) -> dict[str, int]:
    return {p["name"]: p["port"] for p in svc["spec"]["ports"]}


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


@pytest.mark.parametrize("stack", STACKS)
def test_one_lws_per_role_sized_and_scheduled_as_the_spec_says(program: Any, stack: str) -> None:
    rec, spec = program(stack), spec_of(stack)
    lws = {o["metadata"]["name"]: o for o in objects(rec, LWS)}
    assert set(lws) == {role for role, _ in spec.pools.items()}
    for role, pool in spec.pools.items():
        obj = lws[role]
        assert obj["spec"]["replicas"] == pool.groups
        tmpl = obj["spec"]["leaderWorkerTemplate"]
        assert tmpl["size"] == pool.nodes_per_group
        assert tmpl["restartPolicy"] == "RecreateGroupOnPodRestart"
        assert obj["metadata"]["annotations"]["scheduling.volcano.sh/queue-name"] == spec.volcano.queue
        for which in ("leaderTemplate", "workerTemplate"):
            pod = tmpl[which]["spec"]
            assert pod["schedulerName"] == "volcano"
            (c,) = pod["containers"]
            limits = c["resources"]["limits"]
            assert limits["nvidia.com/gpu"] == str(pool.gpus_per_node)
            if pool.rdma_resource:
                assert limits[f"rdma/{pool.rdma_resource}"] == "1"
                assert c["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
            volumes = {v["name"]: v for v in pod["volumes"]}
            assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": pool.shm_size}
            assert volumes["models"]["persistentVolumeClaim"]["claimName"] == spec.model_cache.pvc_name
            assert c["envFrom"] == [{"configMapRef": {"name": "sglang-mooncake-env"}}]
            assert c["command"] == ["inferplane", "launch-worker"]
            # Only the leader serves HTTP: only it has ports and HTTP probes.
            assert ("ports" in c) == (which == "leaderTemplate")
            assert ("readinessProbe" in c) == (which == "leaderTemplate")
        startup = tmpl["leaderTemplate"]["spec"]["containers"][0]["startupProbe"]
        assert startup["periodSeconds"] * startup["failureThreshold"] >= pool.startup_timeout_seconds


@pytest.mark.parametrize("stack", STACKS)
def test_every_pod_carries_the_worker_config_of_its_role_and_release(program: Any, stack: str) -> None:
    rec, spec = program(stack), spec_of(stack)
    _, release = load_stack_and_release(stack)
    for obj in objects(rec, LWS):
        role = obj["metadata"]["name"]
        container = obj["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
        env = env_of(container)
        cfg = parse_config(env[ENV_CONFIG])
        assert cfg.role == env["ROLE"] == role
        assert container["image"] == release.effective(role).sglang_image
        args = argv_for(cfg, sample_env(cfg, namespace=spec.namespace))
        assert args[args.index("--port") + 1] == str(container["ports"][0]["containerPort"])


@pytest.mark.parametrize("stack", STACKS)
def test_gateway_routes_to_every_group_leader_with_its_bootstrap_port(program: Any, stack: str) -> None:
    smg_router = pytest.importorskip("smg.launch_router")
    rec, spec = program(stack), spec_of(stack)
    deploy = one(rec, "kubernetes:apps/v1:Deployment", "smg")
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["smg"] and container["args"][0] == "launch"
    routed = smg_router.parse_router_args(container["args"][1:])
    assert routed.pd_disaggregation and not routed.epd_disaggregation

    lws = {o["metadata"]["name"]: o for o in objects(rec, LWS)}
    expected: dict[str, list[tuple[str, int | None]]] = {}
    for role in ("prefill", "decode"):
        obj = lws[role]
        headless = one(rec, "kubernetes:core/v1:Service", role)
        # The names in the URLs resolve: <lws>-<group>.<headless service>.<namespace>, the Service selecting that LWS.
        assert headless["spec"]["clusterIP"] == "None"
        assert headless["spec"]["selector"] == {"leaderworkerset.sigs.k8s.io/name": obj["metadata"]["name"]}
        leader = obj["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
        ports = {p["name"]: p["containerPort"] for p in leader["spec"]["containers"][0]["ports"]}
        bootstrap = int(leader["metadata"]["annotations"]["sglang.ai/bootstrap-port"]) if role == "prefill" else None
        if role == "prefill":
            assert bootstrap == ports["bootstrap"] == spec.pools.prefill.bootstrap_port
        expected[role] = [
            (f"http://{obj['metadata']['name']}-{i}.{headless['metadata']['name']}.{spec.namespace}:{ports['http']}", bootstrap)
            for i in range(obj["spec"]["replicas"])
        ]
    assert routed.prefill_urls == expected["prefill"]
    assert routed.decode_urls == [url for url, _ in expected["decode"]]
    assert (routed.prefill_policy, routed.decode_policy) == (spec.gateway.prefill_policy, spec.gateway.decode_policy)

    # The control-plane key: an env var from the Secret, expanded by the kubelet into the argv.
    env = env_of(container)
    ref = env["SMG_CONTROL_PLANE_ADMIN_KEY"]["secretKeyRef"]
    assert ref["name"] == spec.gateway.api_key_secret
    assert [k[2] for k in routed.control_plane_api_keys] == ["$(SMG_CONTROL_PLANE_ADMIN_KEY)"]
    svc = one(rec, "kubernetes:core/v1:Service", "smg")
    assert service_ports(svc) == {"http": spec.gateway.port, "metrics": spec.gateway.metrics_port}
    assert deploy["spec"]["replicas"] == spec.gateway.replicas


def test_poc_is_epd_the_language_only_prefill_reaches_every_encoder_group(program: Any) -> None:
    rec, spec = program("poc"), spec_of("poc")
    lws = {o["metadata"]["name"]: o for o in objects(rec, LWS)}
    encoder = lws["encoder"]
    enc_port = encoder["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]["ports"][0]["containerPort"]
    prefill_env = env_of(lws["prefill"]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0])
    cfg = parse_config(prefill_env[ENV_CONFIG])
    assert list(cfg.encoder_urls) == [f"http://encoder-{i}.encoder.{spec.namespace}:{enc_port}" for i in range(encoder["spec"]["replicas"])]
    args = argv_for(cfg, sample_env(cfg, namespace=spec.namespace))
    assert "--language-only" in args
    encoder_cfg = parse_config(env_of(encoder["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0])[ENV_CONFIG])
    assert "--encoder-only" in argv_for(encoder_cfg, sample_env(encoder_cfg, namespace=spec.namespace))


@pytest.mark.parametrize("stack", STACKS)
def test_mooncake_configmap_points_at_mooncakes_services(program: Any, stack: str) -> None:
    rec, spec = program(stack), spec_of(stack)
    data = one(rec, "kubernetes:core/v1:ConfigMap", "sglang-mooncake-env")["data"]
    master_svc = one(rec, "kubernetes:core/v1:Service", "mooncake-master")
    ports = service_ports(master_svc)
    assert data["MOONCAKE_MASTER_METRICS_PORT"] == str(ports["metrics"])
    assert data["MOONCAKE_PROTOCOL"] == spec.mooncake.protocol
    if isinstance(spec.mooncake, MooncakeHa):
        sts = one(rec, "kubernetes:apps/v1:StatefulSet", "mooncake-master")
        assert sts["spec"]["replicas"] == spec.mooncake.masters
        args = sts["spec"]["template"]["spec"]["containers"][0]["args"]
        assert f"--cluster_id={data['MC_STORE_CLUSTER_ID']}" in args
        assert "--enable_oplog=true" in args and "--rpc_address=$(POD_IP)" in args
        etcd_svc = one(rec, "kubernetes:core/v1:Service", ETCD_NAME)
        etcd_sts = one(rec, "kubernetes:apps/v1:StatefulSet", ETCD_NAME)
        members = [
            f"{ETCD_NAME}-{i}.{etcd_svc['metadata']['name']}.{spec.namespace}.svc:{service_ports(etcd_svc)['client']}"
            for i in range(etcd_sts["spec"]["replicas"])
        ]
        assert service_ports(etcd_svc)["client"] == ETCD_CLIENT_PORT
        assert data["MOONCAKE_MASTER"] == "etcd://" + ";".join(members)
        assert f"--ha_backend_connstring={';'.join(members)}" in args
        assert data["MOONCAKE_TE_META_DATA_SERVER"] == "P2PHANDSHAKE"
    else:
        host, _, port = data["MOONCAKE_MASTER"].rpartition(":")
        assert host == f"{master_svc['metadata']['name']}.{spec.namespace}.svc" and int(port) == ports["rpc"]
        meta = urlparse(data["MOONCAKE_TE_META_DATA_SERVER"])
        assert (meta.hostname, meta.port, meta.path) == (host, ports["metadata"], "/metadata")
        deploy = one(rec, "kubernetes:apps/v1:Deployment", "mooncake-master")
        args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
        assert f"--rpc_port={ports['rpc']}" in args and f"--http_metadata_server_port={ports['metadata']}" in args
        assert "--enable_http_metadata_server=true" in args
    assert master_svc["spec"]["selector"] == next(
        o["spec"]["selector"]["matchLabels"]
        for t in ("kubernetes:apps/v1:StatefulSet", "kubernetes:apps/v1:Deployment")
        for o in objects(rec, t, "mooncake-master")
    )


@pytest.mark.parametrize("stack", STACKS)
def test_observability_scrapes_what_runs_and_loads_our_rules_and_dashboards(program: Any, stack: str) -> None:
    rec, spec = program(stack), spec_of(stack)
    release_label = spec.observability.release_label
    releases = {r.inputs["name"]: r.inputs for r in rec.of_type("kubernetes:helm.sh/v3:Release")}
    assert release_label in releases and releases[release_label]["chart"] == "kube-prometheus-stack"
    rule = one(rec, "kubernetes:monitoring.coreos.com/v1:PrometheusRule", "inferplane-alerts")
    assert rule["metadata"]["labels"]["release"] == release_label
    assert rule["spec"]["groups"] == rule_groups(spec.observability.thresholds, kv_over_rdma=spec.mooncake.protocol == "rdma")
    jobs = {}
    for type_ in ("kubernetes:monitoring.coreos.com/v1:ServiceMonitor", "kubernetes:monitoring.coreos.com/v1:PodMonitor"):
        for mon in objects(rec, type_):
            assert mon["metadata"]["labels"]["release"] == release_label
            endpoints = mon["spec"].get("endpoints") or mon["spec"]["podMetricsEndpoints"]
            (job,) = [r["replacement"] for r in endpoints[0]["relabelings"] if r.get("targetLabel") == "job"]
            jobs[job] = mon
    assert set(jobs) == {"sglang", "smg", "mooncake-master"} | ({"etcd"} if isinstance(spec.mooncake, MooncakeHa) else set())
    # Each ServiceMonitor selects a Service that has the named port it scrapes.
    services = objects(rec, "kubernetes:core/v1:Service")
    for job, mon in jobs.items():
        if "endpoints" not in mon["spec"]:
            continue
        match = mon["spec"]["selector"]["matchLabels"]
        selected = [s for s in services if match.items() <= s["metadata"]["labels"].items()]
        assert selected, f"ServiceMonitor {job} selects no Service"
        assert all(mon["spec"]["endpoints"][0]["port"] in service_ports(s) for s in selected)
    # The engine PodMonitor scrapes leaders only, on the port the leader template names.
    assert jobs["sglang"]["spec"]["selector"]["matchLabels"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
    dashboards = [c for c in objects(rec, "kubernetes:core/v1:ConfigMap") if c["metadata"]["labels"].get("grafana_dashboard") == "1"]
    titles = sorted(json.loads(next(iter(c["data"].values())))["title"] for c in dashboards)
    assert titles == sorted(d.title for d in DASHBOARDS) and len(titles) == 6


@pytest.mark.parametrize("stack", STACKS)
def test_policies_fence_mooncake_engines_and_etcd(program: Any, stack: str) -> None:
    rec, spec = program(stack), spec_of(stack)
    nps = {o["metadata"]["name"]: o for o in objects(rec, "kubernetes:networking.k8s.io/v1:NetworkPolicy")}
    assert nps["default-deny-ingress"]["spec"]["podSelector"] == {}
    mc = nps["mooncake-master"]["spec"]
    mc_ports = service_ports(one(rec, "kubernetes:core/v1:Service", "mooncake-master"))
    (from_engines,) = [r for r in mc["ingress"] if r["from"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "sglang"}}}]]
    assert sorted(p["port"] for p in from_engines["ports"]) == sorted(p for n, p in mc_ports.items() if n != "metrics")
    engines = nps["sglang-engines"]["spec"]
    http_rule = engines["ingress"][0]
    assert {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "smg"}}} in http_rule["from"]
    http_ports = {pool.port for _, pool in spec.pools.items()}
    assert {p["port"] for p in http_rule["ports"]} == http_ports
    # The engine-to-engine rule never opens an HTTP port.
    for p in engines["ingress"][1]["ports"]:
        assert not any(p["port"] <= h <= p.get("endPort", p["port"]) for h in http_ports)
    assert ("etcd" in nps) == isinstance(spec.mooncake, MooncakeHa)
    pdbs = {o["metadata"]["name"]: o for o in objects(rec, "kubernetes:policy/v1:PodDisruptionBudget")}
    for role, pool in spec.pools.items():
        assert pdbs[f"{role}-groups"]["spec"]["maxUnavailable"] == (pool.groups - pool.min_groups) * pool.nodes_per_group
    role = one(rec, "kubernetes:rbac.authorization.k8s.io/v1:Role", "inferplane-runbooks")
    verbs = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    assert ("leaderworkerset.x-k8s.io", "leaderworkersets", "patch") in verbs
    assert not any(v in ("*", "escalate", "bind") or r == "secrets" for _, r, v in verbs)
    for sa in objects(rec, "kubernetes:core/v1:ServiceAccount"):
        if sa["metadata"]["namespace"] == spec.namespace:
            assert sa["automountServiceAccountToken"] is False, sa["metadata"]["name"]


@pytest.mark.parametrize("stack", STACKS)
def test_mooncake_master_is_not_pid_1_so_failover_drills_can_signal_it(program: Any, stack: str) -> None:
    masters = [
        obj
        for kind in ("kubernetes:apps/v1:Deployment", "kubernetes:apps/v1:StatefulSet")
        for obj in objects(program(stack), kind)
        if obj["metadata"]["name"].startswith("mooncake-master")
    ]
    assert masters
    assert all(m["spec"]["template"]["spec"]["shareProcessNamespace"] is True for m in masters)
