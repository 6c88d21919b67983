// Which instruction sets this CPU has, which kernel variants this build holds, and the one the
// kernels run (cpu/dispatch.cc chooses it once, at the first call).
#pragma once

#include <string>
#include <vector>

namespace decodelab {

struct CpuInfo {
  std::vector<std::string> detected;   // CPU features that decide the variant (avx2, fma, avx512f, ...)
  std::vector<std::string> supported;  // variants this CPU can run, lowest first
  std::vector<std::string> compiled;   // variants this build holds
  std::string cap;                     // DECODELAB_ISA, or empty
  std::string chosen;                  // the variant every kernel call runs
  bool portable = false;               // a build with a variant per instruction set
};

// Chooses at the first call; std::invalid_argument for a DECODELAB_ISA that names no variant.
const CpuInfo& cpu_info();

}  // namespace decodelab
