"""Train a small convolutional network on scikit-learn's handwritten digits with corenn.

The digits (1797 grayscale 8x8 images, 10 classes) ship inside scikit-learn, so nothing
is downloaded. The script splits them into train/test sets (``train_test_split``, fixed
seed, stratified), trains

    Conv(1->16, 3x3, pad 1) - ReLU - MaxPool(2) - Conv(16->32, 3x3, pad 1) - ReLU - MaxPool(2)
    - Flatten - Linear(128 -> 10)

with Adam and cross-entropy, showing a tqdm progress bar and each epoch's training loss
and test accuracy. Then it saves the weights with ``corenn.save`` (a safetensors file),
rebuilds the network, loads the checkpoint and checks that the reloaded model's test
accuracy equals the trained one's.

Run (from the repository root)::

    pip install -e ".[examples]"
    python examples/train_digits.py              # 10 epochs (about 98% test accuracy), well under a minute
    python examples/train_digits.py --quick      # 5 epochs, for a smoke test
    python examples/train_digits.py --epochs 20 --checkpoint /tmp/digits.safetensors
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

import corenn
import corenn.nn as nn
import corenn.nn.functional as F
from corenn.utils.data import DataLoader, TensorDataset


def build_model() -> nn.Module:
    """The network: two conv/ReLU/max-pool stages sized for 8x8 inputs (8 -> 4 -> 2), then a linear classifier."""
    return nn.Sequential(
        nn.Conv2d(1, 16, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 2 * 2, 10),
    )


def load_digits_split(seed: int):
    """Digits as float32 images scaled to [0, 1] (N, 1, 8, 8) and int64 labels, split 80/20."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None, :, :]  # pixel values are 0..16
    labels = digits.target.astype(np.int64)
    return train_test_split(images, labels, test_size=0.2, random_state=seed, stratify=labels)


@corenn.no_grad()
def accuracy(model: nn.Module, loader) -> float:
    model.eval()
    correct = total = 0
    for images, labels in loader:
        predictions = model(images).argmax(dim=1)
        correct += int((predictions == labels).sum().item())
        total += labels.shape[0]
    return correct / total


def train(epochs: int, batch_size: int = 32, lr: float = 1e-2, seed: int = 0,
          checkpoint: str = "digits_cnn.safetensors", progress: bool = True) -> dict:
    """Train, evaluate every epoch, save, reload; returns the accuracies (used by the tests)."""
    from tqdm import tqdm

    corenn.manual_seed(seed)
    x_train, x_test, y_train, y_test = load_digits_split(seed)
    train_set = TensorDataset(corenn.from_numpy(x_train), corenn.from_numpy(y_train))
    test_set = TensorDataset(corenn.from_numpy(x_test), corenn.from_numpy(y_test))
    generator = corenn.Generator().manual_seed(seed)
    train_loader = DataLoader(train_set, batch_size=batch_size, shuffle=True, generator=generator)
    test_loader = DataLoader(test_set, batch_size=256)
    print(f"digits: {len(train_set)} training and {len(test_set)} test images of 8x8, 10 classes")

    model = build_model()
    optimizer = corenn.optim.Adam(model.named_parameters(), lr=lr)
    scheduler = corenn.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
    history = []
    start = time.perf_counter()
    for epoch in range(1, epochs + 1):
        model.train()
        running, seen = 0.0, 0
        bar = tqdm(train_loader, desc=f"epoch {epoch:>2}/{epochs}", unit="batch", leave=False, disable=not progress,
                   file=sys.stdout)
        for images, labels in bar:
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            running += loss.item() * labels.shape[0]
            seen += labels.shape[0]
            bar.set_postfix(loss=f"{running / seen:.4f}", refresh=False)
        scheduler.step()
        test_accuracy = accuracy(model, test_loader)
        history.append((running / seen, test_accuracy))
        print(f"epoch {epoch:>2}/{epochs}  loss {running / seen:.4f}  test accuracy {100 * test_accuracy:.2f}%")
    elapsed = time.perf_counter() - start
    trained_accuracy = history[-1][1]

    # Save the weights, rebuild the network from scratch, load them, and check nothing was lost.
    directory = os.path.dirname(os.path.abspath(checkpoint))
    os.makedirs(directory, exist_ok=True)
    corenn.save(model.state_dict(), checkpoint)
    reloaded = build_model()
    reloaded.load_state_dict(corenn.load(checkpoint))
    reloaded_accuracy = accuracy(reloaded, test_loader)
    same = reloaded_accuracy == trained_accuracy
    print(f"trained in {elapsed:.1f} s; saved {checkpoint} ({os.path.getsize(checkpoint) / 1024:.1f} KiB)")
    print(f"reloaded model: test accuracy {100 * reloaded_accuracy:.2f}% "
          f"({'equals' if same else 'DIFFERS FROM'} the trained model's {100 * trained_accuracy:.2f}%)")
    if not same:
        raise SystemExit("the reloaded model does not reproduce the trained model's accuracy")
    return {"history": history, "test_accuracy": trained_accuracy, "reloaded_accuracy": reloaded_accuracy,
            "seconds": elapsed, "checkpoint": checkpoint}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=None, help="training epochs (default 10)")
    parser.add_argument("--quick", action="store_true", help="a short run (5 epochs) to check that everything works")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-2, help="Adam learning rate (cosine-annealed to 0)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", default="digits_cnn.safetensors", help="where to save the trained weights")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    args = parser.parse_args(argv)
    if args.epochs is not None and args.epochs < 1:
        parser.error(f"--epochs must be at least 1, got {args.epochs}")
    epochs = args.epochs if args.epochs is not None else (5 if args.quick else 10)
    return train(epochs, batch_size=args.batch_size, lr=args.lr, seed=args.seed, checkpoint=args.checkpoint,
                 progress=not args.no_progress)


if __name__ == "__main__":
    main()
