"""Stdlib-only code that runs on nodes.

Ansible ships these files to hosts as module_utils (ansible.cfg ``module_utils = inferplane/node``,
imported there as ``ansible.module_utils.<name>``); the controller imports the same files as
``inferplane.node.<name>``. One implementation for both sides, so the hash an operator checks on a
node is the hash the CLI wrote into the release manifest.
"""
