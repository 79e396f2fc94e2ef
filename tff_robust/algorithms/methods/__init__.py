"""The methods added to generalized FedAvg, one module or small sub-package each: `rm`
(representation matching), `er` (entropy regularisation), `wd` (the proximal term), `ah`
(adaptive hyper-parameters), `fedex` (FedEx) and `scaffold` (SCAFFOLD). Each declares one
`method.Method` (when it runs, its check, its client and server components, its description);
`registry` lists them once and is what the process, the console and the flags ask.

May import: what `tff_robust.algorithms` may; a method may import the shared machinery of
`algorithms` (never the reverse, but for the process asking the registry) and another method's
module.
"""

# What scripts call as ``methods.components(methods.BuildContext(...))`` (bench/client_time.py).
from tff_robust.algorithms.methods.method import BuildContext  # noqa: E402,F401
from tff_robust.algorithms.methods.registry import components  # noqa: E402,F401
