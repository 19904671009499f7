"""Each page's title is the name the sidebar gives it (a newcomer looks for the same words twice)."""

from __future__ import annotations

import re
from pathlib import Path

import bertscope.app
from bertscope.app.kit.pages import PAGES

APP = Path(bertscope.app.__file__).parent


def test_every_page_is_titled_as_the_sidebar_names_it():
    for page in PAGES:
        if page.default:  # the home page carries the product's name
            continue
        source = (APP / page.script).read_text(encoding="utf-8")
        titles = re.findall(r'^\s*st\.title\("([^"]+)"\)', source, flags=re.M)  # a script's, or its page()'s
        assert titles == [page.title], (page.script, titles)
