"""`python -m miiii`: the command line (cli.py). A Ctrl-C while it imports is remembered, not raised inside an import
(`deferred_interrupts`), and ends it with one line and status 130."""

import signal
import sys

from miiii.errors import deferred_interrupts, sigint

signal.signal(signal.SIGINT, sigint)
try:
    with deferred_interrupts():
        from miiii.cli import main
    code = main()
except KeyboardInterrupt:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    print("interrupted", file=sys.stderr)
    code = 130
raise SystemExit(code)
