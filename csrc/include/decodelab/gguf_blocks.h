// ggml's block formats (GGUF tensor types Q4_0 ... Q6_K): their sizes, their values decoded to
// fp32 as ggml's reference dequantizers compute them, and the 4-bit ones as steps and minima per
// 32 values, the form the int4 kernels keep (cpu/linear/layout.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace decodelab {

enum class BlockType { Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K };

struct BlockFormat {
  BlockType type;
  const char* name;  // GGUF's spelling
  int elems;         // values per block
  int bytes;         // bytes per block
  int bits;          // bits of each value before scaling: 4, 5, 6 or 8
};

inline constexpr BlockFormat kBlockFormats[] = {
    {BlockType::Q4_0, "Q4_0", 32, 18, 4},   {BlockType::Q4_1, "Q4_1", 32, 20, 4},
    {BlockType::Q5_0, "Q5_0", 32, 22, 5},   {BlockType::Q5_1, "Q5_1", 32, 24, 5},
    {BlockType::Q8_0, "Q8_0", 32, 34, 8},   {BlockType::Q4_K, "Q4_K", 256, 144, 4},
    {BlockType::Q5_K, "Q5_K", 256, 176, 5}, {BlockType::Q6_K, "Q6_K", 256, 210, 6}};

// The format named `name`, or null for any other name (F32, F16, an unknown type).
const BlockFormat* find_block_format(const std::string& name);

// n values (a whole number of blocks) from src into dst.
void dequantize_blocks(const BlockFormat& f, const uint8_t* src, size_t n, float* dst);

// The blocks of a 4-bit format (bits == 4) holding n values, as q (n values 0..15, one a byte)
// and per 32 values a step and a minimum with value = step q + min: Q4_0 (d, -8 d), Q4_1 (d, m),
// Q4_K (d scale, -dmin min of each sub-block, products in fp32 as ggml forms them).
void q4_sub_blocks(const BlockFormat& f, const uint8_t* src, size_t n, uint8_t* q, float* step, float* min);

// Q4_K's own scale codes for n values (a whole number of 256-value blocks): per 32 values the 6-bit
// step code sc and minimum code m, per 256 the half bits of d and of -dmin; q4_sub_blocks' step and
// minimum are d sc and -dmin m of these, exactly.
void q4k_codes(const uint8_t* src, size_t n, uint8_t* sc, uint8_t* m, uint16_t* d, uint16_t* neg_dmin);

// The unsigned codes of n values (whole 256-value blocks), in order, one a byte: Q4_K's nibbles
// (0..15, q4_sub_blocks' q) and Q6_K's six bits (0..63, q8_sub_blocks' q + 32). With q4k_codes and
// Q6_K's own scales, what a packed layer keeps, read without forming a step in fp32.
void q4k_nibbles(const uint8_t* src, size_t n, uint8_t* u);
void q6k_unsigned(const uint8_t* src, size_t n, uint8_t* u);
// The unsigned codes of n values of the formats with a half step per 32 values (Q4_0, Q4_1, Q5_0,
// Q5_1: 0..15 or 0..31; Q4_0's value is d (u - 8), Q5_0's d (u - 16), the others' d u + m) and per
// 32 the half bits of d (and of m, Q4_1 and Q5_1), as the file holds them.
void half_step_codes(const BlockFormat& f, const uint8_t* src, size_t n, uint8_t* u, uint16_t* d, uint16_t* m);

// Any format's blocks holding n values as int8 codes q and per group of q8_group(f) values a step
// (and, where q8_has_min(f), a minimum per 32 values) with value = step q + min: the exact values,
// in the form the engine's 8-bit block kernel keeps (cpu/linear/layout.h). Q8_0 (q, d), Q5_0
// (q - 16, d), Q5_1 (q, d, m), Q5_K (q, d sc, -dmin m), Q6_K (q - 32, d sc per 16 values), and the
// 4-bit formats as q4_sub_blocks gives them (Q4_0 as q - 8, d, without a minimum).
int q8_group(const BlockFormat& f);
bool q8_has_min(const BlockFormat& f);
void q8_sub_blocks(const BlockFormat& f, const uint8_t* src, size_t n, int8_t* q, float* step, float* min);
// The planes of high bits a 4-bit model keeps above a layer's low nibbles in the file's own width
// (I5Blocks): 1 for the 5-bit formats with a step per 32 (Q5_0, Q5_1, Q5_K), 2 for Q6_K; 0 for the
// rest, which keep 8-bit codes (or 4-bit ones).
int narrow_planes(const BlockFormat& f);

}  // namespace decodelab
