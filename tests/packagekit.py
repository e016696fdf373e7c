"""Helpers of the workflow package tests: a small valid package, as a folder or
as archives of each kind, and archives built member by member (for the unsafe
ones a user could send)."""
from __future__ import annotations

import hashlib
import io
import json
import tarfile
import zipfile
from pathlib import Path

WORKFLOW = """<workflow>
  <rule match="$.services[?(@.type == 'helloService')].units[?(not @.state.hello)]">
    <send-command template="Hello" service="s" unit="u">
      <success><set path="state.hello">true</set></success>
    </send-command>
  </rule>
</workflow>
"""
PLAN = {"Scripts": ["hello.sh"], "Commands": [{"Name": "hello", "Arguments": {}}]}


def package_files(name: str = "hello", version: str = "1.0.0",
                  workflow: str = WORKFLOW) -> dict[str, bytes]:
    """The members of a valid package: manifest, a workflow, its plan and script."""
    return {"package.json": json.dumps({"name": name, "version": version,
                                        "description": "says hello"}, indent=2).encode(),
            "workflows/hello.xml": workflow.encode(),
            "templates/agent/Hello.template": json.dumps(PLAN).encode(),
            "templates/agent/scripts/hello.sh": b"#!/bin/sh\necho hello\n"}


def write_folder(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def zip_of(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def tar_of(files: dict[str, bytes], mode: str = "w:gz",
           extra: list[tarfile.TarInfo] = ()) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        for info in extra:
            archive.addfile(info)
    return buffer.getvalue()


class Archives:
    """A stand-in for the packages table: id -> archive, counting the reads."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.reads: list[str] = []

    def add(self, package_id: str, files: dict[str, bytes]) -> dict[str, str]:
        data = self.data[package_id] = zip_of(files)
        manifest = json.loads(files["package.json"])
        return {"id": package_id, "name": manifest["name"], "version": manifest["version"],
                "digest": hashlib.sha256(data).hexdigest()}

    def __call__(self, package_id: str) -> bytes | None:
        self.reads.append(package_id)
        return self.data.get(package_id)
