"""Determined's quickstart MNIST example (see README.md). Its scripts run from this folder
(`python3 train.py`, or a trial's copy of it) and import their neighbours by plain name;
this file only gives the type checker distinct module names (`mnist_pytorch.train` is not
`examples/first_experiment`'s `train`)."""
