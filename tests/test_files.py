"""rftkit.files: a folder gets its final name only once whole."""

import pytest

from rftkit.files import atomic_folder


def test_a_folder_is_renamed_into_place_only_when_its_block_succeeds(tmp_path):
    target = tmp_path / "model"
    (tmp_path / "model.partial").mkdir()
    (tmp_path / "model.partial" / "stale.bin").write_text("from a killed run")
    with pytest.raises(RuntimeError):
        with atomic_folder(target) as partial:
            assert not (partial / "stale.bin").exists()  # a leftover is cleared before the block writes
            (partial / "config.json").write_text("{}")
            raise RuntimeError("killed half-way")
    assert not target.exists()
    with atomic_folder(target) as partial:
        (partial / "config.json").write_text("{}")
    assert sorted(p.name for p in target.iterdir()) == ["config.json"] and not partial.exists()
