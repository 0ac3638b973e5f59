# SPDX-License-Identifier: Apache-2.0
"""afd-e2e: the end-to-end harness of afd-plugin.

Imports only the plugin's pure core; never torch or vLLM. Its packages follow
a run: ``define`` (what a scenario says and whether it may run), ``launch``
(the servers to start, on which node and port), ``processes`` (start them,
wait for them, tear them down), ``checks`` (what is asked of the live
deployment), ``publish`` (results, CI lists, generated docs); beside them
``engines`` (local, network namespaces, Ray), ``bench`` and ``plan`` (measure
and size deployments), ``render`` (Kubernetes objects) and ``commands`` (the
``afd-e2e`` subcommands). ``runner.py`` is the run itself, ``cli.py`` the
command line.
"""

__version__ = "0.1.0"
