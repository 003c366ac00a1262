"""Tool use and agent loops (chapter 42): calculator, formula search, dispatcher, loop, policies.

The dispatcher is tested property-based (``hypothesis``) on malformed calls: whatever the
action, it returns an observation and never raises. The calculator is compared with Python's
own arithmetic on generated expressions (generated here, so evaluating them is safe).
"""

import json
from fractions import Fraction
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlbook.models import checkpoints
from mlbook.posttraining import task
from mlbook.systems import agents as ag

SETTINGS = settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
TOOLS = ag.default_tools()


# --- the calculator ------------------------------------------------------------------------------


def _expressions():
    leaf = st.integers(0, 99).map(str)

    def extend(inner):
        binary = st.tuples(inner, st.sampled_from(["+", "-", "*", "/"]), inner).map(
            lambda t: f"{t[0]} {t[1]} {t[2]}"
        )
        return st.one_of(binary, inner.map(lambda e: f"({e})"), inner.map(lambda e: f"-{e}"))

    return st.recursive(leaf, extend, max_leaves=8)


@SETTINGS
@given(_expressions())
def test_calculator_agrees_with_python_arithmetic(expr):
    """Python's parser on the generated text (integers, four operators, parentheses) is the
    independent reference; its division by zero is the calculator's ToolError."""
    try:
        want = eval(expr, {"__builtins__": {}}, {})  # noqa: S307 - generated arithmetic only
    except ZeroDivisionError:
        with pytest.raises(ag.ToolError, match="division by zero"):
            ag.calculate(expr)
        return
    got = float(ag.calculate(expr))
    assert got == pytest.approx(float(want), rel=1e-9, abs=1e-9)


def test_calculator_is_exact_and_follows_precedence():
    assert ag.calculate("3*(4+5)-2^3") == "19"
    assert ag.calculate("2 ** 10") == "1024"
    assert ag.calculate("-2^2") == "-4"  # unary minus binds looser than ^
    assert ag.calculate("2^3^2") == "512"  # right-associative
    assert ag.calculate("1/3 + 1/6") == "0.5"  # exact fractions, then one rounding
    assert Fraction(ag.calculate("0.1+0.2")) == Fraction("0.3")


@pytest.mark.parametrize(
    ("expr", "match"),
    [
        ("__import__('os').system('ls')", "unexpected character"),
        ("x + 1", "unexpected character"),
        ("3 +", "ends too early"),
        ("(1 + 2", "not closed"),
        ("1 2", "after a complete expression"),
        ("1/0", "division by zero"),
        ("0^-1", "division by zero"),
        ("9^99", "exponents must be integers of at most 64"),
        ("2^0.5", "exponents must be integers"),
        ("1+" * 150 + "1", "longer than 200"),
        ("   ", "non-empty string"),
    ],
)
def test_calculator_refuses_everything_but_arithmetic(expr, match):
    with pytest.raises(ag.ToolError, match=match):
        ag.calculate(expr)


# --- the formula search --------------------------------------------------------------------------


def test_search_matches_its_naive_reference_and_finds_the_chapter():
    for q in ["mixture of experts", "softmax attention", "pass@k", "bubble pipeline", "kl"]:
        assert ag.search_formulas(q, k=4) == ag.search_formulas_naive(q, k=4)
    assert ag.search_formulas("mixture experts", k=1).startswith("eq. 27.")
    with pytest.raises(ag.ToolError, match="no equation matches"):
        ag.search_formulas("zzzz qqqq")
    with pytest.raises(ag.ToolError, match="at least one word"):
        ag.search_formulas("?")


def test_shipped_index_is_in_sync_with_the_formula_sheets():
    sheets = Path(__file__).resolve().parents[1] / "data" / "formula_sheets.yml"
    if not sheets.exists():
        pytest.skip("the formula sheets live in the repository only")
    yaml = pytest.importorskip("yaml")
    data = yaml.safe_load(sheets.read_text(encoding="utf-8"))
    want = [(str(e["id"]), e["latex"]) for c in data["chapters"] for e in c["equations"]]
    assert [(e["id"], e["latex"]) for e in ag.formula_index()] == want
    path = Path(ag.__file__).resolve().parents[1] / "data" / "formula_index.json"
    assert json.loads(path.read_text(encoding="utf-8"))[0]["id"] == want[0][0]


# --- the dispatcher: property-based on malformed calls -------------------------------------------

_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=30),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


@SETTINGS
@given(
    st.one_of(st.sampled_from(["calculator", "search", "final", "shell", ""]), st.text(max_size=8)),
    st.one_of(st.dictionaries(st.text(max_size=12), _values, max_size=3), _values),
)
def test_dispatch_never_raises_and_flags_every_invalid_call(tool, args):
    obs = ag.dispatch(ag.Action(tool, args), TOOLS)
    assert isinstance(obs, ag.Observation) and isinstance(obs.text, str)
    valid = (
        tool in TOOLS
        and isinstance(args, dict)
        and set(args) == set(TOOLS[tool].params)
        and all(isinstance(v, str) for v in args.values())
    )
    if not valid:
        assert obs.error


@SETTINGS
@given(st.text(max_size=40))
def test_dispatch_of_any_string_expression_or_query_returns_an_observation(text):
    for tool, name in (("calculator", "expression"), ("search", "query")):
        obs = ag.dispatch(ag.Action(tool, {name: text}), TOOLS)
        assert isinstance(obs, ag.Observation)


@SETTINGS
@given(_values)
def test_dispatch_of_a_non_action_is_an_error_observation(thing):
    obs = ag.dispatch(thing, TOOLS)
    assert obs.error and obs.text.startswith("not an action")


def test_dispatch_names_the_problem():
    calc = TOOLS["calculator"]
    assert ag.dispatch(ag.Action("calculator", {"expression": "2+3"}), TOOLS) == ag.Observation("5")
    cases = [
        (ag.Action("shell", {"cmd": "ls"}), "unknown tool 'shell'"),
        (ag.Action("calculator", {}), "missing argument"),
        (ag.Action("calculator", {"expression": "1", "x": 2}), "unknown argument"),
        (ag.Action("calculator", {"expression": 7}), "must be str, got int"),
        (ag.Action("calculator", ["2+3"]), "must be a mapping"),
        (ag.Action("calculator", {"expression": "1/0"}), "division by zero"),
    ]
    for action, text in cases:
        obs = ag.dispatch(action, TOOLS)
        assert obs.error and text in obs.text, (action, obs)
    with pytest.raises(ag.ToolError, match="must be str"):
        ag.validate({"expression": True}, calc.params)

    def broken(expression):
        raise RuntimeError("bug")

    tools = {"calculator": ag.Tool("calculator", broken, {"expression": str})}
    obs = ag.dispatch(ag.Action("calculator", {"expression": "1"}), tools)
    assert obs.error and "RuntimeError: bug" in obs.text


# --- the loop ------------------------------------------------------------------------------------


class _Replay:
    """A policy that plays a fixed list of actions, then repeats the last one."""

    def __init__(self, actions):
        self.actions = actions

    def __call__(self, h):
        return self.actions[min(len(h) // 2, len(self.actions) - 1)]


_actions = st.one_of(
    st.builds(
        ag.Action,
        st.just("calculator"),
        st.fixed_dictionaries({"expression": st.sampled_from(["1+2", "1/0", "x"])}),
    ),
    st.builds(
        ag.Action,
        st.just("search"),
        st.fixed_dictionaries({"query": st.sampled_from(["softmax", "zz"])}),
    ),
    st.builds(ag.Action, st.just("final"), st.fixed_dictionaries({"answer": st.just("42")})),
    st.builds(ag.Action, st.just("nope"), st.just({})),
    st.just("not an action"),
)


@SETTINGS
@given(
    st.lists(_actions, min_size=1, max_size=6),
    st.integers(1, 6),
    st.integers(5, 120),
    st.integers(1, 3),
)
def test_loop_matches_its_recursive_reference(actions, max_steps, max_tokens, max_errors):
    kw = dict(max_steps=max_steps, max_tokens=max_tokens, max_errors=max_errors)
    t = ag.run_agent(_Replay(actions), "task", TOOLS, **kw)
    assert t == ag.run_agent_naive(_Replay(actions), "task", TOOLS, **kw)
    assert t.stop in ("final", "budget", "error")
    assert t.steps <= max_steps and (t.answer is None) == (t.stop != "final")


def test_three_stop_conditions():
    calc = ag.Action("calculator", {"expression": "1+2"})
    final = ag.Action("final", {"answer": "3"})
    t = ag.run_agent(_Replay([calc, final]), "1+2", TOOLS)
    assert (t.stop, t.answer, t.steps, t.tool_calls) == ("final", "3", 2, 1)
    assert len(t.history) == 4  # x, a_1, o_1, a_2 (eq. 42.1 plus the final action)
    t = ag.run_agent(_Replay([calc]), "loop", TOOLS, max_steps=3)
    assert (t.stop, t.steps, t.tool_calls) == ("budget", 3, 3)
    t = ag.run_agent(_Replay([calc]), "loop", TOOLS, max_steps=50, max_tokens=40)
    assert t.stop == "budget" and t.steps < 50 and t.tokens > 40
    bad = ag.Action("calculator", {"expr": "1"})
    t = ag.run_agent(_Replay([bad]), "bad", TOOLS, max_errors=2)
    assert (t.stop, t.steps, t.errors) == ("error", 2, 2)
    with pytest.raises(ValueError, match="max_steps must be a positive int"):
        ag.run_agent(_Replay([final]), "x", TOOLS, max_steps=0)


def test_scripted_policy_answers_with_the_tools():
    t = ag.run_agent(ag.ScriptedPolicy(), "What is 12*(3+4)?", TOOLS)
    assert (t.answer, t.stop, t.tool_calls) == ("84", "final", 1)
    t = ag.run_agent(ag.ScriptedPolicy(), "Find the formula for the pipeline bubble", TOOLS)
    assert t.answer.startswith("eq. 41.5")
    assert ag.history("x", [(ag.Action("a"), ag.Observation("o"))]) == (
        "x",
        ag.Action("a"),
        ag.Observation("o"),
    )
    assert ag.count_tokens("eq. 42.1: h_t") == 7  # eq . 42 . 1 : h_t


def test_decoder_proposals_and_routing():
    model = checkpoints.load("base")
    pairs = task.problems()[:12]
    ans, probs = ag.propose(
        model, pairs, n=2, temperature=1.0, generator=torch.Generator().manual_seed(0)
    )
    assert len(ans) == 24 and probs.shape == (24,)
    # independent reference: the probability of each answer from the logits, token by token
    for i in (0, 7, 23):
        a, b = pairs[i // 2]
        text = f"\n{a}+{b}={ans[i]}\n"
        ids = task.encode(text)
        with torch.no_grad():
            logp = torch.log_softmax(model(ids[None, :-1]).double(), -1)[0]
        want = sum(float(logp[t, ids[t + 1]]) for t in range(4, len(ids) - 1))
        assert float(probs[i].log()) == pytest.approx(want, abs=1e-5)
    x = "3+4="
    never = ag.run_agent(ag.DecoderPolicy("9", 0.2, threshold=0.0), x, TOOLS)
    always = ag.run_agent(ag.DecoderPolicy("9", 0.9, threshold=1.1), x, TOOLS)
    assert (never.answer, never.tool_calls) == ("9", 0)
    assert (always.answer, always.tool_calls) == ("7", 1)
    with pytest.raises(ValueError, match="prob must be a finite number"):
        ag.DecoderPolicy("9", 1.5, 0.5)
