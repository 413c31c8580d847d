"""The nodes room: the fleet's nodes and their enrollment.

``actions`` holds every change (enrollment tokens, adding and removing a node) with its audit line,
``api`` the ``/api/nodes`` routes over them, ``page`` the portal's Nodes page and ``views`` what another
room's page may read about a node's executables (whether it lacks llama-server, the catalogue hint).
"""
