"""Every metric our rules and dashboards read is in the catalogue, with the right type for how it is used."""

from __future__ import annotations

import pytest

from inferplane.observability.metrics import CATALOGUE, lookup
from inferplane.observability.promql import PromQLNameError, metric_names
from inferplane.observability.rules import rule_groups
from inferplane.spec import Thresholds


def _check_names(expr: str, where: str) -> None:
    for name in metric_names(expr):
        metric = lookup(name)
        assert metric is not None, f"{where}: {name} is not in inferplane/observability/metrics.py"
        if name.endswith("_bucket"):
            assert metric.type == "histogram", f"{where}: {name} used as a histogram but {metric.name} is a {metric.type}"
        if name.endswith("_total") and name in CATALOGUE:
            assert metric.type == "counter", f"{where}: {name} ends in _total but is listed as a {metric.type}"


def test_rule_expressions_only_read_catalogued_metrics() -> None:
    for kv_over_rdma in (True, False):
        for group in rule_groups(Thresholds(), kv_over_rdma=kv_over_rdma):
            for rule in group["rules"]:
                _check_names(rule["expr"], f"rule {rule['alert']}")


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        (
            'sum by (job) (rate(sglang:num_transfer_failed_reqs_total{engine_type="decode"}[5m])) * 60 > 1',
            {"sglang:num_transfer_failed_reqs_total"},
        ),
        (
            '{__name__=~"sglang:num_queue_reqs|sglang:num_decode_prealloc_queue_reqs"}',
            {"sglang:num_queue_reqs", "sglang:num_decode_prealloc_queue_reqs"},
        ),
        ("histogram_quantile(0.99, sum by (le) (rate(x_bucket[5m]))) > 1e3", {"x_bucket"}),
        ("up == 1 unless on (job, instance) smg_worker_health offset 5m", {"up", "smg_worker_health"}),
        ('label_replace(up, "dst", "$1", "instance", "(.*):.*")', {"up"}),
    ],
)
def test_metric_names_reads_what_our_queries_use(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_an_unlisted_metric_is_caught() -> None:
    assert lookup("sglang:time_per_output_token_seconds_bucket") is None  # exists in neither SGLang version
    assert lookup("sglang:num_queue_reqs_bucket") is None  # a gauge has no buckets


def test_regex_name_matchers_must_be_plain_alternatives() -> None:
    with pytest.raises(PromQLNameError):
        metric_names('{__name__=~"sglang:.*"}')
