"""A project laid out as a package, trained with `python -m trainer.train`."""
