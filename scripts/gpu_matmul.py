"""One CUDA matmul in whichever framework this Python has: the proof that a framework image
computes on the GPU (scripts/gpu-check.sh runs it in each image, or here).

    python gpu_matmul.py [--framework auto|torch|tensorflow] [--device cuda|cpu] [--size N]

Prints one JSON line: the framework and its version, the CUDA it was built for, the device
it ran on, the product's largest error against float64, and the sustained TFLOPS in FP32
and FP16 (n = --size, a second of products each). Without torch or tensorflow (the CUDA
runtime images), cuBLAS SGEMMs through ctypes. Exits 1 when the device asked for is not
there (a CUDA build without a driver, a CPU-only build), naming why.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time

SECONDS = 1.0


def _timed(step, flops_each: float) -> float:
    step()  # warm-up: kernels chosen, memory allocated
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < SECONDS:
        step()
        count += 1
    return round(count * flops_each / (time.perf_counter() - started) / 1e12, 3)


def with_torch(device: str, n: int) -> dict:
    import torch

    report = {"framework": "torch", "version": torch.__version__, "cuda_built": torch.version.cuda}
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit(_fail(report, "torch.cuda.is_available() is False"))
    report["device"] = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    small = torch.rand(64, 64, dtype=torch.float64)
    got = (small.float().to(device) @ small.float().to(device)).double().cpu()
    report["max_error"] = float((got - small @ small).abs().max())
    for name, dtype in (("fp32", torch.float32), ("fp16", torch.float16)):
        if device == "cpu" and dtype is torch.float16:
            continue
        a = torch.rand(n, n, device=device, dtype=dtype)

        def step(a=a):
            a @ a
            if device == "cuda":
                torch.cuda.synchronize()

        report[f"{name}_tflops"] = _timed(step, 2 * n**3)
    return report


def with_tensorflow(device: str, n: int) -> dict:
    import tensorflow as tf

    build = tf.sysconfig.get_build_info()
    report = {
        "framework": "tensorflow",
        "version": tf.__version__,
        "cuda_built": build.get("cuda_version"),
    }
    gpus = tf.config.list_physical_devices("GPU")
    if device == "cuda" and not gpus:
        raise SystemExit(_fail(report, "tf.config.list_physical_devices('GPU') is empty"))
    report["device"] = (
        tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU")
        if device == "cuda"
        else "cpu"
    )
    where = "/GPU:0" if device == "cuda" else "/CPU:0"
    with tf.device(where):
        small = tf.random.uniform((64, 64), dtype=tf.float64)
        got = tf.cast(tf.matmul(tf.cast(small, tf.float32), tf.cast(small, tf.float32)), tf.float64)
        report["max_error"] = float(tf.reduce_max(tf.abs(got - tf.matmul(small, small))))
        for name, dtype in (("fp32", tf.float32), ("fp16", tf.float16)):
            if device == "cpu" and dtype is tf.float16:
                continue
            a = tf.random.uniform((n, n), dtype=dtype)
            report[f"{name}_tflops"] = _timed(lambda a=a: tf.matmul(a, a).numpy()[0, 0], 2 * n**3)
    return report


def with_cuda_runtime(device: str, n: int) -> dict:
    """A CUDA image without a framework (gpurental/cuda:*): cudart and cuBLAS through ctypes,
    as the loader finds them (ldconfig). On a CPU it checks the libraries load and says
    which runtime they are; on a GPU it runs cuBLAS SGEMMs."""
    import ctypes

    cudart = ctypes.CDLL(_library("libcudart.so"))
    version = ctypes.c_int()
    if cudart.cudaRuntimeGetVersion(ctypes.byref(version)) == 0:
        runtime = f"{version.value // 1000}.{version.value % 1000 // 10}"
    else:  # CUDA 11's runtime answers only with a driver: the wheel's own version, then
        runtime = _runtime_wheel_version()
    report = {"framework": "cuda-runtime", "version": runtime, "cuda_built": runtime}
    count = ctypes.c_int()
    status = cudart.cudaGetDeviceCount(ctypes.byref(count))
    cublas = ctypes.CDLL(_library("libcublas.so"))
    if device == "cpu":
        return {**report, "device": "cpu", "cuda_devices": count.value, "cuda_status": status}
    if status != 0 or count.value == 0:
        raise SystemExit(_fail(report, f"cudaGetDeviceCount answered {status}"))
    size = n * n * 4
    buffers = [ctypes.c_void_p() for _ in range(3)]
    for buffer in buffers:
        cudart.cudaMalloc(ctypes.byref(buffer), ctypes.c_size_t(size))
    handle = ctypes.c_void_p()
    cublas.cublasCreate_v2(ctypes.byref(handle))
    one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)

    def step():
        cublas.cublasSgemm_v2(
            handle, 0, 0, n, n, n, ctypes.byref(one), buffers[0], n, buffers[1], n,
            ctypes.byref(zero), buffers[2], n,
        )  # fmt: skip
        cudart.cudaDeviceSynchronize()

    prop = ctypes.create_string_buffer(1024)
    cudart.cudaGetDeviceProperties(prop, 0)  # the name is the struct's first field
    report["device"] = prop.value.decode(errors="replace")
    report["fp32_tflops"] = _timed(step, 2 * n**3)
    return report


def _runtime_wheel_version() -> str:
    from importlib import metadata

    for name in ("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu11"):
        try:
            return ".".join(metadata.version(name).split(".")[:2])
        except metadata.PackageNotFoundError:
            continue
    return "?"


def _library(stem: str) -> str:
    """The newest versioned name of a CUDA library the loader knows (libcudart.so.12)."""
    import subprocess

    listed = subprocess.run(  # noqa: S603 - the system's loader cache, listed
        ["/sbin/ldconfig", "-p"], capture_output=True, text=True, check=True
    )
    names = sorted(
        {line.split()[0] for line in listed.stdout.splitlines() if line.strip().startswith(stem)}
    )
    if not names:
        raise SystemExit(f"no {stem}* in the loader's path (ldconfig -p)")
    return names[-1]


def _fail(report: dict, why: str) -> str:
    print(json.dumps({**report, "ok": False, "error": why}), flush=True)
    return f"no {why}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--framework", choices=("auto", "torch", "tensorflow", "cuda-runtime"), default="auto"
    )
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--size", type=int, default=8192)
    args = parser.parse_args()
    framework = args.framework
    if framework == "auto":
        found = [name for name in ("torch", "tensorflow") if importlib.util.find_spec(name)]
        framework = found[0] if found else "cuda-runtime"
    run = {"torch": with_torch, "tensorflow": with_tensorflow}.get(framework, with_cuda_runtime)
    report = run(args.device, args.size)
    print(json.dumps({**report, "size": args.size, "ok": True}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
