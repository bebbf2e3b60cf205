"""`livefuse` command line. Each subcommand lives in `streamer/app/commands/<name>.py` and exposes
`HELP`, `add_arguments(parser)` and `run(args) -> int`; heavy imports stay inside `run`."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

# name -> module; a subcommand is one line here and one module there.
COMMANDS: dict[str, str] = {
    "serve": "streamer.app.commands.serve",
    "process": "streamer.app.commands.process",
    "inspect": "streamer.app.commands.inspect",
    "prompt": "streamer.app.commands.prompt",
    "calibrate": "streamer.app.commands.calibrate",
    "verify": "streamer.app.commands.verify",
    "audit": "streamer.app.commands.audit",
    "tokens": "streamer.app.commands.tokens",
    "control": "streamer.app.commands.control",
    "bench": "streamer.app.commands.bench",
    "eval": "streamer.app.commands.eval",
    "models": "streamer.app.commands.models",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="livefuse", description="Real-time face fusion filter.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, module_name in COMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue  # a command whose module is not part of this build
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # the command line itself (not a caller in this process)
        argv = sys.argv[1:]
        if "serve" in argv[:2]:  # `livefuse [-v] serve`: take SIGTERM before the imports below (PID 1 in a container)
            from streamer.app.commands.serve import stop_on_early_sigterm

            stop_on_early_sigterm()
        from streamer.ops.memory import keep_freed_memory

        keep_freed_memory()   # frames on the main thread (process, bench) reuse their memory as workers do
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    return int(args._run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
