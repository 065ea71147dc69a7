"""``python -m llama_cpp.server`` with its flags, answering like ``tests/openai_chat_server.py``."""

from __future__ import annotations

import argparse
import os
import threading

from tests.openai_chat_server import OpenAIChatServer


def main() -> None:
    parser = argparse.ArgumentParser()
    for flag in (
        "--model",
        "--model_alias",
        "--host",
        "--n_ctx",
        "--n_threads",
        "--interrupt_requests",
        "--verbose",
    ):
        parser.add_argument(flag)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    if not args.model or not os.path.isfile(args.model):
        raise SystemExit(f"model file not found: {args.model}")
    server = OpenAIChatServer((args.model_alias,), port=args.port, api_key=os.environ.get("API_KEY"))
    print(f"fake llama_cpp.server on {server.url}", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
