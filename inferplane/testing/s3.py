"""A real S3 endpoint for tests, benchmarks and molecule: moto_server on a free port.

Signatures are enforced (moto's INITIAL_NO_AUTH_ACTION_COUNT): the first requests create an IAM
user and its access key, every later request must carry a valid AWS SigV4 signature, so a
client that signs wrongly fails here as it would against S3.

    python -m inferplane.testing.s3 serve --state FILE      # foreground; writes FILE (JSON) once ready
    python -m inferplane.testing.s3 upload --state FILE --bucket B --prefix P DIR
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# Requests moto serves unauthenticated: create_user, put_user_policy, create_access_key.
_BOOTSTRAP_ACTIONS = 3
_POLICY = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}


@dataclass
class S3Endpoint:
    endpoint: str
    access_key: str
    secret_key: str
    region: str = "us-east-1"
    pid: int = 0

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=self.region,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
        )

    def env(self) -> dict[str, str]:
        """The AWS environment variables a client (the warm-up engine, the CLI) reads."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
        }


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _wait_listening(host: str, port: int, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"moto_server exited with status {proc.returncode} before listening on {host}:{port}")
        try:
            socket.create_connection((host, port), 0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"moto_server did not listen on {host}:{port} within {timeout:.0f} s")


@contextlib.contextmanager
def moto_s3(host: str = "127.0.0.1", log_path: str | None = None) -> Iterator[S3Endpoint]:
    """Start moto_server with signature checks, create a credentialed IAM user, stop it on exit."""
    import boto3

    env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT=str(_BOOTSTRAP_ACTIONS))
    for attempt in range(3):
        # Another process may take the free port between our probe and moto's bind: retry.
        port = free_port(host)
        cmd = [sys.executable, "-m", "moto.server", "-H", host, "-p", str(port)]
        with open(log_path or os.devnull, "ab") as log:
            proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=log)
        try:
            _wait_listening(host, port, proc)
            break
        except RuntimeError:
            proc.kill()
            proc.wait()
            if attempt == 2:
                raise
    try:
        endpoint = f"http://{host}:{port}"
        iam = boto3.client(
            "iam", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="bootstrap", aws_secret_access_key="bootstrap"
        )
        iam.create_user(UserName="warmup")
        iam.put_user_policy(UserName="warmup", PolicyName="all", PolicyDocument=json.dumps(_POLICY))
        key = iam.create_access_key(UserName="warmup")["AccessKey"]
        yield S3Endpoint(endpoint, key["AccessKeyId"], key["SecretAccessKey"], pid=proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def upload_dir(client: Any, bucket: str, prefix: str, directory: str | os.PathLike[str]) -> list[str]:
    """Upload every file under directory to s3://bucket/prefix/...; creates the bucket. Returns keys."""
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=bucket)
    root = Path(directory)
    keys = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        key = prefix.rstrip("/") + "/" + path.relative_to(root).as_posix() if prefix else path.relative_to(root).as_posix()
        client.upload_file(str(path), bucket, key)
        keys.append(key)
    return keys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inferplane.testing.s3")
    sub = parser.add_subparsers(dest="cmd", required=True)
    serve = sub.add_parser("serve", help="run moto_server with enforced signatures until SIGTERM")
    serve.add_argument("--state", required=True, help="write endpoint and credentials here (JSON) once ready")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--log", help="moto_server's log file")
    up = sub.add_parser("upload", help="upload a directory")
    up.add_argument("--state", required=True)
    up.add_argument("--bucket", required=True)
    up.add_argument("--prefix", default="")
    up.add_argument("directory")
    args = parser.parse_args(argv)
    if args.cmd == "serve":
        stop = {"now": False}

        def on_term(signum: int, frame: object) -> None:
            stop["now"] = True

        signal.signal(signal.SIGTERM, on_term)
        with moto_s3(args.host, args.log) as s3:
            tmp = args.state + ".tmp"
            Path(tmp).write_text(json.dumps({**asdict(s3), "serve_pid": os.getpid()}))
            os.replace(tmp, args.state)
            while not stop["now"]:
                time.sleep(0.2)
        return 0
    s3 = S3Endpoint(**{k: v for k, v in json.loads(Path(args.state).read_text()).items() if k != "serve_pid"})
    for key in upload_dir(s3.client(), args.bucket, args.prefix, args.directory):
        print(key)
    return 0


if __name__ == "__main__":
    sys.exit(main())
