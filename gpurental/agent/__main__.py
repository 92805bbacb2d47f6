"""python -m gpurental.agent [--env-file FILE]: the host agent (worker + heartbeat + sampler)."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from gpurental import logs
from gpurental.agent.activity import Holdings, KernelProbe
from gpurental.agent.config import AgentConfig, ConfigError, read_env_file
from gpurental.agent.gpus import NvmlUnavailable, make_source
from gpurental.agent.host import HeartbeatThread, HostAgent, HostStateThread
from gpurental.agent.reporter import ControlReporter
from gpurental.agent.runtimes import docker_problem, make_runtime
from gpurental.agent.runtimes.imagecache import ImageCache
from gpurental.agent.runtimes.network import NetworkSetupError
from gpurental.agent.sampler import ChannelPublisher, HttpPublisher, Sampler, SamplerThread
from gpurental.agent.worker import make_app, set_agent

log = logging.getLogger("gpurental.agent")


def choose_source(config: AgentConfig):
    if config.gpu_source in {"auto", "nvml"}:
        try:
            return make_source("nvml", host_name=config.host_name), "NVML"
        except (NvmlUnavailable, ImportError, OSError) as exc:
            if config.gpu_source == "nvml":
                raise ConfigError(f"GPURENTAL_GPU_SOURCE=nvml but {exc}") from exc
            why = f"simulated GPUs ({exc})"
    else:
        why = "simulated GPUs (GPURENTAL_GPU_SOURCE=simulated)"
    source = make_source(
        "simulated",
        host_name=config.host_name,
        simulated_model=config.simulated_model,
        simulated_count=config.simulated_gpus,
    )
    return source, f"{config.simulated_gpus}× {config.simulated_model}, {why}"


def choose_runtime(config: AgentConfig):
    process_kwargs = {
        "base_dir": os.path.abspath(config.work_dir),
        "ready_timeout_s": config.ready_timeout,
    }
    docker_kwargs = {
        "allow_pull": config.allow_pull,
        "ready_timeout_s": config.ready_timeout,
        "host_name": config.host_name,
        "sandbox_pool": config.net_pool,
        "image_cache": ImageCache(
            os.path.join(os.path.abspath(config.work_dir), "images.json"),
            limit_bytes=int(config.image_cache_gb * 1024**3),
        ),
    }
    if config.runtime == "process":
        return make_runtime("process", **process_kwargs), "process (GPURENTAL_RUNTIME=process)"
    problem = docker_problem()
    if config.runtime == "docker":
        if problem:
            raise ConfigError(f"GPURENTAL_RUNTIME=docker but {problem}")
        return _prepared(make_runtime("docker", **docker_kwargs), config)
    if not problem:
        runtime = make_runtime("docker", **docker_kwargs)
        try:
            runtime.client.images.get(config.check_image)
        except Exception:  # noqa: BLE001 - any lookup failure means "not usable"
            problem = f"image {config.check_image} is missing (run `make images` to use Docker)"
        else:
            return _prepared(runtime, config)
    # Customer code outside a container runs with the agent's own rights: only on request.
    if not config.debug:
        raise ConfigError(
            f"no usable Docker Engine: {problem}. A GPU host runs customer code only in Docker; "
            "fix that, or for a demo set GPURENTAL_RUNTIME=process (no isolation) or DEBUG=1"
        )
    return make_runtime("process", **process_kwargs), f"process (DEBUG is on), because {problem}"


def _prepared(runtime, config: AgentConfig):
    """The Docker runtime with its tenant network and firewall, and a banner line."""
    try:
        runtime.prepare_host()
    except NetworkSetupError as exc:
        if not config.debug:
            raise ConfigError(f"the tenant network could not be set up: {exc}") from exc
        return runtime, f"docker, WITHOUT the tenant firewall ({exc}; DEBUG is on: demo only)"
    pool = (
        f"{config.net_pool} network sandboxes kept ready per set of ports"
        if config.net_pool
        else "no network sandboxes kept ready (GPURENTAL_NET_POOL=0)"
    )
    users = (
        "containers' root remapped to an unprivileged host uid"
        if runtime.remaps_users()
        else "WARNING: the engine does not remap user namespaces, so a container's root is "
        "the host's root (with few capabilities); start dockerd with --userns-remap=default"
    )
    return runtime, f"docker, on the tenant network; {pool}; {users}"


def make_sampler(config: AgentConfig, source, holdings: Holdings, reporter: ControlReporter):
    """The sampler thread and a banner line saying where its numbers go."""
    url = config.live_telemetry_url
    publisher = None
    if url is not None and url.startswith(("http://", "https://")):
        publisher = HttpPublisher(url, config.host_name, reporter.keys.sign)
    elif url is not None:
        publisher = ChannelPublisher(url, config.host_name, layer=config.telemetry_layer)
    probe = KernelProbe(holdings)
    sampler = Sampler(
        host_name=config.host_name,
        source=source,
        holdings=holdings,
        publish=publisher.publish if publisher else None,
        send_batch=reporter.telemetry,
        batch_interval=config.telemetry_batch_interval,
        kernels=probe.active,
    )
    kind = "NVML" if source.kind == "nvml" else "simulated"
    live = (
        f"live to {url.split('@')[-1]}"
        if url
        else "live stream off (set GPURENTAL_TELEMETRY_URL to the channel layer's Redis)"
    )
    why = (
        f"{kind} samples every {config.sample_interval:g} s, {live}, "
        f"per-minute rollups to the control queue"
    )
    return SamplerThread(sampler, config.sample_interval, probe=probe), publisher, why


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpurental.agent", description=__doc__)
    parser.add_argument("--env-file", help="KEY=VALUE file with the join settings")
    args = parser.parse_args(argv)
    try:
        logs.configure(
            log_format=os.environ.get("LOG_FORMAT", "text"),
            level=os.environ.get("LOG_LEVEL", "INFO"),
        )
    except ValueError as exc:
        print(f"gpurental agent: {exc}", file=sys.stderr)
        return 2
    env = dict(os.environ)
    if args.env_file:
        env = {
            **read_env_file(args.env_file),
            **{k: v for k, v in env.items() if k.startswith("GPURENTAL_")},
        }
    try:
        config = AgentConfig.from_env(env)
        source, source_why = choose_source(config)
        runtime, runtime_why = choose_runtime(config)
    except ConfigError as exc:
        print(f"gpurental agent: {exc}", file=sys.stderr)
        return 2
    logs.bind_process(host=config.host_name)
    app = make_app(config)
    reporter = ControlReporter(app, host_name=config.host_name, token=config.token)
    holdings = Holdings(os.path.join(os.path.abspath(config.work_dir), "telemetry-holdings.json"))
    agent = HostAgent(
        runtime=runtime,
        source=source,
        reporter=reporter,
        bind_address=config.bind_address,
        holdings=holdings,
        hf_cache_dir=config.hf_cache_dir,
        model_import_dir=config.model_import_dir,
        disk_interval=config.disk_interval,
    )
    set_agent(agent)
    sampler, publisher, sampler_why = make_sampler(config, source, holdings, reporter)
    print(
        f"gpurental agent '{config.host_name}': queue {config.queue}\n"
        f"  GPUs:    {source_why}\n"
        f"  runtime: {runtime_why}\n"
        f"  sampler: {sampler_why}\n"
        f"  JupyterLab ports published on {config.bind_address}",
        flush=True,
    )
    # Liveness and the slow look at the engine and the GPUs run apart: a beat never waits.
    heartbeat = HeartbeatThread(agent, config.heartbeat_interval)
    state = HostStateThread(agent, config.heartbeat_interval)
    state.start()
    heartbeat.start()
    sampler.start()
    try:
        app.worker_main(
            [
                "worker",
                "--queues",
                config.queue,
                "--hostname",
                f"agent-{config.host_name}@%h",
                "--pool",
                "threads",
                "--concurrency",
                str(config.concurrency),
                "--loglevel",
                os.environ.get("LOG_LEVEL", "INFO"),
                "--without-gossip",
                "--without-mingle",
            ]
        )
    finally:
        heartbeat.stopped.set()
        state.stopped.set()
        sampler.stopped.set()
        sampler.join(timeout=5)
        if publisher is not None and not sampler.is_alive():  # its loop belongs to that thread
            publisher.close()
        if hasattr(runtime, "close"):
            runtime.close()  # the docker runtime's idle network sandboxes
        source.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
