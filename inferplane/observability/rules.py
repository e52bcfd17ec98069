"""Our alert rules: the ONE definition, in Prometheus rule-file format.

Consumers: the PrometheusRule in inferplane/builders/observability.py (``spec.groups`` is
:func:`rule_groups`) and the local platform's real Prometheus (:func:`write_rules_file`).
tests/promtool/ proves with ``promtool test rules`` that each alert fires on the failure it names
and stays quiet on a healthy platform.

Conventions:
- ``job`` values come from :data:`inferplane.observability.metrics.SCRAPE_JOBS`; rules select on
  ``job`` only where the metric is not prefixed (``up``, Mooncake's ``ha_*``/``master_*``).
- Every alert has ``severity`` (critical: serving is broken or one failure away from it; warning:
  degraded; info: worth knowing), ``component``, and annotations ``summary``, ``description``
  and ``runbook_url`` -> docs/runbooks/alerts.md#<alertname lowercased>.
- Thresholds come from the stack (``observability.thresholds``); fixed ``for`` values are where a
  measured recovery time says how long is abnormal (Mooncake failover ~10-12 s, etcd lease 5 s).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from inferplane.spec import Thresholds

RUNBOOK = "docs/runbooks/alerts.md"

Severity = Literal["critical", "warning", "info"]


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    severity: Severity
    component: str
    summary: str
    description: str
    for_: str | None = None
    labels: dict[str, str] = field(default_factory=dict)

    def rule(self, runbook_base: str) -> dict[str, Any]:
        rule: dict[str, Any] = {"alert": self.name, "expr": self.expr}
        if self.for_:
            rule["for"] = self.for_
        rule["labels"] = {"severity": self.severity, "component": self.component, **self.labels}
        rule["annotations"] = {
            "summary": self.summary,
            "description": self.description,
            "runbook_url": f"{runbook_base}#{self.name.lower()}",
        }
        return rule


_MC = 'job=~"mooncake-master.*"'


def _num(value: float) -> str:
    """A threshold as PromQL reads it (no trailing .0, no exponent)."""
    text = f"{value:.6f}".rstrip("0").rstrip(".")
    return text or "0"


def alerts(t: Thresholds, *, kv_over_rdma: bool = True) -> dict[str, list[Alert]]:
    """Alerts by group name. ``kv_over_rdma``: the stack's Mooncake protocol is RDMA, so a slow KV
    path means a TCP fallback (on a TCP stack slow is expected and the alert is left out)."""
    per_minute = _num(t.kv_transfer_failures_per_minute)
    kv = [
        Alert(
            "KVTransferFailures",
            f"sum by (job, instance, engine_type) (rate(sglang:num_transfer_failed_reqs_total[5m])) * 60 > {per_minute}",
            "critical",
            "kv-transfer",
            "KV transfers failing on {{ $labels.instance }} ({{ $labels.engine_type }})",
            "{{ $value | humanize }} failed KV transfers per minute (threshold " + per_minute + "). Requests on this "
            "engine are aborted or retried by the gateway.",
            for_="2m",
        ),
        Alert(
            "KVBootstrapFailures",
            f"sum by (job, instance, engine_type) (rate(sglang:num_bootstrap_failed_reqs_total[5m])) * 60 > {per_minute}",
            "critical",
            "kv-transfer",
            "KV bootstrap handshakes failing on {{ $labels.instance }} ({{ $labels.engine_type }})",
            "{{ $value | humanize }} failed prefill-decode bootstrap handshakes per minute (threshold " + per_minute + ").",
            for_="2m",
        ),
    ]
    if kv_over_rdma:
        speed = _num(t.kv_transfer_speed_low_gb_s)
        kv.append(
            Alert(
                "KVTransferSlowTcpFallback",
                f"histogram_quantile(0.5, sum by (job, instance, le) (rate(sglang:kv_transfer_speed_gb_s_bucket[10m]))) < {speed}",
                "warning",
                "kv-transfer",
                "KV transfers on {{ $labels.instance }} run at TCP speed",
                "Median KV transfer speed {{ $value | humanize }} GB/s is below " + speed + " GB/s on an RDMA stack: "
                "the transfer engine probably fell back to TCP (MC_FORCE_TCP, no RDMA device, or a dead NIC).",
                for_="15m",
            )
        )
    prefill = [
        Alert(
            "PrefillQueueHigh",
            f'sum by (job, instance) (sglang:num_queue_reqs{{engine_type="prefill"}}) > {t.prefill_queue_high}',
            "warning",
            "prefill",
            "Prefill queue on {{ $labels.instance }} is {{ $value }}",
            f"More than {t.prefill_queue_high} requests wait for prefill; TTFT grows with the queue.",
            for_=t.for_duration,
        ),
        Alert(
            "TTFTHigh",
            "histogram_quantile(0.99, sum by (le) (rate(sglang:time_to_first_token_seconds_bucket"
            f'{{engine_type=~"decode|unified"}}[5m]))) > {_num(t.ttft_p99_seconds)}',
            "warning",
            "slo",
            "p99 TTFT is {{ $value | humanizeDuration }}",
            f"p99 time to first token over 5 m is above the {_num(t.ttft_p99_seconds)} s objective.",
            for_=t.for_duration,
        ),
    ]
    decode = [
        Alert(
            "DecodeQueueHigh",
            'sum by (job, instance) ({__name__=~"sglang:num_queue_reqs|sglang:num_decode_prealloc_queue_reqs", '
            f'engine_type="decode"}}) > {t.decode_queue_high}',
            "warning",
            "decode",
            "Decode queue on {{ $labels.instance }} is {{ $value }}",
            f"More than {t.decode_queue_high} requests wait on this decode engine (waiting queue plus requests "
            "waiting for KV memory); add decode groups or shift the P:D ratio.",
            for_=t.for_duration,
        ),
        Alert(
            "TPOTHigh",
            "histogram_quantile(0.99, sum by (le) (rate(sglang:request_time_per_output_token_seconds_bucket"
            f'{{engine_type=~"decode|unified"}}[5m]))) > {_num(t.tpot_p99_seconds)}',
            "warning",
            "slo",
            "p99 TPOT is {{ $value | humanizeDuration }}",
            f"p99 time per output token over 5 m is above the {_num(t.tpot_p99_seconds)} s objective.",
            for_=t.for_duration,
        ),
        Alert(
            "DecodeKVCacheUsageHigh",
            f'max by (job, instance) (sglang:token_usage{{engine_type="decode"}}) > {_num(t.kv_usage_high)}',
            "warning",
            "decode",
            "Decode KV cache on {{ $labels.instance }} is {{ $value | humanizePercentage }} full",
            "Above " + _num(t.kv_usage_high) + ": new requests wait for KV memory and running ones may be retracted.",
            for_=t.for_duration,
        ),
    ]
    gateway = [
        Alert(
            "SMGDown",
            'up{job="smg"} == 0',
            "critical",
            "gateway",
            "Gateway {{ $labels.instance }} is not answering scrapes",
            "Prometheus cannot scrape this SMG replica; clients routed to it fail.",
            for_="2m",
        ),
        Alert(
            "SMGNoHealthyWorkers",
            '(sum by (job, instance) (smg_worker_health == bool 1) == 0) or (up{job="smg"} == 1 unless on (job, instance) smg_worker_health)',
            "critical",
            "gateway",
            "Gateway {{ $labels.instance }} has no healthy worker",
            "Every worker registered with this SMG replica is unhealthy, or none is registered: it answers 503.",
            for_="2m",
        ),
        Alert(
            "SMGWorkerUnhealthy",
            "max by (job, worker) (smg_worker_health) == 0",
            "warning",
            "gateway",
            "Worker {{ $labels.worker }} fails every gateway replica's health checks",
            "SMG stopped routing to this worker; it stays registered and is re-admitted after consecutive passing checks.",
            for_="5m",
        ),
        Alert(
            "SMGCircuitOpen",
            "max by (job, worker) (smg_worker_cb_state) == 1",
            "warning",
            "gateway",
            "Circuit breaker open for {{ $labels.worker }}",
            "Consecutive request failures opened this worker's circuit; SMG sends it nothing until the half-open probe succeeds.",
            for_="1m",
        ),
        Alert(
            "SMGRejectingRequests",
            'sum by (job, instance) (rate(smg_http_responses_total{status_code="503"}[5m])) '
            "/ sum by (job, instance) (rate(smg_http_responses_total[5m])) > 0.05",
            "critical",
            "gateway",
            "Gateway {{ $labels.instance }} answers {{ $value | humanizePercentage }} of requests with 503",
            "No available prefill or decode worker (all unhealthy or circuits open) or overload shedding.",
            for_="2m",
        ),
    ]
    mooncake = [
        Alert(
            "MooncakeMasterDown",
            f"up{{{_MC}}} == 0",
            "critical",
            "mooncake",
            "Mooncake master {{ $labels.instance }} is down",
            "The master's metrics endpoint does not answer. In poc mode the only master is gone (HiCache L3 and metadata "
            "are unavailable); in HA mode one more failure loses the store.",
            for_="1m",
        ),
        Alert(
            "MooncakeNoLeader",
            f"absent(ha_standby_state{{{_MC}}} == 0)",
            "critical",
            "mooncake",
            "No Mooncake master is leading",
            "No master reports the leader state (ha_standby_state 0) for over a minute; a failover takes about 10-12 s. "
            "Store clients fail with RPC errors (-900).",
            for_="1m",
        ),
        Alert(
            "MooncakeLeaderChange",
            f"(changes(ha_standby_state{{{_MC}}}[10m]) > 0) and (ha_standby_state{{{_MC}}} == 0)",
            "info",
            "mooncake",
            "Mooncake leadership moved to {{ $labels.instance }}",
            "This master became leader within the last 10 minutes: the previous leader died or lost its etcd lease.",
        ),
        Alert(
            "MooncakeMasterNotReady",
            # 0 = leading (or no HA), 3 = watching standby; anything else held for 5 m is stuck.
            f"(ha_standby_state{{{_MC}}} != 0) != 3",
            "warning",
            "mooncake",
            "Mooncake master {{ $labels.instance }} is neither leader nor a ready standby",
            "ha_standby_state {{ $value }} (1 connecting, 2 syncing, 4 recovering, 5 reconnecting, 6-7 promoting, 8 failed) "
            "for 5 m: this master cannot take over.",
            for_="5m",
        ),
        Alert(
            "MooncakeStorePutFailures",
            f"sum by (job, instance) (rate(master_put_start_failures_total{{{_MC}}}[5m])) > 0",
            "warning",
            "mooncake",
            "Mooncake store rejects writes on {{ $labels.instance }}",
            "put_start keeps failing (store full or no mounted segment): HiCache L3 stops caching new prefixes.",
            for_="10m",
        ),
    ]
    etcd = [
        Alert(
            "EtcdNoLeader",
            'etcd_server_has_leader{job="etcd"} == 0',
            "critical",
            "etcd",
            "etcd member {{ $labels.instance }} has no leader",
            "Without an etcd leader Mooncake cannot renew its master lease and loses its leader within 5 s.",
            for_="1m",
        ),
        Alert(
            "EtcdInsufficientMembers",
            'sum by (job) (up{job="etcd"} == bool 1) < ((count by (job) (up{job="etcd"}) + 1) / 2)',
            "critical",
            "etcd",
            "etcd has lost quorum",
            "Fewer than a majority of etcd members answer: no leader election, no Mooncake HA.",
            for_="1m",
        ),
        Alert(
            "EtcdMemberDown",
            'up{job="etcd"} == 0',
            "warning",
            "etcd",
            "etcd member {{ $labels.instance }} is down",
            "Quorum holds, but one more failure loses it.",
            for_="5m",
        ),
    ]
    gpu = [
        Alert(
            "GPUXidError",
            "DCGM_FI_DEV_XID_ERRORS > 0",
            "warning",
            "gpu",
            "XID {{ $value }} on GPU {{ $labels.gpu }} of {{ $labels.Hostname }}",
            "The driver reported an XID error; some (48, 63, 64, 79, 94, 95) mean the GPU needs a reset or replacement.",
        ),
    ]
    return {
        "inferplane.kv-transfer": kv,
        "inferplane.prefill": prefill,
        "inferplane.decode": decode,
        "inferplane.gateway": gateway,
        "inferplane.mooncake": mooncake,
        "inferplane.etcd": etcd,
        "inferplane.gpu": gpu,
    }


def rule_groups(thresholds: Thresholds, *, kv_over_rdma: bool = True, runbook_base: str = RUNBOOK) -> list[dict[str, Any]]:
    """Prometheus rule groups (the ``groups:`` list of a rule file and of a PrometheusRule)."""
    return [
        {"name": name, "rules": [a.rule(runbook_base) for a in group]}
        for name, group in alerts(thresholds, kv_over_rdma=kv_over_rdma).items()
    ]


def alert_names(thresholds: Thresholds | None = None, *, kv_over_rdma: bool = True) -> list[str]:
    return [a.name for group in alerts(thresholds or Thresholds(), kv_over_rdma=kv_over_rdma).values() for a in group]


def write_rules_file(path: Path | str, thresholds: Thresholds, *, kv_over_rdma: bool = True, runbook_base: str = RUNBOOK) -> Path:
    """Write a Prometheus rule file (what ``rule_files:`` and ``promtool`` read) and return its path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"groups": rule_groups(thresholds, kv_over_rdma=kv_over_rdma, runbook_base=runbook_base)}
    out.write_text(yaml.safe_dump(doc, sort_keys=False, width=1000))
    return out
