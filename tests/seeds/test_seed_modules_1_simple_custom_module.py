"""Seed note "Modules" (shared/seeds/000), section "A Simple Custom Module", run with corenn for torch."""
import re

import corenn as torch
from corenn import nn


class MyLinear(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(in_features, out_features))
        self.bias = nn.Parameter(torch.randn(out_features))

    def forward(self, input):
        return (input @ self.weight) + self.bias


def test_calling_the_module_runs_forward():
    m = MyLinear(4, 3)
    sample_input = torch.randn(4)
    out = m(sample_input)
    assert out.shape == (3,)
    assert re.fullmatch(r"tensor\(\[\s*-?\d+\.\d{4},\s+-?\d+\.\d{4},\s+-?\d+\.\d{4}\], grad_fn=<AddBackward0>\)",
                        repr(out))
    expected = sample_input.numpy() @ m.weight.detach().numpy() + m.bias.detach().numpy()
    assert abs(out.detach().numpy() - expected).max() < 1e-5


def test_named_parameters_print_as_in_the_note(capsys):
    m = MyLinear(4, 3)
    for parameter in m.named_parameters():
        print(parameter)
    printed = capsys.readouterr().out
    weight_rows = "\n".join(
        ("tensor([[" if i == 0 else "        [") + ", ".join(f"{v:7.4f}" for v in row) + "]"
        for i, row in enumerate(m.weight.detach().numpy()))
    # the note's layout: a tuple per parameter, "Parameter containing:" then the tensor
    assert printed.startswith("('weight', Parameter containing:\ntensor([[")
    assert "], requires_grad=True))\n('bias', Parameter containing:\ntensor([" in printed
    assert printed.endswith("], requires_grad=True))\n")
    assert len(weight_rows.splitlines()) == 4 and printed.count("\n        [") == 3
    assert list(m.parameters())[0] is m.weight
