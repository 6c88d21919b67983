"""Command line: ``decodelab generate --model PATH "prompt"`` and checkpoint tools."""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional


def _generate(args) -> int:
    from .model import load

    model = load(args.model, threads=args.threads, tokenizer=args.tokenizer, dtype=args.dtype)
    opts = {k: getattr(args, k) for k in ("top_k", "top_p", "min_p", "repetition_penalty") if getattr(args, k) is not None}
    g = model.generate(args.prompt, max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=args.seed,
                       order=args.order, cache=model.new_cache(dtype=args.cache_dtype), **opts)
    print(args.prompt + g.text)
    print(f"[{g.prompt_tokens} prompt tokens, {g.generated_tokens} generated, finish_reason={g.finish_reason}; "
          f"weights {args.dtype}, cache {args.cache_dtype}; "
          f"prefill {g.prefill_tokens_per_second:.1f} tok/s, decode {g.decode_tokens_per_second:.1f} tok/s]",
          file=sys.stderr)
    return 0


def _convert(args) -> int:
    from .testing import convert_llama2c

    out = convert_llama2c(args.checkpoint, args.out, tokenizer=args.tokenizer)
    print(out)
    return 0


def _make(args) -> int:
    from .testing import write_checkpoint

    out = write_checkpoint(args.out, args.shape, seed=args.seed, dtype=args.dtype, shards=args.shards)
    print(out)
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="decodelab", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    g = sub.add_parser("generate", help="generate a continuation of a prompt")
    g.add_argument("--model", required=True, help="Hugging Face folder or llama2.c .bin")
    g.add_argument("--tokenizer", default=None, help="tokenizer path (default: found beside the model)")
    g.add_argument("--max-new-tokens", type=int, default=128)
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    g.add_argument("--top-k", dest="top_k", type=int, default=None)
    g.add_argument("--top-p", dest="top_p", type=float, default=None)
    g.add_argument("--min-p", dest="min_p", type=float, default=None)
    g.add_argument("--repetition-penalty", dest="repetition_penalty", type=float, default=None)
    g.add_argument("--seed", type=int, default=None)
    g.add_argument("--order", default=None, choices=["hf", "vllm", "llama.cpp"])
    g.add_argument("--threads", type=int, default=None)
    g.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "int8", "w8a8"],
                   help="weights as load(dtype=...) keeps them (default float32)")
    g.add_argument("--cache-dtype", dest="cache_dtype", default="float32", choices=["float32", "bfloat16", "int8"],
                   help="KV cache, as new_cache(dtype=...) (default float32)")
    g.add_argument("prompt")
    g.set_defaults(func=_generate)

    c = sub.add_parser("convert-llama2c", help="convert a llama2.c checkpoint to a Hugging Face folder")
    c.add_argument("checkpoint")
    c.add_argument("out")
    c.add_argument("--tokenizer", default=None, help="llama2.c tokenizer.bin to copy beside the weights")
    c.set_defaults(func=_convert)

    m = sub.add_parser("make-checkpoint", help="write a deterministic random-initialised checkpoint")
    m.add_argument("shape", help="a shape name from decodelab.testing.SHAPES")
    m.add_argument("out")
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    m.add_argument("--shards", type=int, default=1)
    m.set_defaults(func=_make)

    args = p.parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError, NotImplementedError) as e:
        print(f"decodelab: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
