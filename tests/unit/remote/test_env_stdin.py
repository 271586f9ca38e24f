"""`queue add/edit --env K=V`: the values leave the jump host on the helper's stdin (U34)."""

from __future__ import annotations

import io

import pytest

from gpuroom.remote.queue import ENV_STDIN_MAX, env_from_stdin
from gpuroom.tui.cli.queue import EnvError, env_on_stdin


def test_env_values_go_on_stdin_and_the_helper_reads_them_back() -> None:
    opts, stdin = env_on_stdin(["WANDB_API_KEY=tok=with=equals", "EMPTY=", "A=1"])
    assert opts == ["--env-stdin"]  # the only thing on the helper's command line
    assert stdin is not None and b"tok=with=equals" in stdin
    assert not any("tok" in o for o in opts)
    assert env_from_stdin(io.BytesIO(stdin)) == {"WANDB_API_KEY": "tok=with=equals",
                                                 "EMPTY": "", "A": "1"}


def test_no_env_sends_no_stdin() -> None:
    assert env_on_stdin([]) == ([], None)


def test_an_item_without_a_name_is_refused_without_echoing_it() -> None:
    with pytest.raises(EnvError) as err:
        env_on_stdin(["A=1", "tok-abcdef"])
    assert "number 2" in str(err.value) and "tok-abcdef" not in str(err.value)
    with pytest.raises(EnvError):
        env_on_stdin(["=value"])


@pytest.mark.attack("bad answers", "--env-stdin fed a list, a non-string value, a key with '=', "
                    "broken JSON and more than the cap")
@pytest.mark.parametrize("raw", [b"[1]", b'{"A": 1}', b'{"A=B": "x"}', b'{"": "x"}', b"{",
                                 b"\xff\xfe", b"x" * (ENV_STDIN_MAX + 1)])
def test_the_helper_refuses_a_stdin_env_that_is_not_an_object_of_strings(raw: bytes) -> None:
    with pytest.raises(SystemExit, match="--env-stdin"):
        env_from_stdin(io.BytesIO(raw))


def test_an_empty_stdin_is_no_env() -> None:
    assert env_from_stdin(io.BytesIO(b"")) == {}
