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


def test_six_dashboards_and_every_query_reads_catalogued_metrics() -> None:
    from inferplane.observability.dashboards import DASHBOARDS, queries

    assert [d.title.split(" / ")[1] for d in DASHBOARDS] == ["Request SLO", "Prefill", "Decode", "Mooncake", "Fabric", "GPU"]
    assert len({d.uid for d in DASHBOARDS}) == 6
    for dash in DASHBOARDS:
        model = dash.model()
        assert model["uid"] == dash.uid and model["panels"], dash.title
        assert all(t["datasource"]["uid"] == "${datasource}" for p in model["panels"] for t in p["targets"])
        for title, expr in queries(dash):
            _check_names(expr, f"dashboard {dash.title!r} panel {title!r}")


def test_every_catalogued_metric_is_read_by_a_rule_or_a_dashboard() -> None:
    # The catalogue lists what we rely on; a name nothing reads is either dead or a typo of a used one.
    from inferplane.observability.dashboards import DASHBOARDS, queries

    used: set[str] = set()
    for group in rule_groups(Thresholds()):
        for rule in group["rules"]:
            used |= {m.name for n in metric_names(rule["expr"]) if (m := lookup(n))}
    for dash in DASHBOARDS:
        for _, expr in queries(dash):
            used |= {m.name for n in metric_names(expr) if (m := lookup(n))}
    unused = sorted(set(CATALOGUE) - used)
    assert unused == [], "catalogue entries nothing reads"
