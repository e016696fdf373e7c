"""Heat and agent templates of a catalog folder, and mapping substitution.

Layout (that of Murano 0.2's ``data/``)::

    DIR/templates/cf/<name>.template          Heat (CFN JSON) fragments
    DIR/templates/agent/<name>.template       execution plans (may be in sub-folders)
    DIR/templates/agent/scripts/<file>        scripts plans refer to
    DIR/templates/agent-config/<name>.template agent configuration for user data
    DIR/init-scripts/<file>                   instance boot scripts

Names come from workflow files, so they never leave their folder: absolute
names and ``..`` are refused.
"""
from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import Any, Callable

from .errors import TemplateError

BUILTIN_DATA = Path(__file__).resolve().parent.parent / "data"


def safe_join(base: Path, name: str, suffix: str = "") -> Path:
    """``base/name+suffix``, refusing names that would escape ``base``."""
    if not isinstance(name, str) or not name.strip():
        raise TemplateError("empty template name")
    pure = PurePosixPath(name)
    if "\\" in name or pure.is_absolute() or ".." in pure.parts or name.startswith("~"):
        raise TemplateError(f"template name {name!r} must stay inside {base}")
    path = base.joinpath(*pure.parts)
    return path.with_name(path.name + suffix) if suffix else path


class TemplateStore:
    """Reads (and caches) the templates of one catalog folder."""

    def __init__(self, data_dir: str | Path, fallback: Path | None = BUILTIN_DATA) -> None:
        self.data_dir = Path(data_dir)
        self.fallback = fallback
        self._parsed: dict[tuple[str, str], Any] = {}
        self._text: dict[Path, str] = {}
        self._bytes: dict[str, bytes] = {}
        self._support: dict[tuple[str, str], str] = {}

    @property
    def cf_dir(self) -> Path:
        return self.data_dir / "templates" / "cf"

    @property
    def agent_dir(self) -> Path:
        return self.data_dir / "templates" / "agent"

    @property
    def scripts_dir(self) -> Path:
        return self.agent_dir / "scripts"

    def heat_path(self, name: str) -> Path:
        return safe_join(self.cf_dir, name, ".template")

    def agent_path(self, name: str) -> Path:
        return safe_join(self.agent_dir, name, ".template")

    def heat_template(self, name: str, mappings: dict[str, Any] | None = None) -> dict:
        """A fresh copy of a Heat template with ``mappings`` substituted."""
        return substitute(self._json(("cf", name), self.heat_path, "Heat template"),
                          mappings or {})

    def agent_template(self, name: str, mappings: dict[str, Any] | None = None) -> dict:
        """A fresh copy of an execution plan template with ``mappings`` substituted."""
        return substitute(self._json(("agent", name), self.agent_path, "agent template"),
                          mappings or {})

    def script(self, name: str) -> bytes:
        data = self._bytes.get(name)
        if data is None:
            path = safe_join(self.scripts_dir, name)
            try:
                data = self._bytes[name] = path.read_bytes()
            except OSError as exc:
                raise TemplateError(f"script {name!r}: {exc.strerror}", str(path)) from None
        return data

    def agent_config(self, name: str) -> str:
        return self._support_file(Path("templates", "agent-config"), name + ".template",
                                  "Default.template")

    def init_script(self, name: str) -> str:
        default = "init.sh" if name.endswith(".sh") else "init.ps1"
        return self._support_file(Path("init-scripts"), name, default)

    def _support_file(self, folder: Path, name: str, default: str) -> str:
        """A user-data file from the catalog, else from Fornace's own data.

        A 0.2 catalog may name files Fornace does not ship (``Linux``,
        ``linux_init.sh``); Fornace's own default of the same kind serves then.
        """
        key = (str(folder), name)
        text = self._support.get(key)
        if text is not None:
            return text
        bases = [self.data_dir / folder]
        if self.fallback is not None:
            bases.append(self.fallback / folder)
        for base, file in [(b, name) for b in bases] + [(bases[-1], default)]:
            path = safe_join(base, file)
            if path.is_file():
                text = self._support[key] = self._read_text(path)
                return text
        raise TemplateError(f"{folder / name} not found in {self.data_dir}")

    def _read_text(self, path: Path) -> str:
        text = self._text.get(path)
        if text is None:
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise TemplateError(f"cannot read: {exc}", str(path)) from None
            self._text[path] = text
        return text

    def _json(self, key: tuple[str, str], locate: Callable[[str], Path], what: str) -> Any:
        """A parsed template, shared: callers copy it (``substitute`` does)."""
        data = self._parsed.get(key)
        if data is None:
            path = locate(key[1])
            if not path.is_file():
                raise TemplateError(f"{what} {path.stem!r} not found", str(path))
            try:
                data = json.loads(self._read_text(path))
            except json.JSONDecodeError as exc:
                raise TemplateError(f"invalid JSON at column {exc.colno}: {exc.msg}",
                                    str(path), exc.lineno) from None
            if not isinstance(data, dict):
                raise TemplateError(f"{what} must be a JSON object", str(path))
            self._parsed[key] = data
        return data


def substitute(value: Any, mappings: dict[str, Any]) -> Any:
    """Replace every string (value or key) that is exactly ``$name``.

    The replacement is ``mappings[name]`` when that mapping exists and is not
    None; otherwise the string stays as it is (0.2 behaviour).
    """
    if isinstance(value, str):
        if value.startswith("$"):
            replacement = mappings.get(value[1:])
            if replacement is not None:
                return replacement
        return value
    if isinstance(value, dict):
        return {_key(k, mappings): substitute(v, mappings) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, mappings) for v in value]
    return value


def _key(key: str, mappings: dict[str, Any]) -> str:
    if key.startswith("$"):
        replacement = mappings.get(key[1:])
        if replacement is not None:
            return str(replacement)
    return key


def merge(base: Any, update: Any) -> Any:
    """Deep-merge ``update`` into ``base`` (in place for dicts) and return it.

    Dicts merge key by key, lists keep the items of ``base`` and add those of
    ``update`` not already there, anything else is replaced.
    """
    if isinstance(base, dict) and isinstance(update, dict):
        for key, value in update.items():
            base[key] = merge(base[key], value) if key in base else value
        return base
    if isinstance(base, list) and isinstance(update, list):
        for item in update:
            if item not in base:
                base.append(item)
        return base
    return update
