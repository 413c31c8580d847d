"""mirbad_master: the Mirbad master (registry, keys, admin API, portal, router) and the `mirbad` command."""

__all__: list[str] = []
