"""``fornace package``: upload (an archive or a folder), list, show, download
and delete against a running Fornace, as a script runs them."""
from __future__ import annotations

import hashlib
import json
import tarfile

import pytest

from clikit import as_json, ok, one_line_error
from fornace.cli.main import main
from packagekit import package_files, write_folder, zip_of


def test_a_folder_is_packed_uploaded_shown_downloaded_and_deleted(cli, tmp_path):
    folder = write_folder(tmp_path / "hello", package_files("cli-hello", "1.0.0"))
    printed = ok(cli("package", "upload", str(folder)))
    assert printed.startswith("uploaded package cli-hello 1.0.0 (id ")

    listed = as_json(cli("package", "list", "--json"))["packages"]
    package = next(p for p in listed if p["name"] == "cli-hello")
    assert package["content_type"] == "application/gzip"
    assert f"{package['id']}\tcli-hello\t1.0.0\tno" in ok(cli("package", "list", "-f", "value"))

    shown = ok(cli("package", "show", "cli-hello"))
    assert f"sha256       {package['digest']}" in shown
    assert "    workflows/hello.xml" in shown
    assert as_json(cli("package", "show", "cli-hello@1.0.0", "--json"))["files"] == \
        sorted(package_files())

    saved = ok(cli("package", "download", "cli-hello"))          # into the current folder
    target = tmp_path / "cli-hello-1.0.0.tar.gz"
    assert saved.startswith("saved package cli-hello 1.0.0 to cli-hello-1.0.0.tar.gz")
    assert hashlib.sha256(target.read_bytes()).hexdigest() == package["digest"]
    with tarfile.open(target) as archive:
        assert sorted(archive.getnames()) == sorted(package_files())
    other = tmp_path / "copy.tgz"
    ok(cli("package", "download", package["id"], "-o", str(other)))
    assert other.read_bytes() == target.read_bytes()

    # versions never change: the same version again is refused (exit status 2)
    again = one_line_error(cli("package", "upload", str(folder)), 2)
    assert "version 1.0.0 of package cli-hello exists already" in again

    refused = one_line_error(cli("package", "delete", "cli-hello"), 2)   # no terminal
    assert "pass --yes" in refused
    assert ok(cli("package", "delete", "cli-hello@1.0.0", "--yes")).startswith(
        "deleted package cli-hello 1.0.0")
    assert "no package is named" in one_line_error(cli("package", "show", "cli-hello"), 2)


def test_an_archive_with_problems_lists_each_with_file_and_line(cli, tmp_path):
    """Every problem at once: the XML's, each missing script, each bad type."""
    files = package_files("cli-broken", workflow=(
        "<workflow>\n<rule match='$'>\n<frobnicate/>\n"
        "<send-command template='Hello' service='s' unit='u'/>\n</rule>\n</workflow>\n"))
    files["templates/agent/Hello.template"] = json.dumps(
        {"Scripts": ["hello.sh", "gone.sh", "lost.sh"], "Commands": []}).encode()
    files["types.json"] = b'{"types": {\n "a": {"extends": "nowhere"},\n "b": {"x": 1}}}'
    archive = tmp_path / "broken.zip"
    archive.write_bytes(zip_of(files))
    done = cli("package", "upload", str(archive))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == f"fornace: {archive}: the package is refused (5 problem(s)):"
    assert lines[1:] == [
        "  workflows/hello.xml:3: unknown function <frobnicate>",
        "  workflows/hello.xml:4: template 'Hello': templates/agent/scripts/gone.sh: "
        "script 'gone.sh': No such file or directory",
        "  workflows/hello.xml:4: template 'Hello': templates/agent/scripts/lost.sh: "
        "script 'lost.sh': No such file or directory",
        "  types.json:3: type 'b': unknown key(s) x",
        "  types.json:2: type 'a' extends unknown type 'nowhere'"]


def test_two_versions_are_named_with_their_version(cli, tmp_path):
    for version in ("1.0", "2.0"):
        archive = tmp_path / f"v{version}.zip"
        archive.write_bytes(zip_of(package_files("cli-two", version)))
        ok(cli("package", "upload", str(archive), "--json"))
    ambiguous = one_line_error(cli("package", "show", "cli-two"), 2)
    assert "several versions: name one (cli-two@1.0, cli-two@2.0)" in ambiguous
    assert as_json(cli("package", "show", "cli-two@2.0", "--json"))["version"] == "2.0"
    for version in ("1.0", "2.0"):
        ok(cli("package", "delete", f"cli-two@{version}", "-y"))


def test_what_is_no_package_is_refused_before_sending_it(cli, tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    assert one_line_error(cli("package", "upload", str(text)), 2) == (
        f"fornace: {text}: the package is not a zip, tar or tar.gz archive")
    assert one_line_error(cli("package", "upload", str(tmp_path / "nope")), 2) == (
        f"fornace: {tmp_path / 'nope'}: no such file or folder")


def test_each_package_command_has_a_description_and_examples(capsys):

    for action in ("upload", "list", "show", "download", "delete", "transfer"):
        with pytest.raises(SystemExit) as done:
            main(["package", action, "--help"])
        assert done.value.code == 0
        text = capsys.readouterr().out
        assert text.startswith(f"usage: fornace package {action}")
        assert "\nexamples:\n  fornace package" in text and "--url URL" in text
