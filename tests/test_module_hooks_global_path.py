"""The global module hooks are reachable under PyTorch's import path."""
import corenn
from corenn.nn.modules.module import Module, register_module_forward_hook, register_module_forward_pre_hook


def test_torch_import_path_registers_working_global_hooks():
    seen = []
    layer = corenn.nn.Linear(2, 2)
    with register_module_forward_pre_hook(lambda module, args: seen.append(("pre", type(module).__name__))):
        with register_module_forward_hook(lambda module, args, out: seen.append(("post", type(module).__name__))):
            layer(corenn.randn(2))
    layer(corenn.randn(2))  # both removed by their context managers
    assert seen == [("pre", "Linear"), ("post", "Linear")]
    assert Module is corenn.nn.Module
