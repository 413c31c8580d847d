"""mirbad_master.ui: the portal, NiceGUI pages served by the master beside ``/api`` and ``/v1``.

:func:`install_ui` attaches it to the master's app. Every page calls the master's services in-process;
only the Playground talks to a router, an in-process one, so its chats meet what every client meets.
"""

from ._install import install_portal, install_ui
from ._portal import Portal

__all__ = ["Portal", "install_portal", "install_ui"]
