"""``fornace package upload|list|show|download|delete|transfer``: workflow packages.

A package (see :mod:`fornace.common.packages.archive` for its layout and
``package.json``) is uploaded as an archive, or as a folder packed on the fly
into a tar.gz; the API checks it as ``fornace workflow check`` does and
refuses it with every problem as ``file:line: message``.  Commands name a
package by id, ``NAME@VERSION``, or ``NAME`` when only one version is visible.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fornace.cli.client import pins
from fornace.cli.client.common import OK, add_command, add_group, dispatch, exit_code
from fornace.cli.client.confirm import DECLINED, add_yes_option, confirmed
from fornace.cli.client.http import ApiClient, ClientError
from fornace.cli.client.formats import (add_format_option, emit, format_of, local_time,
                                        print_json, print_table)
from fornace.common.errors import FornaceError
from fornace.common.packages.archive import SUFFIXES, PackageError, content_type, pack


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    actions = add_group(
        subparsers, "package", "upload, list, show, download, delete, transfer workflow "
        "packages; pin environments to them",
        "Workflow packages: workflows, templates, scripts and catalog entries with a "
        "name and a version (package.json), checked by the API as 'fornace workflow "
        "check' checks files. Commands name a package by id, NAME@VERSION, or NAME when "
        "only one version of it is visible.",
        ["fornace package upload ./my-package", "fornace package list",
         "fornace package show hello@1.0.0", "fornace package download hello -o hello.tgz",
         "fornace package delete hello@1.0.0 --yes", "fornace package use web hello@1.0.1",
         "fornace package pins web"])
    upload = add_command(
        actions, "upload", "upload a package (an archive, or a folder packed on the fly)",
        "Upload a zip, tar or tar.gz archive, or a folder laid out as a package "
        "(package.json, workflows/, templates/cf/, templates/agent/ with scripts/, "
        "optionally init-scripts/ and types.json), which is packed into a tar.gz. A "
        "package with problems is refused with each of them as file:line: message "
        "(exit status 2); a version uploaded already is refused (3): versions never "
        "change.",
        ["fornace package upload hello.zip", "fornace package upload ./hello",
         "fornace package upload ./shared --public"])
    upload.add_argument("source", metavar="FILE|DIR", help="the archive or the folder")
    upload.add_argument("--public", action="store_true",
                        help="a package every project sees (the cloud admin only)")
    listing = add_command(actions, "list", "list the packages",
                          "List the public packages and your project's: id, name, "
                          "version, public or not, size, when uploaded (local time).",
                          ["fornace package list", "fornace package list -f value"])
    add_format_option(listing)
    show = add_command(actions, "show", "show a package: manifest, digest and files",
                       "Show a package: its manifest, sha256 digest, who uploaded it "
                       "and the files it holds.",
                       ["fornace package show hello@1.0.0", "fornace package show ID --json"])
    show.add_argument("package", metavar="PACKAGE", help="id, NAME@VERSION or NAME")
    add_format_option(show)
    download = add_command(actions, "download", "save a package's archive as uploaded",
                           "Save a package's archive, checking its sha256 against the "
                           "digest the API gives (default file: NAME-VERSION.zip, .tar "
                           "or .tar.gz in the current folder; -o - writes it to "
                           "standard output).",
                           ["fornace package download hello@1.0.0",
                            "fornace package download hello -o /tmp/hello.tar.gz"])
    download.add_argument("package", metavar="PACKAGE", help="id, NAME@VERSION or NAME")
    download.add_argument("-o", "--output", metavar="FILE",
                          help="where to save it (- for standard output)")
    delete = add_command(actions, "delete", "delete a package no environment uses",
                         "Delete a package of your project (a public one: the cloud "
                         "admin only); refused while an environment uses it. Asks first "
                         "on a terminal; --yes does not ask.",
                         ["fornace package delete hello@1.0.0", "fornace package delete "
                          "hello@1.0.0 --yes"])
    add_yes_option(delete)
    delete.add_argument("package", metavar="PACKAGE", help="id, NAME@VERSION or NAME")
    transfer = add_command(
        actions, "transfer", "give a package name to another project (the cloud admin)",
        "A package name belongs to the project that first uploaded it: only that "
        "project uploads versions of it. The cloud admin gives NAME to project "
        "PROJECT_ID (--cloud: to the cloud admin, as a name first uploaded public); the "
        "versions uploaded already stay with the projects that uploaded them.",
        ["fornace package transfer hello 4f9c0d", "fornace package transfer hello --cloud"])
    transfer.add_argument("package_name", metavar="NAME", help="the package name")
    to = transfer.add_mutually_exclusive_group(required=True)
    to.add_argument("project", metavar="PROJECT_ID", nargs="?", help="the project's id")
    to.add_argument("--cloud", action="store_true", help="to the cloud admin")
    pins.add_parsers(actions)


def run(conf: Any) -> int:
    return dispatch(conf.command, {"package": _run})


def _run(command: Any, client: ApiClient) -> int:
    actions = {"upload": upload, "list": list_packages, "show": show,
               "download": download, "delete": delete, "transfer": transfer,
               **pins.HANDLERS}
    return actions[command.package_action](command, client)


def archive_of(source: str) -> bytes:
    """The bytes to upload: the file, or the folder packed into a tar.gz."""
    path = Path(source)
    try:
        data = pack(path) if path.is_dir() else path.read_bytes()
        content_type(data)
    except FileNotFoundError:
        raise FornaceError(f"{source}: no such file or folder") from None
    except OSError as exc:
        raise FornaceError(f"{source}: cannot read it: {exc.strerror or exc}") from None
    except PackageError as exc:
        raise FornaceError(f"{source}: {exc}") from None
    return data


def upload(command: Any, client: ApiClient) -> int:
    data = archive_of(command.source)
    query = "?public=true" if command.public else ""
    try:
        raw = client.exchange("POST", f"/packages{query}", data,
                              {"Content-Type": content_type(data),
                               "Accept": "application/json"})
    except ClientError as exc:
        problems = exc.error.get("problems")
        if exc.status != 400 or not isinstance(problems, list):
            raise
        print(f"fornace: {command.source}: the package is refused "
              f"({len(problems)} problem(s)):", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        return exit_code(exc)
    package = json.loads(raw)
    if command.json:
        print_json(package)
    else:
        print(f"uploaded package {package['name']} {package['version']} (id {package['id']}, "
              f"{package['size']} bytes, sha256 {package['digest']})")
    return OK


def find_package(client: ApiClient, wanted: str) -> dict[str, Any]:
    """The visible package whose id is ``wanted``, or named ``NAME@VERSION``, or
    ``NAME`` when it has one version only."""
    packages = client.get("/packages")["packages"]
    for package in packages:
        if package["id"] == wanted:
            return package
    name, _, version = wanted.partition("@")
    named = [p for p in packages if p["name"] == name and (not version
                                                           or p["version"] == version)]
    if len(named) == 1:
        return named[0]
    if named:
        versions = ", ".join(f"{name}@{p['version']}" for p in named)
        raise FornaceError(f"package {name} has several versions: name one ({versions})")
    raise FornaceError(f"no package is named or has the id {wanted!r} "
                       f"(see fornace package list)")


def list_packages(command: Any, client: ApiClient) -> int:
    format_of(command)
    data = client.get("/packages")
    headers = ("ID", "NAME", "VERSION", "PUBLIC", "SIZE", "UPLOADED", "DESCRIPTION")
    rows = [(p["id"], p["name"], p["version"], "yes" if p["public"] else "no", p["size"],
             local_time(p["created"]), p["description"]) for p in data["packages"]]
    emit(command, data, rows, lambda: print_table(headers, rows, empty="(no packages)"))
    return OK


def show(command: Any, client: ApiClient) -> int:
    format_of(command)
    package = client.get(f"/packages/{find_package(client, command.package)['id']}")
    fields = (package["id"], package["name"], package["version"], package["digest"],
              package["size"], local_time(package["created"]))

    def table() -> None:
        owner = "public" if package["public"] else f"project {package['tenant_id']}"
        print(f"package {package['name']} {package['version']} (id {package['id']})\n"
              f"  description  {package['description']}\n  owner        {owner}\n"
              f"  uploaded     {fields[5]} by {package['uploaded_by']}\n"
              f"  archive      {package['content_type']}, {package['size']} bytes\n"
              f"  sha256       {package['digest']}\n  files")
        for name in package["files"]:
            print(f"    {name}")
    emit(command, package, [fields], table)
    return OK


def download(command: Any, client: ApiClient) -> int:
    package = find_package(client, command.package)
    data = client.exchange("GET", f"/packages/{package['id']}/download")
    digest = hashlib.sha256(data).hexdigest()
    if digest != package["digest"]:
        raise FornaceError(f"the archive of package {package['name']} {package['version']} "
                           f"came damaged: sha256 {digest}, not {package['digest']}")
    if command.output == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return OK
    target = Path(command.output or f"{package['name']}-{package['version']}"
                                    f"{SUFFIXES.get(package['content_type'], '')}")
    try:
        target.write_bytes(data)
    except OSError as exc:
        raise FornaceError(f"{target}: cannot write it: {exc.strerror or exc}") from None
    if command.json:
        print_json({**package, "file": str(target)})
    else:
        print(f"saved package {package['name']} {package['version']} to {target} "
              f"({len(data)} bytes, sha256 {digest})")
    return OK


def delete(command: Any, client: ApiClient) -> int:
    package = find_package(client, command.package)
    label = f"package {package['name']} {package['version']}"
    if not confirmed(command, f"Delete {label}?", f"{label} not deleted"):
        return DECLINED
    client.delete(f"/packages/{package['id']}")
    if command.json:
        print_json({"deleted": package})
    else:
        print(f"deleted {label} (id {package['id']})")
    return OK


def transfer(command: Any, client: ApiClient) -> int:
    project = None if command.cloud else command.project
    moved = client.request("PUT", f"/packages/names/{quote(command.package_name, safe='')}",
                           {"project_id": project})
    if command.json:
        print_json(moved)
    else:
        def owner(project_id: str | None) -> str:
            return "the cloud admin" if project_id is None else f"project {project_id}"
        print(f"package name {moved['name']} now belongs to {owner(moved['project_id'])} "
              f"(before: {owner(moved['previous_project_id'])})")
    return OK
