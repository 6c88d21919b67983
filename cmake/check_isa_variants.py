"""Checks that the CPU kernels can be built for several instruction sets into one program: compiles
every kernel file (csrc/cpu, see csrc/cpu/isa.h) once per instruction set, each in its own
namespace, and fails if any symbol of decodelab lies outside those namespaces in two variants
(a link error, or for inline code a silent choice of one variant's instructions).

    python cmake/check_isa_variants.py [--jobs 2]

Needs g++ and the Eigen headers the build uses (cmake/pydeps.py); takes a few minutes."""
import argparse
import concurrent.futures
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Files compiled once for every variant: they choose no vector code themselves.
NEUTRAL = {"dispatch.cc", "onednn.cc", "bandwidth.cc", "busy_cores.cc"}
VARIANTS = {"generic": ["-march=x86-64"], "avx2": ["-march=haswell"], "avx512": ["-march=skylake-avx512"],
            "avx512_vnni": ["-march=icelake-server"]}


def eigen_include() -> str:
    return subprocess.run([sys.executable, str(ROOT / "cmake" / "pydeps.py"), "eigen_include"],
                          capture_output=True, text=True, check=True).stdout.strip()


def eigen_ok() -> bool:
    return bool(eigen_include())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, from " + ", ".join(VARIANTS))
    a = ap.parse_args()
    variants = {v: VARIANTS[v] for v in a.variants.split(",")}
    if not eigen_ok():
        print("the Eigen headers were not found (pip install cmeel-eigen)")
        return 2
    eigen = eigen_include()
    files = sorted(p for p in (ROOT / "csrc" / "cpu").rglob("*.cc") if p.name not in NEUTRAL)
    out = pathlib.Path(tempfile.mkdtemp())
    jobs = []
    for isa, flags in variants.items():
        for f in files:
            obj = out / isa / (f.relative_to(ROOT).as_posix().replace("/", "_") + ".o")
            obj.parent.mkdir(parents=True, exist_ok=True)
            jobs.append((isa, obj, ["g++", "-std=c++17", "-O3", "-fopenmp", *flags, f"-DDECODELAB_ISA={isa}",
                                    "-I", str(ROOT / "csrc" / "include"), "-I", str(ROOT / "csrc"),
                                    "-isystem", eigen, "-c", str(f), "-o", str(obj)]))
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as ex:
        results = list(ex.map(lambda j: subprocess.run(j[2], capture_output=True, text=True), jobs))
    failed = [(j, r) for j, r in zip(jobs, results) if r.returncode != 0]
    for (isa, obj, cmd), r in failed:
        print(f"{isa}: {cmd[-3]} failed:\n{r.stderr[-2000:]}")
    if failed:
        return 1
    owners = {}
    for isa in variants:
        nm = subprocess.run(["nm", "-C", "--defined-only", *map(str, (out / isa).glob("*.o"))],
                            capture_output=True, text=True, check=True).stdout
        for line in nm.splitlines():
            parts = line.split(" ", 2)
            if len(parts) < 3 or parts[1] in ("b", "d", "r", "t") or "decodelab::" not in parts[2]:
                continue  # local symbols cannot collide
            name = parts[2]
            if f"decodelab::{isa}::" in name.split("(")[0]:
                continue
            owners.setdefault(name, set()).add(isa)
    shared = sorted(n for n, s in owners.items() if len(s) > 1)
    for n in shared:
        print("outside an instruction-set namespace, defined by several variants:", n)
    print(f"{len(files)} kernel files x {len(variants)} instruction sets compiled; "
          f"{len(shared)} symbols would collide")
    return 1 if shared else 0


if __name__ == "__main__":
    sys.exit(main())
