"""SMG's command line: the ONE place it is built.

The Kubernetes gateway Deployment (inferplane/builders/gateway.py) and the local platform
(inferplane/local/) both start `smg launch` with the argv from :func:`smg_argv`, so the flags a
rehearsal runs with are the flags production runs with. Flag names and semantics are SMG 1.13.0's
(see runtime-interfaces.md, "SMG 1.13.0"); tests/unit/test_gateway_args.py parses every argv with
SMG's own parser and starts the real binary with one.

Topology: always PD (``--pd-disaggregation``). EPD stays PD at the gateway because SMG 1.13's
``--epd-disaggregation`` needs gRPC workers; encoders sit behind the language-only prefill.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from inferplane.spec import Gateway


@dataclass(frozen=True)
class ControlPlaneKey:
    """One ``--control-plane-api-keys`` entry (``id:name:role:key``).

    On Kubernetes ``key`` is ``$(ENV_NAME)``: the kubelet expands it from a Secret-backed env var
    when the container starts, so the key itself never appears in the pod spec.
    """

    key_id: str
    name: str
    role: Literal["admin", "user"]
    key: str

    def render(self) -> str:
        for field_name, value in (("key_id", self.key_id), ("name", self.name)):
            if not value or ":" in value:
                raise ValueError(f"control-plane key {field_name} {value!r}: must be non-empty without ':'")
        if self.role not in ("admin", "user"):
            raise ValueError(f"control-plane key {self.key_id}: role {self.role!r} must be 'admin' or 'user'")
        if not self.key:
            raise ValueError(f"control-plane key {self.key_id}: empty key")
        return f"{self.key_id}:{self.name}:{self.role}:{self.key}"


Prefill = tuple[str, int | None]
"""(worker URL, KV bootstrap port). A prefill without a port makes SMG send ``bootstrap_port: null``,
which breaks the decode side, so :func:`smg_argv` refuses ``None``."""


def _check_url(url: str, what: str) -> None:
    if not url.startswith(("http://", "https://")) or url.endswith("/"):
        raise ValueError(f"{what} {url!r}: expected http(s)://host:port without a trailing slash")


def smg_argv(
    gateway: Gateway,
    prefills: Sequence[Prefill],
    decodes: Sequence[str],
    *,
    host: str = "0.0.0.0",
    port: int | None = None,
    metrics_host: str = "0.0.0.0",
    metrics_port: int | None = None,
    control_plane_keys: Sequence[ControlPlaneKey] = (),
    worker_startup_timeout_secs: int = 1800,
    worker_startup_check_interval_secs: int = 30,
    health_check_timeout_secs: int = 5,
    log_json: bool = False,
    program: str = "smg",
) -> list[str]:
    """The full argv of ``smg launch`` in PD mode, ``program`` first.

    ``gateway`` supplies policies, health checks, circuit breaker, retries and timeouts;
    ``port``/``metrics_port`` default to the spec's. ``worker_startup_timeout_secs`` should cover
    the slowest pool's weight loading: SMG drops a startup worker it could not reach in that time.
    """
    if not prefills:
        raise ValueError("smg_argv: no prefill workers; PD mode needs at least one --prefill")
    if not decodes:
        raise ValueError("smg_argv: no decode workers; PD mode needs at least one --decode")
    # SMG refuses to start otherwise (found by starting the real binary): say so before it does.
    for role, policy, count in (("prefill", gateway.prefill_policy, len(prefills)), ("decode", gateway.decode_policy, len(decodes))):
        if policy == "power_of_two" and count < 2:
            raise ValueError(
                f"gateway.{role}_policy: power_of_two needs at least 2 {role} workers (have {count}); "
                f"use round_robin or cache_aware, or add {role} groups"
            )
    argv = [
        program,
        "launch",
        "--host",
        host,
        "--port",
        str(gateway.port if port is None else port),
        "--prometheus-host",
        metrics_host,
        "--prometheus-port",
        str(gateway.metrics_port if metrics_port is None else metrics_port),
        "--pd-disaggregation",
    ]
    seen: set[str] = set()
    for url, bootstrap_port in prefills:
        _check_url(url, "prefill")
        if bootstrap_port is None:
            raise ValueError(f"prefill {url}: no bootstrap port; decode cannot fetch KV without it (SMG sends bootstrap_port: null)")
        if url in seen:
            raise ValueError(f"prefill {url}: listed twice")
        seen.add(url)
        argv += ["--prefill", url, str(bootstrap_port)]
    for url in decodes:
        _check_url(url, "decode")
        if url in seen:
            raise ValueError(f"decode {url}: listed twice or also a prefill")
        seen.add(url)
        argv += ["--decode", url]
    argv += [
        "--prefill-policy",
        gateway.prefill_policy,
        "--decode-policy",
        gateway.decode_policy,
        "--health-check-endpoint",
        "/health",
        "--health-check-interval-secs",
        str(gateway.health_check_interval_secs),
        "--health-check-timeout-secs",
        str(health_check_timeout_secs),
        "--health-failure-threshold",
        str(gateway.health_failure_threshold),
        "--health-success-threshold",
        str(gateway.health_success_threshold),
        "--cb-failure-threshold",
        str(gateway.cb_failure_threshold),
        "--cb-timeout-duration-secs",
        str(gateway.cb_timeout_duration_secs),
        "--retry-max-retries",
        str(gateway.retry_max_retries),
        "--request-timeout-secs",
        str(gateway.request_timeout_secs),
        "--worker-startup-timeout-secs",
        str(worker_startup_timeout_secs),
        "--worker-startup-check-interval",
        str(worker_startup_check_interval_secs),
    ]
    if log_json:
        argv.append("--log-json")
    if control_plane_keys:
        # nargs="*": keep it last so no later flag value is swallowed.
        argv += ["--control-plane-api-keys", *(k.render() for k in control_plane_keys)]
    return argv


def prefill_url(host: str, port: int) -> str:
    return f"http://{host}:{port}"
