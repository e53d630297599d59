#!/usr/bin/env python
"""Django's command-line utility for Crewlet.

A `--config PATH` given to any command names the node's Tier A file (crewlet.yaml) before
Django's settings load, so the store path and the keyring come from the file the operator
named rather than from the environment alone.
"""
import os
import sys


def _config_from_argv(argv: list[str]) -> str | None:
    for i, arg in enumerate(argv):
        if arg == "--config" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--config="):
            return arg.split("=", 1)[1]
    return None


def _without_config(argv: list[str]) -> list[str]:
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--config":
            skip = True
        elif not arg.startswith("--config="):
            out.append(arg)
    return out


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crewlet_site.settings")
    config = _config_from_argv(sys.argv[1:])
    if config:
        os.environ["CREWLET_CONFIG"] = config
        command = sys.argv[1] if len(sys.argv) > 1 else ""
        if not command.startswith("crewlet_"):
            # Django's own commands (migrate, createsuperuser, ...) do not know the flag: it
            # has done its work by naming the node's file, so it leaves their arguments.
            sys.argv = _without_config(sys.argv)
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
