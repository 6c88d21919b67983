"""Command line: ``decodelab generate MODEL "prompt"`` (streamed) and checkpoint tools."""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from typing import List, Optional

from ._native import _core

__all__ = ["main", "CliError"]


class CliError(Exception):
    """An error the CLI reports in one line, as ``decodelab: error: ...`` with exit status 2.

    Raised inside the subcommands for a mistake on the command line (a prompt that is a path, a
    model without a tokenizer or chat template, an output folder that is not empty, ...);
    ``main`` catches it, with ValueError, FileNotFoundError and NotImplementedError, prints the
    message to stderr and returns 2.

    Examples:
        >>> import decodelab.cli
        >>> decodelab.cli.main(["make-checkpoint", "llama-tiny", "out"])  # prints the folder written
        out
        0
        >>> decodelab.cli.main(["make-checkpoint", "llama-tiny", "out"])  # a CliError: out is not empty
        2
        >>> issubclass(decodelab.cli.CliError, Exception)
        True
    """


def _generate(args) -> int:
    from .loading import load

    if not (args.model or args.model_pos) and os.path.exists(args.prompt):
        raise CliError(f"give a model and a prompt: decodelab generate MODEL \"prompt\" ({args.prompt!r} is a path, "
                       "not a prompt; with no model, the built-in stories260K runs)")
    model_path = args.model or args.model_pos or "stories260K"  # the model inside the package
    model = load(model_path, threads=args.threads, tokenizer=args.tokenizer, dtype=args.dtype)
    if model.tokenizer is None:
        raise CliError(f"no tokenizer found beside {model_path}; pass --tokenizer PATH (a tokenizer.json, a folder "
                       "with tokenizer files, or a llama2.c tokenizer .bin)")
    opts = {k: getattr(args, k) for k in ("top_k", "top_p", "min_p", "repetition_penalty") if getattr(args, k) is not None}
    seed = args.seed
    if seed is None and args.temperature > 0:
        seed = int.from_bytes(os.urandom(4), "little")  # printed below, so the sample can be repeated
    pieces = model.stream(args.prompt, max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=seed,
                          order=args.order, cache=model.new_cache(dtype=args.cache_dtype), **opts)
    out = sys.stdout
    out.write(args.prompt)
    out.flush()
    n_pieces = 0
    try:
        while True:
            try:
                piece = next(pieces)
            except StopIteration as done:
                g = done.value
                break
            out.write(piece)
            out.flush()
            n_pieces += 1
    except KeyboardInterrupt:
        out.write("\n")
        out.flush()
        print("[stopped by Ctrl-C; the text above is what was generated]", file=sys.stderr)
        return 130
    out.write("\n")
    sampling = f"seed {seed}" if args.temperature > 0 else "greedy"
    print(f"[{g.prompt_tokens} prompt tokens, {g.generated_tokens} generated, finish_reason={g.finish_reason}; "
          f"{sampling}; weights {model.dtype}, cache {args.cache_dtype}; "
          f"prefill {g.prefill_tokens_per_second:.1f} tok/s, decode {g.decode_tokens_per_second:.1f} tok/s]",
          file=sys.stderr)
    return 0


def _read_template(path: Optional[str]) -> Optional[str]:
    """The Jinja text of --chat-template FILE, or None when none is given."""
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read((1 << 20) + 1)
    except (OSError, UnicodeDecodeError) as e:
        raise CliError(f"cannot read the chat template {path}: {e}") from None
    if len(text) > 1 << 20:
        raise CliError(f"the chat template {path} is over 1 MiB; a template is a page of Jinja")
    return text


def _load_for_chat(args, model_path: str, template: Optional[str]):
    """The model, with --chat-template's text as its tokenizer's template when given."""
    from .loading import load

    model = load(model_path, threads=args.threads, tokenizer=args.tokenizer, dtype=args.dtype)
    if template is not None:
        if model.tokenizer is None:
            raise CliError(f"no tokenizer found beside {model_path} to use --chat-template with; pass --tokenizer PATH")
        model.tokenizer.chat_template = template
    return model


def _serve(args) -> int:
    """Load the model, then serve it until SIGINT / SIGTERM (uvicorn finishes running requests)."""
    try:
        import uvicorn
    except ImportError:
        raise CliError("serve needs fastapi and uvicorn: pip install fastapi uvicorn") from None
    from .serve import create_app

    template = _read_template(args.chat_template)
    model_path = args.model or args.model_pos or "stories260K"
    name = args.served_model_name or os.path.basename(os.path.normpath(model_path))

    load_errors: List[BaseException] = []

    def failed(e: BaseException) -> None:  # the model did not load: say why and end the server
        load_errors.append(e)
        server.should_exit = True

    def load():
        model = _load_for_chat(args, model_path, template)
        print(f"[serving {model_path} as {name!r} on http://{args.host}:{args.port}/v1]", file=sys.stderr, flush=True)
        return model

    # flag: (value, unit, whether 0 is allowed); None means the flag was not given.
    limits = {"--max-body-mib": (args.max_body_mib, "MiB", False),
              "--request-timeout": (args.request_timeout, "seconds", False),
              "--shutdown-grace": (args.shutdown_grace, "seconds", True)}
    for flag, (value, unit, zero_ok) in limits.items():
        if value is not None and not (value > 0 or (zero_ok and value == 0)):
            raise CliError(f"{flag} must be a number of {unit} {'>= 0' if zero_ok else '> 0'}, got {value}")
    # The server answers at once (/health: 503) while the model loads in the background.
    app = create_app(load, name, api_key=args.api_key, max_running=args.max_running,
                     max_waiting=args.max_waiting, prefix_cache_mib=args.prefix_cache_mib,
                     max_body_bytes=max(1, int(args.max_body_mib * 2**20)), request_timeout=args.request_timeout,
                     cors_origins=args.cors_origin or (), on_load_error=failed)
    server = _draining_server(uvicorn.Config(app, host=args.host, port=args.port, log_level="warning",
                                             timeout_graceful_shutdown=1), grace=args.shutdown_grace)
    print(f"[loading {model_path} ...]", file=sys.stderr, flush=True)
    server.run()
    if load_errors:
        raise CliError(f"could not load {model_path}: {load_errors[0]}")
    return 0


def _draining_server(config, grace: float):
    """A uvicorn server for `config` that drains on SIGTERM (uvicorn is imported only to serve)."""
    import uvicorn

    class DrainingServer(uvicorn.Server):
        """uvicorn's server, with SIGTERM as a drain: new requests get 503 while those running
        finish, for up to `grace` seconds; then the server stops and the process exits 0. A second
        SIGTERM, or SIGINT, stops it at once as uvicorn does."""

        def __init__(self, config, grace: float):
            super().__init__(config)
            self.grace, self.drain_since = grace, None

        def handle_exit(self, sig, frame):
            if sig == signal.SIGTERM and self.drain_since is None:
                self.config.app.state.served.draining = True
                self.drain_since = time.monotonic()
                return  # not recorded: uvicorn would raise it again after the shutdown, ending with -15
            if sig == signal.SIGTERM:
                self.should_exit = True
                return
            super().handle_exit(sig, frame)

        async def on_tick(self, counter):
            if self.drain_since is not None and not self.should_exit:
                served = self.config.app.state.served
                if served.in_flight == 0 or time.monotonic() - self.drain_since > self.grace:
                    self.should_exit = True
            return await super().on_tick(counter)

    return DrainingServer(config, grace)


def _chat(args) -> int:
    """An interactive chat: each reply streamed; /reset starts over; Ctrl-C ends the reply, Ctrl-D
    (or /quit) the program."""
    model_path = args.model or args.model_pos
    if model_path is None:
        raise CliError("give a model: decodelab chat MODEL (or --model MODEL)")
    model = _load_for_chat(args, model_path, _read_template(args.chat_template))
    if model.tokenizer is None or model.tokenizer.chat_template is None:
        raise CliError(f"{model_path} has no chat template; pass --chat-template FILE (a Jinja template), "
                       "or use an instruct model's file")
    seed = args.seed
    if seed is None and args.temperature > 0:
        seed = int.from_bytes(os.urandom(4), "little")
    start = [{"role": "system", "content": args.system}] if args.system else []
    history = list(start)
    cache = model.new_cache()  # the conversation so far stays cached; each turn prefills only its new text
    print(f"[{model_path}: {model.dtype} weights; /reset starts over, Ctrl-C ends a reply, Ctrl-D quits]",
          file=sys.stderr)
    while True:
        try:
            line = input("> ")
        except EOFError:
            print()
            return 0
        except KeyboardInterrupt:
            print("\n[Ctrl-D or /quit to leave]", file=sys.stderr)
            continue
        text = line.strip()
        if text in ("/quit", "/exit"):
            return 0
        if text == "/reset":
            history = list(start)
            print("[conversation reset]", file=sys.stderr)
            continue
        if not text:
            continue
        history.append({"role": "user", "content": text})
        reply = []
        pieces = None
        try:  # Ctrl-C anywhere in the turn, the prompt's prefill included, ends the reply only
            cap = {} if args.max_new_tokens is None else {"max_new_tokens": args.max_new_tokens}
            pieces = model.chat_stream(history, temperature=args.temperature, seed=seed, cache=cache, **cap)
            for piece in pieces:
                reply.append(piece)
                sys.stdout.write(piece)
                sys.stdout.flush()
            print()
        except KeyboardInterrupt:
            if pieces is not None:
                pieces.close()
            print("\n[reply stopped]", file=sys.stderr)
        history.append({"role": "assistant", "content": "".join(reply)})


def _fresh_folder(out: str, force: bool) -> None:
    if os.path.isfile(out):
        raise CliError(f"{out} is a file; give a folder to write into")
    if os.path.isdir(out) and os.listdir(out) and not force:
        raise CliError(f"{out} exists and is not empty; pass --force to write into it anyway")


def _convert(args) -> int:
    from .testing import convert_llama2c

    _fresh_folder(args.out, args.force)
    print(convert_llama2c(args.checkpoint, args.out, tokenizer=args.tokenizer, progress=True))
    return 0


def _make(args) -> int:
    from .testing import SHAPES, write_checkpoint

    if args.shape not in SHAPES:
        raise CliError(f"unknown shape {args.shape!r}; known: {', '.join(SHAPES)}")
    _fresh_folder(args.out, args.force)
    print(write_checkpoint(args.out, args.shape, seed=args.seed, dtype=args.dtype, shards=args.shards,
                           tokenizer_dir=args.tokenizer, byte_tokenizer=True, progress=True))
    return 0


def _parser() -> argparse.ArgumentParser:
    from . import __version__

    p = argparse.ArgumentParser(prog="decodelab", description=__doc__)
    p.add_argument("--version", action="version", version=f"decodelab {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    g = sub.add_parser("generate", help="generate a continuation of a prompt, printed as it is decoded")
    g.add_argument("model_pos", nargs="?", metavar="MODEL", help="Hugging Face folder, GGUF file, llama2.c .bin, a built-in name or a hub id (default: "
                        "stories260K, inside the package)")
    g.add_argument("prompt")
    g.add_argument("--model", default=None, help="the model, instead of MODEL")
    g.add_argument("--tokenizer", default=None, help="tokenizer path (default: found beside the model)")
    g.add_argument("--max-new-tokens", type=int, default=128)
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    g.add_argument("--top-k", dest="top_k", type=int, default=None)
    g.add_argument("--top-p", dest="top_p", type=float, default=None)
    g.add_argument("--min-p", dest="min_p", type=float, default=None)
    g.add_argument("--repetition-penalty", dest="repetition_penalty", type=float, default=None)
    g.add_argument("--seed", type=int, default=None, help="sampling seed (default: a fresh one, printed)")
    g.add_argument("--order", default=None, choices=["hf", "vllm", "llama.cpp"])
    g.add_argument("--threads", type=int, default=None)
    g.add_argument("--dtype", default=None, choices=list(_core.WEIGHT_DTYPES),
                   help="weights as load(dtype=...) keeps them (default: load()'s: float32, or a GGUF file's "
                        "native dtype, such as int4 for 4-bit blocks)")
    g.add_argument("--cache-dtype", dest="cache_dtype", default="float32", choices=list(_core.KV_DTYPES),
                   help="KV cache, as new_cache(dtype=...) (default float32)")
    g.set_defaults(func=_generate)

    ch = sub.add_parser("chat", help="chat with an instruct model in the terminal, replies streamed")
    ch.add_argument("model_pos", nargs="?", metavar="MODEL", help="GGUF file or Hugging Face folder with a chat template")
    ch.add_argument("--model", default=None, help="the model, instead of MODEL")
    ch.add_argument("--tokenizer", default=None, help="tokenizer path (default: the model's own)")
    ch.add_argument("--system", default=None, help="a system message to start every conversation with")
    ch.add_argument("--max-new-tokens", type=int, default=None,
                    help="cap each reply (default: it runs to its end-of-turn token or the context window)")
    ch.add_argument("--chat-template", dest="chat_template", default=None, metavar="FILE",
                    help="a Jinja chat template to use instead of the model's own (for files without one)")
    ch.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    ch.add_argument("--seed", type=int, default=None)
    ch.add_argument("--threads", type=int, default=None)
    ch.add_argument("--dtype", default=None, choices=list(_core.WEIGHT_DTYPES),
                    help="weights as load(dtype=...) keeps them (default: load()'s)")
    ch.set_defaults(func=_chat)

    sv = sub.add_parser("serve", help="serve the model over an OpenAI-compatible HTTP API (needs fastapi, uvicorn)")
    sv.add_argument("model_pos", nargs="?", metavar="MODEL", help="model path or name (default: stories260K)")
    sv.add_argument("--model", default=None, help="the model, instead of MODEL")
    sv.add_argument("--host", default="127.0.0.1")
    sv.add_argument("--port", type=int, default=8000)
    sv.add_argument("--served-model-name", dest="served_model_name", default=None,
                    help="the id in /v1/models and requests (default: the file or folder name)")
    sv.add_argument("--api-key", dest="api_key", default=None, help="require 'Authorization: Bearer KEY'")
    sv.add_argument("--tokenizer", default=None, help="tokenizer path (default: the model's own)")
    sv.add_argument("--chat-template", dest="chat_template", default=None, metavar="FILE",
                    help="a Jinja chat template for /v1/chat/completions instead of the model's own")
    sv.add_argument("--threads", type=int, default=None)
    sv.add_argument("--dtype", default=None, choices=list(_core.WEIGHT_DTYPES),
                    help="weights as load(dtype=...) keeps them (default: load()'s)")
    sv.add_argument("--max-running", dest="max_running", type=int, default=32,
                    help="requests decoded together in one batch (default 32)")
    sv.add_argument("--max-waiting", dest="max_waiting", type=int, default=256,
                    help="requests queued beyond the batch before answering 429 (default 256)")
    sv.add_argument("--prefix-cache-mib", dest="prefix_cache_mib", type=int, default=256,
                    help="MiB of prompt blocks kept for prompts that start the same way (0: off; default 256)")
    sv.add_argument("--max-body-mib", dest="max_body_mib", type=float, default=8.0,
                    help="the largest request body accepted, in MiB; larger ones get 413 (default 8)")
    sv.add_argument("--request-timeout", dest="request_timeout", type=float, default=None, metavar="S",
                    help="seconds a request may run: then 504, or a stream ends with finish_reason length "
                         "(default: no limit)")
    sv.add_argument("--cors-origin", dest="cors_origin", action="append", default=None, metavar="ORIGIN",
                    help="let browsers call the API from ORIGIN (repeat for more; '*' for any); default off")
    sv.add_argument("--shutdown-grace", dest="shutdown_grace", type=float, default=30.0, metavar="S",
                    help="on SIGTERM, seconds running requests may take to finish while new ones get 503 "
                         "(default 30)")
    sv.set_defaults(func=_serve)

    c = sub.add_parser("convert-llama2c", help="convert a llama2.c checkpoint to a Hugging Face folder")
    c.add_argument("checkpoint")
    c.add_argument("out")
    c.add_argument("--tokenizer", default=None, help="llama2.c tokenizer.bin to copy beside the weights")
    c.add_argument("--force", action="store_true", help="write into OUT even if it is not empty")
    c.set_defaults(func=_convert)

    m = sub.add_parser("make-checkpoint", help="write a deterministic random-initialised checkpoint")
    m.add_argument("shape", help="a shape name from decodelab.testing.SHAPES")
    m.add_argument("out")
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    m.add_argument("--shards", type=int, default=1)
    m.add_argument("--tokenizer", default=None,
                   help="folder whose tokenizer files to copy (default: a byte-level tokenizer.json)")
    m.add_argument("--force", action="store_true", help="write into OUT even if it is not empty")
    m.set_defaults(func=_make)
    return p


def main(argv: Optional[List[str]] = None) -> int:
    """Run the ``decodelab`` command line (the console script and ``python -m decodelab``).

    Subcommands: ``generate [MODEL] PROMPT`` (stream a continuation; the built-in stories260K when
    no model is given), ``chat MODEL`` (an interactive chat), ``serve [MODEL]`` (the
    OpenAI-compatible server, needs fastapi and uvicorn), ``convert-llama2c CHECKPOINT OUT`` and
    ``make-checkpoint SHAPE OUT``; ``decodelab SUBCOMMAND --help`` lists each one's options. The
    text goes to stdout; statistics and errors go to stderr.

    Args:
        argv: the arguments after the program name; default None (``sys.argv[1:]``).

    Returns:
        The exit status: 0 on success, 2 for an error reported as ``decodelab: error: ...``
        (a CliError, ValueError, FileNotFoundError or NotImplementedError), 130 after Ctrl-C.

    Raises:
        SystemExit: from argparse, for ``--help``, ``--version`` (status 0) or arguments it
            cannot parse, including a model given both as MODEL and as ``--model`` (status 2).

    Examples:
        >>> import decodelab.cli
        >>> decodelab.cli.main(["generate", "Once upon a time", "--max-new-tokens", "8"])
        Once upon a time...
        0
        >>> decodelab.cli.main(["make-checkpoint", "llama-tiny", "tiny"])
        tiny
        0
        >>> decodelab.cli.main(["generate", "tiny", "Hello", "--max-new-tokens", "3", "--temperature", "0.8",
        ...                     "--seed", "1"])
        Hello...
        0
        >>> decodelab.cli.main(["make-checkpoint", "llama-huge", "huge"])  # an unknown shape: the error on stderr
        2
    """
    p = _parser()
    args = p.parse_args(argv)
    if args.command in ("generate", "chat", "serve") and args.model and args.model_pos:
        p.error("give the model once: as MODEL or as --model")
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("\n[stopped by Ctrl-C]", file=sys.stderr)
        return 130
    except (CliError, ValueError, FileNotFoundError, NotImplementedError) as e:
        print(f"decodelab: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
