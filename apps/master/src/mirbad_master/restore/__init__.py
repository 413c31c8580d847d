"""The restore room: putting a backup back onto this master and its fleet.

``actions`` reads an uploaded backup (``_upload``: the JSON document or a multipart upload, 64 MiB at
most, the passphrase as a field or header), shows what restoring it would do (``_preview``: the
registry and key store compared, each model's folders asked of its node) and starts, shows and
cancels the one restore job (:class:`~mirbad_orchestration.backups.RestoreJobs`, composed into the
master's services), each change with its audit line; ``api`` holds the ``/api/restore`` routes over
them.
"""
