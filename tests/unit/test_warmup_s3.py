"""The warm-up engine against a real S3 endpoint (moto_server, signatures enforced) and the
SigV4 signer against AWS's published examples and botocore."""

from __future__ import annotations

import calendar
import hashlib
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from inferplane.node.warmup import LISTING_FILE, Options, S3Source, WarmupError, open_source, sigv4_headers, warm_up
from inferplane.node.weights import hash_model
from inferplane.testing.s3 import S3Endpoint, moto_s3, upload_dir
from tests.unit.warmup_support import Model, corrupt, final_names, model

# Parts much smaller than a shard, several ranged GETs per file in flight.
OPT = Options(workers=2, streams=3, chunk_bytes=64 * 1024)


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Endpoint]:
    with moto_s3() as endpoint:
        yield endpoint


@pytest.fixture
def bucket(s3: S3Endpoint, request: pytest.FixtureRequest) -> str:
    name = "b-" + hashlib.sha256(request.node.name.encode()).hexdigest()[:12]
    s3.client().create_bucket(Bucket=name)
    return name


def source(s3: S3Endpoint, uri: str, **kw: str) -> S3Source:
    args = {"s3_endpoint": s3.endpoint, "access_key": s3.access_key, "secret_key": s3.secret_key, **kw}
    src = open_source(uri, env={}, **args)
    assert isinstance(src, S3Source)
    return src


def upload(s3: S3Endpoint, bucket: str, m: Model, prefix: str = "models/tiny") -> None:
    upload_dir(s3.client(), bucket, prefix, m.path)


def test_copies_from_s3_verifies_and_a_second_run_copies_nothing(s3: S3Endpoint, bucket: str, tmp_path: Path) -> None:
    m = model(tmp_path / "src")
    upload(s3, bucket, m)
    dest = tmp_path / "dest"
    res = warm_up(source(s3, f"s3://{bucket}/models/tiny/"), str(dest), m.expected, options=OPT)
    assert res.changed and res.listing and final_names(dest) == final_names(m.path)
    for rel in final_names(m.path):
        assert (dest / rel).read_bytes() == (m.path / rel).read_bytes(), rel
    again = warm_up(source(s3, f"s3://{bucket}/models/tiny/"), str(dest), m.expected, options=OPT)
    assert not again.changed and again.copied == [] and len(again.skipped) == len(final_names(m.path))


def test_a_re_uploaded_object_is_copied_again_and_only_it(s3: S3Endpoint, bucket: str, tmp_path: Path) -> None:
    m = model(tmp_path / "src")
    upload(s3, bucket, m)
    dest = tmp_path / "dest"
    warm_up(source(s3, f"s3://{bucket}/models/tiny"), str(dest), m.expected, options=OPT)
    s3.client().put_object(Bucket=bucket, Key="models/tiny/tokenizer_config.json", Body=b'{"model_max_length": 8192}\n')
    res = warm_up(source(s3, f"s3://{bucket}/models/tiny"), str(dest), m.expected, options=OPT)
    assert res.copied == ["tokenizer_config.json"]
    assert (dest / "tokenizer_config.json").read_bytes() == b'{"model_max_length": 8192}\n'


def test_a_corrupt_object_fails_naming_it(s3: S3Endpoint, bucket: str, tmp_path: Path) -> None:
    m = model(tmp_path / "src")
    corrupt(m.path / m.shards[2], offset=300 * 1024)
    upload(s3, bucket, m)
    dest = tmp_path / "dest"
    with pytest.raises(WarmupError) as err:
        warm_up(source(s3, f"s3://{bucket}/models/tiny/"), str(dest), m.expected, options=OPT)
    assert err.value.kind == "verify" and err.value.path == m.shards[2] and m.shards[2] in str(err.value)
    assert m.shards[2] not in final_names(dest)


def test_an_object_replaced_during_the_copy_fails_instead_of_mixing_versions(s3: S3Endpoint, bucket: str, tmp_path: Path) -> None:
    m = model(tmp_path / "src", shards=1, shard_bytes=1 << 20)
    upload(s3, bucket, m)
    shard = m.shards[0]
    replaced: list[bool] = []

    def reupload_once(rel: str, n: int) -> None:
        # Called after the first part is hashed; the pipeline holds at most streams + 2 parts,
        # so later parts are requested after the new version is in place.
        if rel == shard and not replaced:
            replaced.append(True)
            s3.client().put_object(Bucket=bucket, Key=f"models/tiny/{shard}", Body=b"x" * (1 << 20))

    with pytest.raises(WarmupError) as err:
        warm_up(
            source(s3, f"s3://{bucket}/models/tiny/"),
            str(tmp_path / "dest"),
            m.expected,
            options=replace(OPT, workers=1, streams=1, on_progress=reupload_once),
        )
    assert err.value.path == shard and "PreconditionFailed" in str(err.value)
    assert shard not in final_names(tmp_path / "dest")


def test_keys_with_spaces_and_non_ascii_are_signed_correctly(s3: S3Endpoint, bucket: str, tmp_path: Path) -> None:
    m = model(tmp_path / "src", shards=2)
    upload(s3, bucket, m, prefix="my models/Ünïcode+plus")
    dest = tmp_path / "dest"
    warm_up(source(s3, f"s3://{bucket}/my models/Ünïcode+plus/"), str(dest), m.expected, options=OPT)
    assert hash_model(str(dest))["weights_manifest_sha256"] == m.expected.weights_manifest_sha256


def test_listing_follows_continuation_tokens(s3: S3Endpoint, bucket: str, tmp_path: Path) -> None:
    m = model(tmp_path / "src")
    upload(s3, bucket, m)
    src = source(s3, f"s3://{bucket}/models/tiny/")
    src.page_size = 2
    assert sorted(f.rel for f in src.list_files()) == sorted(final_names(m.path))


def test_a_wrong_secret_key_fails_with_the_store_s_reason_and_copies_nothing(s3: S3Endpoint, bucket: str, tmp_path: Path) -> None:
    m = model(tmp_path / "src")
    upload(s3, bucket, m)
    with pytest.raises(WarmupError) as err:
        warm_up(source(s3, f"s3://{bucket}/models/tiny/", secret_key="wrong"), str(tmp_path / "dest"), m.expected, options=OPT)
    assert err.value.kind == "source" and "SignatureDoesNotMatch" in str(err.value) and "secret key" in str(err.value)
    assert final_names(tmp_path / "dest") == set()


def test_a_missing_bucket_is_named(s3: S3Endpoint, tmp_path: Path) -> None:
    m = model(tmp_path / "src")
    with pytest.raises(WarmupError) as err:
        warm_up(source(s3, "s3://no-such-bucket/models/"), str(tmp_path / "dest"), m.expected, options=OPT)
    assert "NoSuchBucket" in str(err.value) and "'no-such-bucket'" in str(err.value)


def test_an_unreachable_endpoint_is_named(tmp_path: Path) -> None:
    m = model(tmp_path / "src")
    src = open_source("s3://models/tiny/", s3_endpoint="http://127.0.0.1:9", env={})
    with pytest.raises(WarmupError) as err:
        warm_up(src, str(tmp_path / "dest"), m.expected, options=OPT)
    assert err.value.kind == "source" and "cannot reach S3 endpoint http://127.0.0.1:9" in str(err.value)


def test_credentials_and_endpoint_come_from_the_aws_environment(s3: S3Endpoint) -> None:
    src = open_source("s3://models/tiny", env=s3.env())
    assert isinstance(src, S3Source)
    assert (src.cfg.endpoint, src.cfg.access_key, src.cfg.secret_key, src.cfg.prefix) == (
        s3.endpoint,
        s3.access_key,
        s3.secret_key,
        "tiny/",
    )
    with pytest.raises(WarmupError):
        open_source("s3://models/tiny", access_key="only-half", env={})


def test_the_listing_file_is_copied_and_verified_like_any_file(s3: S3Endpoint, bucket: str, tmp_path: Path) -> None:
    m = model(tmp_path / "src")
    upload(s3, bucket, m)
    res = warm_up(source(s3, f"s3://{bucket}/models/tiny/"), str(tmp_path / "dest"), m.expected, options=OPT)
    assert LISTING_FILE in res.copied and LISTING_FILE not in res.unpinned
    assert hashlib.sha256((tmp_path / "dest" / LISTING_FILE).read_bytes()).hexdigest() == m.expected.weights_manifest_sha256


# ---- SigV4 ---------------------------------------------------------------------------------

EXAMPLE_KEY = ("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
EXAMPLE_TIME = calendar.timegm((2013, 5, 24, 0, 0, 0))


def _signature(headers: dict[str, str]) -> str:
    return headers["Authorization"].rsplit("Signature=", 1)[1]


@pytest.mark.parametrize(
    "path,query,headers,signature",
    [
        # The examples of the S3 SigV4 documentation ("Signature Calculations for the Authorization Header").
        ("/test.txt", [], {"Range": "bytes=0-9"}, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"),
        ("/", [("lifecycle", "")], {}, "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"),
        ("/", [("max-keys", "2"), ("prefix", "J")], {}, "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"),
    ],
)
def test_sigv4_matches_the_aws_documentation_examples(
    path: str, query: list[tuple[str, str]], headers: dict[str, str], signature: str
) -> None:
    signed = sigv4_headers("GET", "examplebucket.s3.amazonaws.com", path, query, headers, "us-east-1", *EXAMPLE_KEY, now=EXAMPLE_TIME)
    assert _signature(signed) == signature


def test_sigv4_matches_botocore_with_a_session_token_and_an_odd_key() -> None:
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    path = "/models/my%20models/%C3%9Cn%C3%AFcode%2Bplus/model-00001-of-00002.safetensors"
    req = AWSRequest(method="GET", url=f"http://127.0.0.1:9000{path}", headers={"Range": "bytes=0-1023"})
    S3SigV4Auth(Credentials("AKID", "SECRET", "TOKEN"), "s3", "eu-west-1").add_auth(req)
    amz_date = req.headers["X-Amz-Date"]
    now = calendar.timegm(time.strptime(amz_date, "%Y%m%dT%H%M%SZ"))
    ours = sigv4_headers("GET", "127.0.0.1:9000", path, [], {"range": "bytes=0-1023"}, "eu-west-1", "AKID", "SECRET", "TOKEN", now=now)
    assert ours["x-amz-security-token"] == "TOKEN"
    assert ours["Authorization"] == req.headers["Authorization"]
