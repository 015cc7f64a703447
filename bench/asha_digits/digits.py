"""A verbatim copy of the peers' bench-peers/_digits.py (../shared/bench-peers/ beside the
repository), so that both sides train exactly the same thing.

The shared 'real' workload: an MLP on sklearn's digits (1797 x 64, ships inside scikit-learn).

Split 80/20 with a fixed seed; features scaled to [0,1]. Batch size 64 (23 train batches per epoch).
"""

import numpy as np
import torch
from torch import nn

BATCH = 64


def load_data(seed=0):
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(x))
    x = (x / 16.0).astype(np.float32)
    n_val = len(x) // 5
    va, tr = idx[:n_val], idx[n_val:]
    return x[tr], y[tr].astype(np.int64), x[va], y[va].astype(np.int64)


def make_model(hidden, seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 10)
    )


class Trainer:
    """Holds model/optimizer/tensors; train_epoch() and val_acc() are the unit of work."""

    def __init__(self, data, hidden, lr, seed=0):
        xtr, ytr, xva, yva = data
        self.xtr, self.ytr = torch.from_numpy(xtr), torch.from_numpy(ytr)
        self.xva, self.yva = torch.from_numpy(xva), torch.from_numpy(yva)
        self.model = make_model(hidden, seed)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=lr)
        self.loss = nn.CrossEntropyLoss()
        self.gen = torch.Generator().manual_seed(seed)
        self.batches = 0

    def train_epoch(self):
        self.model.train()
        perm = torch.randperm(len(self.xtr), generator=self.gen)
        for i in range(0, len(perm), BATCH):
            b = perm[i : i + BATCH]
            self.opt.zero_grad()
            self.loss(self.model(self.xtr[b]), self.ytr[b]).backward()
            self.opt.step()
            self.batches += 1

    @torch.no_grad()
    def val_acc(self):
        self.model.eval()
        return (self.model(self.xva).argmax(1) == self.yva).float().mean().item()
