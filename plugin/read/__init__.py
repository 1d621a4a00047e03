"""Reading a trace file into a ``model.Trace``: bytes, decoding, repair, columns."""
