"""The downloads room: model downloads onto a node (Hugging Face, an Ollama registry), through its agent.

:mod:`.actions` is the one write path (a start, refused ones too, a cancel, a retry and a removal, each
audited as ``download.*`` whoever asks), :mod:`.api` the ``/api/nodes/{id}/downloads`` routes over it,
and :mod:`.page` the portal's pieces over the same actions: the search box that starts a download, the
panel that follows them (shown on the Models and the Nodes pages) and the model editor's sources.
"""
