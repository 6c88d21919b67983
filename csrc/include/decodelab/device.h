// Which backends this build has. The CUDA path is optional (CMake DECODELAB_WITH_CUDA).
#pragma once

namespace decodelab {

bool built_with_cuda();
// Number of visible CUDA devices; throws std::runtime_error in a build without CUDA or when
// the CUDA runtime reports an error.
int cuda_device_count();

}  // namespace decodelab
