"""Checks of the exercises of chapter 42 (tool use and agent loops).

The references are independent of :mod:`mlbook.systems.agents`' loop and dispatcher: the error
stop is counted by stepping the rule of eq. 42.4 by hand (42.1); the dispatcher is judged on
hand-labelled calls whose right outcome is written down here (42.2); and the routing curve is
its closed form, right if the tool is called or the decoder's own answer is right (42.3).

Each typical wrong answer is written once, as a function below; ``MISTAKES`` lists them.
"""

from __future__ import annotations

import torch

from . import Incorrect, as_int, as_tensor, attempt, exercise, expect, expect_answer, expect_tuple
from . import reference_answer as _ref

# --- 42.1 ----------------------------------------------------------------------------------------


def guess_step_budget():
    return 5


def guess_first_error():
    return 1


@exercise("42.1", "predict_error_stop")
def error_stop(answer) -> str:
    """The loop of eq. 42.4 stepped by hand on a policy whose every call is malformed."""
    guess = as_int(attempt(answer), "predict_error_stop()", "actions")
    max_steps, max_errors = 5, 2
    steps, streak, stop = 0, 0, "budget"
    while steps < max_steps:  # each call is malformed: each observation is an error
        steps, streak = steps + 1, streak + 1
        if streak >= max_errors:
            stop = "error"
            break
    seen = f"the loop stops with '{stop}' after {steps} actions (max_errors = {max_errors})"
    if guess != steps:
        if guess == max_steps:
            why = (
                "5 is the step budget, but the error stop comes first: two error observations "
                "in a row end the run"
            )
        elif guess == 1:
            why = (
                "it does not stop at the first error: one error observation is information the "
                "policy may correct; only max_errors = 2 in a row stop the run"
            )
        else:
            why = "count the error observations: the stop needs max_errors of them in a row"
        raise Incorrect(f"you guessed {guess}; {seen}. {why}")
    return f"right: {seen}; the step budget (5) is never reached"


# --- 42.2 ----------------------------------------------------------------------------------------


def _tools():
    from ...systems import agents as ag

    def repeat(text, n):
        return text * n

    tools = dict(ag.default_tools())
    tools["repeat"] = ag.Tool("repeat", repeat, {"text": str, "n": int})
    return ag, tools


def _cases():
    """(action, error expected, text expected when valid) for hand-labelled calls."""
    ag, _ = _tools()
    A = ag.Action
    return [
        (A("calculator", {"expression": "2+3*4"}), False, "14"),
        (A("repeat", {"text": "ab", "n": 3}), False, "ababab"),
        (A("shell", {"cmd": "ls"}), True, None),  # unknown tool
        (A("calculator", {}), True, None),  # missing argument
        (A("calculator", {"expression": "1", "x": 2}), True, None),  # extra argument
        (A("calculator", ["2+3"]), True, None),  # args not a dict
        (A("repeat", {"text": 5, "n": 2}), True, None),  # wrong type, yet 5 * 2 runs
        (A("repeat", {"text": "ab", "n": True}), True, None),  # bool is not an int
        (A("calculator", {"expression": "1/0"}), True, None),  # the tool's own error
        (A("calculator", {"expression": "import os"}), True, None),  # not arithmetic
    ]


def dispatch_lets_errors_escape(action, tools):
    from ...systems import agents as ag

    tool = tools.get(action.tool) if isinstance(action.tool, str) else None
    if tool is None:
        return ag.Observation("unknown tool", error=True)
    if not isinstance(action.args, dict) or set(action.args) != set(tool.params):
        return ag.Observation("bad arguments", error=True)
    for name, kind in tool.params.items():
        v = action.args[name]
        if not isinstance(v, kind) or (isinstance(v, bool) and kind is not bool):
            return ag.Observation("bad type", error=True)
    return ag.Observation(str(tool.fn(**action.args)))


def dispatch_without_types(action, tools):
    from ...systems import agents as ag

    tool = tools.get(action.tool) if isinstance(action.tool, str) else None
    if tool is None or not isinstance(action.args, dict) or set(action.args) != set(tool.params):
        return ag.Observation("bad call", error=True)
    try:
        return ag.Observation(str(tool.fn(**action.args)))
    except Exception as err:
        return ag.Observation(str(err), error=True)


def dispatch_bool_as_int(action, tools):
    from ...systems import agents as ag

    tool = tools.get(action.tool) if isinstance(action.tool, str) else None
    if tool is None or not isinstance(action.args, dict) or set(action.args) != set(tool.params):
        return ag.Observation("bad call", error=True)
    if not all(isinstance(action.args[k], t) for k, t in tool.params.items()):
        return ag.Observation("bad type", error=True)
    try:
        return ag.Observation(str(tool.fn(**action.args)))
    except Exception as err:
        return ag.Observation(str(err), error=True)


def dispatch_unflagged(action, tools):
    from ...systems import agents as ag

    tool = tools.get(action.tool) if isinstance(action.tool, str) else None
    if tool is None:
        return ag.Observation("unknown tool")
    try:
        if not isinstance(action.args, dict) or set(action.args) != set(tool.params):
            raise ValueError("bad arguments")
        for name, kind in tool.params.items():
            v = action.args[name]
            if not isinstance(v, kind) or (isinstance(v, bool) and kind is not bool):
                raise TypeError(f"{name} must be {kind.__name__}")
        return ag.Observation(str(tool.fn(**action.args)))
    except Exception as err:
        return ag.Observation(f"error: {err}")


@exercise("42.2", "safe_dispatch")
def safe_dispatch(fn) -> str:
    """Hand-labelled valid and malformed calls; the reader's dispatcher must never raise."""
    ag, tools = _tools()
    for action, error, text in _cases():
        call = f"safe_dispatch({action.text()})"
        try:
            obs = fn(action, tools)
        except NotImplementedError:
            attempt(fn, action, tools)  # raises NotAttempted with the usual message
        except Exception as err:
            raise Incorrect(
                f"{call} raised {type(err).__name__}: {err}. A dispatcher must never raise: "
                "wrap the tool call in try/except and return an error observation"
            ) from None
        expect(
            isinstance(obs, ag.Observation),
            f"{call} should return an ag.Observation, got {type(obs).__name__}",
        )
        if obs.error != error:
            args = action.args if isinstance(action.args, dict) else {}
            if error and args.get("n") is True:
                raise Incorrect(
                    f"{call} was accepted: isinstance(True, int) is True in Python, so a bool "
                    "passes as an int; refuse bool where int is declared"
                )
            if error and args.get("text") == 5:
                raise Incorrect(
                    f"{call} was accepted (5 * 2 = 10 runs without complaint): there is no type "
                    "check; compare each argument with the type the tool declares"
                )
            if error:
                raise Incorrect(
                    f"{call} returned error=False for an invalid call: set the error flag, "
                    "the loop counts error observations to stop"
                )
            raise Incorrect(f"{call} flagged a valid call as an error: {obs.text!r}")
        if not error:
            expect(obs.text == text, f"{call} should observe {text!r}, got {obs.text!r}")
    return (
        f"all {len(_cases())} calls handled without an exception: valid calls run, unknown "
        "tools, missing/extra arguments, wrong types (bool included), non-dict args and the "
        "tool's own errors all become error observations"
    )


# --- 42.3 ----------------------------------------------------------------------------------------

_TEMPERATURES, _THRESHOLDS, _N, _SEED = (0.5, 1.5), [0.0, 0.05, 0.1, 0.2, 1.01], 2, 3


def _closed_form(model, pairs, temperature):
    from ...systems import agents as ag

    answers, probs = ag.propose(model, pairs, _N, temperature, torch.Generator().manual_seed(_SEED))
    truth = [str(a + b) for a, b in pairs for _ in range(_N)]
    right = torch.tensor([y == t for y, t in zip(answers, truth, strict=True)])
    acc = [float(((probs < tau) | right).double().mean()) for tau in _THRESHOLDS]
    calls = [float((probs < tau).double().mean()) for tau in _THRESHOLDS]
    return acc, calls


def curve_counts_tool_as_wrong(model, pairs, temperature, thresholds, n, seed):
    acc, calls = _ref("42.3", "routing_curve")(model, pairs, temperature, thresholds, n, seed)
    return [a - c for a, c in zip(acc, calls, strict=True)], calls


def curve_calls_when_confident(model, pairs, temperature, thresholds, n, seed):
    acc, calls = _ref("42.3", "routing_curve")(model, pairs, temperature, thresholds, n, seed)
    return acc, [1.0 - c for c in calls]


@exercise("42.3", "routing_curve")
def routing_curve(fn) -> str:
    """The reader's routed accuracy and call share against the closed form, two temperatures."""
    from ...models import checkpoints
    from ...posttraining import task

    model, pairs = checkpoints.load("base"), task.problems()[::5]  # 20 problems
    lines = []
    for temperature in _TEMPERATURES:
        got = attempt(fn, model, pairs, temperature, list(_THRESHOLDS), _N, _SEED)
        acc, calls = expect_tuple(got, "routing_curve(...)", ("accuracy", "calls"))
        want_acc, want_calls = _closed_form(model, pairs, temperature)
        what = f"routing_curve(temperature={temperature})"
        expect_answer(
            as_tensor(calls, f"{what} calls"),
            want_calls,
            f"{what} tool-call shares",
            wrong={
                "call the tool when the decoder is unsure, p(y | x) < τ, not when it is sure": [
                    1 - c for c in want_calls
                ]
            },
            atol=1e-9,
        )
        expect_answer(
            as_tensor(acc, f"{what} accuracy"),
            want_acc,
            f"{what} accuracy",
            wrong={
                "a run that calls the calculator is right (the final answer is its observation)": [
                    a - c for a, c in zip(want_acc, want_calls, strict=True)
                ]
            },
            atol=1e-9,
        )
        lines.append(
            f"τ = {temperature}: accuracy "
            + ", ".join(f"{a:.2f}" for a in want_acc)
            + "; calls "
            + ", ".join(f"{c:.2f}" for c in want_calls)
        )
    return (
        f"matches the closed form (right if routed or if the own answer is right) for thresholds "
        f"{_THRESHOLDS} — " + "; ".join(lines)
    )


MISTAKES = {
    "42.1": [
        (guess_step_budget, "5 is the step budget"),
        (guess_first_error, "does not stop at the first error"),
    ],
    "42.2": [
        (dispatch_lets_errors_escape, "must never raise"),
        (dispatch_without_types, "there is no type check"),
        (dispatch_bool_as_int, "bool passes as an int"),
        (dispatch_unflagged, "set the error flag"),
    ],
    "42.3": [
        (curve_counts_tool_as_wrong, "a run that calls the calculator is right"),
        (curve_calls_when_confident, "not when it is sure"),
    ],
}
