"""``python -m mirbad_agent``: the same as the ``mirbad-agent`` command."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
