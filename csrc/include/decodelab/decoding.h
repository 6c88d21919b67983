// Decoding: the one-sequence decode loop, speculative decoding, beam search, and the statistics
// each step can record.
#pragma once

#include "decodelab/beam_search.h"
#include "decodelab/decoder.h"
#include "decodelab/speculative.h"
#include "decodelab/step_stats.h"
