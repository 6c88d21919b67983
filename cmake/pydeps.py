"""Print the locations of build dependencies installed from PyPI, for CMakeLists.txt.

oneDNN's PyPI wheels put their files under the installation's data prefix and Eigen's cmeel
wheel under site-packages/cmeel.prefix; importlib.metadata finds both wherever pip put them,
including pip's isolated build environment.
"""
import importlib.metadata as md
import sys


def locate(dist_name, suffix):
    try:
        dist = md.distribution(dist_name)
    except md.PackageNotFoundError:
        return ""
    for f in dist.files or []:
        p = str(f).replace("\\", "/")
        if p.endswith(suffix):
            return str(dist.locate_file(f)).replace("\\", "/")[: -len(suffix)].rstrip("/")
    return ""


what = sys.argv[1]
if what == "dnnl_DIR":
    base = locate("onednn-devel-cpu-gomp", "dnnl-config.cmake")
    print(base, end="")
elif what == "eigen_include":
    print(locate("cmeel-eigen", "/Eigen/Core").rstrip("/"), end="")
