"""``benchmarks/replacement_headroom.py`` reads its scales and groups before the model loads: a malformed one ends in
one line and exit status 2."""

import pytest

from benchmarks.replacement_headroom import main


@pytest.mark.parametrize(("argv", "said"), [
    (["--group-scales", "0123"], "GROUP:SCALE pairs"),
    (["--group-scales", "0123:x"], "a scale is a number from 0 to 1; got 'x'"),
    (["--group-scales", "01:1.5"], "got '1.5'"),
    (["--groups", "0a"], "a group is its layers' digits"),
    (["--scales", "1,,0.5"], "a scale is a number from 0 to 1; got ''"),
])
def test_a_malformed_argument_is_one_line(argv, said, capsys, monkeypatch):
    import bertscope.core.models as models

    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("the model loaded before the check"))
    with pytest.raises(SystemExit) as ended:
        main(argv)
    assert ended.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert said in error
