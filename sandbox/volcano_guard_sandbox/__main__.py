"""`python -m volcano_guard_sandbox COMMAND ...`, as the `volcano-guard-sandbox` script."""

from volcano_guard_sandbox.commands import main

raise SystemExit(main())
