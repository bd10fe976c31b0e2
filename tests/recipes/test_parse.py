"""The recipe parser and planner: the Dockerfile subset a template is built from,
and the bounds it is checked against before any work."""

from __future__ import annotations

import time

import pytest

from space.recipes.parse import MAX_COPY_SOURCES, MAX_STEPS, Copy, RecipeError, Run, parse
from space.recipes.plan import MAX_CONTEXT_FILES, MAX_COPY_FILES, plan

pytestmark = pytest.mark.templates

RECIPE = """\
# a comment
FROM base
ARG GREETING=hello
ENV APP_HOME=/srv/app MODE=prod
ENV NAME the app
WORKDIR $APP_HOME
COPY server.py ./
COPY conf/a.ini conf/b.ini /etc/app/
RUN echo ${GREETING} > greeting && \\
    chmod 600 greeting
RUN ["python3", "-c", "print('${MODE}')"]
USER nobody
WORKDIR sub
"""


def test_a_recipe_becomes_steps_with_their_environment() -> None:
    recipe = parse(RECIPE, {"GREETING": "hi"})
    assert recipe.base == "base"
    assert recipe.env == {"APP_HOME": "/srv/app", "MODE": "prod", "NAME": "the app"}
    assert recipe.workdir == "/srv/app/sub" and recipe.user == "nobody"
    copy_one, copy_two, shell, exec_form = recipe.steps
    assert copy_one == Copy(7, ("server.py",), "/srv/app/", None)
    assert isinstance(copy_two, Copy) and copy_two.dest == "/etc/app/"
    assert copy_two.sources == ("conf/a.ini", "conf/b.ini")
    assert isinstance(shell, Run) and shell.line == 9
    assert shell.shell == "echo ${GREETING} > greeting &&  chmod 600 greeting"
    assert shell.env["GREETING"] == "hi" and shell.workdir == "/srv/app"
    assert isinstance(exec_form, Run)
    assert exec_form.argv == ("python3", "-c", "print('prod')")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "starts with FROM"),
        ("RUN true", "starts with FROM"),
        ("FROM a b", "one template"),
        ("FROM base\nEXPOSE 80", "line 2: EXPOSE is not supported"),
        ("FROM base\nCOPY ../secret /x", "outside the build context"),
        ("FROM base\nCOPY /../../etc/passwd /x", "outside the build context"),
        ("FROM base\nADD http://example.test/a /a", "not URLs"),
        ("FROM base\nCOPY --from=x a /b", "no flags"),
        ("FROM base\nCOPY onlyone", "<source>"),
        ("FROM base\nENV 1BAD=x", "not a variable name"),
        ("FROM base\nENV A", "ENV <name> <value>"),
        ("FROM base\nRUN [1, 2]", "JSON list of strings"),
        ("FROM base\nRUN [oops", "JSON list"),
        ("FROM base\nRUN echo \\", "continued line"),
        ("FROM base\nUSER a b", "USER takes one"),
        ("FROM base\nRUN", "needs an argument"),
    ],
)
def test_what_a_recipe_cannot_say_is_refused_naming_the_line(text: str, message: str) -> None:
    with pytest.raises(RecipeError, match=message):
        parse(text)


def test_a_recipe_is_bounded() -> None:
    with pytest.raises(RecipeError, match="at most"):
        parse("FROM base\n" + "RUN true\n" * MAX_STEPS)
    with pytest.raises(RecipeError, match="bytes"):
        parse("FROM base\nRUN " + "x" * (1 << 20))


def _doubling(lines: int) -> str:
    chain = "".join(f"ENV A{n}=${{A{n - 1}}}${{A{n - 1}}}\n" for n in range(1, lines))
    return "FROM base\nENV A0=xxxxxxxxxxxxxxxx\n" + chain + "RUN echo $A1\n"


@pytest.mark.parametrize("lines", [16, 40])
def test_a_doubling_recipe_is_refused_at_once_naming_the_line(lines: int) -> None:
    """Issue 27 finding 2: a 354-byte recipe once stalled the node for 26 s."""
    started = time.monotonic()
    with pytest.raises(RecipeError, match=r"line \d+: (expands to|ARG and ENV hold) \d+ bytes"):
        parse(_doubling(lines))
    assert time.monotonic() - started < 1.0  # a timeout, not a benchmark: hours before


def test_a_copy_fan_out_is_refused_before_any_vm() -> None:
    context = {f"d/f{i}": 1 for i in range(1000)}
    names = " ".join(["d"] * MAX_COPY_SOURCES)
    fan_out = "FROM base\n" + f"COPY {names} /x/\n" * 4
    started = time.monotonic()
    with pytest.raises(RecipeError, match=f"line 2: COPY puts over {MAX_COPY_FILES} files"):
        plan(fan_out, None, context)
    assert time.monotonic() - started < 1.0
    with pytest.raises(RecipeError, match=f"at most {MAX_COPY_SOURCES} sources"):
        parse("FROM base\nCOPY " + "a " * (MAX_COPY_SOURCES + 1) + "/x/")
    many = {f"f{i}": 0 for i in range(MAX_CONTEXT_FILES + 1)}
    with pytest.raises(RecipeError, match="at most 10000 files"):
        plan("FROM base\n", None, many)
