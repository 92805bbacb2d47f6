"""The acceptance probe: what this machine's GPUs (or, without one, its CPU) really do.

Runs inside the benchmark container (the framework image, ``gpurental/pytorch``) with
the standard library and torch only, and prints one JSON object on its last line of
output. It measures; the control plane compares with the nominal figures
(``gpurental/acceptance``). Run it by hand with ``python acceptance_probe.py --smoke``.

Figures (each ``{"value": …, "unit": …}``, or ``{"not_applicable": "why"}``, never a
made-up number):

- ``gemm_<fp32|tf32|fp16|bf16>_tflops``: dense square matmul, the weakest GPU's figure
  (each GPU's in ``per_device``);
- ``memory_bandwidth_gbs``: a device-to-device copy (read + write counted);
- ``h2d_gbs`` / ``d2h_gbs``: pinned host memory to and from the device;
- ``p2p_gbs``: a copy from GPU i to GPU j for every pair, the slowest pair's figure;
- ``allreduce_busbw_gbs``: NCCL all-reduce over every GPU, as bus bandwidth
  (nccl-tests' definition: algorithm bandwidth × 2(n−1)/n).

On a machine without CUDA the GEMMs and the memory copy run on the CPU (with as many
threads as the container may use) and the CUDA-only figures say "not applicable on CPU".
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import socket
import sys
import time

import torch

PROBE_VERSION = 1
GIB = 1024**3


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def _timed(fn, device: str, *, min_s: float, warmup: int = 2, max_iters: int = 1000) -> float:
    """Seconds per call of ``fn``: a warm-up, then calls until ``min_s`` has passed."""
    for _ in range(warmup):
        fn()
    _sync(device)
    iters, start = 0, time.perf_counter()
    while True:
        fn()
        iters += 1
        if iters >= max_iters:
            break
        if iters % 4 == 0 or device == "cpu":
            _sync(device)
            if time.perf_counter() - start >= min_s:
                break
    _sync(device)
    return (time.perf_counter() - start) / iters


def not_applicable(why: str) -> dict:
    return {"not_applicable": why}


def gemm_tflops(device: str, dtype: torch.dtype, n: int, min_s: float) -> float:
    a = torch.randn(n, n, device=device, dtype=torch.float32).to(dtype)
    b = torch.randn(n, n, device=device, dtype=torch.float32).to(dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    seconds = _timed(lambda: torch.matmul(a, b, out=out), device, min_s=min_s)
    return 2 * n**3 / seconds / 1e12


def gemm_figures(devices: list[str], sizes: dict, min_s: float) -> dict:
    cuda = devices[0].startswith("cuda")
    figures = {}
    kinds = (
        ("fp32", torch.float32, False),
        ("tf32", torch.float32, True),
        ("fp16", torch.float16, False),
        ("bf16", torch.bfloat16, False),
    )
    for name, dtype, tf32 in kinds:
        key = f"gemm_{name}_tflops"
        if tf32 and not cuda:
            figures[key] = not_applicable(
                "not applicable on CPU: TF32 is a tensor-core mode of NVIDIA GPUs"
            )
            continue
        if cuda:
            torch.backends.cuda.matmul.allow_tf32 = tf32
        per_device = []
        for device in devices:
            n = sizes["gemm_gpu"] if cuda else sizes["gemm_cpu"].get(name, 512)
            per_device.append(round(gemm_tflops(device, dtype, n, min_s), 4))
        figures[key] = {
            "value": min(per_device),
            "unit": "TFLOPS",
            "per_device": per_device,
            "size": n,
        }
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False
    return figures


def copy_gbs(src: torch.Tensor, dst: torch.Tensor, device: str, min_s: float) -> float:
    seconds = _timed(lambda: dst.copy_(src, non_blocking=True), device, min_s=min_s)
    return src.numel() * src.element_size() / seconds / 1e9


def memory_figures(devices: list[str], nbytes: int, min_s: float) -> dict:
    """Device memory: read + write of a copy; the host figures on pinned memory."""
    cuda = devices[0].startswith("cuda")
    per_device = []
    for device in devices:
        src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
        dst = torch.empty_like(src)
        per_device.append(round(2 * copy_gbs(src, dst, device, min_s), 2))
        del src, dst
    figures = {
        "memory_bandwidth_gbs": {
            "value": min(per_device),
            "unit": "GB/s",
            "per_device": per_device,
            "bytes": nbytes,
        }
    }
    if not cuda:
        why = "not applicable on CPU: there is no device memory to copy to"
        figures["h2d_gbs"] = not_applicable(why)
        figures["d2h_gbs"] = not_applicable(why)
        return figures
    h2d, d2h = [], []
    host = torch.empty(nbytes // 4, dtype=torch.float32).pin_memory()
    for device in devices:
        dev = torch.empty(nbytes // 4, dtype=torch.float32, device=device)
        h2d.append(round(copy_gbs(host, dev, device, min_s), 2))
        d2h.append(round(copy_gbs(dev, host, device, min_s), 2))
        del dev
    figures["h2d_gbs"] = {"value": min(h2d), "unit": "GB/s", "per_device": h2d}
    figures["d2h_gbs"] = {"value": min(d2h), "unit": "GB/s", "per_device": d2h}
    return figures


def p2p_figure(devices: list[str], nbytes: int, min_s: float) -> dict:
    if not devices[0].startswith("cuda"):
        return not_applicable("not applicable on CPU: peer-to-peer copies are between GPUs")
    if len(devices) < 2:
        return not_applicable("one GPU: no pair to copy between")
    pairs = {}
    for i, j in itertools.permutations(range(len(devices)), 2):
        src = torch.empty(nbytes // 4, dtype=torch.float32, device=devices[i]).fill_(1.0)
        dst = torch.empty(nbytes // 4, dtype=torch.float32, device=devices[j])

        def copy(src=src, dst=dst):
            dst.copy_(src, non_blocking=True)

        # Time on the destination, and wait for both ends.
        seconds = _timed(copy, devices[j], min_s=min_s)
        _sync(devices[i])
        pairs[f"{i}-{j}"] = round(nbytes / seconds / 1e9, 2)
        del src, dst
    return {"value": min(pairs.values()), "unit": "GB/s", "pairs": pairs}


def _allreduce_worker(rank: int, world: int, port: int, nbytes: int, iters: int, out) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    # The benchmark container has no network but loopback, which NCCL passes over by default.
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    tensor = torch.ones(nbytes // 4, dtype=torch.float32, device=f"cuda:{rank}")
    for _ in range(3):
        dist.all_reduce(tensor)
    torch.cuda.synchronize()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(tensor)
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / iters
    if rank == 0:
        algbw = nbytes / seconds / 1e9
        out.put(algbw * 2 * (world - 1) / world)
    dist.destroy_process_group()


def allreduce_figure(devices: list[str], nbytes: int, iters: int) -> dict:
    if not devices[0].startswith("cuda"):
        return not_applicable("not applicable on CPU: NCCL all-reduce runs between GPUs")
    if len(devices) < 2:
        return not_applicable("one GPU: nothing to all-reduce with")
    import torch.distributed as dist
    import torch.multiprocessing as mp

    if not dist.is_nccl_available():
        return not_applicable("this torch build has no NCCL")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    mp.spawn(_allreduce_worker, args=(len(devices), port, nbytes, iters, out), nprocs=len(devices))
    return {
        "value": round(out.get(), 2),
        "unit": "GB/s",
        "ranks": len(devices),
        "bytes": nbytes,
    }


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


SIZES = {
    # name: (GEMM n on GPU, GEMM n on CPU per dtype, bytes copied, seconds per figure)
    "full": {
        "gemm_gpu": 8192,
        "gemm_cpu": {"fp32": 2048, "fp16": 1024, "bf16": 1024},
        "copy_bytes": GIB,
        "p2p_bytes": 256 * 1024**2,
        "allreduce_bytes": GIB,
        "allreduce_iters": 20,
        "min_s": 1.0,
    },
    "smoke": {
        "gemm_gpu": 2048,
        "gemm_cpu": {"fp32": 512, "fp16": 256, "bf16": 256},
        "copy_bytes": 64 * 1024**2,
        "p2p_bytes": 32 * 1024**2,
        "allreduce_bytes": 64 * 1024**2,
        "allreduce_iters": 5,
        "min_s": 0.2,
    },
}


def probe(*, smoke: bool = False, device: str = "auto") -> dict:
    sizes = SIZES["smoke" if smoke else "full"]
    cuda = torch.cuda.is_available() if device == "auto" else device == "cuda"
    if cuda:
        devices = [f"cuda:{i}" for i in range(torch.cuda.device_count())]
        names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    else:
        devices, names = ["cpu"], []
    started = time.perf_counter()
    figures = {}
    figures.update(gemm_figures(devices, sizes, sizes["min_s"]))
    figures.update(memory_figures(devices, sizes["copy_bytes"], sizes["min_s"]))
    figures["p2p_gbs"] = p2p_figure(devices, sizes["p2p_bytes"], sizes["min_s"])
    figures["allreduce_busbw_gbs"] = allreduce_figure(
        devices, sizes["allreduce_bytes"], sizes["allreduce_iters"]
    )
    return {
        "probe_version": PROBE_VERSION,
        "device": "cuda" if cuda else "cpu",
        "smoke": smoke,
        "torch": torch.__version__,
        "cuda": torch.version.cuda if cuda else None,
        "gpu_names": names,
        "gpu_count": len(names),
        "cpu_model": cpu_model(),
        "cpu_threads": torch.get_num_threads(),
        "seconds": round(time.perf_counter() - started, 2),
        "figures": figures,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="small sizes, a few seconds")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    args = parser.parse_args(argv)
    result = probe(smoke=args.smoke, device=args.device)
    # One line of JSON, last: the agent reads the container's last line of output.
    print(json.dumps(result, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
