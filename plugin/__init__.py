"""Stepscope: a PyTorch profiler dashboard (TensorBoard plugin and standalone server).

Data flows one way (see STYLE.md):
trace file -> ``reader`` -> ``model.Trace`` -> ``analysis`` -> ``views`` payloads
-> ``app`` routes -> TensorBoard adapter (``tb_plugin``) | standalone CLI (``cli``).
"""

__version__ = "0.1.0"
