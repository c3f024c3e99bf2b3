"""What the timing scripts share about the machine they run on.

This project's VMs back guest memory lazily: memory a process frees goes back to the host after a while,
and the next process to touch it pays 2-10x the usual kernel time per page (benchmarks/RESULTS.md,
"Session of 2026-12-02 (evening)" and "2026-12-03"). Touching a few GiB in a child just before each
timed run steadies the kernel's share.
"""

from __future__ import annotations

import subprocess
import sys


def warm(gib: float) -> None:
    """Touch `gib` GiB (rounded, at least 1) in a child process, which lets it go as it exits."""
    if gib <= 0:
        return
    code = f"import numpy as np; xs = [np.ones(1 << 27) for _ in range({max(1, round(gib))})]"
    subprocess.run([sys.executable, "-c", code], check=True)


WARM_HELP = (
    "GiB of memory a child process touches before each run (on a VM that backs guest memory lazily, "
    "first-touch page faults cost 2-10x more after the memory was idle a while)"
)


def tree_env(tree: object, **extra: str) -> dict:
    """os.environ for a child that imports tracekit from `tree`: the tree first on PYTHONPATH, before
    whatever PYTHONPATH already names (where a machine's missing packages were installed with --target)."""
    import os

    rest = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), rest]) if rest else str(tree), **extra}


def settle(command: str) -> bool:
    """Make the process settings `tracekit COMMAND` makes before numpy is imported
    (tracekit/__main__.py: settle_process), so that a script running the command's code in process times
    it as the command runs it. False for a tree from before settle_process (nothing made)."""
    try:
        from tracekit.__main__ import settle_process
    except ImportError:
        return False
    settle_process(command)
    return True
