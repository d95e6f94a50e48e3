"""The Modules note, last section ("FX transformations of modules"): its two examples, conv + batch-norm
fusion and CPU performance analysis, with ``corenn`` in place of ``torch``."""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np

import corenn
import corenn.fx as fx
from corenn import nn
from corenn.fx.passes.fuse import fuse

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "fx_profile_nodes.py"


def _load_example():
    spec = importlib.util.spec_from_file_location("fx_profile_nodes", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _randomize_bn(model):
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            with corenn.no_grad():
                m.running_mean.copy_(corenn.randn(m.num_features) * 0.1)
                m.running_var.copy_(corenn.rand(m.num_features) + 0.5)
                m.weight.copy_(corenn.rand(m.num_features) + 0.5)
                m.bias.copy_(corenn.randn(m.num_features) * 0.1)


def test_conv_bn_fusion_tutorial_flow():
    # The tutorial: take a ResNet in eval mode, fuse, check the outputs agree and the batch norms are gone.
    example = _load_example()
    corenn.manual_seed(0)
    model = example.SmallResNet()
    _randomize_bn(model)
    model.eval()
    fused_model = fuse(model)
    x = corenn.randn(4, 3, 16, 16)
    np.testing.assert_allclose(fused_model(x).detach().numpy(), model(x).detach().numpy(), rtol=1e-4, atol=1e-5)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in fused_model.modules())
    assert sum(isinstance(m, nn.Conv2d) for m in fused_model.modules()) == 5
    assert len([n for n in fused_model.graph.nodes if n.op == "call_module"]) == 6  # 5 convs + fc


def test_cpu_performance_analysis_with_a_profiling_interpreter(capsys):
    example = _load_example()
    interp = example.main(runs=2)
    out = capsys.readouterr().out
    gm = interp.module
    assert isinstance(gm, fx.GraphModule)
    timed = {n.name for n in interp.runtimes}
    assert timed == {n.name for n in gm.graph.nodes}  # every node timed
    assert all(len(times) == 2 and min(times) >= 0 for times in interp.runtimes.values())
    rows = interp.rows()
    assert [r[3] for r in rows] == sorted((r[3] for r in rows), reverse=True)
    assert sum(r[3] for r in rows) <= sum(interp.total_runtimes) / 2 * 1.0001
    assert "Average runtime (ms)" in out and "Mean total runtime" in out and "stem" in out
    # the profiled run computes what the model computes
    x = corenn.randn(1, 3, 8, 8)
    np.testing.assert_allclose(interp.run(x).detach().numpy(), gm(x).detach().numpy(), rtol=1e-6)
