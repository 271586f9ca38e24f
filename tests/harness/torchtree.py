"""One exact comparison of torch state trees (tensors, dicts, lists) for the checkpoint tests."""

from __future__ import annotations

from typing import Any

import torch


def assert_tree_equal(a: Any, b: Any, where: str = "") -> None:
    """Bit-for-bit equality of two state trees; ``where`` names the path of a difference."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert set(a) == set(b), where
        for k in a:
            assert_tree_equal(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_tree_equal(x, y, f"{where}[{i}]")
    else:
        assert a == b, where
