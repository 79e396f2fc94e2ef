"""ClientInput: one type, packed by the driver and unpacked by the client computation."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_robust.algorithms.client_input import ClientInput

SPEC = (tf.TensorSpec([3], tf.float32), tf.TensorSpec([], tf.int32))
THETA = (tf.TensorSpec([2, 2], tf.float32), tf.TensorSpec([2], tf.float32))
STATE = (("rm", THETA),)  # the client state by component key


def dataset(n: int) -> tf.data.Dataset:
  return tf.data.Dataset.from_tensor_slices((np.ones([n, 3], np.float32), np.arange(n, dtype=np.int32)))


def test_without_switches_the_input_is_the_bare_dataset():
  bare = ClientInput(SPEC)
  assert not bare.structured
  assert isinstance(bare.type, tff.SequenceType)
  data = dataset(2)
  assert bare.pack(data, seed=np.zeros(2)) is data  # what the configuration does not send is ignored
  assert bare.unpack(data) == (data, None, None, None, None)


def test_every_switch_adds_its_field_in_one_order():
  full = ClientInput(SPEC, has_val=True, has_seed=True, has_byzantine=True, state_specs=STATE)
  names = [name for name, _ in tff.structure.iter_elements(full.type)]
  assert names == ["data", "val", "seed", "byzantine", "state"]
  assert [name for name, _ in tff.structure.iter_elements(ClientInput(SPEC, has_seed=True).type)] == [
      "data", "seed"]
  with pytest.raises(ValueError, match="'val'"):
    full.pack(dataset(2), seed=np.zeros(2), state={"rm": [np.zeros([2, 2]), np.zeros(2)]})


def test_what_the_driver_packs_the_computation_unpacks():
  shape = ClientInput(SPEC, has_val=True, has_seed=True, has_byzantine=True, state_specs=STATE)

  @tff.tensorflow.computation(shape.type)
  def read(client_input):
    data, val, seed, byzantine, state = shape.unpack(client_input)
    theta = state["rm"]
    count = data.reduce(np.int32(0), lambda n, _: n + 1)
    val_labels = val.reduce(np.int32(0), lambda s, e: s + e[1])
    return count, val_labels, seed, byzantine, tf.reduce_sum(theta[0]) + tf.reduce_sum(theta[1])

  packed = shape.pack(dataset(5), val=dataset(3), seed=np.array([7, 9]), byzantine=True,
                      state={"rm": [np.full([2, 2], 0.5, np.float32), np.ones(2, np.float32)]})
  count, val_labels, seed, byzantine, theta_sum = read(packed)
  assert (count, val_labels) == (5, 0 + 1 + 2)
  np.testing.assert_array_equal(seed, [7, 9])
  assert bool(byzantine) and theta_sum == pytest.approx(4.0)
