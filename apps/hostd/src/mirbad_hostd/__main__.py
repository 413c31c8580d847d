"""``python -m mirbad_hostd``: the same as the ``mirbad-hostd`` command."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
