"""The backup destination room: the network share backups go to, mounted on the master's own machine.

hostd mounts it, reached through that machine's node agent (the ``local`` node). The room's actions read
the share's status, test, apply and disconnect it (the latter two for the signed-in administrator,
audited without the password), keep the share's password sealed at rest so that passphrase backups can
carry it, and tell the backup scheduler whether the backup folder may be written
(:func:`.actions.destination_ready`).
"""
