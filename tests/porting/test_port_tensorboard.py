"""Port of the PyTorch tutorial "Visualizing Models, Data, and Training with TensorBoard"
(``intermediate/tensorboard_tutorial``): a FashionMNIST classifier that logs images, its graph and
its running loss with ``SummaryWriter``.

Written once against ``lib`` and run under PyTorch and corenn (``corenn.utils.tensorboard``) from the
same weights on generated 28x28 images; both runs' event files are read back with TensorBoard's own
``EventAccumulator`` and compared. It keeps the tutorial's ``Net`` (``nn.Conv2d(1, 6, 5)``,
``nn.MaxPool2d(2, 2)``, ``x.view(-1, 16 * 4 * 4)``), ``nn.CrossEntropyLoss``, ``optim.SGD(lr=0.001,
momentum=0.9)`` (a larger lr here), ``writer.add_image`` of an image grid (torchvision's ``make_grid``
is written out with ``torch.cat``), ``writer.add_graph(net, images)``, the training loop's
``running_loss`` logged every few batches with ``writer.add_scalar('training loss', running_loss / n,
epoch * len(trainloader) + i)``, and ``writer.close()``. The projector embedding, the matplotlib figures
and the PR curves are left out.
"""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import corenn
from _port import assert_same_run, assert_same_state, numpy_state, same_weights

pytestmark = [
    pytest.mark.torch,
    # PyTorch's add_graph traces with torch.jit, which PyTorch 2.13 marks deprecated
    pytest.mark.filterwarnings("ignore:`torch.jit.trace"),
]


def build(lib):
    nn, F = lib.nn, lib.nn.functional

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 6, 5)
            self.pool = nn.MaxPool2d(2, 2)
            self.conv2 = nn.Conv2d(6, 16, 5)
            self.fc1 = nn.Linear(16 * 4 * 4, 120)
            self.fc2 = nn.Linear(120, 84)
            self.fc3 = nn.Linear(84, 10)

        def forward(self, x):
            x = self.pool(F.relu(self.conv1(x)))
            x = self.pool(F.relu(self.conv2(x)))
            x = x.view(-1, 16 * 4 * 4)
            x = F.relu(self.fc1(x))
            x = F.relu(self.fc2(x))
            x = self.fc3(x)
            return x

    return Net()


def make_grid(lib, images, padding=2):
    """torchvision.utils.make_grid for one row of single-channel images: pad, then place side by side."""
    n, _, h, w = images.shape
    canvas = lib.zeros(3, h + 2 * padding, n * (w + padding) + padding)
    for i in range(n):
        left = padding + i * (w + padding)
        canvas[:, padding:padding + h, left:left + w] = lib.cat([images[i]] * 3)
    return canvas


def run(lib, net, logdir, images, labels, epochs=2, every=2):
    SummaryWriter = importlib.import_module(f"{lib.__name__}.utils.tensorboard").SummaryWriter
    writer = SummaryWriter(str(logdir))
    data = lib.utils.data
    trainloader = data.DataLoader(data.TensorDataset(lib.from_numpy(images), lib.from_numpy(labels)), batch_size=4)
    dataiter = iter(trainloader)
    first_images, _ = next(dataiter)
    img_grid = make_grid(lib, first_images / 2 + 0.5)  # unnormalize
    writer.add_image("four_fashion_mnist_images", img_grid)
    writer.add_graph(net, first_images)
    criterion = lib.nn.CrossEntropyLoss()
    optimizer = lib.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    running_loss = 0.0
    logged = []
    for epoch in range(epochs):
        for i, data in enumerate(trainloader, 0):
            inputs, labels = data
            optimizer.zero_grad()
            outputs = net(inputs)
            loss = criterion(outputs, labels)
            loss.backward()
            optimizer.step()
            running_loss += loss.item()
            if i % every == every - 1:
                writer.add_scalar("training loss", running_loss / every, epoch * len(trainloader) + i)
                logged.append(running_loss / every)
                running_loss = 0.0
    writer.close()
    return logged


def read_events(logdir):
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    accumulator = event_accumulator.EventAccumulator(str(logdir), size_guidance={"images": 0, "scalars": 0})
    accumulator.Reload()
    scalars = [(event.step, event.value) for event in accumulator.Scalars("training loss")]
    image = accumulator.Images("four_fashion_mnist_images")[0]
    return scalars, (image.width, image.height), accumulator.Tags()


def test_tensorboard_tutorial_logs_the_same_run(torch, tmp_path):
    pytest.importorskip("tensorboard")
    rng = np.random.default_rng(0)
    images = rng.uniform(-1, 1, (16, 1, 28, 28)).astype(np.float32)
    labels = rng.integers(0, 10, 16).astype(np.int64)
    theirs, ours = same_weights(torch, build)
    start = numpy_state(theirs)
    their_logged = run(torch, theirs, tmp_path / "torch", images, labels)
    our_logged = run(corenn, ours, tmp_path / "corenn", images, labels)
    assert_same_run(our_logged, their_logged)
    assert_same_state(ours, theirs, moved_from=start)
    their_scalars, their_size, their_tags = read_events(tmp_path / "torch")
    our_scalars, our_size, our_tags = read_events(tmp_path / "corenn")
    assert [step for step, _ in our_scalars] == [step for step, _ in their_scalars] == [1, 3, 5, 7]
    assert_same_run([value for _, value in our_scalars], [value for _, value in their_scalars])
    assert our_size == their_size == (4 * 30 + 2, 32)
    assert their_tags["graph"] and our_tags["graph"]
