"""The PD KV path: the real Mooncake store, the prefill's bootstrap server and the decode's client.

SGLang moves KV with the Mooncake transfer engine straight from prefill to decode memory, after a
handshake through the prefill's bootstrap server (``--disaggregation-bootstrap-port``; aiohttp,
``GET /health`` -> ``OK``, ``PUT/GET /route``, ``POST /register_dp_rank``, ``POST /query_dp_ranks``).
Here the bytes travel through the real Mooncake store instead: the prefill ``put``s them into its
own segment and the decode ``get``s them over TCP, so the store's capacity, leader failover and
network are on the path and its failures are real failures. The bootstrap server is SGLang's, plus
one route that stands in for the transfer engine's completion notification (SGLang sends it over
ZMQ):
``GET /emulator/rooms/{room}?timeout=S`` - the decode's handshake for that room, answered when the
prefill has stored the room's KV (or failed to).

Mooncake's client calls block, so every call runs off the event loop; ``setup`` against an absent
master even holds the GIL for ~90 s, so it is only attempted once the master (or, for ``etcd://``,
the leader recorded in etcd) accepts connections. Meanwhile the engine serves and PD requests fail
as transfer failures, like an engine whose KV path is broken.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

log = logging.getLogger("inferplane.emulator.kv")

ROOM_RETENTION_S = 60.0
"""How long a finished room's answer waits for a decode that has not asked yet."""


class StoreUnavailable(RuntimeError):
    pass


class MooncakeKvStore:
    """A ``MooncakeDistributedStore`` client that connects in the background and never blocks the loop."""

    def __init__(
        self,
        master: str,
        metadata: str = "P2PHANDSHAKE",
        local_hostname: str = "127.0.0.1",
        segment_bytes: int = 128 << 20,
        local_buffer_bytes: int = 64 << 20,
        protocol: str = "tcp",
        retry_s: float = 2.0,
    ) -> None:
        self.master = master
        self.metadata = metadata
        self.local_hostname = local_hostname
        self.segment_bytes = segment_bytes
        self.local_buffer_bytes = local_buffer_bytes
        self.protocol = protocol
        self.retry_s = retry_s
        self.status = "connecting"
        self.error: str | None = None
        self.puts = self.gets = self.failures = 0
        self._store: Any = None
        self._placement: Any = None
        self._executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="mooncake")
        self._task: asyncio.Task[None] | None = None

    def describe(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "master": self.master,
            "metadata": self.metadata,
            "protocol": self.protocol,
            "error": self.error,
            "puts": self.puts,
            "gets": self.gets,
            "failures": self.failures,
        }

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._connect_loop())

    async def _connect_loop(self) -> None:
        while self._store is None:
            store = None
            # setup() holds the GIL while it retries an absent master (~90 s), freezing the whole
            # engine; so it only runs once the master answers.
            self.error = await self._master_problem()
            if self.error is None:
                try:
                    store = await self._in_daemon_thread(self._setup)
                except Exception as exc:  # the native client raises on bad arguments
                    self.error = f"{type(exc).__name__}: {exc}"
            if store is not None:
                self._store, self.status, self.error = store, "ready", None
                log.info("mooncake store ready (master %s, metadata %s)", self.master, self.metadata)
                return
            self.status = "unreachable"
            log.warning("mooncake store unreachable (master %s): %s; retrying", self.master, self.error)
            await asyncio.sleep(self.retry_s)

    async def _master_problem(self) -> str | None:
        """Why the master cannot be reached now, or None. ``etcd://`` finds the leader as clients do."""
        target = self.master
        if self.master.startswith("etcd://"):
            cluster = os.environ.get("MC_STORE_CLUSTER_ID", "mooncake_cluster")
            leader = await self._etcd_leader(self.master[len("etcd://") :], f"mooncake-store/{cluster}/master_view")
            if leader is None:
                return f"no Mooncake master leader under mooncake-store/{cluster}/master_view in etcd {self.master}"
            target = leader
        elif "://" in self.master:
            return None  # redis:// and friends: leave discovery to the client
        host, _, port = target.rpartition(":")
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host or "127.0.0.1", int(port)), 2.0)
        except (OSError, ValueError, TimeoutError) as exc:
            return f"master {target} does not answer ({type(exc).__name__}: {exc})"
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return None

    @staticmethod
    async def _etcd_leader(endpoints: str, key: str) -> str | None:
        body = {"key": base64.b64encode(key.encode()).decode()}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
            for endpoint in filter(None, re.split(r"[;,]", endpoints)):
                url = (endpoint if "://" in endpoint else f"http://{endpoint}") + "/v3/kv/range"
                try:
                    async with session.post(url, json=body) as resp:
                        kvs = (await resp.json(content_type=None)).get("kvs") or []
                except (aiohttp.ClientError, TimeoutError, ValueError):
                    continue
                if kvs:
                    return base64.b64decode(kvs[0]["value"]).decode()
        return None

    @staticmethod
    async def _in_daemon_thread(fn: Any) -> Any:
        """Run ``fn`` where a hung call cannot delay process exit (setup blocks ~90 s on a dead master)."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()

        def settle(result: Any, error: BaseException | None) -> None:
            if done.done():
                return
            if error is not None:
                done.set_exception(error)
            else:
                done.set_result(result)

        def target() -> None:
            result, error = None, None
            try:
                result = fn()
            except BaseException as exc:
                error = exc
            # The loop may be gone by the time a hung setup returns.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, result, error)

        threading.Thread(target=target, name="mooncake-setup", daemon=True).start()
        return await done

    def _setup(self) -> Any:
        from mooncake.store import MooncakeDistributedStore, ReplicateConfig

        store = MooncakeDistributedStore()
        rc = store.setup(self.local_hostname, self.metadata, self.segment_bytes, self.local_buffer_bytes, self.protocol, "", self.master)
        if rc != 0:
            self.error = f"setup returned {rc} (is mooncake_master at {self.master} up?)"
            return None
        # The KV stays in this engine's own segment, as SGLang's KV stays in the prefill's memory
        # until the decode pulls it. Left to the master, a put may land on the segment of an
        # engine that exited less than client_ttl ago and fail TRANSFER_FAIL (seen in CI during
        # a blue/green switch: 1 request of 763).
        placement = ReplicateConfig()
        placement.replica_num = 1
        placement.preferred_segment = store.get_hostname()
        self._placement = placement
        return store

    async def put(self, key: str, value: bytes) -> None:
        store = self._require()
        rc = await asyncio.get_running_loop().run_in_executor(self._executor, store.put, key, value, self._placement)
        if rc != 0:
            self.failures += 1
            raise StoreUnavailable(f"mooncake put {key} returned {rc}")
        self.puts += 1

    async def get(self, key: str) -> bytes:
        store = self._require()
        value = await asyncio.get_running_loop().run_in_executor(self._executor, store.get, key)
        # The client answers b"" both for a missing key and for an RPC failure.
        if not value:
            self.failures += 1
            raise StoreUnavailable(f"mooncake get {key}: key missing or store unreachable")
        self.gets += 1
        return bytes(value)

    def remove_later(self, key: str, delay_s: float) -> None:
        """Free a key once its read lease (the master's default_kv_lease_ttl, 10 s) has expired."""
        loop = asyncio.get_running_loop()

        def _remove() -> None:
            if self._store is not None:
                with contextlib.suppress(Exception):
                    loop.run_in_executor(self._executor, self._store.remove, key)

        loop.call_later(delay_s, _remove)

    def _require(self) -> Any:
        if self._store is None:
            raise StoreUnavailable(f"mooncake store {self.status} (master {self.master}): {self.error or 'not connected yet'}")
        return self._store

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        store, self._store = self._store, None
        if store is not None:
            # Unmounting talks to the master; a dead master must not hold the process hostage.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(self._executor, store.close), 3.0)
        self._executor.shutdown(wait=False, cancel_futures=True)


@dataclass
class Room:
    created: float = field(default_factory=time.monotonic)
    handshake: asyncio.Event = field(default_factory=asyncio.Event)
    result: asyncio.Future[dict[str, Any]] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    decode_attached: bool = False


class RoomRegistry:
    """Prefill side: one entry per bootstrap room, met by the prefill request and its decode."""

    def __init__(self, max_age_s: float = 660.0) -> None:
        self.rooms: dict[int, Room] = {}
        # A room nobody can still be waiting on (both timeouts passed) is forgotten.
        self.max_age_s = max_age_s

    def room(self, room_id: int) -> Room:
        self._sweep()
        if room_id not in self.rooms:
            self.rooms[room_id] = Room()
        return self.rooms[room_id]

    async def wait_handshake(self, room_id: int, timeout_s: float) -> None:
        await asyncio.wait_for(self.room(room_id).handshake.wait(), timeout_s)

    def complete(self, room_id: int, info: dict[str, Any]) -> None:
        room = self.room(room_id)
        if not room.result.done():
            room.result.set_result({"status": "transferred", **info})

    def fail(self, room_id: int, reason: str) -> None:
        room = self.room(room_id)
        if not room.result.done():
            room.result.set_result({"status": "failed", "reason": reason})

    async def attach_decode(self, room_id: int, timeout_s: float) -> dict[str, Any]:
        room = self.room(room_id)
        if room.decode_attached:
            return {"status": "failed", "reason": f"Duplicate decode bootstrap room {room_id}"}
        room.decode_attached = True
        room.handshake.set()
        try:
            return await asyncio.wait_for(asyncio.shield(room.result), timeout_s)
        except TimeoutError:
            return {"status": "timeout", "reason": f"no KV for bootstrap_room={room_id} after {timeout_s:.0f}s"}
        finally:
            if room.result.done():
                self.rooms.pop(room_id, None)

    def _sweep(self) -> None:
        now = time.monotonic()
        stale = [
            r
            for r, room in self.rooms.items()
            if (room.result.done() and now - room.created > ROOM_RETENTION_S) or now - room.created > self.max_age_s
        ]
        for room_id in stale:
            del self.rooms[room_id]


@dataclass(frozen=True)
class PrefillServerInfo:
    """What ``GET /route`` with -1 ranks answers (SGLang's PrefillServerInfo, one rank)."""

    page_size: int
    kv_cache_dtype: str
    kv_layout: str
    rank_ip: str
    rank_port: int


def bootstrap_app(rooms: RoomRegistry, info: PrefillServerInfo) -> web.Application:
    """The prefill's bootstrap server: SGLang's routes plus the room long-poll."""
    table: dict[tuple[int, int, int, int], dict[str, Any]] = {(0, 0, 0, 0): {"rank_ip": info.rank_ip, "rank_port": info.rank_port}}
    room_to_dp_rank: dict[int, int] = {}

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="OK")

    async def route(request: web.Request) -> web.Response:
        if request.method == "PUT":
            data = await request.json()
            key = (int(data.get("system_dp_rank", 0)), int(data.get("attn_cp_rank", 0)), int(data["attn_tp_rank"]), int(data["pp_rank"]))
            table[key] = {"rank_ip": data["rank_ip"], "rank_port": int(data["rank_port"])}
            return web.Response(text="OK")
        if request.method != "GET":
            return web.Response(text="Method not allowed", status=405, content_type="application/json")
        q = request.query
        names = ("prefill_dp_rank", "prefill_cp_rank", "target_tp_rank", "target_pp_rank")
        if not all(q.get(n) for n in names):
            return web.Response(text="Missing inputs for bootstrap server.", status=400)
        ranks = tuple(int(q[n]) for n in names)
        if ranks == (-1, -1, -1, -1):
            payload = {
                "attn_tp_size": 1,
                "attn_cp_size": 1,
                "dp_size": 1,
                "pp_size": 1,
                "page_size": info.page_size,
                "kv_cache_dtype": info.kv_cache_dtype,
                "kv_layout": info.kv_layout,
                "follow_bootstrap_room": True,
                "enable_dsa_cache_layer_split": False,
                "enable_kv_cache_sharding": False,
                "prefill_http_port": None,
                "decode_allocation_policy": "early",
            }
            return web.json_response(payload)
        if ranks not in table:
            dp, cp, tp, pp = ranks
            return web.Response(text=f"Bootstrap info not found for dp_rank={dp} cp_rank={cp} tp_rank={tp} pp_rank={pp}", status=404)
        return web.json_response(table[ranks])  # type: ignore[index]

    async def register_dp_rank(request: web.Request) -> web.Response:
        data = await request.json()
        room_to_dp_rank[int(data["bootstrap_room"])] = int(data["dp_rank"])
        return web.Response(text="OK")

    async def query_dp_ranks(request: web.Request) -> web.Response:
        data = await request.json()
        found = {str(int(r)): room_to_dp_rank[int(r)] for r in data["bootstrap_rooms"] if int(r) in room_to_dp_rank}
        return web.json_response(found)

    async def room(request: web.Request) -> web.Response:
        try:
            room_id = int(request.match_info["room"])
            timeout_s = float(request.query.get("timeout", "300"))
        except ValueError:
            return web.Response(text="room and timeout must be numbers", status=400)
        return web.json_response(await rooms.attach_decode(room_id, timeout_s))

    app = web.Application()
    app.router.add_route("*", "/route", route)
    app.router.add_post("/register_dp_rank", register_dp_rank)
    app.router.add_post("/query_dp_ranks", query_dp_ranks)
    app.router.add_get("/health", health)
    app.router.add_get("/emulator/rooms/{room}", room)
    return app


class BootstrapError(RuntimeError):
    pass


class TransferError(RuntimeError):
    pass


class DecodeKvClient:
    """Decode side: handshake with a prefill's bootstrap server, then wait for a room's KV."""

    def __init__(self, session: aiohttp.ClientSession, expect: PrefillServerInfo) -> None:
        self.session = session
        self.expect = expect

    async def handshake(self, host: str | None, port: int | None, timeout_s: float) -> None:
        if not host or port is None:
            raise BootstrapError(f"bootstrap address {host}:{port} is incomplete (the router must send bootstrap_host and bootstrap_port)")
        base = f"http://{host}:{port}/route"
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        try:
            async with self.session.get(
                base,
                params={"prefill_dp_rank": "-1", "prefill_cp_rank": "-1", "target_tp_rank": "-1", "target_pp_rank": "-1"},
                timeout=timeout,
            ) as resp:
                if resp.status != 200:
                    raise BootstrapError(f"GET {base} -> {resp.status}: {(await resp.text())[:200]}")
                server = await resp.json()
            async with self.session.get(
                base, params={"prefill_dp_rank": "0", "prefill_cp_rank": "0", "target_tp_rank": "0", "target_pp_rank": "0"}, timeout=timeout
            ) as resp:
                if resp.status != 200:
                    raise BootstrapError(f"GET {base} (rank 0) -> {resp.status}: {(await resp.text())[:200]}")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise BootstrapError(f"prefill bootstrap server {host}:{port} unreachable: {type(exc).__name__}: {exc}") from None
        mine = {"page_size": self.expect.page_size, "kv_cache_dtype": self.expect.kv_cache_dtype, "kv_layout": self.expect.kv_layout}
        theirs = {k: server.get(k) for k in mine}
        if theirs != mine:
            raise BootstrapError(f"KV layout mismatch: prefill {theirs} != decode {mine}")

    async def wait_room(self, host: str, port: int, room: int, timeout_s: float) -> dict[str, Any]:
        url = f"http://{host}:{port}/emulator/rooms/{room}"
        try:
            async with self.session.get(
                url, params={"timeout": str(timeout_s)}, timeout=aiohttp.ClientTimeout(total=timeout_s + 10)
            ) as resp:
                if resp.status != 200:
                    raise TransferError(f"GET {url} -> {resp.status}")
                result: dict[str, Any] = await resp.json()
        except (aiohttp.ClientError, TimeoutError) as exc:
            # A prefill that dies mid-transfer drops this connection: SGLang sees it as a failed node.
            raise TransferError(f"prefill {host}:{port} lost while waiting for KV: {type(exc).__name__}: {exc}") from None
        if result.get("status") != "transferred":
            raise TransferError(str(result.get("reason", result)))
        return result
