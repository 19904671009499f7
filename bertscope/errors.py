"""The one exception type BertScope raises for problems a user can fix.

Pages turn it into ``st.error(str(err))``; the CLI prints ``bertscope: error: <message>`` and
exits with status 2. The message is one line and says what to do.
"""


class BertScopeError(Exception):
    """A user-fixable problem: bad input, a model that cannot be had, a missing head."""


class NotInstalled(BertScopeError):
    """Data BertScope installs from a package registry (a corpus, bertviz's scripts) is not here yet: the message
    names the installed command that fetches it; ``what`` is its name there (``bertscope corpus install NAME``,
    or "bertviz" for ``bertscope assets install``), so the app can offer to run it."""

    def __init__(self, message: str, what: str) -> None:
        super().__init__(message)
        self.what = what
