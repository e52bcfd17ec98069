"""The local front: the one address clients use, in front of one or more SMG gateways.

It plays the part the gateway's Kubernetes Service (or an ingress) plays in a cluster: clients do
not know which SMG serves them, so a blue/green switch (playbooks/switch-model.yml) can move new
requests from the old set's gateway to the new set's without touching clients. Each request goes
to one gateway, chosen by weight from ``targets.json`` (re-read when it changes); a request in
flight, stream included, finishes on the gateway it started on. Every answer says which gateway
served it (``x-inferplane-front-target``).

Routing per request (not per connection) matters: a client's keep-alive connection must not pin
it to a gateway the switch has left, or the old set would never drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import signal
from dataclasses import dataclass
from pathlib import Path

from aiohttp import ClientError, ClientSession, ClientTimeout, TCPConnector, web

TARGET_HEADER = "x-inferplane-front-target"
# Hop-by-hop headers (RFC 9110 7.6.1) and those aiohttp recomputes.
_SKIP = {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "host", "content-length"}


@dataclass(frozen=True)
class Target:
    name: str
    url: str
    weight: int


class Targets:
    """``targets.json`` ({"targets": {name: {url, weight}}}), re-read whenever its mtime changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._mtime: int | None = None
        self._targets: list[Target] = []

    def current(self) -> list[Target]:
        try:
            mtime = self.path.stat().st_mtime_ns
        except OSError:
            return self._targets
        if mtime != self._mtime:
            try:
                data = json.loads(self.path.read_text())
                targets = [Target(n, str(t["url"]).rstrip("/"), int(t["weight"])) for n, t in (data.get("targets") or {}).items()]
            except (OSError, ValueError, KeyError, TypeError):
                return self._targets  # a torn write: keep routing as before until the next good read
            self._targets = [t for t in targets if t.weight > 0]
            self._mtime = mtime
        return self._targets

    def pick(self) -> Target | None:
        targets = self.current()
        if not targets:
            return None
        return random.choices(targets, weights=[t.weight for t in targets])[0]


class Front:
    def __init__(self, targets_file: Path) -> None:
        self.targets = Targets(targets_file)
        self.session: ClientSession | None = None

    async def start(self) -> None:
        # No total timeout: a long stream is a normal request; SMG enforces the request timeout.
        self.session = ClientSession(
            connector=TCPConnector(limit=0), timeout=ClientTimeout(total=None, sock_connect=10), auto_decompress=False
        )

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()

    async def health(self, _request: web.Request) -> web.Response:
        targets = self.targets.current()
        body = {"targets": {t.name: {"url": t.url, "weight": t.weight} for t in targets}}
        return web.json_response(body, status=200 if targets else 503)

    async def proxy(self, request: web.Request) -> web.StreamResponse:
        if request.path == "/front/health":
            return await self.health(request)
        target = self.targets.pick()
        if target is None:
            return web.json_response({"error": {"message": "the front has no gateway with a weight > 0"}}, status=503)
        assert self.session is not None
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _SKIP}
        try:
            async with self.session.request(request.method, target.url + request.path_qs, data=body or None, headers=headers) as upstream:
                out_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _SKIP}
                out_headers[TARGET_HEADER] = target.name
                response = web.StreamResponse(status=upstream.status, headers=out_headers)
                await response.prepare(request)
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
                return response
        except (TimeoutError, ClientError) as exc:
            return web.json_response(
                {"error": {"message": f"front: gateway {target.name} ({target.url}) failed: {type(exc).__name__}: {exc}"}},
                status=502,
                headers={TARGET_HEADER: target.name},
            )


async def serve(host: str, port: int, targets_file: Path) -> None:
    front = Front(targets_file)
    await front.start()
    app = web.Application(client_max_size=64 << 20)
    app.router.add_route("*", "/{tail:.*}", front.proxy)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    print(f"front on http://{host}:{port} (targets {targets_file})", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    # Stop accepting, let requests in flight finish (runner.cleanup waits for them), then exit.
    await runner.cleanup()
    await front.close()


def run(host: str, port: int, targets_file: Path) -> int:
    asyncio.run(serve(host, port, targets_file))
    return 0
