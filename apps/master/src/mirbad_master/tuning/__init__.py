"""The tuning room: tuning runs of a Ready model, their stored runs and Apply best.

``actions`` holds every change (start, cancel and Apply best, each with its audit line, whoever asks),
``api`` the ``/api`` routes over them (``tuning_router``) and ``page`` the portal's Tuning view
(``render_tuning``); the runs themselves are the tuning kind of the orchestration's node job runner
(:class:`~mirbad_orchestration.tuning.TuningJobs`).
"""
