"""The one exception type BertScope raises for problems a user can fix.

Pages turn it into ``st.error(str(err))``; the CLI prints ``bertscope: error: <message>`` and
exits with status 2. The message is one line and says what to do.
"""


class BertScopeError(Exception):
    """A user-fixable problem: bad input, a model that cannot be had, a missing head."""
