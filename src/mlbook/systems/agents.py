"""Tool use and agent loops (chapter 42): history, policy, validated dispatch, budgets, stops.

An agent answers a task ``x`` by acting in steps. At step t its **policy** reads the history
``h_t = (x, a_1, o_1, ..., a_{t-1}, o_{t-1})`` (eq. 42.1) and chooses an action ``a_t``: a tool
and its arguments, or the final answer (eq. 42.2). The **dispatcher** checks the arguments
against the tool's declared parameters and runs the tool; anything wrong (an unknown tool, a
missing or extra argument, a wrong type, the tool's own failure) becomes an *error observation*
that goes into the history, never an exception that ends the program (eq. 42.3). The **loop**
stops for one of three reasons (eq. 42.4): a final answer, a spent budget (steps or tokens), or
too many errors in a row.

Two real tools: :func:`calculate`, an arithmetic evaluator that parses the text itself (numbers,
``+ - * / ^``, parentheses; exact fractions; nothing else is ever executed), and
:func:`search_formulas`, a keyword search over the book's formula index (shipped with the package
as ``mlbook/data/formula_index.json``, written from the repository's formula sheets by
``scripts/build_formula_index.py``). Two policies: :class:`ScriptedPolicy` (deterministic rules)
and :class:`DecoderPolicy` (the book's decoder answers a sum itself when it is confident and
routes it to the calculator otherwise).

Types legend (the loop handles text and small records, not tensors)
    x        the task, a string
    a_t      :class:`Action` (tool name, args dict); the tool ``"final"`` ends the loop
    o_t      :class:`Observation` (text, error flag)
    h_t      a tuple ``(x, a_1, o_1, ..., a_{t-1}, o_{t-1})`` of length 2t - 1
    tokens   :func:`count_tokens` of the rendered history (words and punctuation marks)
Tensor shapes (the decoder's proposals)
    B = n * len(pairs) proposals, problem-major;  answers: B strings;  probs: (B,) float64
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cache
from importlib import resources

import torch

from ..validation import number, positive_int, probability

__all__ = [
    "FINAL",
    "Action",
    "Observation",
    "Tool",
    "ToolError",
    "Trace",
    "history",
    "render",
    "count_tokens",
    "calculate",
    "formula_index",
    "search_formulas",
    "search_formulas_naive",
    "default_tools",
    "validate",
    "dispatch",
    "run_agent",
    "run_agent_naive",
    "ScriptedPolicy",
    "DecoderPolicy",
    "propose",
]

FINAL = "final"  # the action that ends the loop with an answer


@dataclass(frozen=True)
class Action:
    """a_t: the tool to call and its keyword arguments (``tool == "final"``: the answer)."""

    tool: str
    args: Mapping = field(default_factory=dict)

    def text(self) -> str:
        if not isinstance(self.args, Mapping):  # a malformed call is shown as it came
            return f"{self.tool}({self.args!r})"
        args = ", ".join(f"{k}={v!r}" for k, v in self.args.items())
        return f"{self.tool}({args})"


@dataclass(frozen=True)
class Observation:
    """o_t: what the dispatcher returns, a text and whether it reports an error."""

    text: str
    error: bool = False


class ToolError(Exception):
    """A tool cannot run on these arguments (the dispatcher turns it into an observation)."""


@dataclass(frozen=True)
class Tool:
    """A callable tool with declared parameters ``{name: type}`` and a price per call."""

    name: str
    fn: Callable
    params: Mapping[str, type]
    description: str = ""
    cost: float = 0.0


@dataclass(frozen=True)
class Trace:
    """One run of the loop: the answer (None unless it stopped on "final"), why it stopped,
    the final history, and what it used (steps, tokens of the history, tool calls, errors)."""

    answer: str | None
    stop: str
    history: tuple
    steps: int
    tokens: int
    tool_calls: int
    errors: int


# --- the history (eq. 42.1) ----------------------------------------------------------------------


def history(x: str, steps: Sequence[tuple[Action, Observation]] = ()) -> tuple:
    """h_t = (x, a_1, o_1, ..., a_{t-1}, o_{t-1}) from the task and the steps so far.
    Implements eq. 42.1."""
    h = [x]
    for a, o in steps:
        h += [a, o]
    return tuple(h)


def render(h: tuple) -> str:
    """The history as the text a language model would read, one line per entry."""
    lines = [f"task: {h[0]}"]
    for item in h[1:]:
        if isinstance(item, Observation):
            lines.append(("error: " if item.error else "observation: ") + item.text)
        else:  # an action, or whatever a faulty policy returned in its place
            lines.append(f"action: {item.text() if isinstance(item, Action) else repr(item)}")
    return "\n".join(lines)


_TOKEN = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    """Tokens of a text, counted as words and single punctuation marks (a stand-in for a
    tokenizer: what the token budget of the loop counts)."""
    return len(_TOKEN.findall(text))


# --- tool 1: a calculator that parses, never executes -------------------------------------------

_CALC_TOKEN = re.compile(r"\s*(?:(\d+(?:\.\d*)?|\.\d+)|(\*\*|[-+*/^()]))")
_MAX_CHARS, _MAX_EXPONENT = 200, 64


def _lex(text: str) -> list[str]:
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _CALC_TOKEN.match(text, pos)
        if not m:
            raise ToolError(f"unexpected character {text[pos:].lstrip()[0]!r} in the expression")
        out.append(m.group(1) or ("^" if m.group(2) == "**" else m.group(2)))
        pos = m.end()
    return out


def calculate(expression: str) -> str:
    """Evaluate arithmetic text exactly: numbers, + - * / and ^ (or **) with integer exponents,
    parentheses, unary signs; the usual precedence, ^ right-associative. Returns the value as
    text ("7", "0.75"); raises :class:`ToolError` for anything else (names, calls, division by
    zero, exponents beyond 64, more than 200 characters). Nothing is passed to ``eval``."""
    if not isinstance(expression, str) or not expression.strip():
        raise ToolError("expression must be a non-empty string")
    if len(expression) > _MAX_CHARS:
        raise ToolError(f"expression is longer than {_MAX_CHARS} characters")
    toks, i = _lex(expression), 0

    def peek():
        return toks[i] if i < len(toks) else None

    def take():
        nonlocal i
        i += 1
        return toks[i - 1]

    def expr():  # expr := term (('+' | '-') term)*
        v = term()
        while peek() in ("+", "-"):
            v = v + term() if take() == "+" else v - term()
        return v

    def term():  # term := unary (('*' | '/') unary)*
        v = unary()
        while peek() in ("*", "/"):
            if take() == "*":
                v = v * unary()
            else:
                d = unary()
                if d == 0:
                    raise ToolError("division by zero")
                v = v / d
        return v

    def unary():  # unary := ('+' | '-') unary | power
        if peek() in ("+", "-"):
            return unary() if take() == "+" else -unary()
        return power()

    def power():  # power := atom ('^' unary)?   (right-associative)
        base = atom()
        if peek() == "^":
            take()
            e = unary()
            if e.denominator != 1 or abs(e) > _MAX_EXPONENT:
                raise ToolError(f"exponents must be integers of at most {_MAX_EXPONENT}")
            if base == 0 and e < 0:
                raise ToolError("division by zero")
            return base**e
        return base

    def atom():  # atom := number | '(' expr ')'
        t = peek()
        if t is None:
            raise ToolError("the expression ends too early")
        take()
        if t == "(":
            v = expr()
            if peek() != ")":
                raise ToolError("a parenthesis is not closed")
            take()
            return v
        if t[0].isdigit() or t[0] == ".":
            return Fraction(t)
        raise ToolError(f"unexpected {t!r}")

    value = expr()
    if i != len(toks):
        raise ToolError(f"unexpected {toks[i]!r} after a complete expression")
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.12g}"


# --- tool 2: search the book's formula index ----------------------------------------------------

_WORD = re.compile(r"[a-z]+")
_STOP = frozenset(
    "a an and the of for in on to is are what which how by with from at as or".split()
)


@cache
def formula_index() -> tuple[dict, ...]:
    """The book's key equations as shipped with the package: dicts with id, chapter, title,
    latex (written by ``scripts/build_formula_index.py`` from the formula sheets)."""
    path = resources.files("mlbook").joinpath("data", "formula_index.json")
    return tuple(json.loads(path.read_text(encoding="utf-8")))


def _words(text: str) -> set[str]:
    """Lower-case words of two letters or more, stop words removed (LaTeX commands give their
    names: ``\\softmax`` -> softmax)."""
    return {w for w in _WORD.findall(text.lower()) if len(w) > 1 and w not in _STOP}


@cache
def _index_words() -> tuple[tuple[set, ...], dict[str, float]]:
    docs = tuple(_words(e["title"] + " " + e["latex"]) for e in formula_index())
    df: dict[str, int] = {}
    for d in docs:
        for w in d:
            df[w] = df.get(w, 0) + 1
    idf = {w: math.log(len(docs) / n) for w, n in df.items()}
    return docs, idf


def _search_scores(query: str) -> list[float]:
    docs, idf = _index_words()
    q = _words(query)
    return [sum(idf[w] for w in q & d) for d in docs]


def search_formulas(query: str, k: int = 3) -> str:
    """The k equations of the formula index that share the most (idf-weighted) words with the
    query, one line each ("eq. 27.3 (Mixture of Experts): ..."), best first, ties in book order.
    Raises :class:`ToolError` when no entry shares a word."""
    if not isinstance(query, str) or not _words(query):
        raise ToolError("query must contain at least one word")
    k = positive_int(k, "k")
    scores = torch.tensor(_search_scores(query), dtype=torch.float64)
    # stable sort: equal scores keep the book's order
    order = torch.sort(-scores, stable=True).indices[:k]
    hits = [formula_index()[j] for j in order.tolist() if scores[j] > 0]
    if not hits:
        raise ToolError(f"no equation matches {query!r}")
    return "\n".join(f"eq. {e['id']} ({e['title']}): {e['latex']}" for e in hits)


def search_formulas_naive(query: str, k: int = 3) -> str:
    """Reference for :func:`search_formulas`: score every entry in a loop, pick the best k by
    repeated maximum (first index wins ties)."""
    if not isinstance(query, str) or not _words(query):
        raise ToolError("query must contain at least one word")
    scores, picked = _search_scores(query), []
    for _ in range(min(k, len(scores))):
        best = max((j for j in range(len(scores)) if j not in picked), key=lambda j: scores[j])
        if scores[best] <= 0:
            break
        picked.append(best)
    if not picked:
        raise ToolError(f"no equation matches {query!r}")
    entries = [formula_index()[j] for j in picked]
    return "\n".join(f"eq. {e['id']} ({e['title']}): {e['latex']}" for e in entries)


def default_tools(calculator_cost: float = 0.0, search_cost: float = 0.0) -> dict[str, Tool]:
    """The chapter's two tools by name, with their declared parameters and prices per call."""
    return {
        "calculator": Tool(
            "calculator",
            calculate,
            {"expression": str},
            "exact arithmetic: + - * / ^ and parentheses",
            number(calculator_cost, "calculator_cost", 0.0),
        ),
        "search": Tool(
            "search",
            search_formulas,
            {"query": str},
            "the book's key equations that match some words",
            number(search_cost, "search_cost", 0.0),
        ),
    }


# --- the dispatcher (eq. 42.3) -------------------------------------------------------------------


def validate(args, params: Mapping[str, type]) -> dict:
    """The arguments of a call checked against the tool's parameters: a mapping with exactly the
    declared names, each of the declared type (bool is not an int). Raises :class:`ToolError`
    naming the first problem."""
    if not isinstance(args, Mapping):
        raise ToolError(
            f"arguments must be a mapping of names to values, got {type(args).__name__}"
        )
    missing = [p for p in params if p not in args]
    extra = [a for a in args if a not in params]
    if missing:
        raise ToolError(f"missing argument(s) {missing}")
    if extra:
        raise ToolError(f"unknown argument(s) {extra!r}; expected {list(params)}")
    for name, kind in params.items():
        v = args[name]
        if not isinstance(v, kind) or (isinstance(v, bool) and kind is not bool):
            raise ToolError(f"argument {name!r} must be {kind.__name__}, got {type(v).__name__}")
    return dict(args)


def dispatch(action, tools: Mapping[str, Tool]) -> Observation:
    """Run a tool call and return its observation; never raises for a bad call.

    dispatch(a) = tool(validate(args)) when the tool exists and the arguments are valid, else an
    error observation naming the problem (an unknown tool, bad arguments, the tool's own
    :class:`ToolError`, or any other exception inside the tool). Implements eq. 42.3.
    """
    if not isinstance(action, Action):
        return Observation(f"not an action: {type(action).__name__}", error=True)
    tool = tools.get(action.tool) if isinstance(action.tool, str) else None
    if tool is None:
        known = ", ".join(sorted(tools))
        return Observation(f"unknown tool {action.tool!r}; available: {known}", error=True)
    try:
        out = tool.fn(**validate(action.args, tool.params))
    except ToolError as err:
        return Observation(f"{tool.name}: {err}", error=True)
    except Exception as err:  # a tool's bug must not end the loop either
        return Observation(f"{tool.name} failed: {type(err).__name__}: {err}", error=True)
    return Observation(str(out))


# --- the loop (eq. 42.4) -------------------------------------------------------------------------


def run_agent(
    policy: Callable[[tuple], Action],
    x: str,
    tools: Mapping[str, Tool],
    *,
    max_steps: int = 5,
    max_tokens: int = 400,
    max_errors: int = 2,
) -> Trace:
    """Run the agent loop on task ``x`` until one of the three stops of eq. 42.4:

    "final" (the policy answers), "budget" (``max_steps`` actions taken, or the history's
    :func:`count_tokens` beyond ``max_tokens``), or "error" (``max_errors`` error observations
    in a row). ``policy(h)`` maps the history (eq. 42.1) to an action (eq. 42.2); tools run
    through :func:`dispatch` (eq. 42.3). An action that is not an :class:`Action` counts as an
    error. Implements eqs. 42.1-42.4.
    """
    max_steps = positive_int(max_steps, "max_steps")
    max_tokens = positive_int(max_tokens, "max_tokens")
    max_errors = positive_int(max_errors, "max_errors")
    h, calls, errors, streak = history(x), 0, 0, 0
    stop, answer = "budget", None
    for _ in range(max_steps):
        a = policy(h)
        if isinstance(a, Action) and a.tool == FINAL:
            answer = a.args.get("answer") if isinstance(a.args, Mapping) else None
            h, stop, answer = h + (a,), "final", str(answer)
            break
        o = dispatch(a, tools)
        calls += isinstance(a, Action) and a.tool in tools
        errors, streak = errors + o.error, (streak + 1) if o.error else 0
        h = h + (a, o)
        if streak >= max_errors:
            stop = "error"
            break
        if count_tokens(render(h)) > max_tokens:
            break
    steps = sum(not isinstance(e, Observation) for e in h[1:])  # actions taken
    return Trace(answer, stop, h, steps, count_tokens(render(h)), calls, errors)


def run_agent_naive(policy, x, tools, *, max_steps=5, max_tokens=400, max_errors=2) -> Trace:
    """Reference for :func:`run_agent`: the same loop written as a recursion on the history,
    with the stop conditions checked in the order of eq. 42.4."""

    def go(h, steps, calls, errors, streak):
        if steps == max_steps:
            return h, "budget", None, calls, errors
        a = policy(h)
        if isinstance(a, Action) and a.tool == FINAL:
            answer = a.args.get("answer") if isinstance(a.args, Mapping) else None
            return h + (a,), "final", str(answer), calls, errors
        o = dispatch(a, tools)
        h2 = h + (a, o)
        calls2 = calls + int(isinstance(a, Action) and a.tool in tools)
        streak2 = streak + 1 if o.error else 0
        if streak2 >= max_errors:
            return h2, "error", None, calls2, errors + o.error
        if count_tokens(render(h2)) > max_tokens:
            return h2, "budget", None, calls2, errors + o.error
        return go(h2, steps + 1, calls2, errors + o.error, streak2)

    h, stop, answer, calls, errors = go(history(x), 0, 0, 0, 0)
    steps = sum(not isinstance(e, Observation) for e in h[1:])
    return Trace(answer, stop, h, steps, count_tokens(render(h)), calls, errors)


# --- policies (eq. 42.2) -------------------------------------------------------------------------

_ARITH = re.compile(r"^[\d\s.+\-*/^()]+$")


class ScriptedPolicy:
    """A deterministic policy: arithmetic goes to the calculator, "formula for ..." to the
    search, and the first good observation becomes the final answer; after an error it
    answers that it failed. ``a_t = pi(h_t)`` with no randomness: eq. 42.2 as a point mass.
    Implements eq. 42.2."""

    def __call__(self, h: tuple) -> Action:
        x = h[0]
        if len(h) > 1:  # the last entry is the observation of the last call
            last = h[-1]
            return Action(FINAL, {"answer": "unknown" if last.error else last.text})
        question = x.strip().rstrip("?=").strip()
        m = re.search(r"formula (?:for|of) (.+)", question, flags=re.IGNORECASE)
        if m:
            return Action("search", {"query": m.group(1)})
        m = re.search(r"(?:what is|compute)\s+(.+)", question, flags=re.IGNORECASE)
        expr = m.group(1) if m else question
        if _ARITH.match(expr):
            return Action("calculator", {"expression": expr})
        return Action(FINAL, {"answer": "unknown"})


@torch.no_grad()
def propose(model, pairs, n: int = 1, temperature: float = 1.0, generator=None):
    """The decoder's own answers to the sums "a+b=" and their probabilities, in one batch.

    Returns answers (B strings, B = n len(pairs), problem-major) and probs (B,) float64:
    pi(y | x) of each whole completion (digits and newline)."""
    from ..posttraining import task

    tokens, mask = task.sample(model, pairs, n, temperature, generator)
    return task.answers(tokens), task.completion_log_probs(model, tokens, mask).exp()


class DecoderPolicy:
    """The book's decoder as the policy for a sum "a+b=": it proposes its own answer y with
    probability pi(y | x) (see :func:`propose`); it answers itself when pi(y | x) >= threshold
    and calls the calculator otherwise, then answers with the calculator's result. threshold 0:
    the decoder alone; threshold above 1: always the tool. Implements eq. 42.2 (stochastic
    through the sampled answer)."""

    def __init__(self, answer: str, prob: float, threshold: float) -> None:
        self.answer = answer
        self.prob = probability(prob, "prob")
        self.threshold = number(threshold, "threshold", 0.0)

    def __call__(self, h: tuple) -> Action:
        if len(h) == 1:
            if self.prob >= self.threshold:
                return Action(FINAL, {"answer": self.answer})
            return Action("calculator", {"expression": h[0].strip().rstrip("=")})
        last = h[-1]
        return Action(FINAL, {"answer": self.answer if last.error else last.text})
