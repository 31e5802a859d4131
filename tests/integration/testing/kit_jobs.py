"""Processors of the testing kit's tests that a YAML file names (``processor: kit_jobs:double``)."""


def double(job):
    return job.data["n"] * 2
