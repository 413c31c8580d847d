"""The models room: the registry's models and their lifecycle by hand.

``actions`` holds every change (create, edit, delete, start, stop, restart) with its lock and audit
line, ``api`` the ``/api/models`` routes over them and ``page`` the portal's Models page and model
editor; the private modules are the page's pieces (form, dialogs, missing-file notes, the llama-server
hint) and the checks a change runs (the memory estimate, whether a model's files are on its node).
"""
