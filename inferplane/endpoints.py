"""Names and addresses that wire the workloads together: the one place they are derived.

The pools builder names the LWS objects, the gateway builder lists their group leaders, the
launch-worker gives the language-only prefill its encoder URLs, the Mooncake builder and the
``sglang-mooncake-env`` ConfigMap agree on the master's address: all from here, so a rename
cannot leave one side pointing at the old name.

LWS naming (k8s-addons.md section 2): the LWS ``<role>`` has group leaders ``<role>-<i>`` reachable at
``<role>-<i>.<role>.<namespace>`` through the headless Service ``<role>``; workers are ``<role>-<i>-<j>``.
"""

from __future__ import annotations

from inferplane.spec import MooncakeHa, PlatformSpec, Pool

ENGINE_APP = "sglang"
"""``app.kubernetes.io/name`` of every engine pod (prefill, decode, encoder)."""
ROLE_LABEL = "inferplane.io/role"
GATEWAY_APP = "smg"
MOONCAKE_MASTER = "mooncake-master"
MOONCAKE_ENV_CONFIGMAP = "sglang-mooncake-env"
DIST_INIT_PORT = 5000
"""torch.distributed rendezvous port on a multi-node group's leader (``--dist-init-addr``)."""
BOOTSTRAP_PORT_ANNOTATION = "sglang.ai/bootstrap-port"
"""Where SMG's Kubernetes discovery reads a prefill's KV bootstrap port (runtime-interfaces.md 4.6)."""


def pool_name(role: str) -> str:
    return role


def leader_host(namespace: str, role: str, group: int) -> str:
    name = pool_name(role)
    return f"{name}-{group}.{name}.{namespace}"


def leader_url(spec: PlatformSpec, role: str, group: int) -> str:
    pool = _pool(spec, role)
    return f"http://{leader_host(spec.namespace, role, group)}:{pool.port}"


def prefill_workers(spec: PlatformSpec) -> list[tuple[str, int | None]]:
    """(URL, bootstrap port) of every prefill group leader: one SMG ``--prefill`` each."""
    pool = spec.pools.prefill
    return [(leader_url(spec, "prefill", i), pool.bootstrap_port) for i in range(pool.groups)]


def decode_workers(spec: PlatformSpec) -> list[str]:
    return [leader_url(spec, "decode", i) for i in range(spec.pools.decode.groups)]


def encoder_urls(spec: PlatformSpec) -> list[str]:
    """The language-only prefill's ``--encoder-urls`` (EPD); empty without an encoder pool."""
    pool = spec.pools.encoder
    return [] if pool is None else [leader_url(spec, "encoder", i) for i in range(pool.groups)]


def mooncake_host(spec: PlatformSpec) -> str:
    return f"{MOONCAKE_MASTER}.{spec.namespace}.svc"


def mooncake_etcd_endpoints(spec: PlatformSpec) -> tuple[str, ...]:
    # The etcd StatefulSet belongs to the add-ons; its member addresses are derived there.
    from inferplane.builders.addons import etcd_endpoints

    return etcd_endpoints(spec)


def mooncake_master_address(spec: PlatformSpec) -> str:
    """MOONCAKE_MASTER: host:port of the single master, or ``etcd://h1:2379;h2:2379`` in HA, where
    clients look the leader up under the masters' cluster id."""
    mc = spec.mooncake
    if isinstance(mc, MooncakeHa):
        return "etcd://" + ";".join(mooncake_etcd_endpoints(spec))
    return f"{mooncake_host(spec)}:{mc.rpc_port}"


def mooncake_metadata_server(spec: PlatformSpec) -> str:
    """MOONCAKE_TE_META_DATA_SERVER. poc: the master's embedded HTTP metadata server. HA: each
    master's embedded server is its own store and would be lost on failover, so transfer engines
    exchange metadata peer to peer (P2PHANDSHAKE) unless the stack names a shared server."""
    mc = spec.mooncake
    if mc.metadata_server:
        return mc.metadata_server
    if isinstance(mc, MooncakeHa):
        return "P2PHANDSHAKE"
    return f"http://{mooncake_host(spec)}:{mc.metadata_port}/metadata"


def mooncake_cluster_id(spec: PlatformSpec) -> str:
    return spec.mooncake.cluster_id if isinstance(spec.mooncake, MooncakeHa) else "mooncake_cluster"


def _pool(spec: PlatformSpec, role: str) -> Pool:
    pool = dict(spec.pools.items()).get(role)
    if pool is None:
        raise KeyError(f"pools.{role}: this stack has no {role} pool")
    return pool
