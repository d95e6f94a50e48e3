"""corenn.fx graph IR: nodes, graph mutation, names, lint, generated code, Interpreter, Transformer,
replace_pattern and ShapeProp on traced functions (no layers needed)."""
from __future__ import annotations

import copy
import operator
from math import sqrt  # a global name: autowrapped during tracing

import numpy as np
import pytest

import corenn
import corenn.fx as fx
from corenn.fx.passes.shape_prop import ShapeProp


def build_graph():
    g = fx.Graph()
    x = g.placeholder("x")
    y = g.placeholder("y")
    add = g.call_function(operator.add, (x, y))
    relu = g.call_method("relu", (add,))
    s = g.call_function(corenn.sum, (relu,), {"dim": -1})
    g.output(s)
    return g, (x, y, add, relu, s)


def gm_of(g):
    return fx.GraphModule({}, g)


# -- Node -----------------------------------------------------------------------------------------

def test_node_fields_users_and_inputs():
    g, (x, y, add, relu, s) = build_graph()
    assert (add.op, add.target, add.args, add.kwargs) == ("call_function", operator.add, (x, y), {})
    assert list(x.users) == [add] and list(add.users) == [relu]
    assert add.all_input_nodes == [x, y]
    assert s.kwargs == {"dim": -1}
    assert [n.name for n in g.nodes] == ["x", "y", "add", "relu", "sum_1", "output"]
    assert add.next is relu and relu.prev is add


def test_setting_args_updates_users():
    g, (x, y, add, relu, s) = build_graph()
    add.args = (x, x)
    assert add not in y.users and add in x.users
    assert add.all_input_nodes == [x]
    relu.update_arg(0, y)
    assert relu in y.users and relu not in add.users
    s.update_kwarg("dim", 0)
    assert s.kwargs == {"dim": 0}


def test_replace_all_uses_with_and_replace_input_with():
    g, (x, y, add, relu, s) = build_graph()
    changed = add.replace_all_uses_with(x)
    assert changed == [relu] and relu.args == (x,) and not add.users
    s.replace_input_with(relu, y)
    assert s.args == (y,) and not relu.users
    # delete_user_cb leaves some users alone
    g2, (x2, y2, add2, relu2, s2) = build_graph()
    assert add2.replace_all_uses_with(y2, delete_user_cb=lambda u: u is not relu2) == []
    assert relu2.args == (add2,)


def test_prepend_append_move_nodes():
    g, (x, y, add, relu, s) = build_graph()
    neg = g.call_function(operator.neg, (x,))  # created at the insert point: the end, after output
    add.prepend(neg)
    assert [n.name for n in g.nodes] == ["x", "y", "neg", "add", "relu", "sum_1", "output"]
    y.append(neg)
    assert [n.name for n in g.nodes][:4] == ["x", "y", "neg", "add"]
    neg.prepend(neg)  # no effect, as in PyTorch
    assert [n.name for n in g.nodes][:4] == ["x", "y", "neg", "add"]
    relu.append(neg)
    assert [n.name for n in g.nodes] == ["x", "y", "add", "relu", "neg", "sum_1", "output"]
    g.lint()


def test_meta_is_per_node_and_copied_by_node_copy():
    g, (x, y, add, relu, s) = build_graph()
    add.meta["tag"] = 1
    g2 = fx.Graph()
    env = {}
    for n in g.nodes:
        if n.op == "output":
            g2.output(env[n.args[0]])
        else:
            env[n] = g2.node_copy(n, lambda a: env[a])
    assert env[add].meta == {"tag": 1} and env[add].meta is not add.meta
    assert env[add].args == (env[x], env[y])
    g2.lint()
    assert str(g2) == str(g)


def test_bad_node_construction_raises():
    g = fx.Graph()
    with pytest.raises(ValueError, match="opcode"):
        g.create_node("call_thing", operator.add)
    with pytest.raises(ValueError, match="callable"):
        g.call_function("not a function", ())
    with pytest.raises(TypeError, match="tuple"):
        g.create_node("call_function", operator.add, [1, 2])


# -- Graph printing and names ------------------------------------------------------------------------

def test_graph_str_format():
    g, _ = build_graph()
    assert str(g).splitlines() == [
        "graph():",
        "    %x : [num_users=1] = placeholder[target=x]",
        "    %y : [num_users=1] = placeholder[target=y]",
        "    %add : [num_users=1] = call_function[target=operator.add](args = (%x, %y), kwargs = {})",
        "    %relu : [num_users=1] = call_method[target=relu](args = (%add,), kwargs = {})",
        "    %sum_1 : [num_users=1] = call_function[target=corenn.sum](args = (%relu,), kwargs = {dim: -1})",
        "    return sum_1",
    ]


def test_unique_valid_names():
    g = fx.Graph()
    x = g.placeholder("x")
    names = [g.call_function(operator.add, (x, 1)).name for _ in range(3)]
    assert names == ["add", "add_1", "add_2"]
    assert g.create_node("call_method", "max", (x,)).name == "max_1"  # builtins are not shadowed
    assert g.create_node("call_method", "view", (x,), name="class").name == "class_1"  # keywords
    assert g.create_node("call_module", "layers.0.conv", (x,)).name == "layers_0_conv"
    assert g.create_node("call_module", "0", (x,)).name == "_0"
    assert g.create_node("call_method", "relu", (x,), name="a-b c").name == "a_b_c"
    n = g.create_node("call_method", "relu", (x,))
    n.name = "add"  # renaming never produces a duplicate
    assert n.name not in names
    g.output(x)
    g.lint()


def test_iteration_is_safe_while_erasing():
    g = fx.Graph()
    x = g.placeholder("x")
    a = g.call_function(operator.neg, (x,))
    b = g.call_function(operator.neg, (x,))
    c = g.call_function(operator.neg, (x,))
    g.output(x)
    seen = []
    for node in g.nodes:
        seen.append(node.name)
        if node.op == "call_function":
            g.erase_node(node)
    assert seen == ["x", "neg", "neg_1", "neg_2", "output"]
    assert [n.name for n in g.nodes] == ["x", "output"] and len(g.nodes) == 2
    assert a._erased and b._erased and c._erased


# -- insert points, erase, DCE ---------------------------------------------------------------------

def test_inserting_before_and_after():
    g, (x, y, add, relu, s) = build_graph()
    with g.inserting_before(relu):
        neg = g.call_function(operator.neg, (add,))
    relu.replace_input_with(add, neg)
    with g.inserting_after(relu):
        a = g.call_function(operator.mul, (relu, 2))
        b = g.call_function(operator.add, (a, 1))  # keeps creation order (PyTorch would reverse them)
    s.replace_input_with(relu, b)
    assert [n.name for n in g.nodes] == ["x", "y", "add", "neg", "relu", "mul", "add_1", "sum_1", "output"]
    with g.inserting_before(None):
        first = g.call_function(corenn.zeros, (1,))
    assert next(iter(g.nodes)) is first
    with g.inserting_after(None):  # the end: after output; lint refuses it
        g.call_function(corenn.ones, (1,))
    with pytest.raises(RuntimeError, match="after the output"):
        g.lint()


def test_inserted_nodes_change_the_computation():
    g, (x, y, add, relu, s) = build_graph()
    with g.inserting_before(relu):
        neg = g.call_function(operator.neg, (add,))
    relu.replace_input_with(add, neg)
    gm = gm_of(g)
    a = corenn.tensor([[1.0, -2.0, 3.0]])
    b = corenn.tensor([[0.5, 0.5, -4.0]])
    assert gm(a, b).tolist() == pytest.approx([1.5 + 1.0])


def test_erase_node_refuses_a_node_with_users():
    g, (x, y, add, relu, s) = build_graph()
    with pytest.raises(RuntimeError, match=r"erase Node add but it still had 1 users.*relu"):
        g.erase_node(add)
    relu.replace_all_uses_with(add)
    g.erase_node(relu)
    assert "relu" not in [n.name for n in g.nodes]
    with pytest.raises(RuntimeError, match="already erased"):
        g.erase_node(relu)
    g.lint()


def test_eliminate_dead_code_keeps_impure_nodes():
    g = fx.Graph()
    x = g.placeholder("x")
    dead = g.call_function(operator.mul, (x, 3))
    g.call_function(operator.add, (dead, 1))  # dead chain of two
    g.call_method("add_", (x, 1))  # in-place: has an effect
    g.call_function(print, ("hello",))  # side effect
    live = g.call_method("relu", (x,))
    g.output(live)
    assert g.eliminate_dead_code() is True
    assert [n.target if isinstance(n.target, str) else n.target.__name__ for n in g.nodes] == \
        ["x", "add_", "print", "relu", "output"]
    assert g.eliminate_dead_code() is False


def test_find_nodes():
    g, (x, y, add, relu, s) = build_graph()
    assert g.find_nodes(op="placeholder") == [x, y]
    assert g.find_nodes(op="call_function", target=corenn.sum) == [s]


# -- lint ---------------------------------------------------------------------------------------------

def test_lint_catches_use_before_definition():
    g, (x, y, add, relu, s) = build_graph()
    s.append(add)  # move add after its user relu
    with pytest.raises(RuntimeError, match="used before it has been defined"):
        g.lint()


def test_lint_catches_nodes_from_another_graph_and_missing_output():
    g, (x, y, add, relu, s) = build_graph()
    other, (ox, *_rest) = build_graph()
    with pytest.raises(RuntimeError, match="different graph"):
        relu.args = (ox,)
    g2 = fx.Graph()
    g2.placeholder("x")
    with pytest.raises(RuntimeError, match="no output"):
        g2.lint()


def test_lint_catches_broken_users_and_duplicate_names():
    g, (x, y, add, relu, s) = build_graph()
    del add.users[relu]  # corrupt the def-use edges behind the API's back
    with pytest.raises(RuntimeError, match="missing from its users"):
        g.lint()
    g, (x, y, add, relu, s) = build_graph()
    object.__setattr__(relu, "name", "add")
    with pytest.raises(RuntimeError, match="used twice"):
        g.lint()


def test_lint_checks_targets_against_the_owning_module():
    g = fx.Graph()
    x = g.placeholder("x")
    g.output(g.call_module("missing", (x,)))
    with pytest.raises(RuntimeError, match="'missing' .* is missing from the root dict"):
        gm_of(g)
    g2, (x, y, add, relu, s) = build_graph()
    gm = gm_of(g2)
    with g2.inserting_before(relu):
        bad = g2.call_module("missing", (add,))
    relu.replace_input_with(add, bad)
    with pytest.raises(RuntimeError, match="'missing' is not a submodule"):
        gm.graph.lint()
    bad.target = "weight"
    bad.op = "get_attr"
    bad.args = ()
    with pytest.raises(RuntimeError, match="'weight' does not exist"):
        gm.graph.lint()


# -- generated code -----------------------------------------------------------------------------------

def test_code_is_valid_python_with_imports():
    g, _ = build_graph()
    gm = gm_of(g)
    assert gm.code.strip().splitlines() == [
        "import corenn",
        "",
        "",
        "def forward(self, x, y):",
        "    add = x + y;  x = y = None",
        "    relu = add.relu();  add = None",
        "    sum_1 = corenn.sum(relu, dim = -1);  relu = None",
        "    return sum_1",
    ]
    namespace = {}
    exec(compile(gm.code, "<test>", "exec"), namespace)  # runs standalone: it imports what it uses
    a, b = corenn.randn(2, 3), corenn.randn(2, 3)
    np.testing.assert_allclose(namespace["forward"](None, a, b).numpy(), corenn.sum((a + b).relu(), dim=-1).numpy())


def test_code_for_getattr_getitem_slices_and_functional_targets():
    def f(x):
        n = x.shape[0]
        return x[:, 1:3] * n, x[..., 0], corenn.nn.functional.relu(x) if hasattr(corenn, "nn") else x

    gm = fx.symbolic_trace(f)
    assert "x.shape" in gm.code and "x[:, 1:3]" in gm.code and "x[..., 0]" in gm.code
    x = corenn.randn(4, 5)
    for got, want in zip(gm(x), f(x)):
        np.testing.assert_allclose(got.numpy(), want.numpy())


def test_code_binds_functions_that_cannot_be_imported():
    def local_helper(t):
        return t * 3
    g = fx.Graph()
    x = g.placeholder("x")
    g.output(g.call_function(local_helper, (x,)))
    gm = gm_of(g)
    assert "local_helper_1(x)" in gm.code and "not importable" in gm.code  # global renamed past the node name
    assert gm(corenn.tensor([1.0, 2.0])).tolist() == [3.0, 6.0]


def test_code_writes_special_constants():
    g = fx.Graph()
    x = g.placeholder("x")
    a = g.call_function(corenn.clamp, (x,), {"min": float("-inf"), "max": float("inf")})
    b = g.call_method("to", (a,), {"dtype": corenn.float64})
    g.output((b, None))
    gm = gm_of(g)
    assert "-float('inf')" in gm.code and "corenn.float64" in gm.code
    out, none = gm(corenn.tensor([1.0, -2.0]))
    assert out.dtype == corenn.float64 and none is None


def test_recompile_after_edit_and_default_placeholders():
    g = fx.Graph()
    x = g.placeholder("x")
    k = g.placeholder("k", default_value=2)
    g.output(g.call_function(operator.mul, (x, k)))
    gm = gm_of(g)
    assert "def forward(self, x, k = 2):" in gm.code
    assert gm(corenn.tensor([1.0])).tolist() == [2.0]
    assert gm(corenn.tensor([1.0]), 5).tolist() == [5.0]
    mul = g.find_nodes(op="call_function")[0]
    mul.target = operator.add
    assert gm(corenn.tensor([1.0])).tolist() == [2.0]  # not recompiled yet
    gm.recompile()
    assert gm(corenn.tensor([1.0])).tolist() == [3.0]


def test_two_graph_modules_keep_their_own_forward():
    g1, _ = build_graph()
    g2 = fx.Graph()
    a = g2.placeholder("a")
    g2.output(g2.call_function(operator.neg, (a,)))
    m1, m2 = gm_of(g1), gm_of(g2)
    assert type(m1) is not type(m2)
    assert m2(corenn.tensor([1.0])).tolist() == [-1.0]
    assert m1(corenn.ones(1, 2), corenn.ones(1, 2)).tolist() == [4.0]


# -- tracing functions ----------------------------------------------------------------------------------

def test_trace_function_operators_and_methods():
    def f(x, y):
        z = (x * 2 - y) / 3 + 1
        z = -z ** 2 @ y.t()
        return (1 - z).abs() > 0.5, z.exp().mean(dim=0, keepdim=True)

    gm = fx.symbolic_trace(f)
    gm.graph.lint()
    x, y = corenn.randn(3, 4), corenn.randn(3, 4)
    for got, want in zip(gm(x, y), f(x, y)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert operator.matmul in targets and operator.gt in targets and operator.pow in targets


def test_trace_reflected_operators_and_tensor_on_the_left():
    c = corenn.tensor([1.0, 2.0, 3.0])

    def f(x):
        return 2 ** x + c * x - c / (x + 4)

    gm = fx.symbolic_trace(f)
    x = corenn.tensor([0.5, 1.0, 2.0])
    np.testing.assert_allclose(gm(x).numpy(), f(x).numpy(), rtol=1e-6)
    consts = gm.graph.find_nodes(op="get_attr")
    assert consts and consts[0].target == "_tensor_constant0"


def test_unpacking_a_fixed_number_of_values():
    def f(x):
        a, b = x.chunk(2, dim=1)
        v, i = corenn.topk(a.sum(dim=1), 2)
        return b * v.sum(), i

    gm = fx.symbolic_trace(f)
    x = corenn.randn(4, 6)
    for got, want in zip(gm(x), f(x)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


def test_control_flow_raises_trace_error_naming_the_line():
    def f(x):
        if x.sum() > 0:  # data-dependent branch
            return x
        return -x

    with pytest.raises(fx.TraceError) as info:
        fx.symbolic_trace(f)
    message = str(info.value)
    assert "if x.sum() > 0:" in message and "test_fx_graph.py" in message
    assert "concrete_args" in message and "leaf" in message
    assert isinstance(info.value, ValueError)  # torch.fx's TraceError is a ValueError


def test_len_int_and_iteration_raise_trace_errors():
    with pytest.raises(fx.TraceError, match="len"):
        fx.symbolic_trace(lambda x: x * len(x))
    with pytest.raises(fx.TraceError, match="int"):
        fx.symbolic_trace(lambda x: x.reshape(int(x.shape[0]), -1))
    with pytest.raises(fx.TraceError, match="iterated"):
        fx.symbolic_trace(lambda x: [t for t in x])


def test_concrete_args_specialise_and_guard():
    def f(x, flag, scale=2):
        if flag:
            return x * scale
        return x

    gm = fx.symbolic_trace(f, concrete_args={"flag": True})
    x = corenn.tensor([1.0, 2.0])
    assert gm(x, True).tolist() == [2.0, 4.0]
    assert gm(x, True, 3).tolist() == [3.0, 6.0]
    with pytest.raises(ValueError, match="flag has been specialized to have value True but got False"):
        gm(x, False)
    with pytest.raises(TypeError, match="not parameters"):
        fx.symbolic_trace(f, concrete_args={"nope": 1})


def test_varargs_are_refused_with_a_clear_error():
    with pytest.raises(fx.TraceError, match=r"\*args"):
        fx.symbolic_trace(lambda *args: args[0])


def helper_with_branch(x, limit):
    return x if x.shape[0] < limit else x[:limit]


fx.wrap("helper_with_branch")


def test_wrap_records_a_function_as_one_call():
    def f(x):
        return helper_with_branch(x, 2) + 1

    gm = fx.symbolic_trace(f)
    calls = [n for n in gm.graph.nodes if n.op == "call_function" and n.target is helper_with_branch]
    assert len(calls) == 1
    assert helper_with_branch.__name__ in gm.code
    x = corenn.randn(5, 3)
    np.testing.assert_allclose(gm(x).numpy(), f(x).numpy())
    # after tracing the global is restored
    assert globals()["helper_with_branch"].__code__.co_name == "helper_with_branch"


def test_wrap_outside_module_scope_is_refused():
    with pytest.raises(NotImplementedError, match="top level"):
        fx.wrap("len")


def test_autowrap_math_functions_by_global_name():
    def f(x):
        return x / sqrt(x.size(-1))

    gm = fx.symbolic_trace(f)
    assert any(n.target is sqrt for n in gm.graph.nodes)
    assert "math.sqrt" in gm.code
    x = corenn.randn(2, 9)
    np.testing.assert_allclose(gm(x).numpy(), (x / 3).numpy(), rtol=1e-6)


def test_stack_trace_in_meta():
    def f(x):
        return x.relu()
    gm = fx.symbolic_trace(f)
    relu = gm.graph.find_nodes(op="call_method")[0]
    assert "return x.relu()" in relu.meta["stack_trace"]


# -- Interpreter and Transformer ---------------------------------------------------------------------------

def test_interpreter_runs_node_by_node_and_is_overridable():
    g, _ = build_graph()
    gm = gm_of(g)
    a, b = corenn.randn(2, 3), corenn.randn(2, 3)
    np.testing.assert_allclose(fx.Interpreter(gm).run(a, b).numpy(), gm(a, b).numpy())

    class NegRelu(fx.Interpreter):
        def call_method(self, target, args, kwargs):
            result = super().call_method(target, args, kwargs)
            return -result if target == "relu" else result

    np.testing.assert_allclose(NegRelu(gm).run(a, b).numpy(), corenn.sum(-(a + b).relu(), dim=-1).numpy())


def test_interpreter_frees_values_after_last_use_and_reports_the_failing_node():
    g, (x, y, add, relu, s) = build_graph()
    gm = gm_of(g)
    seen_env_sizes = []

    class Watch(fx.Interpreter):
        def run_node(self, n):
            seen_env_sizes.append(len(self.env))
            return super().run_node(n)

    Watch(gm).run(corenn.ones(2, 2), corenn.ones(2, 2))
    assert max(seen_env_sizes) <= 2
    with pytest.raises(Exception) as info:
        fx.Interpreter(gm).run(corenn.ones(2, 2), corenn.ones(3, 3))
    assert any("While executing %add" in note for note in getattr(info.value, "__notes__", []))
    with pytest.raises(RuntimeError, match="Expected positional argument for parameter y"):
        fx.Interpreter(gm).run(corenn.ones(2))


def test_interpreter_initial_env():
    g, (x, y, add, relu, s) = build_graph()
    gm = gm_of(g)
    out = fx.Interpreter(gm).run(None, None, initial_env={add: corenn.tensor([[-1.0, 2.0]])})
    assert out.tolist() == [2.0]


def test_transformer_rewrites_into_a_new_graph_module():
    def f(x):
        return corenn.relu(x) + x.relu()

    gm = fx.symbolic_trace(f)

    class ReluToSigmoid(fx.Transformer):
        def call_function(self, target, args, kwargs):
            if target is corenn.relu:
                return corenn.sigmoid(*args)  # corenn functions on proxies are recorded
            return super().call_function(target, args, kwargs)

        def call_method(self, target, args, kwargs):
            if target == "relu":
                return args[0].sigmoid() * 1
            return super().call_method(target, args, kwargs)

    new = ReluToSigmoid(gm).transform()
    new.graph.lint()
    x = corenn.randn(3)
    np.testing.assert_allclose(new(x).numpy(), (corenn.sigmoid(x) * 2).numpy(), rtol=1e-6)
    np.testing.assert_allclose(gm(x).numpy(), f(x).numpy())  # the original is untouched
    assert "relu" not in new.code


# -- replace_pattern and ShapeProp -----------------------------------------------------------------------

def test_replace_pattern_replaces_every_non_overlapping_match():
    def f(x, w):
        return corenn.relu(x + w) * 2 + corenn.relu(w + x)

    def pattern(a, b):
        return corenn.relu(a + b)

    def replacement(a, b):
        return corenn.sigmoid(a - b)

    gm = fx.symbolic_trace(f)
    matches = fx.subgraph_rewriter.replace_pattern(gm, pattern, replacement)
    assert len(matches) == 2
    gm.graph.lint()
    x, w = corenn.randn(4), corenn.randn(4)
    np.testing.assert_allclose(gm(x, w).numpy(), (corenn.sigmoid(x - w) * 2 + corenn.sigmoid(w - x)).numpy(),
                               rtol=1e-6)


def test_replace_pattern_skips_matches_whose_interior_escapes():
    def f(x, w):
        s = x + w
        return corenn.relu(s) + s  # the add is also used outside the pattern

    def pattern(a, b):
        return corenn.relu(a + b)

    gm = fx.symbolic_trace(f)
    assert fx.subgraph_rewriter.replace_pattern(gm, pattern, lambda a, b: a * b) == []
    x, w = corenn.randn(4), corenn.randn(4)
    np.testing.assert_allclose(gm(x, w).numpy(), f(x, w).numpy())


def test_replace_pattern_literals_must_match_and_input_counts_must_agree():
    def f(x):
        return x * 2 + x * 3

    gm = fx.symbolic_trace(f)
    matches = fx.subgraph_rewriter.replace_pattern(gm, lambda a: a * 2, lambda a: a + a)
    assert len(matches) == 1
    np.testing.assert_allclose(gm(corenn.tensor([1.0])).numpy(), [5.0])
    with pytest.raises(ValueError, match="inputs"):
        fx.subgraph_rewriter.replace_pattern(gm, lambda a: a * 3, lambda a, b: a)


def test_shape_prop_records_shapes_and_dtypes():
    def f(x):
        return corenn.topk(x.sum(dim=1), 2), x.argmax()

    gm = fx.symbolic_trace(f)
    ShapeProp(gm).propagate(corenn.ones(4, 3))
    meta = {n.name: n.meta.get("tensor_meta") for n in gm.graph.nodes}
    assert tuple(meta["x"].shape) == (4, 3) and meta["x"].dtype == corenn.float32
    assert tuple(meta["sum_1"].shape) == (4,)
    values, indices = meta["topk"]
    assert tuple(values.shape) == (2,) and indices.dtype == corenn.int64
    assert meta["argmax"].dtype == corenn.int64 and tuple(meta["argmax"].shape) == ()


def test_graph_deepcopy_is_independent():
    g, (x, y, add, relu, s) = build_graph()
    g2 = copy.deepcopy(g)
    assert str(g2) == str(g)
    next(n for n in g2.nodes if n.name == "relu").target = "sigmoid"
    assert relu.target == "relu"
    g2.lint()
