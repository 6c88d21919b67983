// The thread's op-profile collector (decodelab/op_profile.h).
#include "decodelab/op_profile.h"

namespace decodelab {

namespace {
thread_local OpProfile* tls_profile = nullptr;
}

const char* op_name(Op op) {
  switch (op) {
    case Op::Embed: return "embed";
    case Op::Norm: return "norm";
    case Op::QkvProj: return "qkv_proj";
    case Op::Rope: return "rope";
    case Op::KvStore: return "kv_store";
    case Op::Attention: return "attention";
    case Op::OutProj: return "out_proj";
    case Op::MlpIn: return "mlp_in";
    case Op::Activation: return "activation";
    case Op::MlpOut: return "mlp_out";
    case Op::Residual: return "residual";
    case Op::Head: return "head";
    case Op::Sampling: return "sampling";
    default: return "?";
  }
}

OpProfile* current_op_profile() { return tls_profile; }

OpProfile* exchange_op_profile(OpProfile* p) {
  OpProfile* prev = tls_profile;
  tls_profile = p;
  return prev;
}

}  // namespace decodelab
