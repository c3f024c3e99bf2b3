"""What the manifest records about the machine, the interpreter and torch (stdlib + torch, Python 3.9)."""

from __future__ import annotations

import os
import platform
import socket
import sys
import sysconfig
from datetime import datetime, timezone
from typing import Any, Dict


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def python_info() -> Dict[str, Any]:
    return {
        "version": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "compiler": platform.python_compiler(),
        # 1 on free-threaded (3.13t+) builds, where the GIL can be off.
        "gil_disabled": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
    }


def host_info() -> Dict[str, Any]:
    return {
        "name": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "os": platform.platform(),
        "machine": platform.machine(),
    }


def torch_info() -> Dict[str, Any]:
    import torch

    cudnn = None
    try:
        if torch.backends.cudnn.is_available():
            cudnn = torch.backends.cudnn.version()
    except Exception:  # a CPU build without cuDNN bindings
        cudnn = None
    return {
        "version": torch.__version__,
        "git_version": getattr(torch.version, "git_version", None),
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "cudnn": cudnn,
        "num_threads": torch.get_num_threads(),
    }


def device_info(device: str) -> Dict[str, Any]:
    import torch

    if device == "cuda":
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        return {
            "type": "cuda",
            "name": props.name,
            "count": torch.cuda.device_count(),
            "capability": f"{props.major}.{props.minor}",
            "total_memory_bytes": int(props.total_memory),
            "multi_processor_count": int(props.multi_processor_count),
        }
    return {"type": "cpu", "name": cpu_name(), "count": 1}


def cpu_name() -> str:
    """The CPU model ("AMD EPYC 9654 96-Core Processor"), else the architecture."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(device: str) -> Dict[str, Any]:
    """Python, host, torch and device facts of this process."""
    return {
        "python": python_info(),
        "host": host_info(),
        "torch": torch_info(),
        "device": device_info(device),
    }
