"""SamplingParams and ServerArgs validate themselves and name the offending field."""

import pytest

from sgl_runtime.sampling_params import InvalidRequestError, SamplingParams
from sgl_runtime.server_args import ServerArgs, parse_args


@pytest.mark.parametrize(
    "params, field",
    [
        ({"max_new_tokens": -1}, "max_new_tokens"),
        ({"temperature": -0.5}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_k": 0}, "top_k"),
        ({"min_p": 2.0}, "min_p"),
        ({"n": 0}, "n"),
        ({"bogus": 1}, "bogus"),
        ({"max_new_tokens": "ten"}, "max_new_tokens"),
        ({"stop": [""]}, "stop"),
        ({"regex": "a", "json_schema": {}}, "json_schema"),
        ({"min_new_tokens": 5, "max_new_tokens": 2}, "min_new_tokens"),
        ({"choices": "abc"}, "choices"),  # a lone string, found by the reliability long form
        ({"choices": []}, "choices"),
    ],
)
def test_bad_sampling_params_name_the_field(params, field):
    with pytest.raises(InvalidRequestError, match=field):
        SamplingParams.from_dict(params)


def test_sampling_params_normalise_inputs():
    p = SamplingParams.from_dict({"stop": "\n", "json_schema": {"type": "integer"}, "max_tokens": 7, "grammar": None})
    assert p.stop == ("\n",)
    assert p.max_new_tokens == 7
    assert p.constraint == ("json_schema", '{"type": "integer"}')
    assert SamplingParams.from_dict({"temperature": 0}).is_greedy
    assert SamplingParams.from_dict({"grammar": "json"}).constraint == ("grammar", "json")


def test_server_args_defaults_and_cli():
    args = parse_args(["--port", "1234", "--disable-radix-cache", "--schedule-policy", "fcfs"])
    assert (args.host, args.port, args.disable_radix_cache, args.schedule_policy) == ("127.0.0.1", 1234, True, "fcfs")
    assert args.max_total_tokens is None and parse_args(["--max-total-tokens", "64"]).max_total_tokens == 64
    with pytest.raises(ValueError, match="schedule_policy"):
        ServerArgs(schedule_policy="nope")
    with pytest.raises(TypeError, match="bogus"):
        ServerArgs.from_kwargs(bogus=1)


def test_cli_keeps_default_on_switches_and_checks_the_constraint_knobs():
    """A bool that defaults on stays on without its flag (the CLI used to turn defer_jump_forward off)."""
    assert parse_args([]).defer_jump_forward is True and ServerArgs().defer_jump_forward is True
    assert parse_args(["--no-defer-jump-forward"]).defer_jump_forward is False
    args = parse_args(["--constraint-mask-table-mb", "0", "--mix-jump-forward-min-batch", "8"])
    assert (args.constraint_mask_table_mb, args.mix_jump_forward_min_batch) == (0, 8)
    for name in ("constraint_mask_table_mb", "mix_jump_forward_min_batch"):
        with pytest.raises(ValueError, match=name):
            ServerArgs(**{name: -1})


def test_help_lists_every_flag_with_defaults(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    out = capsys.readouterr().out
    for flag in (
        "--model-path",
        "--mem-fraction-static",
        "--chunked-prefill-size",
        "--api-key",
        "--disable-jump-forward",
    ):
        assert flag in out
    assert "default: 127.0.0.1" in out
