"""What the manifest records about the machine, the interpreter and torch (stdlib + torch, Python 3.9)."""

from __future__ import annotations

import os
import platform
import socket
import sys
import sysconfig
from datetime import datetime, timezone
from typing import Any, Dict, Optional


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
        "build": python_build(),
    }


def _flag(
    config_args: str, flags: str, option: str, compiler_flag: str, distribution: bool
) -> Optional[bool]:
    """True when configure was given `option` or the compiler flags hold `compiler_flag`; False when
    they hold neither; None (cannot tell) when nothing is recorded or for a distribution's build."""
    if option in config_args or compiler_flag in flags:
        return True
    return None if distribution or not config_args else False


def python_build() -> Dict[str, Any]:
    """How this interpreter was built: PGO, LTO, a shared libpython, the compiler, free-threading.

    Read from `sysconfig` (configure's arguments and the flags the interpreter was compiled with).
    A distribution's build (prefix /usr: Debian and Ubuntu compile with PGO and LTO from their own packaging
    rules, which configure's recorded arguments need not show) is marked `distribution`, and its PGO/LTO
    entries are None (cannot tell) unless the recorded flags show them.
    """
    get = sysconfig.get_config_var
    args = str(get("CONFIG_ARGS") or "")
    flags = " ".join(str(get(k) or "") for k in ("PY_CFLAGS", "PY_CFLAGS_NODIST", "PY_LDFLAGS_NODIST", "OPT"))
    distribution = sys.base_prefix == "/usr"
    return {
        "pgo": _flag(args, flags, "--enable-optimizations", "-fprofile-use", distribution),
        "lto": _flag(args, flags, "--with-lto", "-flto", distribution),
        "shared_libpython": bool(get("Py_ENABLE_SHARED")),
        "compiler": platform.python_compiler(),
        "free_threaded": bool(get("Py_GIL_DISABLED")),
        "debug": bool(get("Py_DEBUG")),
        "distribution": distribution,
        "config_args": args[:2000],
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
