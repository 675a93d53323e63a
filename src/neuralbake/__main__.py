"""``python -m neuralbake`` runs the CLI."""

from neuralbake.cli import main

main()
