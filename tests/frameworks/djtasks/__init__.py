"""Tasks of the Django Tasks backend's tests (imported through the backend's
``OPTIONS['modules']``, as a project's own task modules would be)."""
