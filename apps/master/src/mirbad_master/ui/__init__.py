"""mirbad_master.ui: the portal's shared pieces, and the pages that belong to no feature's room.

The frame, the sign-in, the guarded page, the refusal display, formats and chart themes serve every
room's ``page.py``; the Overview, the Playground, the fleet view and the logs live here. Every page calls
the master's services in-process; only the Playground talks to a router, an in-process one, so its
chats meet what every client meets. :mod:`mirbad_master._pages` gathers every page and installs them.
"""

from ._portal import Portal

__all__ = ["Portal"]
