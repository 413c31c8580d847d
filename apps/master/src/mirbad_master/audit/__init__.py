"""The audit room: the audit log read back, filtered and paged, for the API and the portal's Audit view.

The room only reads: every room writes its own audit lines where its changes happen. :mod:`.actions`
turns the filters as typed (texts: actor, action, subject, ISO 8601 times, a limit, a cursor) into one
page of the log, newest first; :mod:`.api` holds ``GET /api/audit`` over it and :mod:`.page` the
portal's Audit view (``/audit``), which a model's and a node's card link to with their id as subject
(:mod:`.views`' ``audit_link``).
"""
