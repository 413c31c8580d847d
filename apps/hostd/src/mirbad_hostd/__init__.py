"""mirbad_hostd: the root daemon behind the Services page, reached by the agent over a unix socket."""

__all__: list[str] = []
