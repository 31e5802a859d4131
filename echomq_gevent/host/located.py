"""Located YAML for the configuration file: a composed node tree turned into plain
values with the line of every key and value, ``${VAR}`` expansion in scalars, and the
error text that names file, line and dotted key (:mod:`echomq_gevent.host.config` uses it)."""
from __future__ import annotations

import re
from typing import Any, Dict, Mapping, Optional, Tuple

import yaml

from ..errors import ConfigError, close_matches

__all__ = ["Path", "Marks", "Builder", "dotted", "format_error", "suggest"]

#: A key path such as ``("queues", "mail", "concurrency")``.
Path = Tuple[Any, ...]

class Marks:
    """Line numbers (1-based) of every key and value, by path tuple."""

    def __init__(self) -> None:
        self.key_line: Dict[Path, int] = {}
        self.value_line: Dict[Path, int] = {}

    def line(self, path: Path) -> Optional[int]:
        """Line of the key at ``path`` (its value's line for list items); walks up to the
        nearest parent that has one."""
        p = tuple(path)
        while True:
            if p in self.key_line:
                return self.key_line[p]
            if p in self.value_line:
                return self.value_line[p]
            if not p:
                return None
            p = p[:-1]


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-((?:[^}])*))?\}")


class Builder:
    """Turns a composed YAML node tree into plain Python values, recording line numbers
    and expanding ``${VAR}`` in scalars. Errors are raised with the line of the node."""

    def __init__(self, filename: str, env: Mapping[str, str]) -> None:
        self.filename = filename
        self.env = env
        self.marks = Marks()
        self._loader = yaml.SafeLoader("")

    def error(self, line: Optional[int], path: Path, message: str) -> ConfigError:
        return ConfigError(format_error(self.filename, line, path, message))

    def build(self, node: yaml.Node, path: Path) -> Any:
        line = node.start_mark.line + 1
        self.marks.value_line.setdefault(path, line)
        if isinstance(node, yaml.MappingNode):
            own_keys = {id(k) for k, _v in node.value if k.tag != "tag:yaml.org,2002:merge"}
            try:
                self._loader.flatten_mapping(node)
            except yaml.YAMLError as exc:
                raise self.error(line, path, f"bad merge key: {exc}") from None
            out: Dict[Any, Any] = {}
            merged_in = set()  # keys that came from a `<<` merge: an own key may override them
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    raise self.error(key_node.start_mark.line + 1, path,
                                     "a key must be a plain name, not a list or mapping")
                key = self._scalar(key_node, path)
                if not isinstance(key, str):
                    key = str(key) if isinstance(key, (int, float)) and not isinstance(key, bool) else key
                if not isinstance(key, str):
                    raise self.error(key_node.start_mark.line + 1, path, f"key {key!r} must be a string")
                sub = path + (key,)
                own = id(key_node) in own_keys
                if key in out and own and key in merged_in:
                    merged_in.discard(key)
                elif key in out and not own:
                    pass  # pyyaml's rule among merged sources: the later entry wins
                elif key in out:
                    raise self.error(key_node.start_mark.line + 1, sub,
                                     f"key {key!r} appears twice in this mapping (first on line "
                                     f"{self.marks.key_line.get(sub)}); remove one")
                if not own:
                    merged_in.add(key)
                self.marks.key_line[sub] = key_node.start_mark.line + 1
                out[key] = self.build(value_node, sub)
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, path + (i,)) for i, item in enumerate(node.value)]
        return self._scalar(node, path)

    def _scalar(self, node: yaml.ScalarNode, path: Path) -> Any:
        value = node.value
        if "${" in value and node.tag == "tag:yaml.org,2002:str":
            expanded = self._expand(value, node.start_mark.line + 1, path)
            if node.style is None:  # plain scalar: type it after expansion
                tag = self._loader.resolve(yaml.ScalarNode, expanded, (True, False))
                return self._loader.construct_object(yaml.ScalarNode(tag, expanded))
            return expanded
        try:
            return self._loader.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            raise self.error(node.start_mark.line + 1, path, f"bad value: {exc}") from None

    def _expand(self, text: str, line: int, path: Path) -> str:
        def repl(m: "re.Match[str]") -> str:
            name, default = m.group(1), m.group(2)
            value = self.env.get(name)
            if value is None or value == "":
                if default is not None:
                    return default
                if value is None:
                    raise self.error(line, path, f"environment variable {name} is not set; set it or "
                                                 f"write ${{{name}:-default}}")
            return value
        return _VAR.sub(repl, text)


def dotted(path: Path) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def format_error(filename: str, line: Optional[int], path: Path, message: str) -> str:
    where = f"{filename}, line {line}" if line else filename
    return f"{where}, key {dotted(path)}: {message}"


def suggest(key: str, valid: Any) -> str:
    valid = list(valid)
    near = close_matches(key, valid)
    if near:
        return f"unknown key {key!r}; did you mean {near[0]!r}?"
    return f"unknown key {key!r}; valid keys here: {', '.join(valid)}"
