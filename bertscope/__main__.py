import sys

from bertscope.cli import main

sys.exit(main())
