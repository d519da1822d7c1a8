"""An Executor's task lines and records (zotsink._executor.calls): what travels as JSON comes
back equal, what cannot is refused naming where it was, and a function is taken only when
the elements can load it by its name."""

from __future__ import annotations

import functools
import json
import math
from typing import Any

import pytest

from zotsink import UsageError
from zotsink._executor import calls
from zotsink._executor.calls import (
    call_text,
    cancelled_record,
    decode_line,
    decode_record,
    line_of,
    raised_record,
    record_task,
    spec_of,
    value_record,
)


def top(x: int) -> int:
    return x


class Shape:
    def area(self) -> int:
        return 1

    @classmethod
    def unit(cls) -> Shape:
        return cls()

    @staticmethod
    def fixed() -> int:
        return 2


def _no_wraps(fn: Any) -> Any:
    def inner(*a: Any) -> Any:
        return fn(*a)

    return inner


@_no_wraps
def decorated(x: int) -> int:
    return x


@functools.wraps(top)
def wrapped(x: int) -> int:  # named top by wraps: the elements would load top itself
    return x


@pytest.mark.parametrize(
    "value",
    [None, True, 0, -3, 2**80, 0.1, math.inf, "", 'é\t\n\0\\"', [1, [2, {"a": None}]], {"k": []}],
)
def test_json_values_come_back_equal(value: Any) -> None:
    text = call_text("c-1", "m:f", [value], {"kw": value}, named="f")
    (call,) = decode_line(text)
    assert call == ("c-1", "m:f", [value], {"kw": value})
    assert "\n" not in text and "\t" not in text and "\0" not in text and text.isascii()


def test_a_nan_comes_back_a_nan() -> None:
    (call,) = decode_line(call_text("c", "m:f", [math.nan], {}, named="f"))
    assert math.isnan(call.args[0])


def test_a_tuple_comes_back_a_list() -> None:
    (call,) = decode_line(call_text("c", "m:f", [(1, (2, 3))], {}, named="f"))
    assert call.args == [[1, [2, 3]]]


@pytest.mark.parametrize(
    ("args", "kwargs", "said"),
    [
        (({1, 2},), {}, "argument 1 is a set, which JSON cannot carry (sorted(value)"),
        ((1, b"raw"), {}, "argument 2 is a bytes, which JSON cannot carry (decode it"),
        ((), {"opts": {"a": [1, object()]}}, "keyword argument opts['a'][1] is a object"),
        (([{1: "one"}],), {}, "argument 1[0] has the key 1 (a int), which JSON would turn"),
    ],
)
def test_what_json_cannot_carry_is_refused_by_its_place(
    args: tuple[Any, ...], kwargs: dict[str, Any], said: str
) -> None:
    with pytest.raises(UsageError) as e:
        call_text("c", "m:f", args, kwargs, named="measure")
    assert str(e.value).startswith("cannot submit measure: ")
    assert said in str(e.value)
    assert "pass such values, or the path of a file" in str(e.value)


def test_numpy_values() -> None:
    np = pytest.importorskip("numpy")
    (call,) = decode_line(call_text("c", "m:f", [np.float64(0.5), np.int64(7)], {}, named="f"))
    assert call.args == [0.5, 7] and type(call.args[1]) is int
    with pytest.raises(UsageError, match=r"argument 1 is a numpy.ndarray.*value.tolist\(\)"):
        call_text("c", "m:f", [np.zeros(3)], {}, named="f")


def test_a_call_too_large_for_a_task_line_is_refused() -> None:
    with pytest.raises(UsageError, match="over the 1,048,576 a call may take"):
        call_text("c", "m:f", ["x" * calls.MAX_CALL_BYTES], {}, named="f")


def test_several_calls_share_a_line_in_their_order() -> None:
    texts = [call_text(f"c-{i}", "m:f", [i], {}, named="f") for i in range(3)]
    assert [c.id for c in decode_line(line_of(texts))] == ["c-0", "c-1", "c-2"]
    assert decode_line(line_of(texts[:1]))[0].args == [0]
    with pytest.raises(ValueError, match="not an Executor's call"):
        decode_line('{"no": "fn"}')


def test_records_name_their_task_first() -> None:
    ok = value_record(17, "c-1", {"mean": 0.5})
    assert record_task(ok) == 17
    assert decode_record(ok) == {"task": 17, "id": "c-1", "status": "ok", "value": {"mean": 0.5}}
    raised = decode_record(raised_record(3, "c-2", KeyError, "'k'", "Traceback ...\nKeyError"))
    assert raised["status"] == "raised"
    assert raised["error"] == {"type": "KeyError", "message": "'k'", "traceback": (
        "Traceback ...\nKeyError"
    )}  # fmt: skip
    assert decode_record(cancelled_record(4, "c-3"))["status"] == "cancelled"
    assert record_task("not a record") is None


def test_a_value_that_cannot_come_back_is_an_unsent_record() -> None:
    rec = decode_record(value_record(1, "c", {"s": {1}}))
    assert rec["status"] == "unsent"
    assert "the value it returned['s'] is a set" in rec["error"]["message"]
    assert "value" not in rec


def test_a_value_larger_than_a_record_is_an_unsent_record(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calls, "MAX_RECORD_BYTES", 100)
    rec = decode_record(value_record(1, "c", "x" * 200))
    assert rec["status"] == "unsent"
    assert "makes a record of 2" in rec["error"]["message"]
    assert "bytes as JSON, over the 100 a record may hold" in rec["error"]["message"]
    assert "zotsink.append_member" in rec["error"]["message"]


def test_functions_the_elements_load_by_name() -> None:
    assert spec_of(top) == f"{__name__}:top"
    assert spec_of(Shape.unit) == f"{__name__}:Shape.unit"  # a classmethod: its class travels
    assert spec_of(Shape.fixed) == f"{__name__}:Shape.fixed"
    assert spec_of(json.dumps) == "json:dumps"


def test_functions_without_a_name_to_load_are_refused_at_once() -> None:
    def nested(x: int) -> int:
        return x

    with pytest.raises(UsageError, match="lambda or a nested function has none"):
        spec_of(lambda x: x)
    with pytest.raises(UsageError, match="define it at the top level of a module"):
        spec_of(nested)
    with pytest.raises(UsageError, match="a method of an object, whose object does not travel"):
        spec_of(Shape().area)
    with pytest.raises(UsageError, match="a lambda or a nested function has none"):
        spec_of(decorated)  # a decorator without functools.wraps: its inner function
    with pytest.raises(UsageError, match="would load it as top of"):
        spec_of(wrapped)
    with pytest.raises(UsageError):
        spec_of(functools.partial(top, 1))


def test_a_function_typed_into_an_interactive_session_is_refused() -> None:
    import subprocess
    import sys

    code = (
        "import zotsink._executor.calls as c\n"
        "def f(x): return x\n"
        "try:\n    c.spec_of(f)\nexcept Exception as e:\n    print(e)\n"
    )
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "defined in an interactive session, which a worker cannot import" in got.stdout
    assert "define it at the top level of a module" in got.stdout
