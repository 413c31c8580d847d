"""The benchmarks room: benchmark jobs of a Ready model and their stored results.

``actions`` holds every change (start and cancel, each with its audit line, whoever asks), ``api`` the
``/api`` routes over them (``benchmarks_router``) and ``page`` the portal's Benchmark view
(``render_benchmarks``); the jobs themselves run on the orchestration's node job runner as its
benchmark kind (:class:`~mirbad_orchestration.jobs.BenchmarkJobs`).
"""
