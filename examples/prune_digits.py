"""Prune the digits CNN: half its channels, fine-tune, shrink it -- and show what that saves.

Trains the CNN of ``examples/train_digits.py`` on scikit-learn's handwritten digits (8x8
images, nothing downloaded), then

1. prunes 50% of the output channels of both convolutions by L2 norm
   (``ln_structured``), and their biases with them (``complete_channel_pruning``), so
   the pruned channels are exactly zero;
2. fine-tunes the masked model (gradients reach ``weight_orig`` masked, so pruned
   channels stay pruned);
3. shrinks it (``corenn_prune.shrink``): the convolutions and the classifier lose the
   pruned channels and their inputs, and the outputs stay those of the masked model.

It prints test accuracy, parameters, checkpoint bytes (``corenn.save``) and inference
time of the test set for the trained, masked and shrunk models, with a progress bar while
training, and ``corenn_prune.summary`` of the shrunk model.

Run (from the repository root)::

    pip install -e ".[examples]" -e plugins/prune
    python examples/prune_digits.py            # 10 + 5 epochs
    python examples/prune_digits.py --quick    # 3 + 2 epochs, a smoke test
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

import corenn
import corenn.nn.functional as F
import corenn_prune
from corenn.utils.data import DataLoader, TensorDataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_digits import accuracy, build_model, load_digits_split  # noqa: E402


def fit(model, loader, epochs: int, lr: float, label: str, progress: bool) -> None:
    from tqdm import tqdm
    optimizer = corenn.optim.Adam(model.parameters(), lr=lr)
    for epoch in range(1, epochs + 1):
        model.train()
        bar = tqdm(loader, desc=f"{label} {epoch}/{epochs}", unit="batch", leave=False, disable=not progress,
                   file=sys.stdout)
        for images, labels in bar:
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            bar.set_postfix(loss=f"{loss.item():.4f}", refresh=False)


def measure(model, test_loader, test_images) -> dict:
    """Accuracy, parameters, checkpoint bytes and the median time to classify the whole test set."""
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "model.safetensors")
        corenn.save(model.state_dict(), path)
        checkpoint = os.path.getsize(path)
    model.eval()
    times = []
    with corenn.no_grad():
        for _ in range(7):
            start = time.perf_counter()
            model(test_images)
            times.append(time.perf_counter() - start)
    return {"accuracy": accuracy(model, test_loader), "params": sum(p.numel() for p in model.parameters()),
            "checkpoint": checkpoint, "ms": 1e3 * float(np.median(times))}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10, help="training epochs")
    parser.add_argument("--finetune-epochs", type=int, default=5)
    parser.add_argument("--amount", type=float, default=0.5, help="fraction of each convolution's channels to prune")
    parser.add_argument("--quick", action="store_true", help="3 + 2 epochs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    epochs, finetune = (3, 2) if args.quick else (args.epochs, args.finetune_epochs)
    progress = not args.no_progress

    corenn.manual_seed(args.seed)
    x_train, x_test, y_train, y_test = load_digits_split(args.seed)
    train_loader = DataLoader(TensorDataset(corenn.from_numpy(x_train), corenn.from_numpy(y_train)), batch_size=32,
                              shuffle=True, generator=corenn.Generator().manual_seed(args.seed))
    test_images = corenn.from_numpy(x_test)
    test_loader = DataLoader(TensorDataset(test_images, corenn.from_numpy(y_test)), batch_size=512)

    model = build_model()
    fit(model, train_loader, epochs, 1e-2, "train", progress)
    results = {"trained": measure(model, test_loader, test_images)}

    example = test_images[:8]
    for index in (0, 3):   # the two convolutions
        corenn_prune.ln_structured(model[index], "weight", amount=args.amount, n=2, dim=0)
    corenn_prune.complete_channel_pruning(model, example)
    results["pruned"] = measure(model, test_loader, test_images)
    fit(model, train_loader, finetune, 3e-3, "fine-tune", progress)
    results["fine-tuned (masked)"] = measure(model, test_loader, test_images)

    small = corenn_prune.shrink(model, example)
    results["shrunk"] = measure(small, test_loader, test_images)

    print(f"\n{'model':<22} {'test acc':>9} {'params':>8} {'checkpoint':>11} {'inference':>10}")
    for name, r in results.items():
        print(f"{name:<22} {100 * r['accuracy']:>8.2f}% {r['params']:>8,} {r['checkpoint']:>9,} B "
              f"{r['ms']:>7.2f} ms")
    trained, shrunk = results["trained"], results["shrunk"]
    print(f"\nshrunk vs trained: {trained['params'] / shrunk['params']:.2f}x fewer parameters, "
          f"{trained['checkpoint'] / shrunk['checkpoint']:.2f}x smaller checkpoint, "
          f"{trained['ms'] / shrunk['ms']:.2f}x faster on the test set "
          f"(the masked model keeps every channel: {results['fine-tuned (masked)']['params']:,} parameters, "
          "plus the masks)")
    if results["shrunk"]["accuracy"] != results["fine-tuned (masked)"]["accuracy"]:
        raise SystemExit("the shrunk model does not reproduce the masked model's accuracy")
    print("\n" + str(corenn_prune.summary(small)))
    return results


if __name__ == "__main__":
    main()
