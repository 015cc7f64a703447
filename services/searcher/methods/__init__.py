"""Search methods: what Determined's `master/pkg/searcher` methods decide,
as pure, immutable values driven by one hook per event (see `base.py`)."""
