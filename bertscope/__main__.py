from bertscope.cli import entry

entry()
