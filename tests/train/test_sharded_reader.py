"""A sharded checkpoint's index is read as data only: a real one loads, a tampered one is refused unrun."""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")


def _save_sharded(folder: Path) -> dict[str, torch.Tensor]:
    import torch.distributed.checkpoint as dcp

    state = {"model.weight": torch.arange(6.0).reshape(2, 3), "step": torch.tensor(4)}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.save(state, checkpoint_id=str(folder), no_dist=True)
    return state


def test_a_real_index_loads_the_tensors(tmp_path: Path) -> None:
    import torch.distributed.checkpoint as dcp

    from studio.train.memory.sharded_reader import DataOnlyReader

    saved = _save_sharded(tmp_path / "sharded")
    index = DataOnlyReader(tmp_path / "sharded").read_metadata()
    assert set(index.state_dict_metadata) == {"model.weight", "step"}
    target = {"model.weight": torch.zeros(2, 3), "step": torch.tensor(0)}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(target, storage_reader=DataOnlyReader(tmp_path / "sharded"), no_dist=True)
    assert torch.equal(target["model.weight"], saved["model.weight"]) and int(target["step"]) == 4


class _RunsCode:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (Path.touch, (str(Path(_MARKER)),))


_MARKER = ""


def test_an_index_that_would_run_code_is_refused_unrun(tmp_path: Path) -> None:
    from studio.train.errors import TrainError
    from studio.train.memory.sharded_reader import DataOnlyReader

    global _MARKER
    _MARKER = str(tmp_path / "ran")
    _save_sharded(tmp_path / "step-2" / "sharded")
    index = tmp_path / "step-2" / "sharded" / ".metadata"
    index.write_bytes(pickle.dumps(_RunsCode()))
    with pytest.raises(TrainError) as caught:
        DataOnlyReader(tmp_path / "step-2" / "sharded").read_metadata()
    assert caught.value.kind == "checkpoint"
    assert f"the index {index} of the sharded checkpoint {tmp_path / 'step-2'} cannot be read as data" \
        in caught.value.message
    assert "is not part of a checkpoint index" in caught.value.message
    assert "resume from an earlier checkpoint" in caught.value.hint
    assert not (tmp_path / "ran").exists()
