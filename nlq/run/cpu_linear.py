"""The Linear layer every projection of the model uses: nn.Linear, with a faster path for the one-row
products of single-stream decoding on a CPU."""

import torch
import torch.nn as nn


class Linear(nn.Linear):
    """nn.Linear, except that a single row on a CPU (a token of single-stream decoding) goes through addmv.
    Decoding a token reads every weight once, so this product's rate is the decode speed, and this
    PyTorch's bf16 F.linear of one row is the slower kernel: GPT-2 small's 49 matrices took 19.0 ms
    against addmv's 14.3 ms (best of 6 interleaved rounds, 2-core Xeon with AMX; float32: equal). Under
    autocast nn.Linear's path is kept: autocast casts for F.linear, and has no rule for addmv."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cpu" or x.shape[:-1].numel() != 1 or torch.is_autocast_enabled("cpu"):
            return super().forward(x)
        row = x.reshape(-1)
        y = torch.mv(self.weight, row) if self.bias is None else torch.addmv(self.bias, self.weight, row)
        return y.view(*x.shape[:-1], -1)
