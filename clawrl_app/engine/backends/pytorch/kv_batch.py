"""Continuous batching of KV caches for the torch backend.

A `DecodeBatch` holds the rows that decode together under one policy version. New
requests are prefilled alone and merged in (their cache left-padded to the batch length);
finished rows are dropped; padding columns no row needs any more are trimmed. Only the
tensors of transformers' `DynamicCache` layers are touched, through `_layers`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F


def _layers(cache: Any) -> list[Any]:
    return list(cache.layers)


@dataclass
class DecodeBatch:
    """Rows decoding in lockstep: KV cache, attention mask and next input per row."""

    cache: Any
    mask_BT: torch.Tensor  # (B, T) 1 = real token, 0 = left padding
    rows: list[Any] = field(default_factory=list)
    padded: bool = False
    """Some row has left padding: the model needs the mask. Without padding none is passed,
    because transformers reads a mask back to the host (`mask.all()`) on every step."""

    @property
    def size(self) -> int:
        return len(self.rows)

    def merge(self, other: DecodeBatch) -> None:
        """Append `other`'s rows (cache and mask), left-padding the shorter side."""
        t_self, t_other = self.mask_BT.shape[1], other.mask_BT.shape[1]
        t = max(t_self, t_other)
        for mine, theirs in zip(_layers(self.cache), _layers(other.cache), strict=True):
            mine.keys = torch.cat([_left_pad(mine.keys, t), _left_pad(theirs.keys, t)], dim=0)
            mine.values = torch.cat([_left_pad(mine.values, t), _left_pad(theirs.values, t)], dim=0)
        self.mask_BT = torch.cat(
            [F.pad(self.mask_BT, (t - t_self, 0)), F.pad(other.mask_BT, (t - t_other, 0))], dim=0
        )
        self.rows.extend(other.rows)
        self.padded = self.padded or other.padded or t_self != t_other

    def keep(self, keep_idx: list[int]) -> None:
        """Keep only the rows at `keep_idx`, then trim padding columns no row uses."""
        if len(keep_idx) == len(self.rows):
            return
        idx = torch.tensor(keep_idx, dtype=torch.long, device=self.mask_BT.device)
        self.rows = [self.rows[i] for i in keep_idx]
        self.mask_BT = self.mask_BT[idx]
        for layer in _layers(self.cache):
            layer.keys = layer.keys[idx]
            layer.values = layer.values[idx]
        if not self.rows or not self.padded:  # no padding: no column to trim, nothing to read
            return
        # each row's padding columns; one read per finished row gives both what every row
        # leaves unused (trimmed) and whether any padding remains
        lead_B = (self.mask_BT.cumsum(dim=1) == 0).sum(dim=1)
        first_real, most = torch.stack([lead_B.min(), lead_B.max()]).tolist()
        self.padded = most > first_real
        if first_real > 0:
            self.mask_BT = self.mask_BT[:, first_real:]
            for layer in _layers(self.cache):
                layer.keys = layer.keys[:, :, first_real:]
                layer.values = layer.values[:, :, first_real:]

    def step_inputs(self, next_ids: list[int]) -> dict[str, torch.Tensor]:
        """Model inputs for one decode step; grows the mask by one column."""
        self.mask_BT = F.pad(self.mask_BT, (0, 1), value=1)
        positions_B1 = (self.mask_BT.sum(dim=1, keepdim=True) - 1).long()  # (B, 1)
        ids_B1 = torch.tensor(next_ids, dtype=torch.long, device=self.mask_BT.device).unsqueeze(1)
        inputs = {"input_ids": ids_B1, "position_ids": positions_B1}  # (B, 1) each
        if self.padded:
            inputs["attention_mask"] = self.mask_BT
        return inputs


def _left_pad(x_BHTD: torch.Tensor, t: int) -> torch.Tensor:
    """Left-pad the time axis (dim 2) of a (B, H, T, D) cache tensor with zeros to length t."""
    missing = t - x_BHTD.shape[2]
    if missing <= 0:
        return x_BHTD
    return F.pad(x_BHTD, (0, 0, missing, 0))
