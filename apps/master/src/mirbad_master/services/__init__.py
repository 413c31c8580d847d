"""The services room: a node's host services (systemd units through its hostd, whitelisted Docker containers).

:mod:`.actions` is the one write path (every unit and container action, every whitelist change, each
audited as ``host.*`` whoever asks), :mod:`.api` the ``/api/nodes/{id}/host/...`` routes over it and
:mod:`.page` the portal's Services page over the same actions.
"""
