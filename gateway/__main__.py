"""``python -m gateway [uvicorn's options]``: serve the gateway, draining on SIGTERM and
Ctrl-C before uvicorn's shutdown (``gateway.ops.server``).

The options are uvicorn's own (its click parameters, so ``--help`` lists them and
``UVICORN_*`` variables set them, as for ``uvicorn``), but for those that would serve
another app or several processes: the APP argument, ``--reload*``, ``--workers``,
``--lifespan``, ``--interface``, ``--factory`` and ``--app-dir``.

``--host`` is the agent port's host too (``ASR_AGENT_PORT``), unless ``ASR_AGENT_HOST``
says otherwise. Exit codes: 0 after a shutdown (a drain), 3 when the start fails (as
uvicorn), 1 when a fault ended serving while the server ran.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click
import uvicorn
from uvicorn.config import LOGGING_CONFIG, STARTUP_FAILURE

from gateway.app import create_app
from gateway.ops.server import DrainingServer

SERVING_LOST = 1  # a fault ended serving: restart us (systemd's Restart=on-failure does)

NOT_TAKEN = frozenset(
    {
        "app",
        "reload",
        "reload_dirs",
        "reload_includes",
        "reload_excludes",
        "reload_delay",
        "workers",
        "timeout_worker_healthcheck",
        "lifespan",
        "interface",
        "factory",
        "app_dir",
    }
)


def serve(**options: Any) -> None:
    """What ``uvicorn.main`` does with its options, with our app and our server."""
    # uvicorn up to 0.54 hands its --header options over as "name:value" strings and
    # splits them in uvicorn.main; 0.55's option parser splits them itself.
    options["headers"] = [
        tuple(header.split(":", 1)) if isinstance(header, str) else tuple(header)
        for header in options["headers"]
    ]
    if options["log_config"] is None:
        options["log_config"] = LOGGING_CONFIG
    # The server drains it itself; the agent listens where the server does.
    app = create_app(wrap_signals=False, server_host=options["host"])
    config = uvicorn.Config(app, lifespan="on", **options)
    server = DrainingServer(config, app)
    try:
        server.run()
    except KeyboardInterrupt:
        pass  # a second Ctrl-C, re-raised by uvicorn once shut down: as uvicorn exits
    finally:
        if config.uds and os.path.exists(config.uds):
            os.remove(config.uds)
    if not server.started:
        sys.exit(STARTUP_FAILURE)
    if app.serving_lost() is not None:
        sys.exit(SERVING_LOST)


main = click.Command(
    "gateway",
    params=[param for param in uvicorn.main.params if param.name not in NOT_TAKEN],
    callback=serve,
    context_settings=uvicorn.main.context_settings,
    help="Serve the ASR gateway with uvicorn, draining its sessions on SIGTERM and Ctrl-C.",
)

if __name__ == "__main__":
    main()
