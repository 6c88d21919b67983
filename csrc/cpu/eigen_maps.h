// Eigen views of the kernels' raw float buffers: a row as a vector, rows as a row-major matrix.
#pragma once

#include <Eigen/Core>

namespace decodelab {

using ConstVec = Eigen::Map<const Eigen::VectorXf>;
using Vec = Eigen::Map<Eigen::VectorXf>;
using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

}  // namespace decodelab
