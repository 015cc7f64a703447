"""TensorBoard files between trials, their checkpoint storage and TensorBoard tasks.

A trial writes its TensorBoard files into one local folder (`core_context.train.
get_tensorboard_path()`); they reach the checkpoint storage at
`<storage>/tensorboard/experiment/<experiment id>/trial/<trial id>/` (`_upload`), in place on a
shared file system. A TensorBoard task keeps a local copy of the trials it shows (`_fetch`) and
points TensorBoard at it. Importing this package imports neither TensorBoard nor tensorboardX.
"""

from determined.tensorboard._fetch import Fetcher, Source, read_sources
from determined.tensorboard._layout import experiment_storage, trial_folder, trial_storage
from determined.tensorboard._scalars import ScalarWriter, scalars, tensorboard_tag, write_scalars
from determined.tensorboard._trial import TrialTensorboard
from determined.tensorboard._upload import Mangler, Selector, Uploader, every_file, same_name

__all__ = [
    "Fetcher",
    "Mangler",
    "ScalarWriter",
    "Selector",
    "Source",
    "TrialTensorboard",
    "Uploader",
    "every_file",
    "experiment_storage",
    "read_sources",
    "same_name",
    "scalars",
    "tensorboard_tag",
    "trial_folder",
    "trial_storage",
    "write_scalars",
]
