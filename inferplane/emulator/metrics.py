"""SGLang's Prometheus metrics: the names, types, labels, help texts and buckets of the pinned version.

Source: SGLang 0.5.23 ``srt/observability/metrics_collector.py`` (scheduler, tokenizer and encoder
collectors) and ``http_request_metrics.py``; 0.5.8 differences where the platform's rules notice them
(KV-transfer metrics were gauges, the prefill bootstrap queue was the "prealloc" queue, no
``is_streaming`` label, no per-request TPOT histogram).

SGLang serves ``/metrics`` from prometheus_client's *multiprocess* collector, whose text differs from
a plain registry's: counters keep ``_total`` in ``# TYPE``, there are no ``_created`` samples, labels
are sorted (``le`` last), and a labelled metric nobody has touched is absent, HELP line included.
:func:`exposition` writes that form from a private registry.
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.utils import floatToGoString

from inferplane.emulator.config import EngineConfig

Buckets = tuple[float, ...]
TTFT_BUCKETS: Buckets = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
E2E_BUCKETS: Buckets = (*TTFT_BUCKETS, 600, 1200, 1800, 2400)
ITL_BUCKETS: Buckets = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080, 0.100, 0.200, 0.400)
ITL_BUCKETS = (*ITL_BUCKETS, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000)
QUEUE_BUCKETS: Buckets = (0.0, 0.001, 0.005, 0.010, 0.050, 0.100, 0.200, 0.500, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100)
QUEUE_BUCKETS = (*QUEUE_BUCKETS, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000)
PROMPT_TOKEN_BUCKETS: Buckets = (100, 300, 500, 700, 1000, 1500, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000, 12500, 15000)
PROMPT_TOKEN_BUCKETS = (*PROMPT_TOKEN_BUCKETS, 17500, 20000, 22500, 25000, 27500, 30000, 35000, 40000, 60000, 80000, 100000)
PROMPT_TOKEN_BUCKETS = (*PROMPT_TOKEN_BUCKETS, 200000, 300000, 400000, 600000, 800000, 1000000, 1100000)
KV_SPEED_BUCKETS: Buckets = (0.1, 0.5, 1, 5, 10, 25, 50, 100, 200, 400)
KV_LATENCY_BUCKETS: Buckets = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000)
KV_BOOTSTRAP_BUCKETS: Buckets = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500)
KV_TOTAL_MB_BUCKETS: Buckets = (1, 5, 10, 50, 100, 500, 1000, 5000, 10000)
GET_LOADS_BUCKETS: Buckets = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0)
ENCODER_E2E_BUCKETS: Buckets = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 60)
ENCODER_QUEUE_BUCKETS: Buckets = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10)
ENCODER_ITEMS_BUCKETS: Buckets = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 24, 32, 64)


class EngineMetrics:
    """One engine's metrics. Scheduler gauges are refreshed from the engine before each scrape."""

    def __init__(self, cfg: EngineConfig) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.modern = cfg.at_least_0_5_23
        served = cfg.model.served_model_name
        # Scheduler metrics carry the parallel ranks; tokenizer metrics only model and engine type.
        self.labels = {"model_name": served, "engine_type": cfg.engine_type, "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
        self.tokenizer_labels = {"model_name": served, "engine_type": cfg.engine_type}
        self.encoder_labels = {"model_name": served, "dp_rank": "0"}
        self.gauges: dict[str, Gauge] = {}
        if cfg.role == "encoder":
            self._encoder_metrics()
        else:
            self._scheduler_metrics()
            self._tokenizer_metrics()
        self._http_metrics()

    # -- declarations -----------------------------------------------------------------------

    def _gauge(self, name: str, doc: str, labelnames: Sequence[str] | None = None) -> Gauge:
        gauge = Gauge(name, doc, labelnames=list(labelnames or self.labels), multiprocess_mode="mostrecent", registry=self.registry)
        self.gauges[name] = gauge
        return gauge

    def _counter(self, name: str, doc: str, labelnames: Sequence[str]) -> Counter:
        return Counter(name, doc, labelnames=list(labelnames), registry=self.registry)

    def _histogram(self, name: str, doc: str, labelnames: Sequence[str], buckets: Sequence[float]) -> Histogram:
        return Histogram(name, doc, labelnames=list(labelnames), buckets=list(buckets), registry=self.registry)

    def _scheduler_metrics(self) -> None:
        sched = list(self.labels)
        for name, doc in (
            ("sglang:num_running_reqs", "The number of running requests."),
            ("sglang:num_queue_reqs", "The number of requests in the waiting queue."),
            ("sglang:num_grammar_queue_reqs", "The number of requests in the grammar waiting queue."),
            ("sglang:gen_throughput", "The generation throughput (token/s)."),
            ("sglang:cache_hit_rate", "The prefix cache hit rate."),
            ("sglang:decode_sum_seq_lens", "The sum of all sequence lengths in decode."),
            ("sglang:token_usage", "The token usage."),
            ("sglang:num_used_tokens", "The number of used tokens."),
            ("sglang:num_retracted_reqs", "The number of retracted requests."),
            ("sglang:num_paused_reqs", "The number of paused requests by async weight sync."),
            ("sglang:num_prefill_inflight_queue_reqs", "The number of requests in the prefill inflight queue."),
            ("sglang:num_decode_prealloc_queue_reqs", "The number of requests in the decode prealloc queue."),
            ("sglang:num_decode_transfer_queue_reqs", "The number of requests in the decode transfer queue."),
            ("sglang:pending_prealloc_token_usage", "The token usage for pending preallocated tokens (not preallocated yet)."),
            ("sglang:utilization", "The utilization."),
            ("sglang:new_token_ratio", "The new token ratio."),
            ("sglang:is_cuda_graph", "Whether the batch is using CUDA graph."),
            ("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool."),
            ("sglang:context_len", "The context length of the model."),
            ("sglang:page_size", "The page size of the KV cache."),
        ):
            self._gauge(name, doc, sched)
        if self.modern:
            self._gauge("sglang:num_prefill_bootstrap_queue_reqs", "The number of requests in the prefill bootstrap queue.", sched)
        else:
            self._gauge("sglang:num_prefill_prealloc_queue_reqs", "The number of requests in the prefill prealloc queue.", sched)
        self.num_bootstrap_failed = self._counter(
            "sglang:num_bootstrap_failed_reqs_total", "The number of bootstrap failed requests.", sched
        )
        self.num_transfer_failed = self._counter("sglang:num_transfer_failed_reqs_total", "The number of transfer failed requests.", sched)
        self.num_prefill_retries = self._counter("sglang:num_prefill_retries_total", "Total number of prefill retries.", sched)
        self.queue_time = self._histogram("sglang:queue_time_seconds", "Histogram of queueing time in seconds.", sched, QUEUE_BUCKETS)
        kv = (
            ("kv_transfer_speed_gb_s", "Histogram of KV cache transfer speed in GB/s.", KV_SPEED_BUCKETS),
            ("kv_transfer_latency_ms", "Histogram of KV cache transfer latency in ms.", KV_LATENCY_BUCKETS),
            ("kv_transfer_bootstrap_ms", "Histogram of KV transfer bootstrap time in ms.", KV_BOOTSTRAP_BUCKETS),
            ("kv_transfer_alloc_ms", "Histogram of KV transfer allocation waiting time in ms.", KV_BOOTSTRAP_BUCKETS),
            ("kv_transfer_total_mb", "Histogram of KV cache transfer size in MB.", KV_TOTAL_MB_BUCKETS),
        )
        self.kv_histograms: dict[str, Histogram] = {}
        for short, doc, buckets in kv:
            if self.modern:
                self.kv_histograms[short] = self._histogram(f"sglang:{short}", doc, sched, buckets)
            else:
                # 0.5.8 exported the last transfer's value as a gauge, logged with every stats tick.
                self._gauge(f"sglang:{short}", doc.replace("Histogram of ", "The "), sched).labels(**self.labels).set(0)

    def _tokenizer_metrics(self) -> None:
        tok = list(self.tokenizer_labels)
        streaming = [*tok, "is_streaming"] if self.modern else tok
        self.prompt_tokens = self._counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.", streaming)
        self.generation_tokens = self._counter("sglang:generation_tokens_total", "Number of generation tokens processed.", streaming)
        self.cached_tokens = self._counter(
            "sglang:cached_tokens_total", "Number of cached prompt tokens by source (device/host/storage).", [*tok, "cache_source"]
        )
        self.num_requests = self._counter("sglang:num_requests_total", "Number of requests processed.", streaming)
        self.num_aborted = self._counter("sglang:num_aborted_requests_total", "Number of requests aborted.", tok)
        self.prompt_tokens_histogram = self._histogram(
            "sglang:prompt_tokens_histogram", "Histogram of prompt token length.", tok, PROMPT_TOKEN_BUCKETS
        )
        self.generation_tokens_histogram = self._histogram(
            "sglang:generation_tokens_histogram", "Histogram of generation token length.", tok, PROMPT_TOKEN_BUCKETS
        )
        self.get_loads_duration = self._histogram(
            "sglang:get_loads_duration_seconds", "Time spent serving /v1/loads requests (seconds).", tok, GET_LOADS_BUCKETS
        )
        self.ttft = self._histogram(
            "sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", streaming, TTFT_BUCKETS
        )
        self.itl = self._histogram("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", tok, ITL_BUCKETS)
        self.tpot = (
            self._histogram(
                "sglang:request_time_per_output_token_seconds",
                "Per-request TPOT in seconds: (finished_time - first_token_time) / (completion_tokens - 1).",
                streaming,
                ITL_BUCKETS,
            )
            if self.modern
            else None
        )
        self.e2e = self._histogram(
            "sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", streaming, E2E_BUCKETS
        )

    def _encoder_metrics(self) -> None:
        enc = list(self.encoder_labels)
        self.encoder_requests = self._counter(
            "sglang:encoder_requests_total", "Total encoder requests by modality and status.", [*enc, "modality", "status"]
        )
        self.encoder_requests_received = self._counter(
            "sglang:encoder_requests_received_total",
            "Total requests received by encoder (at receive time), per DP rank.",
            [*enc, "modality"],
        )
        self.encoder_items_per_request = self._histogram(
            "sglang:encoder_mm_items_per_request", "Number of multimodal items per request.", [*enc, "modality"], ENCODER_ITEMS_BUCKETS
        )
        self.encoder_e2e = self._histogram(
            "sglang:encoder_request_e2e_latency_seconds", "End-to-end encoder request latency.", [*enc, "modality"], ENCODER_E2E_BUCKETS
        )
        self.encoder_queue_wait = self._histogram(
            "sglang:encoder_queue_wait_seconds", "Time a request waited before encoding.", [*enc, "modality"], ENCODER_QUEUE_BUCKETS
        )
        self._gauge("sglang:encoder_cache_size_mb", "Encoder embedding cache size in MB.", enc)
        self._gauge("sglang:encoder_cache_entries", "Number of entries in the encoder embedding cache.", enc)

    def _http_metrics(self) -> None:
        self.http_requests = self._counter(
            "sglang:http_requests_total", "Total number of HTTP requests by endpoint and method", ["endpoint", "method"]
        )
        self.http_responses = self._counter(
            "sglang:http_responses_total",
            "Total number of HTTP responses by endpoint and status code",
            ["endpoint", "status_code", "method"],
        )
        self.http_active = Gauge(
            "sglang:http_requests_active",
            "Number of currently active HTTP requests",
            labelnames=["endpoint", "method"],
            multiprocess_mode="livesum",
            registry=self.registry,
        )

    # -- recording ------------------------------------------------------------------------------

    def set_gauge(self, name: str, value: float) -> None:
        labels = self.encoder_labels if name.startswith("sglang:encoder_") else self.labels
        self.gauges[name].labels(**labels).set(value)

    def streaming(self, stream: bool) -> dict[str, str]:
        return {**self.tokenizer_labels, "is_streaming": "true" if stream else "false"} if self.modern else self.tokenizer_labels

    def observe_kv_transfer(self, latency_ms: float, total_mb: float, speed_gb_s: float) -> None:
        for short, value in (
            ("kv_transfer_latency_ms", latency_ms),
            ("kv_transfer_total_mb", total_mb),
            ("kv_transfer_speed_gb_s", speed_gb_s),
        ):
            self._kv(short, value)

    def observe_kv_bootstrap(self, bootstrap_ms: float, alloc_ms: float) -> None:
        self._kv("kv_transfer_bootstrap_ms", bootstrap_ms)
        self._kv("kv_transfer_alloc_ms", alloc_ms)

    def _kv(self, short: str, value: float) -> None:
        if self.modern:
            self.kv_histograms[short].labels(**self.labels).observe(value)
        else:
            self.set_gauge(f"sglang:{short}", value)

    def render(self) -> str:
        return exposition(self.registry)


def _escape_label(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    items = sorted((k, v) for k, v in labels.items() if k != "le")
    if "le" in labels:
        items.append(("le", labels["le"]))
    return "{" + ",".join(f'{k}="{_escape_label(v)}"' for k, v in items) + "}"


def exposition(registry: CollectorRegistry) -> str:
    """Prometheus text format 0.0.4 as prometheus_client's multiprocess collector writes it."""
    lines: list[str] = []
    for family in registry.collect():
        samples = [s for s in family.samples if not s.name.endswith("_created")]
        if not samples:
            continue
        name = family.name + "_total" if family.type == "counter" else family.name
        lines.append(f"# HELP {name} {_escape_help(family.documentation)}")
        lines.append(f"# TYPE {name} {family.type}")
        lines.extend(f"{s.name}{_labels(s.labels)} {floatToGoString(s.value)}" for s in samples)
    return "\n".join(lines) + "\n"
