"""mirbad_agent: the Mirbad node agent (mutual TLS on port 9443, routes under /agent/v1)."""

__all__: list[str] = []
