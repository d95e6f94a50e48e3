"""compact() and summary(): real memory savings measured by sizes; pruned modules deep-copy, pickle and save."""
from __future__ import annotations

import copy
import os
import pickle

import numpy as np
import pytest

import corenn
import corenn_prune
import corenn.nn.utils.prune as prune
from corenn import nn
from corenn_prune.sparse import _available, sparse_backend


def test_pytorchs_import_path_is_the_plugins_module():
    from corenn.nn.utils import prune as same
    assert same is prune is corenn.nn.utils.prune
    assert prune.__name__ == "corenn_prune.prune"
    assert corenn.plugins.records["prune"].status == "active"


def test_deepcopy_pickle_and_save_keep_a_pruned_module(tmp_path):
    layer = prune.l1_unstructured(nn.Linear(6, 4), "weight", amount=0.5)
    prune.ln_structured(layer, "weight", amount=1, n=2, dim=0)
    for clone in (copy.deepcopy(layer), pickle.loads(pickle.dumps(layer))):
        assert type(clone) is nn.Linear and prune.is_pruned(clone)
        assert corenn.equal(clone.weight, layer.weight)
        assert [type(m).__name__ for m in prune.pruning_method(clone, "weight")] == ["L1Unstructured", "LnStructured"]
        prune.l1_unstructured(clone, "weight", amount=1)             # iterating on the copy leaves the original
        prune.remove(clone, "weight")
        assert not clone._forward_pre_hooks and len(layer._forward_pre_hooks) == 1 and prune.is_pruned(layer)
    path = tmp_path / "pruned.safetensors"
    corenn.save(layer.state_dict(), str(path))
    fresh = prune.identity(nn.Linear(6, 4), "weight")
    fresh.load_state_dict(corenn.load(str(path)))
    assert corenn.equal(fresh.weight, layer.weight)


def test_the_mask_is_stored_once_and_weight_is_not_a_third_copy():
    mask = corenn.ones(4, 6)
    layer = prune.custom_from_mask(nn.Linear(6, 4), "weight", mask=mask)
    method = prune.pruning_method(layer, "weight")
    assert method.mask is None                                # the buffer holds it, the method let go
    assert "weight" not in vars(layer) and "weight" in layer.computed_attribute_names()
    stored = sum(t.numel() for t in layer.parameters()) + sum(t.numel() for t in layer.buffers())
    assert stored == 2 * 24 + 4                               # weight_orig + weight_mask + bias: no stored weight
    with pytest.raises(AttributeError, match="can't assign to 'weight' of a pruned Linear.*weight_orig"):
        layer.weight = corenn.zeros(4, 6)


def test_module_weight_is_current_after_an_optimizer_step():
    layer = prune.l1_unstructured(nn.Linear(6, 4), "weight", amount=0.5)
    optimizer = corenn.optim.SGD(layer.parameters(), lr=0.5)
    layer(corenn.randn(3, 6)).sum().backward()
    optimizer.step()
    assert corenn.equal(layer.weight, layer.weight_orig * layer.weight_mask)   # PyTorch's is stale until forward
    assert bool((layer.weight[layer.weight_mask == 0] == 0).all())


BACKENDS = [b for b in ("numba", "scipy", "numpy") if _available(b)]


@pytest.fixture(params=BACKENDS)
def backend(request):
    before = sparse_backend()
    sparse_backend(request.param)
    yield request.param
    sparse_backend(before)


@pytest.mark.parametrize("layout", ["csr", "block"])
def test_compacted_layers_compute_what_the_masked_ones_do(backend, layout):
    corenn.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, stride=2), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 3 * 3, 5))
    prune.global_unstructured([(net[0], "weight"), (net[3], "weight")], pruning_method=prune.L1Unstructured,
                              amount=0.8)
    x = corenn.randn(4, 3, 5, 5)
    small = corenn_prune.compact(net, layout=layout, block_size=(2, 4))
    assert [type(m).__name__ for m in small] == ["SparseConv2d", "ReLU", "Flatten", "SparseLinear"]
    with corenn.no_grad():
        np.testing.assert_allclose(small(x).numpy(), net(x).numpy(), atol=1e-5)
    np.testing.assert_array_equal(small[3].weight.numpy(), net[3].weight.detach().numpy())
    assert prune.is_pruned(net) and not prune.is_pruned(small)          # a copy by default
    with pytest.raises(RuntimeError, match="SparseConv2d is for inference"):
        small(x.requires_grad_())


def test_compact_checkpoint_is_small_and_loads_back(tmp_path):
    corenn.manual_seed(1)
    dense = nn.Linear(512, 256)
    path_dense = tmp_path / "dense.safetensors"
    corenn.save(dense.state_dict(), str(path_dense))
    prune.l1_unstructured(dense, "weight", amount=0.9)
    path_masked = tmp_path / "masked.safetensors"
    corenn.save(dense.state_dict(), str(path_masked))
    small = corenn_prune.compact(dense)
    path_small = tmp_path / "compact.safetensors"
    corenn.save(small.state_dict(), str(path_small))
    sizes = {p.stem: os.path.getsize(p) for p in (path_dense, path_masked, path_small)}
    assert sizes["masked"] > 1.9 * sizes["dense"]              # PyTorch's layout: original and mask
    assert sizes["compact"] * 5 < sizes["dense"]                # 10% of the weights at 6 bytes each, plus offsets
    # A compacted model of the same architecture (any sparsity) loads the checkpoint.
    other = corenn_prune.compact(prune.l1_unstructured(nn.Linear(512, 256), "weight", amount=0.5))
    other.load_state_dict(corenn.load(str(path_small)))
    x = corenn.randn(3, 512)
    with corenn.no_grad():
        np.testing.assert_allclose(other(x).numpy(), small(x).numpy(), atol=1e-6)


@pytest.mark.parametrize("sparsity, at_least", [(0.5, 1.3), (0.9, 6.0), (0.95, 12.0)])
def test_compact_weight_memory_at_each_sparsity(sparsity, at_least):
    layer = prune.l1_unstructured(nn.Linear(1024, 512), "weight", amount=sparsity)
    small = corenn_prune.compact(layer, min_sparsity=0.0)
    dense_bytes = 1024 * 512 * 4
    assert dense_bytes / small.stored_nbytes() >= at_least
    rows = corenn_prune.summary(small)
    assert rows[0].dense_bytes == dense_bytes + 512 * 4 and rows[0].stored_bytes == small.stored_nbytes() + 512 * 4


def test_summary_table_dense_against_stored():
    net = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
    prune.l1_unstructured(net[0], "weight", amount=0.5)
    rows = corenn_prune.summary(net)
    assert [r.name for r in rows] == ["0", "2"]
    assert rows[0].nonzero == 128 + 16 and rows[0].stored_bytes == (2 * 256 + 16) * 4
    assert rows[1].sparsity == 0.0 and rows[1].stored_bytes == rows[1].dense_bytes
    text = str(rows)
    assert text.splitlines()[0].split() == ["layer", "type", "shape", "sparsity", "params", "nonzero", "dense",
                                            "bytes", "stored", "bytes"]
    assert "total" in text.splitlines()[-1]


def test_bad_options_are_named():
    layer = nn.Linear(4, 4)
    with pytest.raises(ValueError, match="compact\\(\\): argument 'layout' must be 'csr' or 'block', got 'coo'"):
        corenn_prune.compact(layer, layout="coo")
    with pytest.raises(ValueError, match="argument 'block_size'"):
        corenn_prune.compact(layer, layout="block", block_size=(0, 4))
    with pytest.raises(ValueError, match="argument 'min_sparsity'"):
        corenn_prune.compact(layer, min_sparsity=2)
    with pytest.raises(ValueError, match="sparse_backend\\(\\): argument 'name'"):
        sparse_backend("cuda")
    with pytest.raises(NotImplementedError, match="groups=2"):
        corenn_prune.compact(nn.Conv2d(4, 4, 3, groups=2), min_sparsity=0.0)
