"""Plugins: the hook specifications, the plugin host the worker calls through, and the
built-in plugin (BullMQ's failure rule, its backoff types, lifecycle logs).
"""
from .._lazy import lazy_exports

#: what the module of this name exported in 0.1, loaded on first use
_EXPORTS = {
    "PluginHost": ".host",
    "make_plugin_manager": ".host",
    "load_entry_points": ".host",
    "import_plugin_module": ".host",
    "RENAMED_PLUGINS": ".host",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)
