#include "decodelab/transformer.h"

#include "decodelab/attention_probs.h"
#include "decodelab/busy_cores.h"
#include "decodelab/op_profile.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>

namespace decodelab {

namespace {
std::string L(int i) { return std::to_string(i); }

// Offsets of consecutive blocks of the given byte sizes, each starting on a 64-byte boundary; the
// last entry is the total.
std::vector<size_t> aligned_offsets(const std::vector<size_t>& bytes) {
  std::vector<size_t> at(bytes.size() + 1, 0);
  for (size_t i = 0; i < bytes.size(); ++i) at[i + 1] = at[i] + (bytes[i] + kAlign - 1) / kAlign * kAlign;
  return at;
}

// The first layer of each weight shape (in, out, with or without bias), in order: oneDNN keeps its
// primitives per shape, so one trial run on each sets them all up.
std::vector<const Linear*> one_per_shape(const std::vector<Linear*>& layers) {
  std::set<std::tuple<int, int, bool>> seen;
  std::vector<const Linear*> out;
  for (const Linear* l : layers)
    if (seen.insert(std::make_tuple(l->in, l->out, l->b != nullptr)).second) out.push_back(l);
  return out;
}

// Bytes of a linear layer's weights one pass reads: values, steps and minima (layout padding aside).
double read_bytes(const Linear& x) {
  const double n = static_cast<double>(x.in) * x.out, blocks = static_cast<double>(x.out) * ((x.in + 31) / 32);
  switch (x.type) {
    case WeightType::F32: return 4 * n;
    case WeightType::BF16: return 2 * n;
    case WeightType::I8:
    case WeightType::I8A8: return n + 4.0 * x.out;
    case WeightType::I4: return n / 2 + (x.k_sc ? 2 + 4.0 / 8 : x.steps16 ? (x.mins16 ? 4 : 2) : 8) * blocks;
    case WeightType::I8Blocks:
      if (x.k_sc8) return n + blocks * (x.i8b_groups + 2.0 / 8);
      return n + (x.steps16 ? 2 : 4) * blocks * (x.i8b_groups + (x.mins || x.mins16 ? 1 : 0));
    case WeightType::I5Blocks:
      if (x.k_sc8) return n * (4 + x.i5_planes) / 8 + blocks * (x.i8b_groups + 2.0 / 8);
      return n * (4 + x.i5_planes) / 8 + (x.steps16 ? 2 : 4) * blocks * (x.i8b_groups + (x.mins || x.mins16 ? 1 : 0));
  }
  return 0;
}

// A pass's totals into the profile: per linear op, the weights' bytes and the multiply-adds of
// `rows` rows; per attention, the cache positions read and their multiply-adds.
void record_linears(OpProfile& p, int ph, Op op, std::initializer_list<const Linear*> ls, int rows) {
  for (const Linear* x : ls) {
    p.weight_bytes[ph][static_cast<int>(op)] += read_bytes(*x);
    p.macs[ph][static_cast<int>(op)] += static_cast<double>(rows) * x->in * x->out;
  }
}
}  // namespace

void Transformer::record_pass(OpClock& clk, int R, KVCache* const* caches, const int* rows, int n_seg,
                              bool all_logits) const {
  OpProfile& p = *clk.profile();
  const int ph = clk.phase();
  ++p.passes[ph];
  p.rows[ph] += R;
  for (const Layer& l : layers_) {
    if (cfg_.is_llama()) record_linears(p, ph, Op::QkvProj, {&l.q, &l.k, &l.v}, R);
    else record_linears(p, ph, Op::QkvProj, {&l.qkv}, R);
    record_linears(p, ph, Op::OutProj, {&l.o}, R);
    if (cfg_.is_llama()) record_linears(p, ph, Op::MlpIn, {&l.gate, &l.up}, R);
    else record_linears(p, ph, Op::MlpIn, {&l.fc}, R);
    record_linears(p, ph, Op::MlpOut, {&l.down}, R);
  }
  record_linears(p, ph, Op::Head, {&lm_head_}, all_logits ? R : n_seg);
  // Attention: each segment's rows read the positions before them (within a sliding window), keys
  // and values of every KV head, once per layer; a query head's scores and weighted values are 2 x
  // head_dim multiply-adds per position.
  const int KVD = cfg_.n_kv_heads * cfg_.head_dim;
  for (int s = 0; s < n_seg; ++s) {
    const KVDType dt = caches[s]->pool().dtype();
    const double per_pos = 2.0 * (dt == KVDType::F32 ? 4 * KVD : dt == KVDType::BF16 ? 2 * KVD
                                                                                      : KVD + 4 * cfg_.n_kv_heads);
    const int p_end = caches[s]->length();  // after this pass's tokens were committed
    for (int li = 0; li < cfg_.n_layers; ++li) {
      const int window = cfg_.sliding_window.empty() ? 0 : cfg_.sliding_window[li];
      const int seen = window > 0 ? std::min(p_end, window + rows[s] - 1) : p_end;
      p.kv_bytes[ph] += seen * per_pos;
      double pairs = 0;  // (query, key) pairs of the segment's rows
      for (int t = 0; t < rows[s]; ++t) {
        const int n = p_end - rows[s] + t + 1;
        pairs += window > 0 ? std::min(n, window) : n;
      }
      p.macs[ph][static_cast<int>(Op::Attention)] += pairs * 2.0 * cfg_.n_heads * cfg_.head_dim;
    }
  }
}

std::vector<Linear*> Transformer::layer_linears() {
  std::vector<Linear*> all;
  for (Layer& l : layers_)
    for (Linear* x : {&l.q, &l.k, &l.v, &l.qkv, &l.o, &l.gate, &l.up, &l.fc, &l.down})
      if (x->in > 0) all.push_back(x);
  return all;
}


Transformer::Transformer(const ModelConfig& cfg, std::shared_ptr<WeightStore> weights, int n_threads,
                         WeightType weight_type, bool zero_copy, int block_size, bool bf16_matmul)
    : cfg_(cfg),
      weights_(std::move(weights)),
      n_threads_(1),
      weight_type_(weight_type),
      block_size_(block_size),
      bf16_matmul_(bf16_matmul) {
  cfg_.validate();
  BlockPool::check_block_size(block_size);
  set_n_threads(n_threads);
  omp_set_num_threads(n_threads_);  // for the conversions and trial runs below
  auto& W = *weights_;
  const int64_t D = cfg_.dim, V = cfg_.vocab_size, H = cfg_.hidden_dim;
  const int64_t QD = static_cast<int64_t>(cfg_.n_heads) * cfg_.head_dim;
  const int64_t KVD = static_cast<int64_t>(cfg_.n_kv_heads) * cfg_.head_dim;
  std::unordered_map<const float*, std::string> source_of;  // fp32 sources of the weights quantized below
  // fp32 layers read from the mapping, copied below unless zero_copy: the source name of each.
  const bool copy_f32 = weight_type_ == WeightType::F32 && !zero_copy;
  std::unordered_map<const float*, std::string> to_copy;
  // Layers a file stores in ggml's blocks (GGUF), read from the blocks when they are converted below
  // rather than decoded whole to fp32 first: each one's format and mapped blocks.
  struct Blocks {
    const BlockFormat* format;
    const uint8_t* data;
    std::string name;
  };
  std::unordered_map<const Linear*, Blocks> blocks_of;
  auto from_blocks = [&](Linear& l, const std::string& name, int64_t rows, int64_t cols) {
    const BlockFormat* f = nullptr;
    const uint8_t* src = weight_type_ == WeightType::F32 ? nullptr : W.blocks(name, {rows, cols}, &f);
    if (src) blocks_of[&l] = Blocks{f, src, name};
    return src != nullptr;
  };
  // A norm or bias vector: read in place from the mapping with fp32 weights (nothing copied under
  // zero_copy), copied with pread where the layers are packed (see WeightStore::f32_read).
  auto vec = [&](const std::string& name, int64_t n) {
    return weight_type_ == WeightType::F32 ? W.f32(name, {n}) : W.f32_read(name, {n});
  };
  auto lin = [&](Linear& l, const std::string& name, int64_t in, int64_t out, bool in_major, bool bias) {
    l.in = static_cast<int>(in);
    l.out = static_cast<int>(out);
    if (bias) l.b = vec(name + ".bias", out);
    if (!in_major && from_blocks(l, name + ".weight", out, in)) return;
    const bool copy = copy_f32 && W.in_place(name + ".weight");
    if (in_major && weight_type_ == WeightType::F32 && !copy) {
      // GPT-2's Conv1D (in, out): an (out, in) copy lets batch-1 decode read each weight row once
      // with one dot product per output, the layout Llama weights already have. Quantized types
      // are converted to (out, in) from the mapping directly.
      l.w = W.f32_transposed(name + ".weight", {in, out});
    } else {
      l.in_major = in_major;
      l.w = W.f32(name + ".weight", in_major ? std::vector<int64_t>{in, out} : std::vector<int64_t>{out, in});
      source_of[l.w] = name + ".weight";
      if (copy) to_copy[l.w] = name + ".weight";
    }
  };
  layers_.resize(cfg_.n_layers);
  std::string head_name = cfg_.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";  // Llama's
  // An RMSNorm weight as the kernels apply it: Gemma's 1 + w, computed once here in fp32.
  auto norm_w = [&](const std::string& name, int64_t n) -> const float* {
    if (!cfg_.norm_plus_one) return vec(name, n);
    plus_one_.emplace_back(static_cast<size_t>(n));
    float* out = plus_one_.back().data();
    if (weight_type_ == WeightType::F32) std::memcpy(out, W.f32(name, {n}), static_cast<size_t>(n) * sizeof(float));
    else W.f32_read_into(name, {n}, out);  // with pread, as vec
    for (int64_t i = 0; i < n; ++i) out[i] += 1.0f;
    return out;
  };
  if (cfg_.is_llama()) {
    if (!from_blocks(lm_head_, "model.embed_tokens.weight", V, D))
      tok_embed_ = W.f32("model.embed_tokens.weight", {V, D});
    for (int i = 0; i < cfg_.n_layers; ++i) {
      const std::string p = "model.layers." + L(i) + ".";
      Layer& l = layers_[i];
      l.norm1_w = norm_w(p + "input_layernorm.weight", D);
      if (cfg_.sandwich_norms) {  // Gemma: post_attention_layernorm normalises the attention's output
        l.post_attn_norm_w = norm_w(p + "post_attention_layernorm.weight", D);
        l.norm2_w = norm_w(p + "pre_feedforward_layernorm.weight", D);
        l.post_ff_norm_w = norm_w(p + "post_feedforward_layernorm.weight", D);
      } else {
        l.norm2_w = norm_w(p + "post_attention_layernorm.weight", D);
      }
      lin(l.q, p + "self_attn.q_proj", D, QD, false, cfg_.qkv_bias);
      lin(l.k, p + "self_attn.k_proj", D, KVD, false, cfg_.qkv_bias);
      lin(l.v, p + "self_attn.v_proj", D, KVD, false, cfg_.qkv_bias);
      lin(l.o, p + "self_attn.o_proj", QD, D, false, cfg_.o_bias);
      if (cfg_.qk_norm) {
        l.q_norm_w = norm_w(p + "self_attn.q_norm.weight", cfg_.head_dim);
        l.k_norm_w = norm_w(p + "self_attn.k_norm.weight", cfg_.head_dim);
      }
      lin(l.gate, p + "mlp.gate_proj", D, H, false, false);
      lin(l.up, p + "mlp.up_proj", D, H, false, false);
      lin(l.down, p + "mlp.down_proj", H, D, false, false);
    }
    final_w_ = norm_w("model.norm.weight", D);
    if (blocks_of.count(&lm_head_)) {  // rows of the table decoded per token; a tied head reads the blocks too
      const Blocks& e = blocks_of[&lm_head_];
      const auto [file, offset] = W.source(e.name);
      embed_blocks_ = {e.format, file, offset, static_cast<size_t>(D) / e.format->elems * e.format->bytes};
      if (!cfg_.tie_word_embeddings) blocks_of.erase(&lm_head_);
    }
    if (!cfg_.tie_word_embeddings && !from_blocks(lm_head_, "lm_head.weight", V, D))
      lm_head_.w = W.f32("lm_head.weight", {V, D});
    else if (cfg_.tie_word_embeddings && tok_embed_)
      lm_head_.w = tok_embed_;
  } else {
    // GPT-2 and GPT-NeoX: LayerNorms and linear layers with biases, one fused q/k/v matrix (GPT-2's
    // [q | k | v] in Conv1D's (in, out) layout; NeoX's rows head by head [q_h | k_h | v_h], split
    // after the product). Only their names differ, and GPT-2's learned positions.
    struct Names {
      const char *embed, *layers, *ln1, *ln2, *qkv, *o, *fc, *down, *final_norm, *head;
      bool conv1d;
    };
    const Names n = cfg_.is_neox()
                        ? Names{"gpt_neox.embed_in", "gpt_neox.layers.", "input_layernorm", "post_attention_layernorm",
                                "attention.query_key_value", "attention.dense", "mlp.dense_h_to_4h",
                                "mlp.dense_4h_to_h", "gpt_neox.final_layer_norm", "embed_out", false}
                        : Names{"transformer.wte", "transformer.h.", "ln_1", "ln_2", "attn.c_attn", "attn.c_proj",
                                "mlp.c_fc", "mlp.c_proj", "transformer.ln_f", "lm_head", true};
    const std::string embed = std::string(n.embed) + ".weight", final_norm = n.final_norm;
    tok_embed_ = W.f32(embed, {V, D});
    if (cfg_.is_gpt2()) pos_embed_ = W.f32("transformer.wpe.weight", {cfg_.max_position, D});
    for (int i = 0; i < cfg_.n_layers; ++i) {
      const std::string p = n.layers + L(i) + ".";
      Layer& l = layers_[i];
      l.norm1_w = vec(p + n.ln1 + ".weight", D);
      l.norm1_b = vec(p + n.ln1 + ".bias", D);
      l.norm2_w = vec(p + n.ln2 + ".weight", D);
      l.norm2_b = vec(p + n.ln2 + ".bias", D);
      lin(l.qkv, p + n.qkv, D, 3 * D, n.conv1d, true);
      lin(l.o, p + n.o, D, D, n.conv1d, true);
      lin(l.fc, p + n.fc, D, H, n.conv1d, true);
      lin(l.down, p + n.down, H, D, n.conv1d, true);
    }
    final_w_ = vec(final_norm + ".weight", D);
    final_b_ = vec(final_norm + ".bias", D);
    head_name = cfg_.tie_word_embeddings ? embed : std::string(n.head) + ".weight";
    lm_head_.w = cfg_.tie_word_embeddings ? tok_embed_ : W.f32(head_name, {V, D});
  }
  if (cfg_.has_rope()) {
    // The first positions' RoPE rows are computed once; rows past them are computed per call, so
    // a config's context length alone costs no memory at load.
    // (A dynamic RoPE's or longrope's rows change past the original length: the table stops there.)
    const bool per_call = cfg_.rope_dynamic_factor > 0.0f || !cfg_.rope_long_inv_freq.empty();
    rope_positions_ = std::min(per_call ? std::min(cfg_.rope_original_max, cfg_.max_position) : cfg_.max_position,
                               kRopeTablePositions);
    const size_t half = cfg_.rope_dim() / 2;
    rope_cos_.resize(rope_positions_ * half);
    rope_sin_.resize(rope_cos_.size());
    rope_rows(0, rope_positions_, rope_cos_.data(), rope_sin_.data());
    if (!cfg_.rope_local_inv_freq.empty()) {  // sliding layers' own frequencies (Gemma 3)
      rope_local_cos_.resize(rope_cos_.size());
      rope_local_sin_.resize(rope_cos_.size());
      rope_rows(0, rope_positions_, rope_local_cos_.data(), rope_local_sin_.data(), 0, true);
    }
  }
  lm_head_.in = cfg_.dim;
  lm_head_.out = cfg_.vocab_size;
  if (copy_f32) {
    // fp32 weights read on every decode step are copied once from the file mapping into one block
    // of huge pages (see HugePageAllocator), each layer at a 64-byte boundary, and their mapped
    // pages leave the resident set: through the mapping's 4 KiB pages the same decode runs slower
    // (benchmarks/results/kernel_tuning.md).
    // GPT-2's Conv1D weights are transposed to (out, in) on the way.
    if (W.in_place(head_name)) to_copy[lm_head_.w] = head_name;
    std::vector<Linear*> all;
    for (Linear* x : layer_linears())
      if (to_copy.count(x->w)) all.push_back(x);
    if (to_copy.count(lm_head_.w)) all.insert(all.begin(), &lm_head_);
    std::vector<size_t> bytes;
    for (const Linear* x : all) bytes.push_back(static_cast<size_t>(x->in) * x->out * sizeof(float));
    const std::vector<size_t> at = aligned_offsets(bytes);
    f32_arena_.resize(at.back());
    for (size_t i = 0; i < all.size(); ++i) {
      Linear& x = *all[i];
      float* dst = reinterpret_cast<float*>(f32_arena_.data() + at[i]);
      const std::vector<int64_t> shape = x.in_major ? std::vector<int64_t>{x.in, x.out} : std::vector<int64_t>{x.out, x.in};
      W.copy_f32(to_copy[x.w], shape, x.in_major, dst);
      if (x.w == tok_embed_) tok_embed_ = dst;  // a tied head is also the embedding table
      x.w = dst;
      x.in_major = false;
    }
  }
  // Prefill's matrix products, set up now rather than inside the first request: one trial run per
  // weight shape (oneDNN's primitives are kept per shape), on the first layer of that shape. Every
  // matmul reads (out, in) weights; a GPT-2 source still (in, out) before quantization serves as
  // K x N floats for the trial run, whose output is discarded. Only fp32 and bf16 layers (widened
  // per call) run the fp32 matmul, and only those with fp32 sources take a trial run here.
  if (weight_type_ == WeightType::F32 || weight_type_ == WeightType::BF16) {
    std::vector<Linear*> with_f32;
    for (Linear* x : layer_linears())
      if (x->w) with_f32.push_back(x);
    for (const Linear* x : one_per_shape(with_f32)) matmul_onednn_prepare(x->w, x->in, x->out, x->b);
    if (lm_head_.w) matmul_onednn_prepare(lm_head_.w, lm_head_.in, lm_head_.out);
  }
  if (weight_type_ != WeightType::F32) {
    std::vector<Linear*> all = layer_linears();
    all.insert(all.begin(), &lm_head_);
    // Every layer's converted weights in one block of huge pages (see HugePageAllocator), each at a
    // 64-byte boundary: a decode step streams them all, and most layers are smaller than one page.
    // With 4-bit layers, layers a file stores in 5 to 8 bits (the Q5_0, Q6_K and Q8_0 layers of a
    // Q4_K_M file) keep their width: 4 bits would throw away what the file kept. Those come as the
    // file's blocks and keep its codes and steps as they are: Q5_0, Q5_1, Q5_K and Q6_K in 5 and 6
    // bits (I5Blocks, about the file's own size), Q8_0 in 8 (I8Blocks). The output head keeps 8
    // bits (its logits are what every token is chosen from) unless the file itself stores it in
    // 4 bits: then it keeps the file's own 4-bit values, as every other 4-bit layer does.
    auto type_of = [&](const Linear* x) {
      if (weight_type_ != WeightType::I4) return weight_type_;
      const auto b = blocks_of.find(x);
      const bool blocks = b != blocks_of.end();
      if (blocks) {
        const BlockFormat& f = *b->second.format;
        if (narrow_planes(f)) return WeightType::I5Blocks;
        return f.bits > 4 ? WeightType::I8Blocks : WeightType::I4;
      }
      return x == &lm_head_ ? WeightType::I8 : WeightType::I4;
    };
    std::vector<size_t> bytes;
    for (Linear* x : all) {
      const WeightType type = type_of(x);
      if (type == WeightType::I5Blocks) x->i5_planes = narrow_planes(*blocks_of.at(x).format);
      bytes.push_back(quantized_size(*x, type));
    }
    const std::vector<size_t> at = aligned_offsets(bytes);
    arena_.resize(at.back());
    quantized_.resize(all.size());
    // The fp32 mapping of each quantized layer is not read again: it leaves the resident set as
    // soon as the layer is converted, so that load's peak holds one layer's source at a time (and
    // those the trial runs above read) rather than the whole file next to its conversion. A tied head
    // is also the embedding table, whose rows are then read one per token.
    // A large layer (an output head of 150k-260k rows) also lets its source go a run of rows at a
    // time while it is converted, so that its whole source and its conversion are never resident together.
    source_of.emplace(lm_head_.w, head_name);
    for (size_t i = 0; i < all.size(); ++i) {
      Linear& x = *all[i];
      const WeightType type = type_of(&x);
      const auto b = blocks_of.find(&x);
      const auto it = source_of.find(b == blocks_of.end() ? x.w : nullptr);
      const std::string* name = b != blocks_of.end() ? &b->second.name : it != source_of.end() ? &it->second : nullptr;
      const int64_t out_rows = x.out;
      const RowsDone done = [&W, name, out_rows](int o0, int n) { W.release_rows(*name, o0, n, out_rows); };
      const RowsDone* progress = name ? &done : nullptr;
      if (b == blocks_of.end()) {
        quantize_linear(x, type, quantized_[i], arena_.data() + at[i], nullptr, progress);
        if (name) W.release(*name);
        continue;
      }
      // A file's blocks: under int4 repacked as they are (4-bit layers as I4, wider ones and the
      // head as I8Blocks); under other dtypes decoded a panel of rows at a time into the conversion.
      const Blocks& e = b->second;
      if (type == WeightType::I4 && e.format->bits == 4) {
        pack_i4_blocks(x, *e.format, e.data, quantized_[i], arena_.data() + at[i], progress);
      } else if (type == WeightType::I8Blocks) {
        pack_i8_blocks(x, *e.format, e.data, quantized_[i], arena_.data() + at[i], progress);
      } else if (type == WeightType::I5Blocks) {
        pack_i5_blocks(x, *e.format, e.data, quantized_[i], arena_.data() + at[i], progress);
      } else {
        const size_t row_bytes = static_cast<size_t>(x.in) / e.format->elems * e.format->bytes;
        const int in = x.in;
        const RowSource rows = [&e, row_bytes, in](int o0, int n, float* dst) {
          dequantize_blocks(*e.format, e.data + o0 * row_bytes, static_cast<size_t>(n) * in, dst);
        };
        quantize_linear(x, type, quantized_[i], arena_.data() + at[i], &rows, progress);
      }
      W.release(e.name);
    }
    for (Linear* x : all) x->bf16_activations = this->bf16_matmul();
    if (weight_type_ == WeightType::BF16 || this->bf16_matmul()) {
      // bf16 and int8 prompts unpack (or widen) each layer's weights into a scratch of the calling
      // thread that grows to the largest layer, and bf16 matmuls are set up per weight shape: one
      // trial run on each shape maps the scratch and sets them up now. The layers come from `all`
      // past the head at its front (used only for all-position logits): layer_linears() lists
      // only layers with fp32 weights, which quantization has let go of.
      for (const Linear* l : one_per_shape({all.begin() + 1, all.end()})) {
        const int rows = gemm_min_rows(weight_type_);
        std::vector<float> x(static_cast<size_t>(rows) * l->in, 0.0f);
        std::vector<float> y(static_cast<size_t>(rows) * l->out);
        linear(x.data(), rows, *l, y.data());
      }
    }
  }
  // GPT-2's fused q, k, v layer as three views of its rows, computed straight into q, k and v
  // (as Llama's three layers are, in one pass): no copy of each row's three parts afterwards.
  if (cfg_.is_gpt2())
    for (Layer& l : layers_) {
      const int D = cfg_.dim;
      l.qkv_split = linear_row_view(l.qkv, 0, D, &l.qkv_rows[0]) && linear_row_view(l.qkv, D, D, &l.qkv_rows[1]) &&
                    linear_row_view(l.qkv, 2 * D, D, &l.qkv_rows[2]);
    }
  // The first scratch, sized for kReservedRows rows and written through (resize zero-fills), so
  // its pages are mapped now rather than inside the first request.
  auto ws = std::make_unique<Workspace>();
  const int rows = std::min(kReservedRows, cfg_.max_position);
  ws->reserve(cfg_, rows);
  spare_ws_.push_back(std::move(ws));
}

// RoPE rows for positions p0 .. p0+T-1, (T, head_dim/2), as Hugging Face computes them: inv_freq
// and the angles in fp32, cos and sin in double.
// A scaled RoPE (rope_inv_freq, from Python's rope.py) gives its own frequencies, and YaRN a factor
// on cos and sin, applied in fp32 as transformers applies it.
// Dynamic NTK past rope_original_max: the base stretched for seq_len, in fp32 as transformers computes it.
void Transformer::rope_rows(int p0, int T, float* cos_out, float* sin_out, int seq_len, bool local) const {
  const int dim = cfg_.rope_dim(), half = dim / 2;
  const float factor = cfg_.rope_attention_factor, dyn = cfg_.rope_dynamic_factor;
  const bool stretched = !local && dyn > 0.0f && seq_len > cfg_.rope_original_max;
  const bool long_freq = !local && !cfg_.rope_long_inv_freq.empty() && seq_len > cfg_.rope_original_max;
  float base = 0.0f;
  if (stretched) {
    const float s = dyn * static_cast<float>(seq_len) / static_cast<float>(cfg_.rope_original_max) - (dyn - 1.0f);
    base = static_cast<float>(cfg_.rope_theta) * std::pow(s, static_cast<float>(dim) / static_cast<float>(dim - 2));
  }
  for (int i = 0; i < half; ++i) {
    const float inv_freq =
        local                         ? cfg_.rope_local_inv_freq[i]
        : stretched                   ? 1.0f / std::pow(base, static_cast<float>(2 * i) / static_cast<float>(dim))
        : long_freq                   ? cfg_.rope_long_inv_freq[i]
        : cfg_.rope_inv_freq.empty() ? static_cast<float>(1.0 / std::pow(cfg_.rope_theta, (2.0 * i) / dim))
                                      : cfg_.rope_inv_freq[i];
    for (int t = 0; t < T; ++t) {
      const float angle = static_cast<float>(p0 + t) * inv_freq;
      const float c = static_cast<float>(std::cos(static_cast<double>(angle)));
      const float s = static_cast<float>(std::sin(static_cast<double>(angle)));
      cos_out[static_cast<size_t>(t) * half + i] = factor == 1.0f || local ? c : c * factor;
      sin_out[static_cast<size_t>(t) * half + i] = factor == 1.0f || local ? s : s * factor;
    }
  }
}

uint64_t Transformer::owned_bytes() const { return weights_->owned_bytes() + f32_arena_.size(); }

uint64_t Transformer::quantized_bytes() const {
  uint64_t n = 0;
  for (const auto& q : quantized_)
    n += q.bytes + q.scales.size() * 4 + q.wsums.size() * 4 + q.halves.size() * 2 + q.codes.size();
  return n;
}

void Transformer::set_n_threads(int n) {
  if (n < 1 || n > 1024) throw std::invalid_argument("threads must be in [1, 1024], got " + std::to_string(n));
  if (active_.load() > 0)
    throw std::invalid_argument("threads cannot change while this model is running a call on another thread; "
                                "set it between calls");
  n_threads_.store(n);
}

namespace {
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

int Transformer::threads_now() const {
  const int n = n_threads_.load();
  if (!auto_threads_.load() || n == 1) return n;
  const int64_t now = now_ns();
  int cur = auto_n_.load();
  if (cur < 1 || cur > n || now >= next_thread_check_ns_.load()) {
    const int others = other_runnable_tasks();
    // The check reads a /proc file per thread of this process: in a process with many threads it
    // waits longer between checks, so that checking stays under 0.5 % of the time.
    const int64_t cost = now_ns() - now;
    next_thread_check_ns_.store(now + std::max(kThreadCheckNs, 200 * cost));
    const int want = others < 0 ? n : std::max(1, n - others);
    if (cur < 1 || cur > n) cur = n;  // start with every thread
    if (want < cur) {
      // Fewer threads only when two checks in a row see the other tasks, so that a task passing
      // through does not slow the next interval.
      if (drop_pending_.exchange(true)) cur = want;
    } else {
      drop_pending_.store(false);
      cur = want;
    }
    auto_n_.store(cur);
  }
  return cur;
}

Transformer::Activity::Activity(const Transformer& m) : m_(m) { m_.active_.fetch_add(1); }
Transformer::Activity::~Activity() { m_.active_.fetch_sub(1); }

void Transformer::norm(const float* x, const float* w, const float* b, int T, float* y) const {
  if (cfg_.is_llama())  // GPT-2 and GPT-NeoX: LayerNorm with a bias
    rmsnorm(x, w, T, cfg_.dim, cfg_.norm_eps, y);
  else
    layernorm(x, w, b, T, cfg_.dim, cfg_.norm_eps, y);
}

void Transformer::check_tokens(const int32_t* tokens, int T, const KVCache& cache) const {
  if (cache.pool().owner() != this)
    throw std::invalid_argument("this cache belongs to another model; make one with this model's new_cache()");
  if (T < 1) throw std::invalid_argument("need at least one token, got none");
  for (int t = 0; t < T; ++t)
    if (tokens[t] < 0 || tokens[t] >= cfg_.vocab_size)
      throw std::invalid_argument("token id " + std::to_string(tokens[t]) + " at index " + std::to_string(t) +
                                  " is outside the vocabulary [0, " + std::to_string(cfg_.vocab_size) + ")");
}

std::shared_ptr<KVCache> Transformer::new_cache(int capacity, KVDType dtype, bool grow) const {
  std::shared_ptr<BlockPool> p;
  {
    std::lock_guard<std::mutex> lock(pools_mu_);
    auto& slot = pools_[static_cast<int>(dtype)];
    if (!slot) slot = std::make_shared<BlockPool>(cfg_, this, dtype, block_size_);
    p = slot;
  }
  return std::make_shared<KVCache>(p, capacity, cfg_.max_position, grow);
}

std::shared_ptr<BlockPool> Transformer::pool(KVDType dtype) const {
  std::lock_guard<std::mutex> lock(pools_mu_);
  return pools_[static_cast<int>(dtype)];
}

class Transformer::WorkspaceLease {
 public:
  explicit WorkspaceLease(const Transformer& m) : m_(m) {
    std::lock_guard<std::mutex> lock(m_.ws_mu_);
    if (m_.spare_ws_.empty()) {
      ws_ = std::make_unique<Workspace>();
    } else {
      ws_ = std::move(m_.spare_ws_.back());
      m_.spare_ws_.pop_back();
    }
  }
  ~WorkspaceLease() {
    std::lock_guard<std::mutex> lock(m_.ws_mu_);
    m_.spare_ws_.push_back(std::move(ws_));
  }
  WorkspaceLease(const WorkspaceLease&) = delete;
  WorkspaceLease& operator=(const WorkspaceLease&) = delete;
  Workspace& get() { return *ws_; }

 private:
  const Transformer& m_;
  std::unique_ptr<Workspace> ws_;
};

void Transformer::forward(const int32_t* tokens, int T, KVCache& cache, float* logits, bool all_logits) const {
  check_tokens(tokens, T, cache);
  cache.prepare_append(T);
  KVCache* c = &cache;
  WorkspaceLease ws(*this);
  run(tokens, T, &c, &T, 1, logits, all_logits, ws.get());
}

void Transformer::forward_hidden(const int32_t* tokens, int T, KVCache& cache, float* logits, float* hidden,
                                 float* attentions) const {
  check_tokens(tokens, T, cache);
  if (attentions && cache.length() != 0)
    throw std::invalid_argument("attention probabilities need an empty cache (positions from 0), got one holding " +
                                std::to_string(cache.length()) + " positions");
  cache.prepare_append(T);
  KVCache* c = &cache;
  WorkspaceLease ws(*this);
  run(tokens, T, &c, &T, 1, logits, true, ws.get(), hidden, attentions);
}

void Transformer::head(const float* hidden, int R, float* logits) const {
  if (R < 1) throw std::invalid_argument("head needs at least one row, got " + std::to_string(R));
  omp_set_num_threads(threads_now());
  std::vector<float> h(static_cast<size_t>(R) * cfg_.dim);
  norm(hidden, final_w_, final_b_, R, h.data());
  linear(h.data(), R, lm_head_, logits);
}

void Transformer::decode_batch(const int32_t* tokens, int B, KVCache* const* caches, float* logits,
                               bool fixed_rows) const {
  if (B < 1) throw std::invalid_argument("decode_batch needs at least one sequence");
  for (int b = 0; b < B; ++b) {
    check_tokens(tokens + b, 1, *caches[b]);
    for (int a = 0; a < b; ++a)
      if (caches[a] == caches[b]) throw std::invalid_argument("decode_batch: a cache appears twice");
  }
  for (int b = 0; b < B; ++b) caches[b]->prepare_append(1);
  std::vector<int> rows(B, 1);
  WorkspaceLease ws(*this);
  if (!fixed_rows) {
    run(tokens, B, caches, rows.data(), B, logits, false, ws.get());
    return;
  }
  FixedRowArithmetic fixed;
  const size_t V = static_cast<size_t>(cfg_.vocab_size);
  for (int b0 = 0; b0 < B; b0 += kFixedRowsMax) {
    const int n = std::min(kFixedRowsMax, B - b0);
    run(tokens + b0, n, caches + b0, rows.data(), n, logits + b0 * V, false, ws.get());
  }
}

// Rows are grouped in segments: segment s has rows[s] consecutive tokens of one sequence,
// continuing caches[s]. Linear layers run on all rows at once (the weights are read once for the
// batch); RoPE, the cache writes and attention run per segment at its own positions.
void Transformer::run(const int32_t* tokens, int R, KVCache* const* caches, const int* rows, int n_seg,
                      float* logits, bool all_logits, Workspace& ws, float* hidden, float* attentions) const {
  // One thread count for the whole pass: the scratch below is sized for it.
  const int n_threads = threads_now();
  omp_set_num_threads(n_threads);
  OpClock clk(R == n_seg ? Phase::Decode : Phase::Prompt);
  const int D = cfg_.dim, NH = cfg_.n_heads, KVH = cfg_.n_kv_heads, HD = cfg_.head_dim;
  const int QD = NH * HD, KVD = KVH * HD;
  std::vector<int> first(n_seg), p0(n_seg);
  for (int s = 0, r = 0; s < n_seg; r += rows[s], ++s) {
    first[s] = r;
    p0[s] = caches[s]->length();
  }
  ws.reserve(cfg_, R);
  float* x = ws.x.data();
  float* h = ws.h.data();

  // Each segment's RoPE rows, for every layer: the table's, or, past it, computed once here into
  // the scratch (row first[s] + t holds position p0[s] + t).
  std::vector<const float*> rope_cos(n_seg), rope_sin(n_seg), local_cos(n_seg), local_sin(n_seg);
  const bool local_rope = !cfg_.rope_local_inv_freq.empty();
  if (cfg_.has_rope()) {
    const size_t half = cfg_.rope_dim() / 2;
    for (int s = 0; s < n_seg; ++s) {
      if (p0[s] + rows[s] <= rope_positions_) {
        rope_cos[s] = rope_cos_.data() + static_cast<size_t>(p0[s]) * half;
        rope_sin[s] = rope_sin_.data() + static_cast<size_t>(p0[s]) * half;
        if (local_rope) {
          local_cos[s] = rope_local_cos_.data() + static_cast<size_t>(p0[s]) * half;
          local_sin[s] = rope_local_sin_.data() + static_cast<size_t>(p0[s]) * half;
        }
        continue;
      }
      // Past the table: computed here into the scratch (the local rows after the global ones).
      const size_t need = static_cast<size_t>(R) * half * (local_rope ? 2 : 1);
      if (ws.rope_cos.size() < need) {
        ws.rope_cos.resize(need);
        ws.rope_sin.resize(need);
      }
      float* c = ws.rope_cos.data() + static_cast<size_t>(first[s]) * half;
      float* sn = ws.rope_sin.data() + static_cast<size_t>(first[s]) * half;
      rope_rows(p0[s], rows[s], c, sn, p0[s] + rows[s]);
      rope_cos[s] = c, rope_sin[s] = sn;
      if (local_rope) {
        float* lc = c + static_cast<size_t>(R) * half;
        float* ls = sn + static_cast<size_t>(R) * half;
        rope_rows(p0[s], rows[s], lc, ls, 0, true);
        local_cos[s] = lc, local_sin[s] = ls;
      }
    }
  }

  // A row of the file's blocks is read into h, which the first norm fills only after this loop
  // (a block format holds at most 4 bytes a value, so a row fits in D floats).
  uint8_t* raw = reinterpret_cast<uint8_t*>(h);
  for (int s = 0; s < n_seg; ++s)
    for (int t = 0; t < rows[s]; ++t) {
      const int r = first[s] + t;
      float* row = x + static_cast<size_t>(r) * D;
      if (tok_embed_) {
        std::memcpy(row, tok_embed_ + static_cast<size_t>(tokens[r]) * D, D * sizeof(float));
      } else {  // a table kept in a file's blocks: one row read and decoded
        embed_blocks_.file->read(embed_blocks_.offset + static_cast<uint64_t>(tokens[r]) * embed_blocks_.row_bytes,
                                 embed_blocks_.row_bytes, raw);
        dequantize_blocks(*embed_blocks_.format, raw, D, row);
      }
      if (cfg_.embed_scale > 0.0f)  // Gemma: embeddings times sqrt(hidden size), in fp32
        for (int i = 0; i < D; ++i) row[i] *= cfg_.embed_scale;
      if (pos_embed_) add_inplace(row, pos_embed_ + static_cast<size_t>(p0[s] + t) * D, D);
    }
  clk.mark(Op::Embed);

  const size_t stream = static_cast<size_t>(R) * D;  // one copy of the residual stream
  if (hidden) std::memcpy(hidden, x, stream * sizeof(float));
  for (int li = 0; li < cfg_.n_layers; ++li) {
    const Layer& l = layers_[li];
    norm(x, l.norm1_w, l.norm1_b, R, h);
    clk.mark(Op::Norm);
    float* q = ws.q.data();
    float* k = ws.k.data();
    float* v = ws.v.data();
    if (cfg_.is_llama() || l.qkv_split) {
      const Linear* qkv_layers[3] = {&l.q, &l.k, &l.v};
      if (l.qkv_split) qkv_layers[0] = &l.qkv_rows[0], qkv_layers[1] = &l.qkv_rows[1], qkv_layers[2] = &l.qkv_rows[2];
      float* qkv_out[3] = {q, k, v};
      linear_many(h, R, qkv_layers, qkv_out, 3);
    } else {
      float* qkv = ws.qkv.data();
      linear(h, R, l.qkv, qkv);
      const bool per_head = cfg_.is_neox() && cfg_.qkv_per_head;  // [q_h | k_h | v_h] per head, else [q | k | v]
      for_each_index(R, R >= 32, [&](int64_t r) {
        const float* row = qkv + static_cast<size_t>(r) * (QD + 2 * KVD);
        if (per_head) {
          for (int hh = 0; hh < NH; ++hh) {
            const float* src = row + static_cast<size_t>(hh) * 3 * HD;
            std::memcpy(q + static_cast<size_t>(r) * QD + hh * HD, src, HD * sizeof(float));
            std::memcpy(k + static_cast<size_t>(r) * KVD + hh * HD, src + HD, HD * sizeof(float));
            std::memcpy(v + static_cast<size_t>(r) * KVD + hh * HD, src + 2 * HD, HD * sizeof(float));
          }
          return;
        }
        std::memcpy(q + static_cast<size_t>(r) * QD, row, QD * sizeof(float));
        std::memcpy(k + static_cast<size_t>(r) * KVD, row + QD, KVD * sizeof(float));
        std::memcpy(v + static_cast<size_t>(r) * KVD, row + QD + KVD, KVD * sizeof(float));
      });
    }
    clk.mark(Op::QkvProj);
    // A batch of single-token segments (batched decode, beams) spreads its sequences over the
    // threads, each attending on its own; one longer segment spreads its heads instead (no
    // enclosing parallel region then: a nested one would run on one thread).
    const bool per_seq = n_seg > 1 && R == n_seg;
    const int window = cfg_.sliding_window.empty() ? 0 : cfg_.sliding_window[li];
    const AttentionOptions att_opt{window, cfg_.attn_scale, cfg_.attn_softcap};
    // timed: marks RoPE, the stores and attention apart (not inside a parallel loop over segments).
    auto attend = [&](int s, int threads, bool timed) {
      float* qs = q + static_cast<size_t>(first[s]) * QD;
      float* ks = k + static_cast<size_t>(first[s]) * KVD;
      float* vs = v + static_cast<size_t>(first[s]) * KVD;
      if (cfg_.has_rope()) {
        if (cfg_.qk_norm) {  // per head, in place
          rmsnorm(qs, l.q_norm_w, rows[s] * NH, HD, cfg_.norm_eps, qs);
          rmsnorm(ks, l.k_norm_w, rows[s] * KVH, HD, cfg_.norm_eps, ks);
        }
        const bool local = local_rope && window > 0;  // a sliding layer's own RoPE
        const float* rc = local ? local_cos[s] : rope_cos[s];
        const float* rs = local ? local_sin[s] : rope_sin[s];
        rope(qs, rows[s], NH, HD, 0, rc, rs, cfg_.rope_interleaved, cfg_.rope_dim());
        rope(ks, rows[s], KVH, HD, 0, rc, rs, cfg_.rope_interleaved, cfg_.rope_dim());
      }
      if (timed) clk.mark(Op::Rope);
      BlockPool& pool = caches[s]->pool();
      const int* table = caches[s]->block_table().data();
      store_kv(ks, vs, pool, table, li, rows[s], p0[s]);
      if (timed) clk.mark(Op::KvStore);
      if (attentions)  // one segment from position 0 (forward_hidden checks): its own keys are all
        attention_probabilities(qs, ks, rows[s], NH, KVH, HD, att_opt,
                                attentions + static_cast<size_t>(li) * NH * rows[s] * rows[s]);
      attention_paged(qs, pool, table, li, rows[s], p0[s], NH, ws.att.data() + static_cast<size_t>(first[s]) * QD,
                      threads, att_opt);
      if (timed) clk.mark(Op::Attention);
    };
    if (per_seq) {
#pragma omp parallel for schedule(dynamic) num_threads(n_threads)
      for (int s = 0; s < n_seg; ++s)
        attend(s, 1, false);
      clk.mark(Op::Attention);
    } else {
      for (int s = 0; s < n_seg; ++s) attend(s, n_threads, true);
    }
    linear(ws.att.data(), R, l.o, h);
    clk.mark(Op::OutProj);
    if (cfg_.sandwich_norms) {  // Gemma, in place
      norm(h, l.post_attn_norm_w, nullptr, R, h);
      clk.mark(Op::Norm);
    }
    // A parallel residual (GPT-NeoX) normalises the layer's input for the MLP too, and adds
    // mlp + attention to it at the end, in transformers' order; otherwise attention goes in first.
    const bool parallel = cfg_.is_neox() && cfg_.parallel_residual;
    float* mlp_in = parallel ? ws.att.data() : h;  // att is free once projected; neox: QD == D
    if (!parallel) {
      add_inplace(x, h, static_cast<size_t>(R) * D);
      clk.mark(Op::Residual);
    }

    norm(x, l.norm2_w, l.norm2_b, R, mlp_in);
    clk.mark(Op::Norm);
    const size_t nh = static_cast<size_t>(R) * cfg_.hidden_dim;
    if (cfg_.is_llama()) {
      const Linear* ff_layers[2] = {&l.gate, &l.up};
      float* ff_out[2] = {ws.ff_a.data(), ws.ff_b.data()};
      linear_many(mlp_in, R, ff_layers, ff_out, 2);
      clk.mark(Op::MlpIn);
      if (cfg_.gelu_gate) gelu_tanh_mul(ws.ff_a.data(), ws.ff_b.data(), ws.ff_a.data(), nh);
      else silu_mul(ws.ff_a.data(), ws.ff_b.data(), ws.ff_a.data(), nh);
    } else {
      linear(mlp_in, R, l.fc, ws.ff_a.data());
      clk.mark(Op::MlpIn);
      if (cfg_.is_neox()) gelu_erf_inplace(ws.ff_a.data(), nh);
      else gelu_tanh_inplace(ws.ff_a.data(), nh);
    }
    clk.mark(Op::Activation);
    if (parallel) {
      linear(ws.ff_a.data(), R, l.down, mlp_in);
      clk.mark(Op::MlpOut);
      add_inplace(mlp_in, h, static_cast<size_t>(R) * D);  // mlp + attention
      add_inplace(x, mlp_in, static_cast<size_t>(R) * D);
    } else {
      linear(ws.ff_a.data(), R, l.down, h);
      clk.mark(Op::MlpOut);
      if (cfg_.sandwich_norms) {
        norm(h, l.post_ff_norm_w, nullptr, R, h);
        clk.mark(Op::Norm);
      }
      add_inplace(x, h, static_cast<size_t>(R) * D);
    }
    if (hidden) std::memcpy(hidden + (li + 1) * stream, x, stream * sizeof(float));
    clk.mark(Op::Residual);
  }

  for (int s = 0; s < n_seg; ++s) caches[s]->commit_append(tokens + first[s], rows[s]);
  clk.mark(Op::KvStore);
  if (all_logits) {
    norm(x, final_w_, final_b_, R, h);
    linear(h, R, lm_head_, logits);
  } else {
    // The last row of each segment, gathered, then one head matmul over them.
    for (int s = 0; s < n_seg; ++s) {
      const int last = first[s] + rows[s] - 1;
      norm(x + static_cast<size_t>(last) * D, final_w_, final_b_, 1, h + static_cast<size_t>(s) * D);
    }
    linear(h, n_seg, lm_head_, logits);
  }
  if (cfg_.final_softcap > 0.0f)  // Gemma 2: cap tanh(logits / cap)
    softcap_inplace(logits, static_cast<size_t>(all_logits ? R : n_seg) * cfg_.vocab_size, cfg_.final_softcap);
  clk.mark(Op::Head);
  if (clk.on()) record_pass(clk, R, caches, rows, n_seg, all_logits);
}

}  // namespace decodelab
