#!/usr/bin/env python
"""Django's command line for a checkout; an installed package offers the same as `gshost`."""

from gshost.__main__ import main

if __name__ == "__main__":
    main()
