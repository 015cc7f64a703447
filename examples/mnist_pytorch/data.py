"""MNIST for the example, offline.

`get_dataset` loads MNIST the way Determined's quickstart does, with
`torchvision.datasets.MNIST(root, train, download=True)`. Where the idx files are not
already under `<root>/MNIST/raw/` (torchvision's layout), a small MNIST-format set is
written there first, so nothing is downloaded: ten digit-like class prototypes, each
example one of them shifted by up to three pixels, with a faint copy of another class and
noise on top. The small CNN learns it in a few hundred batches (to about 97% accuracy). The
same seed always writes the same bytes, so every worker of a trial, and every trial, sees
the same data. Real MNIST files put in that folder are used as they are.

When torchvision does not import, the same files are read by a small idx reader into a
`TensorDataset` with the same normalisation: batches are `[images, labels]` either way.
"""

import os
import struct
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, TensorDataset

# The files torchvision.datasets.MNIST reads (its download unpacks the .gz files to these).
FILES = {
    True: ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    False: ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
SIDE = 28
# The mean and standard deviation of real MNIST's pixels, as the quickstart normalises.
MEAN, STD = 0.1307, 0.3081
DEFAULT_SIZES = {"train_size": 4096, "test_size": 512, "seed": 0}

Bytes = np.ndarray[Any, np.dtype[np.uint8]]


def get_dataset(root: str | Path, train: bool, data_config: dict[str, Any] | None = None) -> Dataset[Any]:
    """The training or test split under `root`, written first if missing.

    `data_config` is the experiment config's `data` section: `train_size`, `test_size`
    and `seed` of the generated set (used only when the files are missing)."""
    raw = Path(root) / "MNIST" / "raw"
    sizes = {**DEFAULT_SIZES, **(data_config or {})}
    write_missing_split(raw, True, int(sizes["train_size"]), int(sizes["seed"]))
    write_missing_split(raw, False, int(sizes["test_size"]), int(sizes["seed"]) + 1)
    try:
        from torchvision import datasets, transforms
    except ImportError:
        return read_split(raw, train)
    transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((MEAN,), (STD,))])
    return datasets.MNIST(str(root), train=train, download=True, transform=transform)  # type: ignore[no-any-return]


def read_split(raw: Path, train: bool) -> TensorDataset:
    """The split's idx files as (N, 1, 28, 28) normalised float images and int64 labels."""
    images_file, labels_file = FILES[train]
    images = torch.from_numpy(read_idx(raw / images_file).astype(np.float32) / 255.0)
    labels = torch.from_numpy(read_idx(raw / labels_file).astype(np.int64))
    return TensorDataset(((images - MEAN) / STD).unsqueeze(1), labels)


def read_idx(path: Path) -> Bytes:
    """An idx file of unsigned bytes (magic 0x0000 08 <number of dimensions>)."""
    content = path.read_bytes()
    zero, kind, dims = struct.unpack(">HBB", content[:4])
    if zero != 0 or kind != 0x08:
        raise ValueError(f"{path} is not an idx file of unsigned bytes")
    shape = struct.unpack(f">{dims}I", content[4 : 4 + 4 * dims])
    return np.frombuffer(content, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def write_missing_split(raw: Path, train: bool, size: int, seed: int) -> None:
    images_file, labels_file = FILES[train]
    if (raw / images_file).exists() and (raw / labels_file).exists():
        return
    images, labels = generate(size, seed)
    raw.mkdir(parents=True, exist_ok=True)
    write_idx(raw / images_file, images)
    write_idx(raw / labels_file, labels)


def write_idx(path: Path, array: Bytes) -> None:
    """Writes the idx file through a temporary file and a rename: workers of one trial may
    write the same file at once, and a reader never sees half of one."""
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(handle, "wb") as out:
        out.write(header + array.tobytes())
    os.chmod(temporary, 0o644)
    os.replace(temporary, path)


def generate(size: int, seed: int) -> tuple[Bytes, Bytes]:
    """`size` 28x28 images of 10 classes and their labels (0-9), from `seed`.

    The prototypes come from a fixed seed, so the training and test splits share them."""
    prototypes = class_prototypes(np.random.default_rng(12345))
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, size=size)
    others = rng.integers(0, 10, size=size)
    faint = rng.uniform(0.0, 0.6, size=size)
    shifts = rng.integers(-3, 4, size=(size, 2))
    images = np.empty((size, SIDE, SIDE), dtype=np.float32)
    for index, (label, other, (down, right)) in enumerate(zip(labels, others, shifts, strict=True)):
        mixed = prototypes[label] + faint[index] * prototypes[other]
        images[index] = np.roll(mixed, (down, right), axis=(0, 1))
    images += rng.normal(0.0, 0.6, size=images.shape).astype(np.float32)
    return (np.clip(images, 0.0, 1.0) * 255).astype(np.uint8), labels.astype(np.uint8)


def class_prototypes(rng: np.random.Generator) -> np.ndarray[Any, np.dtype[np.float32]]:
    """Ten blobby strokes in the middle of a dark 28x28 field: a random 5x5 pattern per
    class, scaled up 4 times (20x20) and centred."""
    coarse = (rng.random((10, 5, 5)) > 0.5).astype(np.float32)
    prototypes = np.zeros((10, SIDE, SIDE), dtype=np.float32)
    prototypes[:, 4:24, 4:24] = np.kron(coarse, np.ones((4, 4), dtype=np.float32))
    return prototypes
