"""`python -m rftkit.patches > docs/patches.md`: the table of runtime patches as a page."""

from rftkit.patches.page import markdown

print(markdown(), end="")
