import json
import platform
import subprocess
import sys

import pytest

glibc = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"

# In a fresh interpreter (this one's heap already holds freed blocks of earlier tests): how
# much resident memory a freed, touched 64 MiB tensor leaves behind, before and after the
# allocator is told to keep it. 64 MiB is past the largest threshold to which glibc raises
# its mmap threshold by itself (32 MiB), so the first block is mapped and unmapped whatever
# came before it.
_KEPT_AFTER_FREE = """
import json, resource, torch
from alignmt.model.allocator import keep_freed_memory
def rss_mib():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() / 2**20
def kept_mib():
    before = rss_mib()
    block = torch.ones(64, 2**20 // 4)
    del block
    return rss_mib() - before
default = kept_mib()
assert keep_freed_memory()
print(json.dumps([default, kept_mib()]))
"""


@pytest.mark.skipif(not glibc, reason="mallopt is glibc's; elsewhere the allocator is left alone")
def test_freed_tensor_memory_stays_with_the_process_for_reuse():
    run = subprocess.run(
        [sys.executable, "-c", _KEPT_AFTER_FREE], capture_output=True, text=True, check=True
    )
    default, kept = json.loads(run.stdout)
    assert default < 16  # glibc unmaps a large block on free
    assert kept > 48  # kept on the heap for the next step's tensors
