"""A small blocking HTTP client for loopback calls (health probes, SMG and Prometheus APIs).

Proxies from the environment are ignored: every local endpoint is on 127.0.0.1.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class Response:
    status: int  # 0: no HTTP answer (refused, timeout)
    body: bytes
    error: str = ""

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def text(self) -> str:
        return self.body.decode(errors="replace")

    def json(self) -> Any:
        return json.loads(self.body)


def request(
    url: str,
    method: str = "GET",
    body: Any = None,
    *,
    headers: dict[str, str] | None = None,
    timeout: float = 3.0,
    raw: bytes | None = None,
) -> Response:
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    hdrs = dict(headers or {})
    if body is not None and raw is None:
        hdrs.setdefault("Content-Type", "application/json")
    req = urllib.request.Request(url, data=data, method=method, headers=hdrs)
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            return Response(resp.status, resp.read())
    except urllib.error.HTTPError as exc:
        return Response(exc.code, exc.read() or b"", str(exc))
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        reason = getattr(exc, "reason", exc)
        return Response(0, b"", str(reason))


def get_json(url: str, *, headers: dict[str, str] | None = None, timeout: float = 3.0) -> Any | None:
    resp = request(url, headers=headers, timeout=timeout)
    if not resp.ok:
        return None
    try:
        return resp.json()
    except ValueError:
        return None
