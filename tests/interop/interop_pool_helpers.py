"""The processor the pool interop tests name in their YAML (importable by module name)."""


def echo(job):
    return job.data
