"""Running workers from a configuration: the YAML file, the runner, the
``echomq-gevent`` command, the embedded Redis, logs and the status table.
"""
