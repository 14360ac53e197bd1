"""A safe calculator for the `calculator {expression}` tool: an AST walker over numbers,
+ - * / // % **, parentheses, unary signs and a whitelist of `math` functions and
constants. No `eval`, no names or attributes beyond the whitelist, caps on exponents,
result size and expression length, so no input can hang or crash it."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

MAX_CHARS = 500
MAX_EXPONENT = 1000
MAX_MAGNITUDE = 1e100
MAX_NODES = 200

FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sqrt": math.sqrt, "log": math.log, "log10": math.log10, "log2": math.log2,
    "exp": math.exp, "sin": math.sin, "cos": math.cos, "tan": math.tan,
    "floor": math.floor, "ceil": math.ceil, "factorial": math.factorial,
    "comb": math.comb, "perm": math.perm, "gcd": math.gcd, "lcm": math.lcm,
    "abs": abs, "round": round, "min": min, "max": max,
}  # fmt: skip
CONSTANTS = {"pi": math.pi, "e": math.e}
BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}  # fmt: skip


class CalcError(ValueError):
    """The expression is not allowed or cannot be computed; the message says why."""


def _check(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CalcError("the result is not a number")
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        raise CalcError("the result is not a finite number")
    if abs(value) > MAX_MAGNITUDE:
        raise CalcError("the result is too large")
    return value


def _eval(node: ast.AST) -> Any:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _check(node.value)
    if isinstance(node, ast.Name):
        if node.id in CONSTANTS:
            return CONSTANTS[node.id]
        raise CalcError(f"unknown name {node.id!r}")
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd | ast.USub):
        value = _eval(node.operand)
        return _check(-value if isinstance(node.op, ast.USub) else value)
    if isinstance(node, ast.BinOp) and type(node.op) in BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise CalcError(f"exponents above {MAX_EXPONENT} are not allowed")
        if (
            isinstance(node.op, ast.Pow)
            and abs(left) > 1
            and abs(right) * math.log10(abs(left)) > math.log10(MAX_MAGNITUDE)
        ):
            raise CalcError("the result is too large")
        try:
            return _check(BINARY[type(node.op)](left, right))
        except ZeroDivisionError:
            raise CalcError("division by zero") from None
        except (OverflowError, ValueError, TypeError) as exc:
            raise CalcError(str(exc)) from None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        fn = FUNCTIONS.get(node.func.id)
        if fn is None:
            raise CalcError(f"unknown function {node.func.id!r}")
        args = [_eval(a) for a in node.args]
        if node.func.id in ("factorial", "comb", "perm") and any(
            isinstance(a, int) and a > 1000 for a in args
        ):
            raise CalcError("arguments above 1000 are not allowed here")
        try:
            return _check(fn(*args))
        except (OverflowError, ValueError, TypeError) as exc:
            raise CalcError(f"{node.func.id}: {exc}") from None
    raise CalcError(f"{type(node).__name__} is not allowed in a calculator expression")


def calculate(expression: str) -> int | float:
    """The value of `expression`; CalcError for anything not allowed."""
    if not isinstance(expression, str) or not expression.strip():
        raise CalcError("empty expression")
    if len(expression) > MAX_CHARS:
        raise CalcError(f"expressions are limited to {MAX_CHARS} characters")
    expr = expression.replace("^", "**").replace("×", "*").replace("÷", "/")
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise CalcError("not a valid expression") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise CalcError("the expression is too long")
    try:
        return _eval(tree)  # type: ignore[no-any-return]
    except RecursionError:
        raise CalcError("the expression is nested too deeply") from None


def format_number(value: int | float) -> str:
    """Integers as integers, floats without noise (12 significant digits)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value) if isinstance(value, int) else f"{value:.12g}"
