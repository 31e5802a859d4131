"""An example processor plugin package for echomq-gevent: copy this folder to start your own.

``pip install ./plugins/example-processor-package`` registers the module
``echomq_example.plugin`` in the ``echomq_gevent`` entry-point group; every
``echomq-gevent`` process (with ``entry_points: true``, the default) then loads it
without naming it in the YAML file.
"""
from setuptools import setup

setup(
    name="echomq-example-processors",
    version="0.1.0",
    description="Example echomq-gevent processor plugin (template)",
    packages=["echomq_example"],
    python_requires=">=3.9",
    install_requires=["echomq-gevent"],
    entry_points={
        # group "echomq_gevent": name = module (or module:object) holding @hookimpl functions
        "echomq_gevent": ["example = echomq_example.plugin"],
    },
)
