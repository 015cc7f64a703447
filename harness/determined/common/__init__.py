"""Pieces shared by the CLI, the harness and the services: the experiment
configuration (`expconf`), the model-definition context (`context`) and
small pure helpers. Submodules are imported lazily by their users; this
package imports nothing itself so that `det` starts fast."""
