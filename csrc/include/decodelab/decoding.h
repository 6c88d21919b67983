// Decoding: the one-sequence decode loop, beam search, and the statistics each step can record.
#pragma once

#include "decodelab/beam_search.h"
#include "decodelab/decoder.h"
#include "decodelab/step_stats.h"
