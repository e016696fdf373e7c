"""The shared package loader and layering rule (fornace.common.packages): a
stored version is read once per digest, refused when its sha256 is not the
one named, unpacked into a folder of its own and kept (the last ``keep``);
package files replace the data folder's files of the same name, templates
are looked for in the packages first."""
from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import pytest

from packagekit import Archives, package_files, write_folder
from fornace.common.errors import FornaceError
from fornace.common.packages.archive import PackageError, PackageLimits
from fornace.common.packages.layers import (DATA_FOLDER, Layer, in_effect, package_source,
                                            template_order, workflow_paths)
from fornace.common.packages.loader import ArchiveAltered, ArchiveMissing, PackageLoader


@pytest.fixture
def loader():
    made = PackageLoader(PackageLimits(), keep=2)
    yield made
    made.close()


def test_a_version_is_unpacked_once_and_its_folder_reused(loader):
    archives = Archives()
    ref = archives.add("p1", package_files())
    assert not loader.has(ref["digest"])
    folder = loader.get(ref, archives)
    assert (folder / "workflows" / "hello.xml").read_bytes() == \
        package_files()["workflows/hello.xml"]
    assert loader.has(ref["digest"])
    assert loader.get(ref, archives) == folder
    assert loader.get({**ref, "id": "p1-again"}, archives) == folder   # by digest
    assert archives.reads == ["p1"]


def test_an_archive_whose_sha256_is_not_the_one_named_is_refused(loader):
    archives = Archives()
    ref = archives.add("p1", package_files())
    with pytest.raises(ArchiveAltered, match="does not match its sha256: it was altered"):
        loader.get({**ref, "digest": "0" * 64}, archives)
    assert not loader.has("0" * 64)
    with pytest.raises(ArchiveMissing, match=r"its archive \(id gone\) is not in the database"):
        loader.get({**ref, "id": "gone"}, archives)
    assert isinstance(ArchiveMissing(ref), PackageError)


def test_what_does_not_unpack_or_prepare_is_refused_without_this_processs_folders(tmp_path):
    def prepare(ref, folder: Path) -> Path:
        raise FornaceError(f"{folder}/workflows/hello.xml:1: not a workflow")

    loader = PackageLoader(PackageLimits(), prepare=prepare, prefix="fornace-test-")
    archives = Archives()
    ref = archives.add("p1", package_files())
    with pytest.raises(PackageError) as caught:
        loader.get(ref, archives)
    assert caught.value.problems == ["workflows/hello.xml:1: not a workflow"]
    assert list(loader._root.iterdir()) == []      # its folder went with it
    broken = {"id": "b", "name": "b", "version": "1", "digest": hashlib.sha256(b"no").hexdigest()}
    with pytest.raises(PackageError, match="not a zip, tar or tar.gz"):
        loader.get(broken, {"b": b"no"}.get)
    loader.close()
    assert not loader._root.exists()


def test_what_is_prepared_is_kept_once_per_digest():
    prepared: list[str] = []

    def prepare(ref, folder: Path) -> tuple[str, Path]:
        prepared.append(ref["id"])
        return ref["id"], folder

    loading = PackageLoader(PackageLimits(), prepare=prepare)
    archives = Archives()
    ref = archives.add("p1", package_files())
    first = loading.get(ref, archives)
    assert loading.get(ref, archives) is first
    assert prepared == ["p1"] and first[0] == "p1"
    loading.close()


def test_one_thread_reads_a_version_while_the_others_wait():
    loader = PackageLoader(PackageLimits())
    archives = Archives()
    ref = archives.add("p1", package_files())
    entered, release = threading.Event(), threading.Event()

    def slow(package_id: str) -> bytes | None:
        entered.set()
        assert release.wait(30)
        return archives(package_id)

    got: list[Path] = []
    first = threading.Thread(target=lambda: got.append(loader.get(ref, slow)))
    first.start()
    assert entered.wait(30)
    second = threading.Thread(target=lambda: got.append(loader.get(ref, slow)))
    second.start()
    release.set()
    first.join(30)
    second.join(30)
    assert archives.reads == ["p1"] and len(got) == 2 and got[0] == got[1]
    loader.close()


def test_only_the_last_versions_are_kept_and_evicted_folders_go(loader):
    archives = Archives()
    refs = [archives.add(f"p{n}", package_files(version=f"1.0.{n}")) for n in range(3)]
    folders = [loader.get(ref, archives) for ref in refs]
    assert not folders[0].exists() and folders[2].exists()
    assert not loader.has(refs[0]["digest"]) and loader.has(refs[1]["digest"])
    loader.get(refs[0], archives)                  # forgotten: read again
    assert archives.reads == ["p0", "p1", "p2", "p0"]


def test_evicted_folders_may_stay_until_close():
    loader = PackageLoader(PackageLimits(), keep=1, remove_evicted=False)
    archives = Archives()
    refs = [archives.add(f"p{n}", package_files(version=f"1.0.{n}")) for n in range(2)]
    folders = [loader.get(ref, archives) for ref in refs]
    assert not loader.has(refs[0]["digest"])
    assert (folders[0] / "workflows" / "hello.xml").is_file()   # a running job still reads it
    loader.close()
    assert not folders[0].exists() and not folders[1].exists()


# -- the layering rule ---------------------------------------------------------------

def test_a_package_file_replaces_the_data_folders_file_of_the_same_name(tmp_path):
    data = write_folder(tmp_path / "data", {"workflows/Common.xml": b"<workflow/>",
                                            "workflows/Deploy.xml": b"<workflow/>"})
    first = write_folder(tmp_path / "a", {"workflows/Common.xml": b"<workflow/>",
                                          "workflows/hello.xml": b"<workflow/>"})
    second = write_folder(tmp_path / "b", {"workflows/hello.xml": b"<workflow/>"})
    refs = [{"id": "a", "name": "a", "version": "1.0"}, {"id": "b", "name": "b", "version": "2.0"}]
    files = in_effect(Layer(DATA_FOLDER, workflow_paths(data), data),
                      [Layer(package_source(ref), workflow_paths(folder), folder, ref)
                       for ref, folder in zip(refs, (first, second))])
    found = {f.name: f for f in files}
    assert [f.name for f in files] == ["Common.xml", "Deploy.xml", "hello.xml"]
    assert found["Common.xml"].item == first / "workflows" / "Common.xml"
    assert found["Common.xml"].replaces == (DATA_FOLDER,)
    assert found["Common.xml"].layer.ref == refs[0]
    assert found["Deploy.xml"].item == data / "workflows" / "Deploy.xml"
    assert found["Deploy.xml"].layer.source == DATA_FOLDER and found["Deploy.xml"].replaces == ()
    # a later package (by pinned name) replaces an earlier one's
    assert found["hello.xml"].item == second / "workflows" / "hello.xml"
    assert found["hello.xml"].replaces == ("package a 1.0",)


def test_templates_are_found_in_the_packages_first(tmp_path):
    plan = "templates/agent/Hello.template"
    data = write_folder(tmp_path / "data", {plan: b"{}", "templates/cf/Net.template": b"{}"})
    first = write_folder(tmp_path / "a", {plan: b'{"a": 1}'})
    second = write_folder(tmp_path / "b", {plan: b'{"b": 1}'})
    order = template_order(data, [first, second])
    assert order == [first, second, data]

    def holder(name: str) -> Path:
        return next(folder for folder in order if (folder / name).is_file())
    assert holder(plan) == first
    assert holder("templates/cf/Net.template") == data
