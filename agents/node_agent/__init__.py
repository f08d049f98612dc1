"""The gpulab node agent: a small program that runs on each GPU node.

No Django here, and one dependency besides the standard library (pynvml), so an admin
can copy this folder to a node or install it alone. It posts a heartbeat every 10 s to the
control plane (`/api/v1/agents/heartbeat/`) with the node's per-node token. Relative
imports only, so it works as `agents.node_agent` and as a top-level `node_agent`.
"""
