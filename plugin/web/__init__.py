"""The Flask app, the TensorBoard adapter and the static-asset helpers."""
