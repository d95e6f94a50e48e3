"""corenn.multiprocessing: shared-memory tensors, Hogwild training of one shared MLP, spawn's error propagation."""
from __future__ import annotations

import multiprocessing as std_mp

import numpy as np
import pytest

import corenn
import corenn.multiprocessing as mp
import corenn.nn.functional as F


def _add_one(tensor):
    tensor.add_(1)


def _put_back(queue, tensor, received):
    queue.put(tensor)
    received.wait(60)  # as in PyTorch, the sender lives until the receiver has the tensor (it hands over the fd)


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_in_place_updates_of_a_child_are_seen_by_the_parent(start_method):
    context = mp.get_context(start_method)
    tensor = corenn.zeros(5)
    tensor.share_memory_()
    assert tensor.is_shared() and corenn.zeros(2).is_shared() is False
    process = context.Process(target=_add_one, args=(tensor,))
    process.start()
    process.join(60)
    assert process.exitcode == 0
    assert tensor.tolist() == [1.0] * 5


def test_a_tensor_through_a_queue_shares_memory_with_the_sender():
    context = mp.get_context("spawn")
    queue = context.Queue()
    tensor = corenn.arange(4.0)
    got_it = context.Event()
    process = context.Process(target=_put_back, args=(queue, tensor, got_it))
    process.start()
    received = queue.get(timeout=60)
    got_it.set()
    process.join(60)
    assert received.tolist() == [0.0, 1.0, 2.0, 3.0] and received.is_shared()
    received.add_(10)
    assert tensor.tolist() == [10.0, 11.0, 12.0, 13.0]  # the same memory


def test_module_share_memory_shares_parameters_and_buffers():
    model = corenn.nn.Sequential(corenn.nn.Linear(3, 2), corenn.nn.BatchNorm1d(2))
    assert model.share_memory() is model
    assert all(t.is_shared() for t in (*model.parameters(), *model.buffers()))


def _digits():
    from sklearn.datasets import load_digits
    data = load_digits()
    x = (data.data / 16.0).astype(np.float32)
    return x, data.target.astype(np.int64)


def _train(rank, model, x, y, epochs, seed):
    corenn.manual_seed(seed + rank)
    optimizer = corenn.optim.SGD(model.parameters(), lr=0.1)
    generator = np.random.default_rng(seed + rank)
    for _ in range(epochs):
        order = generator.permutation(len(x))
        for start in range(0, len(x), 32):
            batch = order[start:start + 32]
            optimizer.zero_grad()
            F.cross_entropy(model(corenn.tensor(x[batch])), corenn.tensor(y[batch])).backward()
            optimizer.step()


def _accuracy(model, x, y):
    with corenn.no_grad():
        return float((model(corenn.tensor(x)).argmax(1).numpy() == y).mean())


def _mlp():
    corenn.manual_seed(0)
    return corenn.nn.Sequential(corenn.nn.Linear(64, 32), corenn.nn.ReLU(), corenn.nn.Linear(32, 10))


def test_hogwild_two_processes_train_one_shared_mlp_to_single_process_accuracy():
    x, y = _digits()
    train_x, train_y, test_x, test_y = x[:1400], y[:1400], x[1400:], y[1400:]
    single = _mlp()
    _train(0, single, train_x, train_y, epochs=4, seed=1)
    single_accuracy = _accuracy(single, test_x, test_y)

    shared = _mlp()
    shared.share_memory()
    processes = [std_mp.get_context("fork").Process(target=_train, args=(rank, shared, train_x[rank::2],
                                                                        train_y[rank::2], 4, 1))
                 for rank in range(2)]
    for process in processes:
        process.start()
    try:
        for process in processes:
            process.join(120)
            assert process.exitcode == 0, f"worker ended with {process.exitcode}"
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join()
    # Each process saw half the data for the same epochs, updating one model: together a full pass each epoch.
    hogwild_accuracy = _accuracy(shared, test_x, test_y)
    assert single_accuracy > 0.85
    assert hogwild_accuracy >= single_accuracy - 0.03, (hogwild_accuracy, single_accuracy)
    assert not any(p.is_alive() for p in processes)


def _fails_on_rank_one(rank):
    if rank == 1:
        raise ValueError("rank one cannot continue")


def _exits_on_rank_zero(rank):
    if rank == 0:
        raise SystemExit(3)


def test_spawn_joins_and_names_the_failed_process():
    mp.spawn(_add_rank_to_nothing, nprocs=2)
    with pytest.raises(mp.ProcessRaisedException, match=r"Process 1 terminated with the following error"
                                                        r"(.|\n)*ValueError: rank one cannot continue") as info:
        mp.spawn(_fails_on_rank_one, nprocs=2)
    assert info.value.error_index == 1
    with pytest.raises(mp.ProcessExitedException, match="process 0 terminated with exit code 3"):
        mp.spawn(_exits_on_rank_zero, nprocs=2)


def _add_rank_to_nothing(rank):
    assert rank in (0, 1)
