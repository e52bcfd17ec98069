"""An SGLang engine emulator: SGLang 0.5.23's HTTP interfaces, metrics and PD protocol, no GPU.

What is real: the routes and their JSON shapes, the request contract (unknown ``sampling_params``
keys are a 400, unknown top-level keys are ignored), the PD rules (bootstrap fields, the prefill's
bootstrap server, the decode finishing only after its prefill's KV arrived), the metric names,
types, labels and buckets, SIGTERM draining, and the KV bytes themselves: the prefill ``put``s them
into the real Mooncake store and the decode ``get``s them over TCP.

What is emulated: the model. Tokens are a pure function of the model revision, the prompt and
the sampling parameters (:mod:`inferplane.emulator.model`), and time follows a latency model
(:mod:`inferplane.emulator.latency`) under a FIFO scheduler bounded by ``--max-running-requests``
and the KV pool (:mod:`inferplane.emulator.engine`).

``inferplane emulator`` (:mod:`inferplane.commands.emulator`) runs one; tests build
:class:`inferplane.emulator.server.Emulator` in-process.
"""
