"""The local platform: real etcd, Mooncake masters in HA, SMG, Prometheus and an S3 server, with
emulated SGLang engine groups, on one machine. Python API for tests and runbooks::

    from inferplane.local import LocalPlatform, load_config
    platform = LocalPlatform(load_config(state_dir="/tmp/p", base_port=41000))
    state = platform.up()              # idempotent; state.json in the state dir
    platform.proc("kill", "mooncake-master-0")
    platform.group_restart("decode-1", version="0.5.24")
    platform.down()
"""

from inferplane.local.components import MissingBinary
from inferplane.local.config import LocalPlatformConfig, load_config
from inferplane.local.platform import (
    PROC_ACTIONS,
    LocalError,
    LocalPlatform,
    admin_headers,
    health,
    mooncake_leader,
    prometheus_alerts,
    smg_workers,
    status_of,
)
from inferplane.local.state import State, load

__all__ = [
    "PROC_ACTIONS",
    "LocalError",
    "LocalPlatform",
    "LocalPlatformConfig",
    "MissingBinary",
    "State",
    "admin_headers",
    "health",
    "load",
    "load_config",
    "mooncake_leader",
    "prometheus_alerts",
    "smg_workers",
    "status_of",
]
