"""The one way every entry point reports a user's mistake: a UserError, caught once in cli_main, ends the
program with its one line and a non-zero exit status."""

import io
import os
import sys


class UserError(Exception):
    """A mistake in what the user gave (config, data, checkpoint, prompt, file), explained in one line that
    names the fix. Every entry point catches it once, in cli_main, and exits non-zero with that line."""

    exit_code = 1
    every_rank = False  # True: every process of a torchrun meets it alike (same config, data, files)


class ConfigError(UserError):
    """A config problem."""

    every_rank = True


def cli_main(body, argv=None):
    """Run body(argv) as a script's main: console lines reach a redirected file as they are printed
    (nohup ... > log), and a UserError ends the program with its one line and its exit status (1; 130 for
    Ctrl-C, as a shell reports SIGINT)."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(line_buffering=True)
    try:
        return body(sys.argv[1:] if argv is None else list(argv))
    except KeyboardInterrupt:
        print("error: interrupted (Ctrl-C)", file=sys.stderr)
        sys.exit(130)
    except UserError as e:
        if e.every_rank and os.environ.get("RANK", "0") != "0":
            sys.exit(e.exit_code)  # every rank read the same config, data or file: rank 0 says it once
        if e.exit_code == 1:
            sys.exit(f"error: {e}")
        print(f"error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
