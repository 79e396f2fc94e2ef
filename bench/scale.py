"""The tasks at their real client counts: start-up, round time at 10/50/100 clients a round,
pooled evaluation and peak memory, each against TFF's own FedAvg on the same file.

For each data set (EMNIST-62, Shakespeare, CIFAR-100, Stack Overflow; `scale_files` writes them
in TFF's format at the real client counts, Stack Overflow's posts scaled down for disk) and two
file sizes (``full``, and ``half``: half the clients and about half the examples), each system of
`scale_run` runs in a process of its own:

* ``ours`` (this project's reader and process) at both sizes: start-up, pooled read and
  evaluation, peak RSS of the driver and its TFF worker (one round at each client count, full
  size only);
* ``tff_same``: TFF's ``build_weighted_fed_avg`` on the same client datasets, alone: its memory;
* ``pair``: ours and ``tff_same`` in one process, their rounds alternating on the same clients
  (``--warmup`` rounds at the first count discarded, ``--rounds`` timed): the round times and their ratio, the
  process' overhead over TFF's on the same data;
* ``tff_sql``: TFF's loader (``SqlClientData``, a scan of the file per client) with TFF's FedAvg:
  start-up, rounds at ``--tff_sql_clients`` and the pooled evaluation, read over
  ``--tff_sql_eval_clients`` clients and scaled to all of them (marked ``×k``);
* ``workers`` (``--workers_check``): ours on EMNIST at full size, each round from the same state
  on the local runtime and on two local TFF workers: how far apart the next states are.

Each file is read once before its systems run, so all of them find it in the OS page cache.
Results go to ``--json_out`` and a Markdown summary to stdout. The whole run takes hours on 2
cores (CIFAR-100's ResNet-18 and the TFF data path dominate); ``--scale`` < 1 runs the same on
smaller files (that share of the clients) to check the bench itself:

    uv run python bench/scale.py --scale=0.02 --clients=2,4 --rounds=1 --data_root=/tmp/scale
    uv run python bench/scale.py --data_root=/work/scale_data --workers_check \\
        --json_out=docs/runs/bench/scale.json      # the full run
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import scale_files  # noqa: E402  (bench/ is this script's directory on sys.path)

from tff_robust.common import strict_json  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TASKS = ("emnist_cr", "shakespeare", "cifar100", "stackoverflow_nwp")


def child(system: str, task: str, data_dir: str, clients: str, args, eval_clients: int = 0,
          eval_: bool = True, rounds: int | None = None, warmup: int | None = None) -> dict:
  """Runs `scale_run` for one system in a new process; its RESULT line."""
  rounds = args.rounds if rounds is None else rounds
  warmup = args.warmup if warmup is None else warmup
  cmd = [sys.executable, os.path.join(HERE, "scale_run.py"), f"--system={system}", f"--task={task}",
         f"--data_dir={data_dir}", f"--clients={clients}", f"--rounds={rounds}",
         f"--warmup={warmup}", f"--eval={int(eval_)}", f"--eval_clients={eval_clients}"]
  print(f"[{time.strftime('%H:%M:%S')}] {' '.join(cmd[1:])}", flush=True)
  t0 = time.perf_counter()
  proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=False)
  lines = proc.stdout.splitlines()
  for line in lines:
    if not line.startswith("RESULT "):
      print(line, flush=True)
  results = [json.loads(line[len("RESULT "):]) for line in lines if line.startswith("RESULT ")]
  if proc.returncode != 0 or not results:
    raise RuntimeError(f"{' '.join(cmd)} exited with code {proc.returncode}")
  results[0]["process_s"] = time.perf_counter() - t0
  return results[0]


def run_size(task: str, size: str, fraction: float, args) -> dict:
  """Every system on one file; the file is written first when absent."""
  directory = os.path.join(args.data_root, f"{task}_{size}" + (f"_x{args.scale:g}" if args.scale != 1 else ""))
  path, wrote = scale_files.ensure(task, directory, fraction)
  out = {"file": path, "file_mb": os.path.getsize(path) / 2**20, "write_s": wrote, "fraction": fraction,
         "cache_warm_s": _read_through(path)}
  full = size == "full"
  # Alone, for start-up, the pooled test and peak memory (one round at each count is enough).
  out["ours"] = child("ours", task, directory, args.clients if full else "", args, rounds=1, warmup=0)
  if full:
    out["tff_same"] = child("tff_same", task, directory, args.clients, args, eval_=False, rounds=1,
                            warmup=0)
    out["pair"] = child("pair", task, directory, args.clients, args, eval_=False)
  out["tff_sql"] = child("tff_sql", task, directory, args.tff_sql_clients if full else "", args,
                         eval_clients=args.tff_sql_eval_clients)
  if full and args.workers_check and task == "emnist_cr":
    out["workers"] = child("workers", task, directory, args.clients.split(",")[0], args)
  return out


def _read_through(path: str) -> float:
  """Reads the file once, so that every system finds it in the OS page cache alike; seconds."""
  t0 = time.perf_counter()
  with open(path, "rb") as f:
    while f.read(1 << 24):
      pass
  return time.perf_counter() - t0


def _ratio(a, b) -> str:
  return f"{a / b:.2f}" if a and b else "–"


def _rounds(result: dict, n: str):
  r = result.get("rounds", {}).get(n)
  return r["median"] if r else None


def summary(results: dict, counts: list[str]) -> list[str]:
  """Markdown tables of the figures and their ratios to TFF."""
  lines = ["| data set | size | file MiB | train clients | start-up ours s | TFF's loader s | ratio | "
           "pooled read ours s | TFF's path s | ratio | pooled eval ours s (cached) | TFF's path s | "
           "ratio | driver / worker peak MiB ours | tff_same | tff_sql |", "|" + " --- |" * 16]
  for task, sizes in results.items():
    for size, r in sizes.items():
      ours, sql, same = r["ours"], r["tff_sql"], r.get("tff_same", {})
      po, ps = ours.get("pooled", {}), sql.get("pooled", {})
      sql_eval = ps.get("cold_s", 0) * ps.get("scale", 1)
      sql_read = ps.get("read_s", 0) * ps.get("scale", 1)
      mark = f" (×{ps['scale']:.0f})" if ps.get("scale", 1) > 1 else ""
      mem = lambda x: (f"{x['driver_peak_mb']:.0f} / {max(x['worker_peak_mb'] or [0]):.0f}"  # noqa: E731
                       if x else "–")
      lines.append(
          f"| {task} | {size} | {r['file_mb']:.0f} | {ours['train_clients']} | {ours['startup_s']:.2f} | "
          f"{sql['startup_s']:.2f} | {_ratio(ours['startup_s'], sql['startup_s'])} | "
          f"{po.get('read_s', 0):.1f} | {sql_read:.1f}{mark} | {_ratio(po.get('read_s'), sql_read)} | "
          f"{po.get('cold_s', 0):.1f} ({po.get('warm_s', 0):.1f}) | {sql_eval:.1f}{mark} | "
          f"{_ratio(po.get('cold_s'), sql_eval)} | {mem(ours)} | {mem(same)} | {mem(sql)} |")
  lines += ["", "| data set | file full / half | train clients full / half | start-up full / half | "
            "pooled test examples full / half | pooled read full / half |", "|" + " --- |" * 6]
  for task, sizes in results.items():
    if "full" in sizes and "half" in sizes:
      f, h = sizes["full"], sizes["half"]
      pf, ph = f["ours"].get("pooled", {}), h["ours"].get("pooled", {})
      clients = lambda r: r["ours"]["train_clients"]  # noqa: E731
      lines.append(f"| {task} | {_ratio(f['file_mb'], h['file_mb'])} | {_ratio(clients(f), clients(h))} | "
                   f"{_ratio(f['ours']['startup_s'], h['ours']['startup_s'])} | "
                   f"{_ratio(pf.get('examples'), ph.get('examples'))} | "
                   f"{_ratio(pf.get('read_s'), ph.get('read_s'))} |")
  lines += ["", "| data set | clients a round | ours s | tff_same s | ours / tff_same (medians) | "
            "round by round | CPU | tff_sql s | ours / tff_sql |", "|" + " --- |" * 9]
  for task, sizes in results.items():
    r = sizes.get("full")
    if not r or "pair" not in r:
      continue
    for n in counts:
      o, t = (r["pair"]["rounds"][k].get(n) for k in ("ours", "tff_same"))
      if not o or not t:
        continue
      paired = statistics.median(a / b for a, b in zip(o["wall"], t["wall"]))
      q = _rounds(r["tff_sql"], n)
      lines.append(f"| {task} | {n} | {o['median']:.2f} | {t['median']:.2f} | "
                   f"{_ratio(o['median'], t['median'])} | {paired:.2f} | {_ratio(sum(o['cpu']), sum(t['cpu']))} | "
                   f"{f'{q:.2f}' if q else '–'} | {_ratio(o['median'], q)} |")
  for task, sizes in results.items():
    w = sizes.get("full", {}).get("workers")
    if w:
      lines += ["", f"{task} on two local TFF workers ({w['clients']} clients a round, dropout off): "
                f"round {w['two_workers']['round_s']:.2f} s against {w['local']['round_s']:.2f} s on the "
                f"local runtime; from the same state the next states differ by at most "
                f"{w['max_abs_weight_difference']:.1e} in any weight; pooled test accuracy "
                f"{w['two_workers']['metrics'].get('accuracy', float('nan')):.4f} against "
                f"{w['local']['metrics'].get('accuracy', float('nan')):.4f}, loss "
                f"{w['two_workers']['metrics']['loss']:.6f} against {w['local']['metrics']['loss']:.6f}."]
  return lines


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--data_root", default="/work/scale_data", help="where the files are written")
  parser.add_argument("--tasks", default=",".join(TASKS))
  parser.add_argument("--sizes", default="full,half")
  parser.add_argument("--scale", type=float, default=1.0, help="share of the real client counts")
  parser.add_argument("--clients", default="10,50,100")
  parser.add_argument("--tff_sql_clients", default="10", help="client counts TFF's own loader runs")
  parser.add_argument("--tff_sql_eval_clients", type=int, default=50,
                      help="evaluation clients TFF's loader reads (scaled to all; 0 = all)")
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--warmup", type=int, default=1)
  parser.add_argument("--workers_check", action="store_true")
  parser.add_argument("--json_out", default=None)
  args = parser.parse_args()
  fractions = {"full": args.scale, "half": args.scale / 2}
  results: dict = {}
  t0 = time.perf_counter()
  for task in args.tasks.split(","):
    results[task] = {}
    for size in args.sizes.split(","):
      results[task][size] = run_size(task, size, fractions[size], args)
  lines = summary(results, args.clients.split(","))
  print("\n".join(lines))
  if args.json_out:
    os.makedirs(os.path.dirname(os.path.abspath(args.json_out)), exist_ok=True)
    strict_json.write(args.json_out, {  # strict JSON: a non-finite number is written as null
        "command": " ".join(sys.argv),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load_average": os.getloadavg()},
        "seconds": time.perf_counter() - t0, "args": vars(args), "summary": lines, "results": results})


if __name__ == "__main__":
  main()
