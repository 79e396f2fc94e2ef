"""What a client receives besides the broadcast: one object owns its TFF type, packing and unpacking.

A client's input is its training dataset, and by switch:

* ``val``: its held-out validation examples (weighting by validation accuracy, FedEx);
* ``seed``: its own seed, from (run seed, round, client) (FedEx's c ~ θ, byzantine noise);
* ``byzantine``: whether it sends a corrupted update this round;
* ``state``: the client state its components keep across rounds, by component key
  (`client.StateSpec`: RM's persisted θ^i, seed 000 Algorithm 1 line 12; SCAFFOLD's c_i).

With none of them the input is the bare dataset. The driver (`loop.TrainingLoop`) packs the
values with `ClientInput.pack`; the client computation (`client_work.ClientTrainer`) unpacks
them with `ClientInput.unpack`; both follow the one `ClientInput.type`.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, NamedTuple, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff


class Unpacked(NamedTuple):
  """A client's input, with None for what this configuration does not send."""

  data: Any
  val: Any = None
  seed: Any = None
  byzantine: Any = None
  state: Any = None  # by component key


@dataclasses.dataclass(frozen=True)
class ClientInput:
  """The client input of one configuration.

  Attributes:
    element_spec: of one unbatched training example.
    has_val: a validation dataset (same element spec) is sent.
    has_seed: the client's int64[2] seed is sent.
    has_byzantine: the client's byzantine flag is sent.
    state_specs: ``((key, specs), ...)``: each stateful component's state, else None.
  """

  element_spec: Any
  has_val: bool = False
  has_seed: bool = False
  has_byzantine: bool = False
  state_specs: Optional[tuple[tuple[str, tuple[tf.TensorSpec, ...]], ...]] = None

  @property
  def structured(self) -> bool:
    """Whether the input is a struct rather than the bare dataset."""
    return self.has_val or self.has_seed or self.has_byzantine or self.state_specs is not None

  @property
  def type(self) -> tff.Type:
    """The TFF type of one client's input (the `tff.CLIENTS` member type)."""
    seq = tff.SequenceType(tff.types.tensorflow_to_type(self.element_spec))
    if not self.structured:
      return seq
    fields = collections.OrderedDict(data=seq)
    if self.has_val:
      fields["val"] = seq
    if self.has_seed:
      fields["seed"] = tff.TensorType(np.int64, [2])
    if self.has_byzantine:
      fields["byzantine"] = tff.TensorType(np.bool_)
    if self.state_specs is not None:
      fields["state"] = tff.StructWithPythonType(
          [(key, [tff.TensorType(s.dtype.as_numpy_dtype, s.shape) for s in specs])
           for key, specs in self.state_specs], collections.OrderedDict)
    return tff.StructWithPythonType(list(fields.items()), collections.OrderedDict)

  def pack(self, data: tf.data.Dataset, *, val: Optional[tf.data.Dataset] = None,
           seed: Optional[np.ndarray] = None, byzantine: bool = False,
           state: Optional[dict[str, list[np.ndarray]]] = None):
    """The driver side: the value `type` describes (values this configuration does not send
    are ignored; the ones it sends must be given)."""
    if not self.structured:
      return data
    out = collections.OrderedDict(data=data)
    if self.has_val:
      out["val"] = _required(val, "val")
    if self.has_seed:
      out["seed"] = np.asarray(_required(seed, "seed"), np.int64)
    if self.has_byzantine:
      out["byzantine"] = np.bool_(byzantine)
    if self.state_specs is not None:
      state = _required(state, "state")
      out["state"] = collections.OrderedDict((key, list(state[key])) for key, _ in self.state_specs)
    return out

  def unpack(self, client_input) -> Unpacked:
    """The computation side: the fields of a packed input (inside the client computation)."""
    if not self.structured:
      return Unpacked(client_input)
    return Unpacked(
        data=client_input["data"],
        val=client_input["val"] if self.has_val else None,
        seed=client_input["seed"] if self.has_seed else None,
        byzantine=client_input["byzantine"] if self.has_byzantine else None,
        state=client_input["state"] if self.state_specs is not None else None)


def _required(value, name: str):
  if value is None:
    raise ValueError(f"this client input carries {name!r}, but none was given")
  return value
