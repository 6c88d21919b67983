"""The CPU kernels can be built for several instruction sets into one program (csrc/cpu/isa.h):
compiled for the plainest x86-64 and for AVX-512 VNNI, each in its own namespace, no symbol of
decodelab is defined by both outside those namespaces. A later run-time choice of kernels then
compiles the same files again and moves no code."""
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "cmake" / "check_isa_variants.py"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++, which building decodelab needs too")
def test_kernel_variants_do_not_collide():
    r = subprocess.run([sys.executable, str(SCRIPT), "--variants", "generic,avx512_vnni"], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert "2 instruction sets compiled; 0 symbols would collide" in r.stdout
