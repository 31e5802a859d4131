"""A module no test imports: a job naming a function in it must not import it."""
import os

os.environ["ECHOMQ_TEST_UNIMPORTED_WAS_IMPORTED"] = "1"


def boom():
    raise AssertionError("a job made the worker import and run this")
