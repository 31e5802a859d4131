#!/usr/bin/env python
"""The example shop's manage.py. The worker command runs on gevent: patch first."""
import os
import sys

if __name__ == "__main__":
    if sys.argv[1:2] == ["echomq_worker"]:
        from gevent import monkey

        monkey.patch_all()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
