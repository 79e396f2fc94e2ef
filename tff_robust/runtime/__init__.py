"""Where TFF computations run: the local C++ execution context and its `worker_binary` child,
torn down explicitly (`context`), remote executor services for a round split across workers
(`workers`), and child processes that die with their parent and are stopped by pid (`children`).

May import: tff_robust.common only."""
