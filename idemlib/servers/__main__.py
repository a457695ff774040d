"""``python -m idemlib.servers start|stop|status [NAME ...] [--owner OWNER]``: the course's own servers by hand.

``start`` starts the course's own PostgreSQL, Redis and NATS (or those named) and
prints one ``IDEMLIB_NAME_URL=...`` line each, ready for ``export``; ``stop`` stops
them (with ``--owner``, only those that owner started: ``make lab`` and ``make
test`` stop their own this way); ``status`` lists those running.
"""

from __future__ import annotations

import argparse
import sys

from idemlib.servers import OWN_KINDS as KINDS
from idemlib.servers import SERVERS
from idemlib.servers.local import CannotStart, ensure, status, stop


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m idemlib.servers", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("start", "stop", "status"))
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"any of {', '.join(KINDS)} (default: all)")
    parser.add_argument("--owner", help="stop only the servers this owner started (IDEMLIB_SERVERS_OWNER)")
    arguments = parser.parse_args(argv)
    if unknown := set(arguments.names) - set(KINDS):
        parser.error(f"unknown server {', '.join(sorted(unknown))}; choose from {', '.join(KINDS)}")
    kinds = [KINDS[name] for name in arguments.names or KINDS]
    if arguments.action == "start":
        try:
            for kind in kinds:
                print(f"{SERVERS[kind.key].variable}={ensure(kind).url}")
        except CannotStart as error:
            print(f"Could not start {kind.key}: {error}", file=sys.stderr)
            return 1
    elif arguments.action == "stop":
        for running in stop(kinds, owner=arguments.owner):
            print(f"stopped {running.key} ({running.version}, process {running.pid}, port {running.port})")
    else:
        for running in status(kinds):
            print(f"{running.key}: {running.version} at 127.0.0.1:{running.port}, process {running.pid}, "
                  f"owner {running.owner or '(none)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
