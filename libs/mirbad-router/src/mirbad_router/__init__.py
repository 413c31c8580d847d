"""mirbad_router: the embeddable OpenAI-compatible /v1 proxy of Mirbad, as a Starlette app.

It arrives with the master issue; the package exists so the workspace layout and its import contracts
are in place from the start.
"""

__all__: list[str] = []
