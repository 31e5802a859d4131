"""Processors the replay tests name in their YAML file (``replay_jobs:charge``)."""

#: what the processor does this run: "fail" or "ok" (the tests switch it)
MODE = {"now": "fail"}


def charge(job):
    job.update_progress(50)
    job.log(f"charging {job.data['amount']}")
    if MODE["now"] == "fail":
        raise ValueError(f"card declined for {job.data['amount']}")
    return {"charged": job.data["amount"]}
