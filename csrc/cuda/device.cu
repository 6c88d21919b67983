#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "decodelab/device.h"

// Every CUDA call goes through this check: it throws (a Python RuntimeError) with the file and
// line instead of ending the process.
#define DECODELAB_CUDA_CHECK(call)                                                              \
  do {                                                                                          \
    cudaError_t err_ = (call);                                                                  \
    if (err_ != cudaSuccess)                                                                    \
      throw std::runtime_error(std::string("CUDA error at ") + __FILE__ + ":" +                 \
                               std::to_string(__LINE__) + ": " + cudaGetErrorString(err_));     \
  } while (0)

namespace decodelab {

bool built_with_cuda() { return true; }

int cuda_device_count() {
  int n = 0;
  DECODELAB_CUDA_CHECK(cudaGetDeviceCount(&n));
  return n;
}

}  // namespace decodelab
