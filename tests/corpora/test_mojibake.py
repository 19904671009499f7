"""The tweets' mojibake read back: each character's corrupted forms, after any number of rounds, give it again."""

import pytest

from bertscope.corpora.mojibake import PREFERRED, QUOTED, corrupt, repair


def test_one_round_is_cp1252_read_and_mac_roman_written():
    assert corrupt("’", 1) == "’".encode().decode("cp1252").encode("mac_roman") == b"\x89\xdb\xaa"
    assert corrupt("’", 2) == b"\xe4\xf3\xbb"  # the file's commonest form
    assert corrupt("…", 2) == b"\xe4\xf3_"  # ¦ (a6 in cp1252) has no Mac Roman byte: lost
    assert corrupt("plain ASCII", 4) == b"plain ASCII"


@pytest.mark.parametrize("rounds", [1, 2, 3, 4])
@pytest.mark.parametrize("ch", list(PREFERRED) + ["😂"])
def test_every_round_of_a_common_character_reads_back(ch, rounds):
    assert repair(b"a " + corrupt(ch, rounds) + b" b") == f"a {ch} b"


@pytest.mark.parametrize(("ch", "rounds"), [("🙏", 4), ("🏈", 3), ("ü", 1), ("ü", 2)])
def test_a_form_several_characters_share_is_a_replacement_character(ch, rounds):
    assert repair(b"a " + corrupt(ch, rounds) + b" b") == "a \ufffd b"  # ü's ¼ (bc) has no Mac Roman byte


def test_a_line_of_several_rounds_and_literal_underscores():
    line = b"x_y " + corrupt("“", 3) + b"@a_b: it" + corrupt("’", 2) + b"s " + corrupt("😂", 2) * 2 + corrupt("”", 3)
    assert repair(line) == "x_y “@a_b: it’s 😂😂”"


def test_the_quoted_form_no_chain_explains():
    for ending, ch in QUOTED.items():
        assert repair(b"(AP) \xd5\xa2_\x8a\xce" + ending + b" Audi") == f"(AP) {ch} Audi"


def test_lost_bytes_become_one_replacement_character():
    assert repair(b"so _\xf4\xd6_ #nfl") == "so \ufffd #nfl"  # an emoji whose last byte was lost: which one is unknown
    assert repair(b"odd \xff\xfe\xfd end") == "odd \ufffd end"


def test_a_line_that_happens_to_be_utf8_is_read_back_too():
    line = b"http://t.co/Xe5lCR5wkk_\xd1\x9d"
    assert line.decode("utf-8").endswith("_ѝ")
    assert repair(line) == "http://t.co/Xe5lCR5wkk”"
