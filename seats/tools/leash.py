"""Start a stdio tool server on a leash: it dies with the node (issue "Turns that act": "stdio
children die with the node").

Run as `python -I -S leash.py PARENT_PID COMMAND ARGS...`. On Linux it asks the kernel to
SIGKILL this process when its parent dies (PR_SET_PDEATHSIG, kept across exec), checks that
the parent is still the node (it may have died before the request), then execs the command in
its place. A node that is SIGKILLed cannot close its children's stdin in an orderly way; with
the leash they go with it instead of running on as orphans. Elsewhere the leash only execs:
the child then relies on its stdin closing, as the MCP stdio transport specifies.

Kept to the standard library and runnable with `-S`, because it stands between every tool
server and its start.
"""
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def main(argv: list[str]) -> None:
    if len(argv) < 3:
        sys.stderr.write("leash: usage: leash.py PARENT_PID COMMAND [ARGS...]\n")
        os._exit(2)
    parent, command = int(argv[1]), argv[2:]
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            sys.stderr.write(f"leash: prctl failed (errno {ctypes.get_errno()})\n")
    if os.getppid() != parent:
        os._exit(1)  # the node died before the leash took: nobody is left to serve
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        sys.stderr.write(f"leash: cannot start {command[0]}: {exc.strerror}\n")
        os._exit(127)


if __name__ == "__main__":
    main(sys.argv)
