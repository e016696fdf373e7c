"""Heat and agent templates of a catalog folder, and mapping substitution.

Layout (that of Murano 0.2's ``data/``)::

    DIR/templates/cf/<name>.template          Heat (CFN JSON) fragments
    DIR/templates/agent/<name>.template       execution plans (may be in sub-folders)
    DIR/templates/agent/scripts/<file>        scripts plans refer to
    DIR/templates/agent-config/<name>.template agent configuration for user data
    DIR/init-scripts/<file>                   instance boot scripts

Names come from workflow files, so they never leave their folder: absolute
names, ``..`` and ``~`` are refused, and a file is read only if its real path
(symbolic links followed) is inside the catalog folder (or, for the
user-data files Fornace ships, inside Fornace's own catalog).  Files larger
than ``[engine] max_template_bytes`` and templates nested deeper than
``[engine] max_json_depth`` are refused with an error naming the file.
"""
from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path, PurePosixPath
from typing import Any, Callable

from fornace.common.errors import TemplateError
from fornace.common.jsonlimits import JsonLimitError, loads, read_bounded
from fornace.common.packages.layers import DATA_FOLDER
from fornace.common.resources import BUILTIN_DATA
from fornace.conductor.dsl.limits import Limits


def safe_join(base: Path, name: str, suffix: str = "") -> Path:
    """``base/name+suffix``, refusing names that would escape ``base``."""
    if not isinstance(name, str) or not name.strip():
        raise TemplateError("empty template name")
    pure = PurePosixPath(name)
    if "\\" in name or pure.is_absolute() or ".." in pure.parts or name.startswith("~"):
        raise TemplateError(f"template name {name!r} must stay inside {base}")
    path = base.joinpath(*pure.parts)
    return path.with_name(path.name + suffix) if suffix else path


def inside(path: Path, root: Path) -> Path:
    """The real path of ``path`` (links followed), refused when it is not inside
    ``root`` (a real path too)."""
    real = path.resolve()
    if not real.is_relative_to(root):
        raise TemplateError(f"leads outside the catalog {root} (through a symbolic link)",
                            str(path))
    return real


class TemplateStore:
    """Reads (and caches) the templates of one catalog folder."""

    def __init__(self, data_dir: str | Path, fallback: Path | None = BUILTIN_DATA,
                 limits: Limits | None = None, origin: str = DATA_FOLDER) -> None:
        self.data_dir = Path(data_dir)
        self.origin = origin   # "data folder", or the package version it is: "kv 1.1.0"
        self.fallback = fallback
        self.limits = limits or Limits()
        self._root = self.data_dir.resolve()
        self._fallback_root = fallback.resolve() if fallback is not None else None
        self._parsed: dict[tuple[str, str], Any] = {}
        self._text: dict[Path, str] = {}
        self._bytes: dict[str, bytes] = {}
        self._base64: dict[str, str] = {}
        self._support: dict[tuple[str, str], str] = {}
        self._digests: dict[tuple[str, str], str] = {}

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

    def source(self, kind: str, name: str) -> tuple[str, str]:
        """(digest of the file's bytes, origin) of an agent template (``kind``
        ``template``) or a script (``script``), for change detection."""
        key = (kind, name)
        digest = self._digests.get(key)
        if digest is None:
            data = self.script(name) if kind == "script" else self._read_text(
                self.agent_path(name), self._root).encode()
            digest = self._digests[key] = hashlib.sha256(data).hexdigest()[:16]
        return digest, self.origin

    def script(self, name: str) -> bytes:
        data = self._bytes.get(name)
        if data is None:
            path = safe_join(self.scripts_dir, name)
            try:
                data = self._bytes[name] = self._read(path, self._root, f"script {name!r}")
            except OSError as exc:
                raise TemplateError(f"script {name!r}: {exc.strerror}", str(path)) from None
        return data

    def _read(self, path: Path, root: Path, what: str) -> bytes:
        """A catalog file's bytes: inside ``root``, at most max_template_bytes."""
        try:
            return read_bounded(inside(path, root), self.limits.max_template_bytes, what)
        except JsonLimitError as exc:
            raise TemplateError(f"{exc.message} ([engine] max_template_bytes)",
                                str(path)) from None

    def script_base64(self, name: str) -> str:
        """A script as plans carry it (base64), encoded once per catalog."""
        encoded = self._base64.get(name)
        if encoded is None:
            encoded = self._base64[name] = base64.b64encode(self.script(name)).decode("ascii")
        return encoded

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
        bases = [(self.data_dir / folder, self._root)]
        if self.fallback is not None and self._fallback_root is not None:
            bases.append((self.fallback / folder, self._fallback_root))
        for (base, root), file in [(b, name) for b in bases] + [(bases[-1], default)]:
            path = safe_join(base, file)
            if path.is_file():
                text = self._support[key] = self._read_text(path, root)
                return text
        raise TemplateError(f"{folder / name} not found in {self.data_dir}")

    def _read_text(self, path: Path, root: Path) -> str:
        text = self._text.get(path)
        if text is None:
            try:
                text = self._read(path, root, "file").decode("utf-8")
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
                data = loads(self._read_text(path, self._root),
                             max_depth=self.limits.max_json_depth, source=str(path))
            except json.JSONDecodeError as exc:
                raise TemplateError(f"invalid JSON at column {exc.colno}: {exc.msg}",
                                    str(path), exc.lineno) from None
            except JsonLimitError as exc:
                limit = " ([engine] max_json_depth)" if exc.kind == "depth" else ""
                raise TemplateError(exc.message + limit, str(path), exc.line) from None
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


class TemplateLayers:
    """The templates of a job pinned to workflow packages: each name is looked up
    in the packages' catalogs first (in order), then in the conductor's own.

    A package's workflows find the templates the package holds (the upload's
    check made sure they are there); the conductor's workflows find theirs,
    unless a package ships a template of the same name to replace it.
    """

    def __init__(self, stores: list[TemplateStore]) -> None:
        if not stores:
            raise ValueError("TemplateLayers needs at least one TemplateStore")
        self.stores = stores
        self.limits = stores[-1].limits
        self.data_dir = stores[-1].data_dir

    def _holder(self, has: Callable[[TemplateStore], bool]) -> TemplateStore:
        for store in self.stores[:-1]:
            try:
                if has(store):
                    return store
            except TemplateError:   # a bad name: the last store says why
                break
        return self.stores[-1]

    def heat_template(self, name: str, mappings: dict[str, Any] | None = None) -> dict:
        return self._holder(lambda s: s.heat_path(name).is_file()).heat_template(name, mappings)

    def agent_template(self, name: str, mappings: dict[str, Any] | None = None) -> dict:
        return self._holder(lambda s: s.agent_path(name).is_file()).agent_template(
            name, mappings)

    def source(self, kind: str, name: str) -> tuple[str, str]:
        if kind == "script":
            return self._holder(lambda s: safe_join(s.scripts_dir, name).is_file()).source(
                kind, name)
        return self._holder(lambda s: s.agent_path(name).is_file()).source(kind, name)

    def script(self, name: str) -> bytes:
        return self._holder(lambda s: safe_join(s.scripts_dir, name).is_file()).script(name)

    def script_base64(self, name: str) -> str:
        return self._holder(
            lambda s: safe_join(s.scripts_dir, name).is_file()).script_base64(name)

    def agent_config(self, name: str) -> str:
        folder = Path("templates", "agent-config")
        return self._holder(lambda s: safe_join(s.data_dir / folder, name + ".template")
                            .is_file()).agent_config(name)

    def init_script(self, name: str) -> str:
        return self._holder(lambda s: safe_join(s.data_dir / "init-scripts", name)
                            .is_file()).init_script(name)
