"""Every metric name our alert rules and dashboards rely on, with where it comes from.

Names are exactly as exposed by the pinned versions (runtime-interfaces.md; the Mooncake master
and SMG names were read from the running binaries): SGLang 0.5.23, SMG 1.13.0, Mooncake master
0.3.13.post1, etcd 3.x, DCGM exporter 4.x. tests/unit/test_observability.py fails when a rule or a
dashboard query names a metric that is not listed here, so a typo or a version rename shows up
as a test failure instead of as a silent, empty panel or an alert that can never fire.

Scrape jobs: every scraper (the ServiceMonitors/PodMonitors in inferplane/builders/observability.py
and the local platform's Prometheus) sets ``job`` to one of SCRAPE_JOBS; rules select on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Source = Literal["sglang", "smg", "mooncake-master", "etcd", "dcgm", "node-exporter", "prometheus"]
MetricType = Literal["counter", "gauge", "histogram"]

SCRAPE_JOBS: dict[str, str] = {
    "sglang": "SGLang engine leaders (prefill, decode, encoder): /metrics on the HTTP port, --enable-metrics",
    "smg": "SMG gateway replicas: /metrics on the Prometheus port (29000)",
    "mooncake-master": "Mooncake masters: /metrics on the metrics port (9003)",
    "etcd": "the etcd members Mooncake HA elects its leader on: /metrics on the client port (2379)",
    "dcgm": "NVIDIA DCGM exporter (GPU operator): /metrics on 9400",
}
"""Jobs our monitors create. node-exporter (RDMA port counters for the Fabric dashboard) is scraped by
kube-prometheus-stack's own monitor; no rule selects on its job."""


@dataclass(frozen=True)
class Metric:
    name: str
    source: Source
    type: MetricType
    help: str


def _m(source: Source, type_: MetricType, *entries: tuple[str, str]) -> list[Metric]:
    return [Metric(name, source, type_, help_) for name, help_ in entries]


_ALL: list[Metric] = [
    # Prometheus itself: one sample per scrape target.
    *_m("prometheus", "gauge", ("up", "1 if the last scrape of the target succeeded")),
    # SGLang 0.5.23 (python/sglang/srt/observability/metrics_collector.py).
    *_m(
        "sglang",
        "gauge",
        ("sglang:num_running_reqs", "requests in the running batch"),
        ("sglang:num_queue_reqs", "requests in the waiting queue"),
        ("sglang:num_retracted_reqs", "requests retracted for lack of KV memory"),
        ("sglang:token_usage", "fraction of the KV cache in use"),
        ("sglang:num_used_tokens", "KV tokens in use"),
        ("sglang:max_total_num_tokens", "KV cache capacity in tokens"),
        ("sglang:gen_throughput", "generation throughput, tokens/s"),
        ("sglang:cache_hit_rate", "prefix cache hit rate"),
        ("sglang:num_prefill_inflight_queue_reqs", "PD prefill: requests whose KV is being sent"),
        ("sglang:num_prefill_bootstrap_queue_reqs", "PD prefill: requests waiting for the decode handshake"),
        ("sglang:num_decode_prealloc_queue_reqs", "PD decode: requests waiting for KV memory"),
        ("sglang:num_decode_transfer_queue_reqs", "PD decode: requests whose KV is arriving"),
        ("sglang:hicache_host_used_tokens", "HiCache host (L2) tokens in use"),
        ("sglang:hicache_host_total_tokens", "HiCache host (L2) capacity"),
        ("sglang:encoder_cache_size_mb", "EPD encoder: embedding cache size"),
        ("sglang:weight_load_duration_seconds", "time spent loading weights at startup"),
    ),
    *_m(
        "sglang",
        "counter",
        ("sglang:prompt_tokens_total", "prompt tokens processed"),
        ("sglang:generation_tokens_total", "tokens generated"),
        ("sglang:cached_tokens_total", "prompt tokens served from the prefix cache"),
        ("sglang:num_requests_total", "requests finished"),
        ("sglang:num_aborted_requests_total", "requests aborted"),
        ("sglang:num_bootstrap_failed_reqs_total", "PD: requests whose KV bootstrap handshake failed"),
        ("sglang:num_transfer_failed_reqs_total", "PD: requests whose KV transfer failed"),
        ("sglang:num_prefill_retries_total", "PD: prefill retries"),
        ("sglang:storage_prefetch_hit_tokens_total", "HiCache: tokens prefetched from the L3 store (Mooncake)"),
        ("sglang:backuped_tokens_total", "HiCache: tokens written to the L3 store"),
        ("sglang:encoder_requests_total", "EPD encoder: requests encoded"),
    ),
    *_m(
        "sglang",
        "histogram",
        ("sglang:time_to_first_token_seconds", "TTFT per request"),
        ("sglang:inter_token_latency_seconds", "time between output tokens"),
        ("sglang:request_time_per_output_token_seconds", "TPOT per request (0.5.23)"),
        ("sglang:e2e_request_latency_seconds", "end-to-end request latency"),
        ("sglang:queue_time_seconds", "time a request waited in the queue"),
        ("sglang:kv_transfer_speed_gb_s", "PD: KV transfer speed per request, GB/s (histogram in 0.5.23)"),
        ("sglang:kv_transfer_latency_ms", "PD: KV transfer latency per request, ms (histogram in 0.5.23)"),
        ("sglang:kv_transfer_bootstrap_ms", "PD: KV bootstrap handshake time, ms"),
        ("sglang:encoder_request_e2e_latency_seconds", "EPD encoder: request latency"),
    ),
    # SMG 1.13.0 (Prometheus listener, 29000).
    *_m(
        "smg",
        "gauge",
        ("smg_worker_health", "1 healthy, 0 unhealthy, per worker URL (series removed with the worker)"),
        ("smg_worker_cb_state", "circuit breaker per worker: 0 closed, 1 open, 2 half-open"),
        ("smg_worker_requests_active", "requests in flight per worker"),
        ("smg_worker_pool_size", "registered workers per worker_type"),
        ("smg_workers_overloaded", "1 while every worker of a model is overloaded"),
        ("smg_pd_admission_window", "decode admission window (max_running_requests)"),
    ),
    *_m(
        "smg",
        "counter",
        ("smg_http_responses_total", "responses by status_code and error_code"),
        ("smg_worker_retries_total", "retries by worker_type"),
        ("smg_worker_retries_exhausted_total", "requests that ran out of retries"),
        ("smg_worker_errors_total", "worker errors by worker_type and error_type"),
        ("smg_pd_bootstrap_failures_total", "PD: requests whose bootstrap injection failed"),
    ),
    *_m(
        "smg",
        "histogram",
        ("smg_http_request_duration_seconds", "request duration at the gateway"),
        ("smg_pd_ttft_seconds", "PD: time to first token seen by the gateway"),
    ),
    # Mooncake master 0.3.13.post1 (admin HTTP /metrics on 9003; read from the running binary).
    *_m(
        "mooncake-master",
        "gauge",
        ("master_allocated_bytes", "store bytes allocated"),
        ("master_total_capacity_bytes", "store capacity mounted by clients"),
        ("master_key_count", "objects in the store"),
        ("master_active_clients", "clients with a live lease"),
        ("ha_standby_state", "HA standby state: 0 stopped (the leader, or a non-HA master), 3 watching, 8 failed"),
        ("ha_oplog_standby_lag", "oplog entries the standby is behind"),
        ("ha_oplog_pending_entries", "oplog entries not yet applied"),
    ),
    *_m(
        "mooncake-master",
        "counter",
        ("ha_state_transitions_total", "HA state machine transitions"),
        ("master_put_start_requests_total", "put_start RPCs"),
        ("master_put_start_failures_total", "failed put_start RPCs (allocation or lease)"),
        ("master_get_replica_list_requests_total", "get_replica_list RPCs (reads)"),
        ("master_get_replica_list_failures_total", "failed get_replica_list RPCs"),
        ("master_successful_evictions_total", "eviction passes that freed space"),
        ("master_evicted_size_bytes", "bytes evicted"),
    ),
    # etcd 3.x.
    *_m(
        "etcd",
        "gauge",
        ("etcd_server_has_leader", "1 if this member sees a leader"),
        ("etcd_mvcc_db_total_size_in_bytes", "backend database size"),
    ),
    *_m(
        "etcd",
        "counter",
        ("etcd_server_leader_changes_seen_total", "leader changes seen by this member"),
        ("etcd_server_proposals_failed_total", "failed raft proposals"),
    ),
    *_m(
        "etcd",
        "histogram",
        ("etcd_disk_wal_fsync_duration_seconds", "WAL fsync latency"),
        ("etcd_network_peer_round_trip_time_seconds", "round trip time to peers"),
    ),
    # DCGM exporter default counters (dcgm-exporter etc/default-counters.csv).
    *_m(
        "dcgm",
        "gauge",
        ("DCGM_FI_DEV_GPU_UTIL", "GPU utilisation, %"),
        ("DCGM_FI_DEV_FB_USED", "framebuffer used, MiB"),
        ("DCGM_FI_DEV_FB_FREE", "framebuffer free, MiB"),
        ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature, C"),
        ("DCGM_FI_DEV_POWER_USAGE", "power draw, W"),
        ("DCGM_FI_DEV_XID_ERRORS", "last XID error code"),
        ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "graphics engine active ratio"),
        ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "tensor pipe active ratio"),
        ("DCGM_FI_PROF_DRAM_ACTIVE", "memory interface active ratio"),
        ("DCGM_FI_PROF_PCIE_TX_BYTES", "PCIe bytes/s sent"),
        ("DCGM_FI_PROF_PCIE_RX_BYTES", "PCIe bytes/s received"),
    ),
    *_m(
        "dcgm",
        "counter",
        ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "NVLink bandwidth counter, all links"),
    ),
    # node-exporter's infiniband collector (kube-prometheus-stack): RDMA NIC port counters.
    *_m(
        "node-exporter",
        "counter",
        ("node_infiniband_port_data_received_bytes_total", "bytes received on an RDMA port"),
        ("node_infiniband_port_data_transmitted_bytes_total", "bytes sent on an RDMA port"),
        ("node_infiniband_link_downed_total", "times an RDMA link went down"),
    ),
]

CATALOGUE: dict[str, Metric] = {m.name: m for m in _ALL}
assert len(CATALOGUE) == len(_ALL), "a metric is listed twice"

_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def lookup(series_name: str) -> Metric | None:
    """The catalogue entry a series belongs to (``x_bucket`` belongs to histogram ``x``)."""
    if series_name in CATALOGUE:
        return CATALOGUE[series_name]
    for suffix in _HISTOGRAM_SUFFIXES:
        if series_name.endswith(suffix):
            base = CATALOGUE.get(series_name[: -len(suffix)])
            if base is not None and base.type == "histogram":
                return base
    return None
