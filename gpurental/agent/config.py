"""The agent's configuration: only the broker, its name and its token are required.

The agent never gets database credentials; everything else has a default.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gpurental import protocol


class ConfigError(ValueError):
    pass


def read_env_file(path: str | os.PathLike) -> dict[str, str]:
    values = {}
    for raw in Path(path).read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            values[key.strip()] = value.strip().strip("'\"")
    return values


@dataclass(frozen=True)
class AgentConfig:
    broker_url: str
    host_name: str
    token: str
    gpu_source: str = "auto"  # auto | nvml | simulated
    simulated_gpus: int = 8
    simulated_model: str = "NVIDIA A10G"
    runtime: str = "auto"  # auto | docker | process
    bind_address: str = "127.0.0.1"
    work_dir: str = "var/agent"
    heartbeat_interval: float = 5.0
    ready_timeout: float = 120.0
    concurrency: int = 4
    net_pool: int = 2  # idle network sandboxes per set of ports (runtimes/sandboxes.py)
    allow_pull: bool = False
    image_cache_gb: float = 200.0  # customers' pulled images kept, least recently used out
    check_image: str = "gpurental/jupyter-cpu:latest"
    # Live telemetry: the channel layer's Redis ("" = derive from a Redis broker URL,
    # "off" = no live stream; per-minute batches still go through the broker).
    telemetry_url: str = ""
    telemetry_layer: str = "core"  # the web's CHANNEL_LAYER_BACKEND: core | pubsub
    sample_interval: float = 1.0
    telemetry_batch_interval: float = 60.0
    hf_cache_dir: str = ""  # the host's shared Hugging Face cache, mounted read-only on request
    model_import_dir: str = ""  # model cache fills read only from here (agent/modelcache.py)
    disk_interval: float = 60.0  # seconds between measurements of the workspaces
    debug: bool = False  # DEBUG=1: the process runtime may stand in for a missing Docker
    # amqps://: the broker's CA (the system's CAs without it); a client certificate.
    broker_ca_file: str = ""
    broker_cert_file: str = ""
    broker_key_file: str = ""

    @property
    def broker_ssl(self) -> dict | None:
        """Celery's broker_use_ssl for an amqps:// broker (None for any other)."""
        if not self.broker_url.startswith("amqps://"):
            return None
        return protocol.broker_ssl(
            ca_file=self.broker_ca_file,
            cert_file=self.broker_cert_file,
            key_file=self.broker_key_file,
        )

    @property
    def live_telemetry_url(self) -> str | None:
        from gpurental.agent.sampler import telemetry_url_from_broker

        if self.telemetry_url == "off":
            return None
        return self.telemetry_url or telemetry_url_from_broker(self.broker_url)

    @property
    def queue(self) -> str:
        return protocol.host_queue(self.host_name)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> AgentConfig:
        env = dict(os.environ if env is None else env)
        missing = [
            k
            for k in ("GPURENTAL_BROKER_URL", "GPURENTAL_HOST_NAME", "GPURENTAL_HOST_TOKEN")
            if not env.get(k)
        ]
        if missing:
            raise ConfigError(
                f"{', '.join(missing)} not set: copy the host's join command from the back-office "
                "(Fleet → Hosts), it sets all three"
            )
        count = env.get("GPURENTAL_SIMULATED_GPUS", "8")
        if not count.isdigit() or int(count) < 1:
            raise ConfigError(
                f"GPURENTAL_SIMULATED_GPUS={count!r}: must be a whole number of at least 1"
            )
        for key, allowed in (
            ("GPURENTAL_GPU_SOURCE", {"auto", "nvml", "simulated"}),
            ("GPURENTAL_RUNTIME", {"auto", "docker", "process"}),
        ):
            if env.get(key, "auto") not in allowed:
                raise ConfigError(f"{key}={env[key]!r}: use one of {', '.join(sorted(allowed))}")
        if env.get("GPURENTAL_TELEMETRY_LAYER", "core") not in {"core", "pubsub"}:
            raise ConfigError(
                f"GPURENTAL_TELEMETRY_LAYER={env['GPURENTAL_TELEMETRY_LAYER']!r}: use core or "
                "pubsub, the same as the web's CHANNEL_LAYER_BACKEND"
            )
        if bool(env.get("GPURENTAL_BROKER_CERT_FILE")) != bool(
            env.get("GPURENTAL_BROKER_KEY_FILE")
        ):
            raise ConfigError(
                "GPURENTAL_BROKER_CERT_FILE and GPURENTAL_BROKER_KEY_FILE: set both (a client "
                "certificate and its key) or neither"
            )
        name = env["GPURENTAL_HOST_NAME"]
        return cls(
            broker_url=env["GPURENTAL_BROKER_URL"],
            host_name=name,
            token=env["GPURENTAL_HOST_TOKEN"],
            gpu_source=env.get("GPURENTAL_GPU_SOURCE", "auto"),
            simulated_gpus=int(count),
            simulated_model=env.get("GPURENTAL_SIMULATED_MODEL", "NVIDIA A10G"),
            runtime=env.get("GPURENTAL_RUNTIME", "auto"),
            bind_address=env.get("GPURENTAL_BIND_ADDRESS", "127.0.0.1"),
            work_dir=env.get("GPURENTAL_AGENT_DIR", f"var/agent-{name}"),
            heartbeat_interval=float(env.get("GPURENTAL_HEARTBEAT_INTERVAL", "5")),
            ready_timeout=float(env.get("GPURENTAL_READY_TIMEOUT", "120")),
            concurrency=int(env.get("GPURENTAL_CONCURRENCY", "4")),
            net_pool=_count(env, "GPURENTAL_NET_POOL", "2"),
            allow_pull=env.get("GPURENTAL_ALLOW_PULL", "0") in {"1", "true", "yes"},
            image_cache_gb=_positive(env, "GPURENTAL_IMAGE_CACHE_GB", "200"),
            check_image=env.get("GPURENTAL_IMAGE", "gpurental/jupyter-cpu:latest"),
            telemetry_url=env.get("GPURENTAL_TELEMETRY_URL", ""),
            telemetry_layer=env.get("GPURENTAL_TELEMETRY_LAYER", "core"),
            sample_interval=_positive(env, "GPURENTAL_SAMPLE_INTERVAL", "1"),
            telemetry_batch_interval=_positive(env, "GPURENTAL_TELEMETRY_BATCH_INTERVAL", "60"),
            hf_cache_dir=env.get("GPURENTAL_HF_CACHE_DIR", ""),
            model_import_dir=env.get(
                "GPURENTAL_MODEL_IMPORT_DIR",
                os.path.join(env.get("GPURENTAL_AGENT_DIR", f"var/agent-{name}"), "model-imports"),
            ),
            disk_interval=_positive(env, "GPURENTAL_DISK_CHECK_INTERVAL", "60"),
            debug=env.get("DEBUG", "").lower() in {"1", "true", "yes", "on"},
            broker_ca_file=env.get("GPURENTAL_BROKER_CA_FILE", ""),
            broker_cert_file=env.get("GPURENTAL_BROKER_CERT_FILE", ""),
            broker_key_file=env.get("GPURENTAL_BROKER_KEY_FILE", ""),
        )


def _positive(env: dict[str, str], key: str, default: str) -> float:
    raw = env.get(key, default)
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if value <= 0:
        raise ConfigError(f"{key}={raw!r}: must be a positive number of seconds")
    return value


def _count(env: dict[str, str], key: str, default: str) -> int:
    raw = env.get(key, default)
    if not (raw.isascii() and raw.isdigit()) or int(raw) > 16:
        raise ConfigError(f"{key}={raw!r}: must be a whole number from 0 to 16")
    return int(raw)
