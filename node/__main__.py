"""`python -m node --config FILE`: run one node daemon until SIGTERM (see node/config.py for the file)."""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import threading
from pathlib import Path

from node.errors import UserError


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m node", description="Run one wanbed node daemon.")
    ap.add_argument("--config", required=True, help="node configuration YAML (see node/config.py)")
    ap.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    args = ap.parse_args(argv)
    os.umask(0o077)      # the spool holds mail, the records who wrote to whom: the node's files are its own
    from node import registry
    from node.daemon import NodeDaemon

    try:
        cfg = registry.load_config(args.config)
        Path(cfg.records_dir).mkdir(parents=True, exist_ok=True)
        logging.basicConfig(filename=str(Path(cfg.records_dir) / "node.log"), level=args.log_level,
                            format=f"%(asctime)s {cfg.name} %(name)s %(levelname)s %(message)s")
        profile_to = os.environ.get("WANBED_NODE_PROFILE")   # diagnostics: cProfile stats file per node
        if profile_to:
            import cProfile
            cProfile.runctx("asyncio.run(NodeDaemon(cfg).serve())", globals(), locals(),
                            f"{profile_to}.{cfg.name}")
        else:
            asyncio.run(NodeDaemon(cfg).serve())
    except UserError as exc:
        print(f"node: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:
        print(f"node: {exc.strerror or exc}.", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


def _exit(code: int) -> None:
    """End the process without the interpreter's teardown. By now the daemon has closed its spool and records;
    what is left is gRPC's core shutdown and the sweep of every module, 0.2-0.5 s that each stop of a
    network's daemons waits for. Threads that must finish still do, and the log is flushed first."""
    main_thread = threading.main_thread()
    for t in threading.enumerate():
        if t is not main_thread and not t.daemon:
            t.join()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit(main())
