"""The backups room: the master's backups in the backup directory, written and taken out.

``actions`` holds "back up now", the listing with the schedule and the last failure, the one-time
download tokens and the reading of one backup (each change with its audit line); ``api`` the
``/api/backup`` routes over them; ``_files`` opens a backup by its bare name only, never a path, a
symlink or another file. The daily backup itself is the composition's ``BackupScheduler``, built from
the master's stores by ``_backup_source``.
"""
