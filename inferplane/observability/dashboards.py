"""The six Grafana dashboards, generated as code: Request SLO, Prefill, Decode, Mooncake, Fabric, GPU.

Each is a Grafana dashboard JSON model (schemaVersion 39) with a ``datasource`` variable, so it
works against whichever Prometheus data source the Grafana has. The Observability builder puts
them in ConfigMaps labelled ``grafana_dashboard: "1"`` for the Grafana sidecar.
tests/unit/test_observability.py checks every query's metric names against the metric catalogue.

A small builder instead of grafana-foundation-sdk: six dashboards of time series and stats need
~100 lines, and a generated-SDK dependency would pin us to its Grafana schema release.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DS = {"type": "prometheus", "uid": "${datasource}"}
_WIDTH = 24


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""


@dataclass(frozen=True)
class Panel:
    title: str
    queries: tuple[Query, ...]
    unit: str = "short"
    kind: str = "timeseries"  # or "stat"
    description: str = ""


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    panels: tuple[Panel, ...]
    tags: tuple[str, ...] = field(default=("inferplane",))

    @property
    def slug(self) -> str:
        return self.uid.removeprefix("inferplane-")

    def model(self) -> dict[str, Any]:
        panels = []
        x = y = 0
        for i, panel in enumerate(self.panels):
            width = 6 if panel.kind == "stat" else 12
            if x + width > _WIDTH:
                x, y = 0, y + 8
            panels.append(_panel(i + 1, panel, {"x": x, "y": y, "w": width, "h": 8}))
            x += width
        return {
            "uid": self.uid,
            "title": self.title,
            "tags": list(self.tags),
            "schemaVersion": 39,
            "version": 1,
            "editable": False,
            "time": {"from": "now-3h", "to": "now"},
            "refresh": "30s",
            "timezone": "utc",
            "templating": {
                "list": [
                    {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus", "current": {}, "hide": 0}
                ]
            },
            "annotations": {"list": []},
            "panels": panels,
        }


def _panel(panel_id: int, panel: Panel, grid: dict[str, int]) -> dict[str, Any]:
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DS,
        "gridPos": grid,
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}}
        if panel.kind == "timeseries"
        else {"reduceOptions": {"calcs": ["lastNotNull"]}},
        "targets": [
            {"refId": chr(ord("A") + i), "datasource": DS, "expr": q.expr, "legendFormat": q.legend or "__auto"}
            for i, q in enumerate(panel.queries)
        ],
    }


def _q(quantile: float, metric: str, by: str = "", selector: str = "", window: str = "5m") -> str:
    group = f"le{', ' + by if by else ''}"
    return f"histogram_quantile({quantile}, sum by ({group}) (rate({metric}_bucket{selector}[{window}])))"


_DECODE = '{engine_type=~"decode|unified"}'
_MC = '{job=~"mooncake-master.*"}'

REQUEST_SLO = Dashboard(
    "inferplane-request-slo",
    "inferplane / Request SLO",
    (
        Panel(
            "Requests/s at the gateway", (Query("sum by (status_code) (rate(smg_http_responses_total[5m]))", "{{status_code}}"),), "reqps"
        ),
        Panel(
            "503 share at the gateway",
            (Query('sum(rate(smg_http_responses_total{status_code="503"}[5m])) / sum(rate(smg_http_responses_total[5m]))', "503"),),
            "percentunit",
        ),
        Panel(
            "TTFT (decode engines)",
            (
                Query(_q(0.5, "sglang:time_to_first_token_seconds", selector=_DECODE), "p50"),
                Query(_q(0.99, "sglang:time_to_first_token_seconds", selector=_DECODE), "p99"),
            ),
            "s",
        ),
        Panel("TTFT at the gateway (PD)", (Query(_q(0.99, "smg_pd_ttft_seconds"), "p99"),), "s"),
        Panel(
            "Time per output token",
            (
                Query(_q(0.5, "sglang:request_time_per_output_token_seconds", selector=_DECODE), "p50"),
                Query(_q(0.99, "sglang:request_time_per_output_token_seconds", selector=_DECODE), "p99"),
            ),
            "s",
        ),
        Panel("End-to-end latency", (Query(_q(0.99, "sglang:e2e_request_latency_seconds", selector=_DECODE), "p99"),), "s"),
        Panel("Healthy workers per gateway", (Query("sum by (instance) (smg_worker_health == bool 1)", "{{instance}}"),), kind="stat"),
        Panel("Open circuits", (Query("sum(smg_worker_cb_state == bool 1)", "open"),), kind="stat"),
        Panel(
            "Aborted requests/s", (Query("sum by (engine_type) (rate(sglang:num_aborted_requests_total[5m]))", "{{engine_type}}"),), "reqps"
        ),
        Panel(
            "Finished requests/s and tokens/s",
            (
                Query('sum(rate(sglang:num_requests_total{engine_type=~"decode|unified"}[5m]))', "requests"),
                Query('sum(rate(sglang:generation_tokens_total{engine_type=~"decode|unified"}[5m]))', "generated tokens"),
            ),
        ),
        Panel("Gateway latency p99", (Query(_q(0.99, "smg_http_request_duration_seconds"), "p99"),), "s"),
        Panel(
            "Gateway retries/s",
            (
                Query("sum by (worker_type) (rate(smg_worker_retries_total[5m]))", "retries {{worker_type}}"),
                Query("sum by (worker_type) (rate(smg_worker_retries_exhausted_total[5m]))", "exhausted {{worker_type}}"),
            ),
        ),
        Panel(
            "Worker errors/s",
            (Query("sum by (worker_type, error_type) (rate(smg_worker_errors_total[5m]))", "{{worker_type}} {{error_type}}"),),
        ),
        Panel("In flight per worker", (Query("max by (worker) (smg_worker_requests_active)", "{{worker}}"),)),
        Panel("Registered workers", (Query("max by (worker_type) (smg_worker_pool_size)", "{{worker_type}}"),), kind="stat"),
        Panel("Overloaded models", (Query("max(smg_workers_overloaded)", "overloaded"),), kind="stat"),
    ),
)

PREFILL = Dashboard(
    "inferplane-prefill",
    "inferplane / Prefill",
    (
        Panel("Waiting queue per engine", (Query('sum by (instance) (sglang:num_queue_reqs{engine_type="prefill"})', "{{instance}}"),)),
        Panel(
            "Running requests per engine", (Query('sum by (instance) (sglang:num_running_reqs{engine_type="prefill"})', "{{instance}}"),)
        ),
        Panel(
            "PD queues (bootstrap, in flight)",
            (
                Query("sum by (instance) (sglang:num_prefill_bootstrap_queue_reqs)", "bootstrap {{instance}}"),
                Query("sum by (instance) (sglang:num_prefill_inflight_queue_reqs)", "inflight {{instance}}"),
            ),
        ),
        Panel(
            "Prompt tokens/s", (Query('sum by (instance) (rate(sglang:prompt_tokens_total{engine_type="prefill"}[5m]))', "{{instance}}"),)
        ),
        Panel(
            "Prefix cache hit rate",
            (Query('avg by (instance) (sglang:cache_hit_rate{engine_type="prefill"})', "{{instance}}"),),
            "percentunit",
        ),
        Panel(
            "Queue time p99",
            (Query(_q(0.99, "sglang:queue_time_seconds", by="instance", selector='{engine_type="prefill"}'), "{{instance}}"),),
            "s",
        ),
        Panel("Prefill retries/s", (Query("sum by (instance) (rate(sglang:num_prefill_retries_total[5m]))", "{{instance}}"),)),
        Panel(
            "HiCache L3 (Mooncake store) tokens/s",
            (
                Query("sum(rate(sglang:storage_prefetch_hit_tokens_total[5m]))", "prefetch hits"),
                Query("sum(rate(sglang:backuped_tokens_total[5m]))", "written"),
            ),
        ),
        Panel(
            "Cached prompt tokens/s",
            (Query('sum by (instance) (rate(sglang:cached_tokens_total{engine_type="prefill"}[5m]))', "{{instance}}"),),
        ),
        Panel(
            "HiCache host (L2) usage",
            (
                Query(
                    "sum by (instance) (sglang:hicache_host_used_tokens) / sum by (instance) (sglang:hicache_host_total_tokens)",
                    "{{instance}}",
                ),
            ),
            "percentunit",
        ),
        Panel("Encoder requests/s (EPD)", (Query("sum by (instance) (rate(sglang:encoder_requests_total[5m]))", "{{instance}}"),), "reqps"),
        Panel(
            "Encoder latency p99 (EPD)",
            (Query(_q(0.99, "sglang:encoder_request_e2e_latency_seconds", by="instance"), "{{instance}}"),),
            "s",
        ),
        Panel("Encoder cache (EPD)", (Query("sum by (instance) (sglang:encoder_cache_size_mb)", "{{instance}}"),), "decmbytes"),
    ),
)

DECODE = Dashboard(
    "inferplane-decode",
    "inferplane / Decode",
    (
        Panel("Running requests per engine", (Query('sum by (instance) (sglang:num_running_reqs{engine_type="decode"})', "{{instance}}"),)),
        Panel(
            "Queues per engine",
            (
                Query('sum by (instance) (sglang:num_queue_reqs{engine_type="decode"})', "waiting {{instance}}"),
                Query("sum by (instance) (sglang:num_decode_prealloc_queue_reqs)", "KV prealloc {{instance}}"),
                Query("sum by (instance) (sglang:num_decode_transfer_queue_reqs)", "KV transfer {{instance}}"),
            ),
        ),
        Panel("KV cache usage", (Query('max by (instance) (sglang:token_usage{engine_type="decode"})', "{{instance}}"),), "percentunit"),
        Panel("Generation throughput", (Query('sum by (instance) (sglang:gen_throughput{engine_type="decode"})', "{{instance}}"),), "tps"),
        Panel(
            "Inter-token latency p99",
            (Query(_q(0.99, "sglang:inter_token_latency_seconds", by="instance", selector=_DECODE), "{{instance}}"),),
            "s",
        ),
        Panel("Retracted requests", (Query('sum by (instance) (sglang:num_retracted_reqs{engine_type="decode"})', "{{instance}}"),)),
        Panel("Admission window (max_running_requests)", (Query("max by (worker) (smg_pd_admission_window)", "{{worker}}"),)),
        Panel(
            "KV tokens used / capacity",
            (
                Query('sum by (instance) (sglang:num_used_tokens{engine_type="decode"})', "used {{instance}}"),
                Query('sum by (instance) (sglang:max_total_num_tokens{engine_type="decode"})', "capacity {{instance}}"),
            ),
        ),
        Panel("Weight load time", (Query("max by (instance) (sglang:weight_load_duration_seconds)", "{{instance}}"),), "s", kind="stat"),
    ),
)

MOONCAKE = Dashboard(
    "inferplane-mooncake",
    "inferplane / Mooncake",
    (
        Panel("Masters up", (Query(f"up{_MC}", "{{instance}}"),), kind="stat"),
        Panel("HA state (0 leader, 3 standby)", (Query(f"ha_standby_state{_MC}", "{{instance}}"),), kind="stat"),
        Panel(
            "Store used vs capacity",
            (
                Query(f"master_allocated_bytes{_MC}", "used {{instance}}"),
                Query(f"master_total_capacity_bytes{_MC}", "capacity {{instance}}"),
            ),
            "bytes",
        ),
        Panel(
            "Keys and clients",
            (Query(f"master_key_count{_MC}", "keys {{instance}}"), Query(f"master_active_clients{_MC}", "clients {{instance}}")),
        ),
        Panel(
            "Put / get RPCs per second",
            (
                Query(f"sum by (instance) (rate(master_put_start_requests_total{_MC}[5m]))", "put {{instance}}"),
                Query(f"sum by (instance) (rate(master_get_replica_list_requests_total{_MC}[5m]))", "get {{instance}}"),
            ),
            "ops",
        ),
        Panel(
            "Failed RPCs per second",
            (
                Query(f"sum by (instance) (rate(master_put_start_failures_total{_MC}[5m]))", "put {{instance}}"),
                Query(f"sum by (instance) (rate(master_get_replica_list_failures_total{_MC}[5m]))", "get {{instance}}"),
            ),
            "ops",
        ),
        Panel("Oplog standby lag", (Query(f"ha_oplog_standby_lag{_MC}", "{{instance}}"),)),
        Panel("HA state transitions", (Query(f"increase(ha_state_transitions_total{_MC}[15m])", "{{instance}}"),)),
        Panel("Evicted bytes/s", (Query(f"rate(master_evicted_size_bytes{_MC}[5m])", "{{instance}}"),), "Bps"),
        Panel("Oplog entries not yet applied", (Query(f"ha_oplog_pending_entries{_MC}", "{{instance}}"),)),
        Panel("Eviction passes/s", (Query(f"rate(master_successful_evictions_total{_MC}[5m])", "{{instance}}"),)),
        Panel("etcd leader changes (1h)", (Query('increase(etcd_server_leader_changes_seen_total{job="etcd"}[1h])', "{{instance}}"),)),
        Panel(
            "etcd latency p99",
            (
                Query(_q(0.99, "etcd_disk_wal_fsync_duration_seconds", by="instance", selector='{job="etcd"}'), "WAL fsync {{instance}}"),
                Query(
                    _q(0.99, "etcd_network_peer_round_trip_time_seconds", by="instance", selector='{job="etcd"}'), "peer RTT {{instance}}"
                ),
            ),
            "s",
        ),
        Panel(
            "etcd database and failed proposals",
            (
                Query('etcd_mvcc_db_total_size_in_bytes{job="etcd"}', "db {{instance}}"),
                Query('increase(etcd_server_proposals_failed_total{job="etcd"}[1h])', "failed proposals/h {{instance}}"),
            ),
        ),
    ),
)

FABRIC = Dashboard(
    "inferplane-fabric",
    "inferplane / Fabric",
    (
        Panel("KV transfer speed p50", (Query(_q(0.5, "sglang:kv_transfer_speed_gb_s", by="instance"), "{{instance}}"),), "GBs"),
        Panel("KV transfer latency p99", (Query(_q(0.99, "sglang:kv_transfer_latency_ms", by="instance"), "{{instance}}"),), "ms"),
        Panel("KV bootstrap time p99", (Query(_q(0.99, "sglang:kv_transfer_bootstrap_ms", by="instance"), "{{instance}}"),), "ms"),
        Panel(
            "KV failures per minute",
            (
                Query("sum by (instance) (rate(sglang:num_transfer_failed_reqs_total[5m])) * 60", "transfer {{instance}}"),
                Query("sum by (instance) (rate(sglang:num_bootstrap_failed_reqs_total[5m])) * 60", "bootstrap {{instance}}"),
                Query("sum(rate(smg_pd_bootstrap_failures_total[5m])) * 60", "gateway bootstrap injection"),
            ),
        ),
        Panel(
            "RDMA port throughput",
            (
                Query(
                    "sum by (instance, device) (rate(node_infiniband_port_data_transmitted_bytes_total[5m]))", "tx {{instance}} {{device}}"
                ),
                Query("sum by (instance, device) (rate(node_infiniband_port_data_received_bytes_total[5m]))", "rx {{instance}} {{device}}"),
            ),
            "Bps",
        ),
        Panel("RDMA link downs (1h)", (Query("increase(node_infiniband_link_downed_total[1h])", "{{instance}} {{device}} {{port}}"),)),
        Panel("NVLink bandwidth", (Query("sum by (Hostname) (rate(DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL[5m]))", "{{Hostname}}"),)),
        Panel(
            "PCIe traffic",
            (
                Query("sum by (Hostname) (DCGM_FI_PROF_PCIE_TX_BYTES)", "tx {{Hostname}}"),
                Query("sum by (Hostname) (DCGM_FI_PROF_PCIE_RX_BYTES)", "rx {{Hostname}}"),
            ),
            "Bps",
        ),
    ),
)

GPU = Dashboard(
    "inferplane-gpu",
    "inferplane / GPU",
    (
        Panel("GPU utilisation", (Query("avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL)", "{{Hostname}}"),), "percent"),
        Panel("Tensor pipe active", (Query("avg by (Hostname) (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE)", "{{Hostname}}"),), "percentunit"),
        Panel(
            "Memory used / free",
            (
                Query("sum by (Hostname) (DCGM_FI_DEV_FB_USED)", "used {{Hostname}}"),
                Query("sum by (Hostname) (DCGM_FI_DEV_FB_FREE)", "free {{Hostname}}"),
            ),
            "decmbytes",
        ),
        Panel("DRAM active", (Query("avg by (Hostname) (DCGM_FI_PROF_DRAM_ACTIVE)", "{{Hostname}}"),), "percentunit"),
        Panel("Temperature", (Query("max by (Hostname) (DCGM_FI_DEV_GPU_TEMP)", "{{Hostname}}"),), "celsius"),
        Panel("Power", (Query("sum by (Hostname) (DCGM_FI_DEV_POWER_USAGE)", "{{Hostname}}"),), "watt"),
        Panel("XID errors", (Query("DCGM_FI_DEV_XID_ERRORS > 0", "{{Hostname}} gpu {{gpu}}"),), kind="stat"),
        Panel("Graphics engine active", (Query("avg by (Hostname) (DCGM_FI_PROF_GR_ENGINE_ACTIVE)", "{{Hostname}}"),), "percentunit"),
    ),
)

DASHBOARDS: tuple[Dashboard, ...] = (REQUEST_SLO, PREFILL, DECODE, MOONCAKE, FABRIC, GPU)


def queries(dashboard: Dashboard) -> list[tuple[str, str]]:
    """(panel title, expr) of every query, for checks."""
    return [(p.title, q.expr) for p in dashboard.panels for q in p.queries]
