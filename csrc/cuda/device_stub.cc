#include <stdexcept>

#include "decodelab/device.h"

namespace decodelab {

bool built_with_cuda() { return false; }

int cuda_device_count() {
  throw std::runtime_error("decodelab was built without CUDA (configure with -DDECODELAB_WITH_CUDA=ON)");
}

}  // namespace decodelab
