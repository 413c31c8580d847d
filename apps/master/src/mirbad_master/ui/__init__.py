"""mirbad_master.ui: the portal's cross-cutting pieces, NiceGUI pages served beside ``/api`` and ``/v1``.

:func:`mirbad_master.ui._install.install_ui` attaches the portal to the master's app, with every
feature room's page. It is not imported here: the rooms' pages import this package's pieces (layout,
marks, refusals), so a package that imported them back would make a cycle for whoever loads a page
first. Every page calls the master's services in-process; only the Playground talks to a router, an
in-process one, so its chats meet what every client meets.
"""

from ._portal import Portal

__all__ = ["Portal"]
