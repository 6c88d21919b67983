// Every CPU kernel's entry point: include the narrower header where one is enough. Shapes are
// row-major; comments give them as (rows, cols).
#pragma once

#include "decodelab/attention.h"
#include "decodelab/bandwidth.h"
#include "decodelab/layer_ops.h"
#include "decodelab/linear.h"
#include "decodelab/parallel.h"
