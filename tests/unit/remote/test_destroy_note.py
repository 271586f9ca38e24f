"""remote/survive.py destroy_note: queue add's one info line when checkpoints go to a mount
that survives a stop but not a destroy (principle 4), through a symlink too."""

from __future__ import annotations

from pathlib import Path

from gpuroom.remote.survive import destroy_note


def test_on_the_stop_only_volume_is_said_elsewhere_is_not(tmp_path: Path) -> None:
    volume = tmp_path / "workspace"
    (volume / "runs" / "j1").mkdir(parents=True)
    (tmp_path / "link").symlink_to(volume)
    said = destroy_note(str(tmp_path / "link" / "runs" / "j1"), [str(volume)])
    assert said is not None and "survives a stop but not a destroy" in said
    assert destroy_note(str(tmp_path / "elsewhere"), [str(volume)]) is None
    assert destroy_note(str(volume / "runs"), []) is None  # no such mount: no claim
