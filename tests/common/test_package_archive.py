"""Workflow package archives (fornace.common.packages.archive): what is unpacked,
and each unsafe or malformed archive refused with the member it names."""
from __future__ import annotations

import io
import json
import stat
import tarfile
import zipfile

import pytest

from packagekit import package_files, tar_of, write_folder, zip_of
from fornace.common.packages.archive import (TAR, TAR_GZ, ZIP, Manifest, PackageError,
                                             PackageLimits, content_type, pack,
                                             read_manifest, unpack)

NAMES = sorted(package_files())


def refused(data: bytes, tmp_path, limits: PackageLimits = PackageLimits()) -> list[str]:
    with pytest.raises(PackageError) as caught:
        unpack(data, tmp_path / "out", limits)
    return caught.value.problems


@pytest.mark.parametrize("build,kind", [(zip_of, ZIP), (tar_of, TAR_GZ),
                                        (lambda f: tar_of(f, "w"), TAR)])
def test_each_kind_of_archive_unpacks_with_its_manifest(build, kind, tmp_path):
    data = build(package_files())
    assert content_type(data) == kind
    assert unpack(data, tmp_path) == NAMES
    assert (tmp_path / "templates/agent/scripts/hello.sh").read_bytes().startswith(b"#!")
    assert read_manifest(tmp_path) == Manifest("hello", "1.0.0", "says hello")


def test_a_folder_packs_into_what_unpacks_the_same(tmp_path):
    folder = write_folder(tmp_path / "src", package_files())
    (folder / "workflows" / "__pycache__").mkdir()
    (folder / "workflows" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    assert unpack(pack(folder), tmp_path / "out") == NAMES


def test_a_folder_with_a_link_is_not_packed(tmp_path):
    folder = write_folder(tmp_path / "src", package_files())
    (folder / "workflows" / "other.xml").symlink_to("/etc/passwd")
    with pytest.raises(PackageError, match="links are not allowed"):
        pack(folder)


def test_not_an_archive_and_a_damaged_one(tmp_path):
    assert refused(b"hello, world", tmp_path) == [
        "the package is not a zip, tar or tar.gz archive"]
    broken = zip_of(package_files())[:200]
    assert refused(broken, tmp_path)[0].startswith("the archive is damaged: ")


@pytest.mark.parametrize("name,problem", [
    ("/etc/cron.d/evil", "absolute paths are not allowed"),
    ("C:/evil", "absolute paths are not allowed"),
    ("workflows/../../evil.xml", "'..' is not allowed"),
    ("workflows\\evil.xml", "backslashes and NUL are not allowed"),
])
def test_unsafe_names_are_refused_before_anything_is_written(name, problem, tmp_path):
    for build in (zip_of, tar_of):
        problems = refused(build({**package_files(), name: b"x"}), tmp_path)
        assert problems == [f"{name}: {problem}" + (" in names" if "NUL" in problem else
                                                      " in a package's paths" if ".." in problem
                                                      else "")]
        assert not (tmp_path / "out").exists()


def test_links_and_devices_in_a_tar_are_refused(tmp_path):
    link = tarfile.TarInfo("workflows/evil.xml")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    hard = tarfile.TarInfo("workflows/hard.xml")
    hard.type, hard.linkname = tarfile.LNKTYPE, "workflows/hello.xml"
    fifo = tarfile.TarInfo("workflows/fifo")
    fifo.type = tarfile.FIFOTYPE
    assert refused(tar_of(package_files(), extra=[link]), tmp_path) == [
        "workflows/evil.xml: links are not allowed in a package"]
    assert refused(tar_of(package_files(), extra=[hard]), tmp_path) == [
        "workflows/hard.xml: links are not allowed in a package"]
    assert refused(tar_of(package_files(), extra=[fifo]), tmp_path) == [
        "workflows/fifo: only files and folders are allowed"]


def test_a_link_in_a_zip_is_refused(tmp_path):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in package_files().items():
            archive.writestr(name, data)
        info = zipfile.ZipInfo("workflows/evil.xml")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(info, "/etc/passwd")
    assert refused(buffer.getvalue(), tmp_path) == [
        "workflows/evil.xml: links are not allowed in a package"]


def test_too_big_and_too_many_files(tmp_path):
    data = zip_of(package_files())
    assert refused(data, tmp_path, PackageLimits(max_bytes=100)) == [
        f"the package is {len(data)} bytes, more than the 100 allowed "
        f"([api] max_package_bytes)"]
    many = {**package_files(), **{f"workflows/w{i}.xml": b"<workflow/>" for i in range(10)}}
    assert refused(zip_of(many), tmp_path, PackageLimits(max_files=5)) == [
        "the package has 14 files, more than the 5 allowed ([api] max_package_files)"]


@pytest.mark.parametrize("build", [zip_of, tar_of])
def test_a_bomb_stops_at_the_unpacked_limit(build, tmp_path):
    """10 MB of zeros compress to a few kB: the bytes written are counted."""
    bomb = build({**package_files(), "templates/cf/Big.template": bytes(10_000_000)})
    assert len(bomb) < 100_000
    problems = refused(bomb, tmp_path, PackageLimits(max_unpacked_bytes=1_000_000))
    assert len(problems) == 1 and "expands to more than 1000000 bytes" in problems[0]
    written = sum(p.stat().st_size for p in (tmp_path / "out").rglob("*") if p.is_file()) \
        if (tmp_path / "out").exists() else 0
    assert written <= 1_000_000


def test_a_zip_that_lies_about_its_sizes_is_still_counted(tmp_path):
    data = bytearray(zip_of({**package_files(), "templates/cf/Big.template": bytes(2_000_000)}))
    # the declared sizes of the member (local header and central directory) say 10 bytes
    start = data.find(b"PK\x01\x02")
    while start != -1:
        name_length = int.from_bytes(data[start + 28:start + 30], "little")
        if data[start + 46:start + 46 + name_length] == b"templates/cf/Big.template":
            data[start + 24:start + 28] = (10).to_bytes(4, "little")
        start = data.find(b"PK\x01\x02", start + 4)
    problems = refused(bytes(data), tmp_path, PackageLimits(max_unpacked_bytes=1_000_000))
    assert len(problems) == 1 and ("expands to more than" in problems[0]
                                   or problems[0].startswith("the archive is damaged"))


def test_the_layout_and_the_manifest_are_required(tmp_path):
    files = package_files()
    del files["package.json"]
    files["scripts/hello.sh"] = b"echo"
    files["notes.txt"] = b"hi"
    assert refused(zip_of(files), tmp_path) == [
        "scripts/hello.sh: unexpected file: scripts go in templates/agent/scripts/ "
        "(the catalog's layout)",
        "notes.txt: unexpected file: a package holds only workflows/, templates/, "
        "init-scripts/, package.json, types.json",
        "package.json: missing (name, version and description of the package)"]


def test_a_member_twice_is_refused(tmp_path):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in [*package_files().items(), ("workflows/hello.xml", b"<x/>")]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    assert refused(buffer.getvalue(), tmp_path) == ["workflows/hello.xml: is in the archive twice"]


@pytest.mark.parametrize("manifest,problems", [
    (b'{\n  "name": "x",\n  "version": 1.0,,\n}', ["package.json:3: invalid JSON: "
                                                    "Expecting property name enclosed in "
                                                    "double quotes"]),
    (b'["x"]', ["package.json: must be a JSON object with name and version"]),
    (json.dumps({"name": "../x", "version": "1 0", "extra": 1}).encode(), [
        "package.json: name must be 1 to 64 letters, digits, '.', '_' or '-' (starting "
        "with a letter or digit), not '../x'",
        "package.json: version must be 1 to 32 letters, digits, '.', '+' or '-' (e.g. "
        "1.2.0), not '1 0'",
        "package.json: unknown fields extra (known: name, version, description)"]),
    (b'\xff\xfe', ["package.json: not UTF-8 text"]),
    (b'{"name": "x",\n "version": ' + b"[" * 5000 + b"]" * 5000 + b"}",
     ["package.json:2: JSON nested deeper than 100 levels at column 112 ($.version[0]"]),
])
def test_a_wrong_manifest_names_its_line_or_field(manifest, problems, tmp_path):
    (tmp_path / "package.json").write_bytes(manifest)
    with pytest.raises(PackageError) as caught:
        read_manifest(tmp_path)
    assert caught.value.problems[0].startswith(problems[0])
    assert caught.value.problems[1:] == problems[1:]
