"""The releases room: versions and their skew, each node's llama-server builds and vLLM images, image pulls.

:mod:`.actions` reads the versions (from the node monitor's cache) and a node's builds, images and
pulls (from its agent), and is the one write path of a pull's start and cancel (each audited as
``image.pull*`` whoever asks); :mod:`.api` holds the ``/api/releases`` and ``/image-pulls`` routes over
it and :mod:`.page` the portal's Releases page over the same actions.
"""
