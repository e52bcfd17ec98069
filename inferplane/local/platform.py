"""The local platform's lifecycle: up, down, status, and the group/process operations runbooks use.

`up` converges: it starts whatever is not running (in dependency order, each phase waiting for
health before the next), leaves running parts alone, and records everything in state.json.
`down` stops exactly the processes state.json names, each only after checking it is still the
process we started. Engine groups keep their URL across restarts, so SMG's registration (which
is by URL) is untouched by group operations, as with a recreated LWS group behind its Service.
"""

from __future__ import annotations

import hashlib
import secrets
import shutil
import signal
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Literal

from inferplane.errors import ConfigError
from inferplane.local import components, proc
from inferplane.local import state as st
from inferplane.local.components import ProcSpec
from inferplane.local.config import LocalPlatformConfig
from inferplane.local.http import Response, get_json, request
from inferplane.local.layout import HOST, MAX_EXTRA_GATEWAYS, Layout
from inferplane.manifest import ReleaseManifest, load_release
from inferplane.spec import REPO_ROOT

ProcAction = Literal["stop", "start", "kill", "pause", "resume"]
PROC_ACTIONS: tuple[ProcAction, ...] = ("stop", "start", "kill", "pause", "resume")
# `down` stops in waves, each wave's processes at once: the serving path first (SMG and the engines
# it routes to, and Prometheus, so no alert fires about the teardown), then the Mooncake side, then
# etcd, which the masters need until they have exited. Per wave, how long to wait after SIGTERM
# before SIGKILL (a process that closed its listeners gets 3 s more, see proc.wait_exit): engines
# finish in-flight requests; etcd members whose peers are already gone spend ~7 s trying to hand
# over leadership (measured), and their WAL is fsynced, so a kill after 3 s loses nothing.
STOP_WAVES: tuple[tuple[tuple[st.ProcKind, ...], float], ...] = (
    (("front", "smg", "prometheus", "engine"), 20.0),
    (("mooncake-master", "mooncake-metadata", "s3"), 5.0),
    (("etcd",), 3.0),
)


class LocalError(Exception):
    """A local-platform operation could not finish; the message says where it stopped and what to do."""


def log_tail(path: str | Path, lines: int = 3) -> str:
    try:
        text = Path(path).read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text[-lines:])


class LocalPlatform:
    """One local platform, identified by its state dir. Safe to construct while it is running."""

    def __init__(self, cfg: LocalPlatformConfig, *, base_port: int | None = None, say: Callable[[str], None] | None = None) -> None:
        """``base_port`` overrides the config's; without it `up` reuses the port of the state dir's last run."""
        self.cfg = cfg
        self.base_port = base_port
        self.state_dir = cfg.state_path.resolve()
        self.say = say or (lambda _msg: None)

    # ---- reading -----------------------------------------------------------------------------

    def state(self) -> st.State:
        found = st.load(self.state_dir)
        if found is None:
            raise LocalError(f"no local platform in {self.state_dir} (no {st.STATE_FILE}); start one with `inferplane local up`")
        return found

    def layout(self, base_port: int | None = None) -> Layout:
        return Layout.of(self.cfg, base_port)

    # ---- up ------------------------------------------------------------------------------------

    def up(self) -> st.State:
        ensure_binaries(self.cfg)
        with st.locked(self.state_dir):
            previous = st.load(self.state_dir)
            running = previous is not None and any(self._alive(p) for p in previous.processes.values())
            base_port = self.base_port or (previous.base_port if previous else self.cfg.base_port)
            if previous is not None and running and previous.base_port != base_port:
                raise LocalError(
                    f"already up in {self.state_dir} on base port {previous.base_port}, not {base_port}; "
                    f"use --base-port {previous.base_port}, or `inferplane local down` first"
                )
            if not running:
                # A fresh platform starts from an empty etcd: members would otherwise rejoin with the
                # peer URLs and Mooncake oplog of the previous run.
                shutil.rmtree(self.state_dir / "etcd", ignore_errors=True)
            layout = self.layout(base_port)
            release = load_release(self.cfg.release_path)
            state = self._plan(layout, release, previous if running else None)
            st.save(state)
            specs = self._specs(layout, state)
            self._phase(state, [specs[n] for n in specs if n.startswith("etcd-") or n in ("mooncake-metadata", "s3", "prometheus")])
            self._upload_model(state, release)
            self._phase(state, [specs[n] for n in specs if n.startswith("mooncake-master-")])
            self._wait_leader(state)
            self._phase(state, [specs[g] for g in state.groups if state.groups[g].role == "encoder"])
            self._phase(state, [specs[g] for g in state.groups if state.groups[g].role != "encoder"])
            # SMG registers its startup workers in the background. Once it runs, registrations are
            # the runbooks' business (a drained group stays out), so only a fresh SMG is waited for.
            if self._phase(state, [specs["smg"]]):
                self._wait_workers(state)
            self._phase(state, [specs[gw.process] for gw in state.endpoints.gateways.values()])
            self._phase(state, [specs["front"]])
            return state

    def _plan(self, layout: Layout, release: ReleaseManifest, previous: st.State | None) -> st.State:
        """The state to converge to: the previous one while it runs (groups keep their versions)."""
        model = self.cfg.model or release.roles["prefill"].model
        if model not in release.models:
            raise ConfigError(
                str(self.cfg.release_path), [f"models: no model '{model}'; local_platform.model must name one of {sorted(release.models)}"]
            )
        source = release.models[model].source
        if not source.startswith("s3://"):
            raise ConfigError(
                str(self.cfg.release_path),
                [f"models.{model}.source: '{source}' is not s3://bucket/prefix; the local object store serves s3 only"],
            )
        bucket, _, prefix = source[len("s3://") :].partition("/")
        admin_key = previous.endpoints.gateway.admin_key if previous else None
        if self.cfg.gateway_admin_key and not admin_key:
            admin_key = secrets.token_urlsafe(24)
        baseline = self.baseline_groups(layout, release, model)
        groups = {name: (previous.groups.get(name) if previous else None) or g for name, g in baseline.items()}
        # Groups added at run time (`group add`, a blue/green set) stay while the platform runs.
        groups |= {name: g for name, g in (previous.groups.items() if previous else []) if name not in baseline}
        front = previous.endpoints.front if previous and previous.endpoints.front else None
        endpoints = st.Endpoints(
            gateway=st.Gateway(
                url=f"http://{HOST}:{layout.smg}", metrics_url=f"http://{HOST}:{layout.smg_metrics}/metrics", admin_key=admin_key
            ),
            etcd=st.Etcd(endpoints=components.etcd_endpoints(layout)),
            mooncake=st.Mooncake(
                cluster_id=self.cfg.mooncake.cluster_id,
                master_address=components.master_address(layout),
                metadata_url=components.metadata_url(layout),
                masters=[
                    st.MooncakeMaster(
                        name=f"mooncake-master-{i}",
                        rpc_address=f"{HOST}:{layout.master_rpc(i)}",
                        metrics_url=f"http://{HOST}:{layout.master_metrics(i)}/metrics",
                        health_url=f"http://{HOST}:{layout.master_metrics(i)}/health",
                    )
                    for i in range(layout.masters)
                ],
            ),
            prometheus=f"http://{HOST}:{layout.prometheus}",
            s3=st.S3(endpoint=f"http://{HOST}:{layout.s3}", bucket=bucket, prefix=prefix),
            front=st.Front(
                url=f"http://{HOST}:{layout.front}",
                targets_file=str(self.state_dir / "front" / "targets.json"),
                weights=front.weights if front else {"smg": 100},
            ),
            gateways=dict(previous.endpoints.gateways) if previous else {},
        )
        state = st.State(
            state_dir=str(self.state_dir),
            base_port=layout.base_port,
            model=model,
            release=str(self.cfg.release_path),
            processes=dict(previous.processes) if previous else {},
            groups=groups,
            endpoints=endpoints,
        )
        # Process records are rebuilt from the specs (same argv as before unless a group changed).
        for name, spec in self._specs(layout, state).items():
            old_proc = state.processes.get(name)
            keep = old_proc is not None and self._alive(old_proc)
            state.processes[name] = (
                old_proc
                if keep and old_proc is not None
                else st.Process(
                    name=name,
                    kind=spec.kind,
                    cmd=spec.argv,
                    env=spec.env,
                    log=str(self._log(name)),
                    ports=spec.ports,
                    health_url=spec.health_url,
                )
            )
        return state

    def baseline_groups(self, layout: Layout, release: ReleaseManifest, model: str) -> dict[str, st.Group]:
        """Every group as a fresh `up` creates it: the config's release, each role's pinned version."""
        return {
            slot.name: st.Group(
                name=slot.name,
                role=slot.role,
                url=slot.url,
                bootstrap_port=slot.bootstrap_port,
                version=release.effective(slot.role).sglang_version,
                release=str(self.cfg.release_path),
                model=model,
            )
            for slot in layout.groups
        }

    def _specs(self, layout: Layout, state: st.State) -> dict[str, ProcSpec]:
        token = "inferplane-" + hashlib.sha256(str(self.state_dir).encode()).hexdigest()[:12]
        specs: list[ProcSpec] = [components.etcd_member(layout, i, self.state_dir, token) for i in range(layout.etcd_members)]
        if layout.metadata_server:
            specs.append(components.mooncake_metadata(layout))
        specs += [components.s3(layout), components.prometheus(layout, self.cfg, self.state_dir)]
        specs += [components.mooncake_master(layout, i, self.cfg) for i in range(layout.masters)]
        encoder_urls = [s.url for s in layout.groups if s.role == "encoder"]
        specs += [components.engine(layout.group(name), g, layout, self.cfg, encoder_urls) for name, g in state.groups.items()]
        specs.append(components.smg(layout, self.cfg, state.endpoints.gateway.admin_key))
        specs += [self._gateway_spec(layout, gw) for gw in state.endpoints.gateways.values()]
        specs.append(self._front_spec(layout, state))
        return {s.name: s for s in specs}

    def _gateway_spec(self, layout: Layout, gw: st.Gateway) -> ProcSpec:
        port, metrics = int(gw.url.rsplit(":", 1)[1]), int(gw.metrics_url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
        slots = [layout.group(g) for g in gw.groups or []]
        return components.smg(layout, self.cfg, gw.admin_key, name=gw.process, ports=(port, metrics), groups=slots)

    def _front_spec(self, layout: Layout, state: st.State) -> ProcSpec:
        front = state.endpoints.front
        assert front is not None
        return components.front(layout, Path(front.targets_file), components.front_targets(front.weights, self._gateway_urls(state)))

    @staticmethod
    def _gateway_urls(state: st.State) -> dict[str, str]:
        return {"smg": state.endpoints.gateway.url} | {name: gw.url for name, gw in state.endpoints.gateways.items()}

    def _log(self, name: str) -> Path:
        return self.state_dir / "logs" / f"{name}.log"

    # ---- starting and waiting ---------------------------------------------------------------------

    @staticmethod
    def _alive(p: st.Process) -> bool:
        ident = p.identity()
        return ident is not None and proc.is_ours(ident)

    def _phase(self, state: st.State, specs: Iterable[ProcSpec]) -> list[str]:
        """Start every spec not already running (resume paused ones), wait for all to be healthy;
        return the names it started."""
        started: list[ProcSpec] = []
        for spec in specs:
            rec = state.processes[spec.name]
            if self._alive(rec):
                ident = rec.identity()
                if ident and proc.stopped(ident.pid):
                    proc.resume(ident)
                    self.say(f"{spec.name}: resumed")
                rec.desired = "running"
                continue
            self._check_ports(spec)
            self._start(state, spec)
            started.append(spec)
        st.save(state)
        if started:
            self._wait_healthy(state, [s.name for s in started])
        return [s.name for s in started]

    def _check_ports(self, spec: ProcSpec) -> None:
        for purpose, port in spec.ports.items():
            if not proc.port_free(port):
                owner = proc.port_owner(port)
                raise LocalError(
                    f"port {port} ({spec.name} {purpose}) is already in use{' by ' + owner if owner else ''}; "
                    f"stop that process or choose another --base-port"
                )

    def _start(self, state: st.State, spec: ProcSpec) -> None:
        for path, content in spec.files.items():
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            if callable(content):
                content(Path(path))
            else:
                Path(path).write_text(content)
        rec = state.processes[spec.name]
        rec.cmd, rec.env, rec.ports, rec.health_url = spec.argv, spec.env, spec.ports, spec.health_url
        ident = proc.spawn(spec.argv, log=Path(rec.log), env=spec.env, state_dir=self.state_dir, cwd=REPO_ROOT)
        rec.pid, rec.starttime, rec.desired = ident.pid, ident.starttime, "running"
        st.save(state)
        self.say(f"{spec.name}: started (pid {ident.pid}, log {rec.log})")

    def _wait_healthy(self, state: st.State, names: list[str], timeout: float | None = None) -> None:
        timeout = timeout or self.cfg.startup_timeout_seconds
        deadline = time.monotonic() + timeout
        pending = list(names)
        last: dict[str, str] = {}
        while pending:
            for name in list(pending):
                rec = state.processes[name]
                if not self._alive(rec):
                    raise LocalError(f"{name} exited during startup; log {rec.log}: {log_tail(rec.log)}")
                ok, detail = health(rec)
                last[name] = detail
                if ok:
                    pending.remove(name)
            if not pending:
                break
            if time.monotonic() > deadline:
                name = pending[0]
                raise LocalError(
                    f"{name} not healthy after {timeout:g}s ({last.get(name)}); "
                    f"log {state.processes[name].log}: {log_tail(state.processes[name].log)}"
                )
            time.sleep(0.2)

    def _wait_leader(self, state: st.State) -> None:
        deadline = time.monotonic() + self.cfg.startup_timeout_seconds
        while time.monotonic() < deadline:
            if mooncake_leader(state)[0]:
                return
            time.sleep(0.3)
        raise LocalError(
            "no Mooncake master became a serving leader; check etcd health and the mooncake-master-* logs (`inferplane local status`)"
        )

    def _wait_workers(self, state: st.State, gateway: st.Gateway | None = None) -> None:
        """SMG registers its startup workers in the background: wait until every group it starts with is ready."""
        gateway = gateway or state.endpoints.gateway
        names = gateway.groups if gateway.groups is not None else [s.name for s in self.layout(state.base_port).groups]
        want = {state.groups[n].url for n in names if state.groups[n].role in ("prefill", "decode")}
        deadline = time.monotonic() + self.cfg.startup_timeout_seconds
        seen: dict[str, str] = {}
        while time.monotonic() < deadline:
            table = smg_workers(state, gateway)
            seen = {w.get("url", ""): str(w.get("status")) for w in table or []}
            if want <= {u for u, s in seen.items() if s == "ready"}:
                return
            time.sleep(0.3)
        missing = sorted(u for u in want if seen.get(u) != "ready")
        raise LocalError(
            f"{gateway.process} did not report every group ready (not ready: {', '.join(missing)}); log {state.processes[gateway.process].log}"
        )

    def _upload_model(self, state: st.State, release: ReleaseManifest) -> None:
        """Generate the local model (byte-identical to what releases/local.yaml pins) into the object store."""
        import boto3  # heavy import, only needed here

        from inferplane.node.weights import hash_model
        from inferplane.testing.tiny_model import make_model

        model = release.models[state.model]
        model_dir = self.state_dir / "model" / state.model
        if not (model_dir / "config.json").is_file():
            make_model(model_dir)
        got = hash_model(str(model_dir))
        for key in ("config_sha256", "tokenizer_sha256", "weights_manifest_sha256"):
            if got[key] != getattr(model, key):
                raise LocalError(
                    f"{model_dir}: {key} {got[key]} differs from {self.cfg.release_path} ({getattr(model, key)}); "
                    f"regenerate the pin with `inferplane manifest hash-model {model_dir} --update {self.cfg.release} --model {state.model}`"
                )
        s3cfg = state.endpoints.s3
        client = boto3.client(
            "s3",
            endpoint_url=s3cfg.endpoint,
            region_name=s3cfg.region,
            aws_access_key_id=s3cfg.access_key_id,
            aws_secret_access_key=s3cfg.secret_access_key,
        )
        existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
        if s3cfg.bucket not in existing:
            client.create_bucket(Bucket=s3cfg.bucket)
        for path in sorted(p for p in model_dir.rglob("*") if p.is_file()):
            key = s3cfg.prefix + path.relative_to(model_dir).as_posix()
            client.upload_file(str(path), s3cfg.bucket, key)

    # ---- down ----------------------------------------------------------------------------------

    def down(self, purge: bool = False) -> list[str]:
        """Stop every recorded process that is still ours. Returns the names stopped."""
        with st.locked(self.state_dir):
            state = st.load(self.state_dir)
            stopped: list[str] = []
            if state is not None:
                for kinds, grace in STOP_WAVES:
                    stopped += self._terminate_all([p for p in state.processes.values() if p.kind in kinds], grace)
                for p in state.processes.values():
                    p.pid, p.starttime, p.desired = None, None, "stopped"
                st.save(state)
            # Children our processes spawned carry the tag in their environment.
            for pid in proc.tagged(self.state_dir):
                proc.kill(proc.Identity(pid, proc.starttime(pid) or -1, tuple(proc.cmdline(pid)[1:])))
        if purge and st.state_file(self.state_dir).is_file():
            shutil.rmtree(self.state_dir)
        return stopped

    def _terminate_all(self, batch: list[st.Process], grace: float) -> list[str]:
        # SIGTERM the whole batch first so their shutdowns overlap, then wait for all at once.
        live = [(p, i) for p, i in ((p, p.identity()) for p in batch) if i is not None and proc.is_ours(i)]
        for _p, ident in live:
            if proc.stopped(ident.pid):
                proc.resume(ident)
            proc.signal_group(ident, signal.SIGTERM)
        t0 = time.monotonic()
        hung = set(proc.wait_exit_all({ident.pid: p.ports.values() for p, ident in live}, grace))
        for p, ident in live:
            if ident.pid in hung:
                proc.kill(ident)
            proc.kill_stragglers(ident.pid)
            self.say(f"{p.name}: stopped{' (killed: did not exit after SIGTERM)' if ident.pid in hung else ''}")
        if live:
            self.say(f"{len(live)} process(es) stopped in {time.monotonic() - t0:.1f}s")
        return [p.name for p, _ in live]

    # ---- group and process operations -----------------------------------------------------------------

    def group_stop(self, name: str) -> st.Group:
        return self._group_op(name, "stop")

    def group_start(self, name: str, timeout: float | None = None) -> st.Group:
        return self._group_op(name, "start", timeout=timeout)

    def group_restart(
        self, name: str, version: str | None = None, release: str | Path | None = None, timeout: float | None = None
    ) -> st.Group:
        """Recreate the group's process on ``version``/``release`` at the same URL; SMG is not told.
        ``timeout``: seconds for it to turn healthy (default startup_timeout_seconds); past it the
        process keeps running, unhealthy, and the call fails."""
        return self._group_op(name, "restart", version=version, release=release, timeout=timeout)

    def _group_op(
        self, name: str, op: str, version: str | None = None, release: str | Path | None = None, timeout: float | None = None
    ) -> st.Group:
        with st.locked(self.state_dir):
            state = self.state()
            if name not in state.groups:
                raise LocalError(f"no engine group '{name}'; groups: {', '.join(state.groups)}")
            group = state.groups[name]
            rec = state.processes[name]
            if op in ("stop", "restart"):
                self._stop(rec)
                st.save(state)
            if op == "restart" and (version or release):
                if release:
                    path = Path(release).resolve()
                    manifest = load_release(path)
                    group.release = str(path)
                    if group.role not in manifest.roles:
                        raise LocalError(
                            f"{path}: pins no '{group.role}' role; the group stays stopped. Fix the release and run `inferplane local group start {name}`"
                        )
                    group.version = version or manifest.effective(group.role).sglang_version
                else:
                    group.version = version or group.version
            if op in ("start", "restart"):
                layout = self.layout(state.base_port)
                encoder_urls = [g.url for g in state.groups.values() if g.role == "encoder"]
                spec = components.engine(layout.group(name), group, layout, self.cfg, encoder_urls)
                if self._alive(rec):
                    self.say(f"{name}: already running")
                else:
                    self._check_ports(spec)
                    self._start(state, spec)
                    self._wait_healthy(state, [name], timeout)
            st.save(state)
            return group

    # ---- run-time groups, extra gateways and the front (blue/green) ---------------------------------

    def group_add(self, name: str, release: str | Path | None = None, version: str | None = None, timeout: float | None = None) -> st.Group:
        """Start a group beyond the configured ones (e.g. prefill-2 of a new set) on ``release``; no gateway is told."""
        with st.locked(self.state_dir):
            state = self.state()
            layout = self.layout(state.base_port)
            if name in state.groups:
                raise LocalError(f"group '{name}' exists already ({state.groups[name].version}); restart it or pick another index")
            try:
                slot = layout.group(name)
            except KeyError as exc:
                raise LocalError(f"'{name}' is not a group name (<prefill|decode|encoder>-<index>): {exc.args[0]}") from None
            path = Path(release).resolve() if release else self.cfg.release_path
            manifest = load_release(path)
            if slot.role not in manifest.roles:
                raise LocalError(f"{path}: pins no '{slot.role}' role; add roles.{slot.role} or pick another release")
            group = st.Group(
                name=name,
                role=slot.role,
                url=slot.url,
                bootstrap_port=slot.bootstrap_port,
                version=version or manifest.effective(slot.role).sglang_version,
                release=str(path),
                model=state.model,
            )
            encoder_urls = [g.url for g in state.groups.values() if g.role == "encoder"]
            spec = components.engine(slot, group, layout, self.cfg, encoder_urls)
            self._check_ports(spec)
            state.groups[name] = group
            state.processes[name] = st.Process(
                name=name, kind=spec.kind, cmd=spec.argv, env=spec.env, log=str(self._log(name)), ports=spec.ports
            )
            self._start(state, spec)
            self._wait_healthy(state, [name], timeout)
            st.save(state)
            return group

    def group_remove(self, name: str) -> None:
        """Stop a run-time group (SIGTERM: in-flight requests finish) and forget it."""
        with st.locked(self.state_dir):
            state = self.state()
            if name not in state.groups:
                raise LocalError(f"no engine group '{name}'; groups: {', '.join(state.groups)}")
            if name in {s.name for s in self.layout(state.base_port).groups}:
                raise LocalError(f"{name} is one of the platform's configured groups; stop it with `inferplane local group stop {name}`")
            users = [n for n, gw in state.endpoints.gateways.items() if name in (gw.groups or [])]
            if users:
                raise LocalError(f"{name} is a startup worker of gateway(s) {', '.join(users)}; remove those first")
            self._stop(state.processes[name])
            del state.groups[name]
            del state.processes[name]
            st.save(state)
            self.say(f"{name}: removed")

    def gateway_add(self, name: str, groups: list[str]) -> st.Gateway:
        """Start another SMG (``smg-<name>``) with ``groups`` as its workers, e.g. a blue/green set's own gateway."""
        if not name or not all(c.isalnum() or c == "-" for c in name) or name == "smg":
            raise LocalError(f"gateway name '{name}': use letters, digits and '-', not 'smg' (the platform's own)")
        with st.locked(self.state_dir):
            state = self.state()
            layout = self.layout(state.base_port)
            if name in state.endpoints.gateways:
                raise LocalError(f"gateway '{name}' exists already at {state.endpoints.gateways[name].url}")
            unknown = [g for g in groups if g not in state.groups]
            roles = {state.groups[g].role for g in groups if g in state.groups}
            if unknown or not {"prefill", "decode"} <= roles:
                raise LocalError(
                    f"gateway '{name}' needs existing prefill and decode groups (unknown: {', '.join(unknown) or 'none'}; roles: {sorted(roles)})"
                )
            used = {gw.url for gw in state.endpoints.gateways.values()}
            index = next(
                i
                for i in range(MAX_EXTRA_GATEWAYS + 1)
                if i == MAX_EXTRA_GATEWAYS or f"http://{HOST}:{layout.extra_gateway(i)[0]}" not in used
            )
            if index == MAX_EXTRA_GATEWAYS:
                raise LocalError(f"all {MAX_EXTRA_GATEWAYS} extra gateway slots are in use; remove one first")
            port, metrics = layout.extra_gateway(index)
            gw = st.Gateway(
                url=f"http://{HOST}:{port}",
                metrics_url=f"http://{HOST}:{metrics}/metrics",
                admin_key=state.endpoints.gateway.admin_key,
                process=f"smg-{name}",
                groups=list(groups),
            )
            spec = self._gateway_spec(layout, gw)
            self._check_ports(spec)
            state.endpoints.gateways[name] = gw
            state.processes[gw.process] = st.Process(
                name=gw.process, kind="smg", cmd=spec.argv, log=str(self._log(gw.process)), ports=spec.ports, health_url=spec.health_url
            )
            self._start(state, spec)
            self._wait_healthy(state, [gw.process])
            self._wait_workers(state, gw)
            st.save(state)
            return gw

    def gateway_remove(self, name: str) -> None:
        """Stop an extra gateway (SIGTERM: SMG finishes what it is proxying) once the front sends it nothing."""
        with st.locked(self.state_dir):
            state = self.state()
            if name not in state.endpoints.gateways:
                raise LocalError(f"no extra gateway '{name}'; extra gateways: {', '.join(state.endpoints.gateways) or 'none'}")
            front = state.endpoints.front
            if front is not None and front.weights.get(name, 0) > 0:
                raise LocalError(
                    f"the front still sends {front.weights[name]} of its weight to '{name}'; `inferplane local front set` it to 0 first"
                )
            gw = state.endpoints.gateways.pop(name)
            if front is not None:
                front.weights.pop(name, None)
            rec = state.processes.pop(gw.process, None)
            if rec is not None:
                self._stop(rec)
            st.save(state)
            self.say(f"gateway {name}: removed")

    def front_set(self, weights: dict[str, int]) -> st.Front:
        """Route new requests to the named gateways by weight (0 = none); requests already sent finish where they are."""
        with st.locked(self.state_dir):
            state = self.state()
            front = state.endpoints.front
            if front is None:
                raise LocalError("this platform has no front; `inferplane local up` again starts one")
            urls = self._gateway_urls(state)
            unknown = [n for n in weights if n not in urls]
            if unknown or any(w < 0 for w in weights.values()) or sum(weights.values()) <= 0:
                raise LocalError(
                    f"front weights {weights}: name gateways of this platform ({', '.join(urls)}) with weights >= 0 and at least one > 0"
                )
            front.weights = {n: w for n, w in weights.items() if w > 0}
            path = Path(front.targets_file)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(components.front_targets(front.weights, urls))
            tmp.replace(path)
            st.save(state)
            self.say("front: " + ", ".join(f"{n}={w}" for n, w in front.weights.items()))
            return front

    def _stop(self, rec: st.Process, timeout: float = 30.0) -> bool:
        ident = rec.identity()
        done = ident is not None and proc.terminate(ident, timeout, rec.ports.values())
        rec.pid, rec.starttime, rec.desired = None, None, "stopped"
        if done:
            self.say(f"{rec.name}: stopped")
        return done

    def proc(self, action: ProcAction, name: str) -> st.Process:
        """stop (SIGTERM + wait), start (same argv as before), kill (SIGKILL), pause (SIGSTOP), resume (SIGCONT)."""
        with st.locked(self.state_dir):
            state = self.state()
            try:
                rec = state.process(name)
            except KeyError as exc:
                raise LocalError(str(exc.args[0])) from None
            ident = rec.identity()
            alive = ident is not None and proc.is_ours(ident)
            if action == "start":
                if alive:
                    self.say(f"{name}: already running")
                    return rec
                spec = ProcSpec(name, rec.kind, rec.cmd, rec.ports, rec.health_url, rec.env)
                self._check_ports(spec)
                self._start(state, spec)
                self._wait_healthy(state, [name])
                return rec
            if not alive or ident is None:
                why = "it was stopped" if rec.desired == "stopped" else "it died"
                raise LocalError(f"{name} is not running ({why}; log {rec.log}); `inferplane local proc start {name}` starts it")
            if action == "stop":
                self._stop(rec)
            elif action == "kill":
                proc.kill(ident)
                rec.pid, rec.starttime, rec.desired = None, None, "stopped"
                self.say(f"{name}: killed")
            elif action == "pause":
                proc.pause(ident)
                rec.desired = "paused"
                self.say(f"{name}: paused")
            elif action == "resume":
                proc.resume(ident)
                rec.desired = "running"
                self.say(f"{name}: resumed")
            st.save(state)
            return rec

    # ---- status --------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        state = self.state()
        return status_of(state)


def health(rec: st.Process) -> tuple[bool, str]:
    """(healthy, detail) of one process by its kind's own health endpoint."""
    if not rec.health_url:
        return True, "no health endpoint"
    resp = request(rec.health_url, timeout=2.0)
    if rec.kind == "mooncake-metadata":
        return resp.status != 0, f"HTTP {resp.status}" if resp.status else resp.error
    if not resp.ok:
        return False, f"HTTP {resp.status} {resp.text[:80]}".strip() if resp.status else resp.error
    if rec.kind == "etcd":
        body = _json(resp)
        return (body.get("health") == "true", f"health={body.get('health')}") if isinstance(body, dict) else (False, resp.text[:80])
    if rec.kind == "mooncake-master":
        body = _json(resp)
        if not isinstance(body, dict):
            return False, resp.text[:80]
        return body.get("status") == "ok", f"{body.get('role')}/{body.get('ha_state')}"
    return True, f"HTTP {resp.status}"


def _json(resp: Response) -> Any:
    try:
        return resp.json()
    except ValueError:
        return None


def mooncake_leader(state: st.State) -> tuple[str | None, list[dict[str, Any]]]:
    """(name of the serving leader or None, each master's /health answer)."""
    leader = None
    masters = []
    for m in state.endpoints.mooncake.masters:
        body = get_json(m.health_url, timeout=2.0) or {}
        masters.append({"name": m.name, "rpc_address": m.rpc_address, **body})
        if body.get("role") == "leader" and body.get("ha_state") == "serving":
            leader = m.name
    return leader, masters


def admin_headers(state: st.State) -> dict[str, str]:
    key = state.endpoints.gateway.admin_key
    return {"Authorization": f"Bearer {key}"} if key else {}


def smg_workers(state: st.State, gateway: st.Gateway | None = None) -> list[dict[str, Any]] | None:
    gateway = gateway or state.endpoints.gateway
    headers = {"Authorization": f"Bearer {gateway.admin_key}"} if gateway.admin_key else {}
    body = get_json(gateway.url + "/workers", headers=headers, timeout=3.0)
    return body.get("workers") if isinstance(body, dict) else None


def prometheus_alerts(state: st.State) -> list[dict[str, Any]] | None:
    body = get_json(state.endpoints.prometheus + "/api/v1/alerts", timeout=3.0)
    if not isinstance(body, dict):
        return None
    return list(body.get("data", {}).get("alerts", []))


def status_of(state: st.State) -> dict[str, Any]:
    processes = []
    for rec in state.processes.values():
        ident = rec.identity()
        alive = ident is not None and proc.is_ours(ident)
        paused = alive and ident is not None and proc.stopped(ident.pid)
        ok, detail = health(rec) if alive and not paused else (False, "")
        if not alive:
            phase = "stopped" if rec.desired == "stopped" else "dead"
        else:
            phase = "paused" if paused else ("healthy" if ok else "unhealthy")
        processes.append(
            {
                "name": rec.name,
                "kind": rec.kind,
                "pid": rec.pid if alive else None,
                "state": phase,
                "detail": detail,
                "ports": rec.ports,
                "log": rec.log,
            }
        )
    leader, masters = mooncake_leader(state)
    workers = smg_workers(state)
    by_url = {g.url: g.name for g in state.groups.values()}
    alerts = prometheus_alerts(state)
    return {
        "state_dir": state.state_dir,
        "base_port": state.base_port,
        "healthy": all(p["state"] in ("healthy",) for p in processes if p["state"] != "stopped") and leader is not None,
        "processes": processes,
        "mooncake": {"leader": leader, "masters": masters, "master_address": state.endpoints.mooncake.master_address},
        "gateway": {
            "url": state.endpoints.gateway.url,
            "workers": None
            if workers is None
            else [
                {
                    "group": by_url.get(w.get("url", ""), "?"),
                    "url": w.get("url"),
                    "worker_type": w.get("worker_type"),
                    "status": w.get("status"),
                    "is_healthy": w.get("is_healthy"),
                    "load": w.get("load"),
                    "id": w.get("id"),
                }
                for w in workers
            ],
        },
        "groups": [g.model_dump() for g in state.groups.values()],
        "front": None if state.endpoints.front is None else {"url": state.endpoints.front.url, "weights": state.endpoints.front.weights},
        "extra_gateways": {name: {"url": gw.url, "groups": gw.groups} for name, gw in state.endpoints.gateways.items()},
        "alerts": None
        if alerts is None
        else [{"alertname": a["labels"].get("alertname"), "state": a.get("state"), "labels": a["labels"]} for a in alerts],
        "endpoints": state.endpoints.model_dump(exclude={"gateway": {"admin_key"}}),
    }


def ensure_binaries(cfg: LocalPlatformConfig) -> None:
    """Fail before starting anything when a program is missing, naming what to install."""
    programs = ["etcd", "mooncake_master", "moto_server", "prometheus", "smg"]
    if cfg.mooncake.metadata == "http":
        programs.append("mooncake_http_metadata_server")
    for program in programs:
        components.binary(program)
