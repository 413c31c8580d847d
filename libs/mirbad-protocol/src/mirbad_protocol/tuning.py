"""mirbad_protocol.tuning: tuning requests, runs and jobs, as the admin API and results files carry them.

A tuning job's state is :class:`mirbad_protocol.benchmarks.JobState`, the one both job kinds share.
"""

from ._tuning import (
    CandidateOutcome,
    TuningCandidate,
    TuningGoal,
    TuningJobList,
    TuningJobView,
    TuningList,
    TuningRequest,
    TuningRun,
    TuningSearch,
)

__all__ = [
    "CandidateOutcome",
    "TuningCandidate",
    "TuningGoal",
    "TuningJobList",
    "TuningJobView",
    "TuningList",
    "TuningRequest",
    "TuningRun",
    "TuningSearch",
]
