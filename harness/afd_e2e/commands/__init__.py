# SPDX-License-Identifier: Apache-2.0
"""One module per ``afd-e2e`` subcommand: ``add_arguments(parser)`` and
``run(args) -> int``."""
