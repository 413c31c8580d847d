"""The keys room: the API keys of ``/v1`` and whether a key is required.

``actions`` holds every change with its audit line, ``api`` the ``/api/keys`` routes over them and
``page`` the portal's Access page (keys, usage and the connection snippets of ``_snippets``).
"""
