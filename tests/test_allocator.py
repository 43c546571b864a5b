import platform
import subprocess
import sys

import pytest

glibc = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"

# In a fresh interpreter (this one's heap already holds freed blocks of earlier tests):
# how much resident memory a freed, touched 64 MiB tensor leaves behind.
_KEPT_AFTER_FREE = """
import resource, sys, torch
from alignmt.model.allocator import keep_freed_memory
def rss_mib():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() / 2**20
if sys.argv[1] == "keep":
    assert keep_freed_memory()
before = rss_mib()
block = torch.ones(64, 2**20 // 4)
del block
print(rss_mib() - before)
"""


def _kept_mib(mode: str) -> float:
    run = subprocess.run(
        [sys.executable, "-c", _KEPT_AFTER_FREE, mode], capture_output=True, text=True, check=True
    )
    return float(run.stdout)


@pytest.mark.skipif(not glibc, reason="mallopt is glibc's; elsewhere the allocator is left alone")
def test_freed_tensor_memory_stays_with_the_process_for_reuse():
    assert _kept_mib("default") < 16  # glibc unmaps a large block on free
    assert _kept_mib("keep") > 48  # kept on the heap for the next step's tensors
