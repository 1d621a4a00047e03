"""Packaging for Stepscope: package ``stepscope`` lives in ``plugin/``; frontend assets ship inside it."""

import os

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))


def _version() -> str:
    with open(os.path.join(HERE, "plugin", "__init__.py"), encoding="utf-8") as f:
        for line in f:
            if line.startswith("__version__"):
                return line.split("=")[1].strip().strip('"')
    raise RuntimeError("no __version__ in plugin/__init__.py")


setup(
    name="stepscope",
    version=_version(),
    description="PyTorch profiler dashboard: TensorBoard plugin and standalone server",
    long_description=open(os.path.join(HERE, "README.md"), encoding="utf-8").read()
    if os.path.exists(os.path.join(HERE, "README.md")) else "",
    long_description_content_type="text/markdown",
    license="BSD-3-Clause",
    license_files=["LICENSE"],
    python_requires=">=3.10",  # numpy>=2.1 (np.strings) needs Python 3.10
    packages=["stepscope"] + [
        "stepscope." + os.path.relpath(root, os.path.join(HERE, "plugin")).replace(os.sep, ".")
        for root, _d, files in os.walk(os.path.join(HERE, "plugin"))
        if "__init__.py" in files and os.path.abspath(root) != os.path.join(HERE, "plugin")
    ] + ["stepscope.frontend"],
    # frontend/ ships inside the package as stepscope/frontend (found by stepscope.web.assets)
    package_dir={"stepscope": "plugin", "stepscope.frontend": "frontend"},
    package_data={"stepscope": ["*.md"], "stepscope.frontend": ["*", "**/*"]},
    install_requires=[
        "tensorboard>=2.18",  # the first TensorBoard that runs on numpy 2
        "flask>=2.2",
        "werkzeug>=2.2",
        "waitress>=2.1",
        "plotly>=5,<8",  # only its bundled plotly.min.js is used (assets.py)
        "numpy>=2.1",  # np.strings (columns.py)
        "msgspec>=0.18",
        "orjson>=3.8",
        "isal>=1.6",  # fast gzip inflate (rawfile.py falls back to zlib without it)
        "rich>=13",  # terminal tables and progress of `stepscope summary` (share/render.py)
    ],
    extras_require={
        "samples": ["torch>=2.0"],
        # log directories as URLs (s3://, gs://, abfs://...) through fsspec (stepscope.fs)
        "remote": ["fsspec>=2023.1", "s3fs>=2023.1", "gcsfs>=2023.1", "adlfs>=2023.1"],
        # --scheduler tcp://HOST:8786: per-trace analysis on a Dask cluster (store/dask_pool.py)
        "dask": ["distributed>=2023.1"],
        "test": [
            "pytest>=7",
            "hypothesis>=6",
            "playwright>=1.40",
            "psutil>=5",
            "ruff>=0.5",
            "fsspec>=2023.1",
            "s3fs>=2023.1",  # tests/test_remote.py: s3:// against a moto server
            "moto[server]>=5",
            "distributed>=2023.1",  # tests/test_dask.py: a LocalCluster
            "torch>=2.0",
        ],
    },
    entry_points={
        "tensorboard_plugins": ["stepscope = stepscope.web.tb_plugin:StepscopePlugin"],
        "console_scripts": ["stepscope = stepscope.cli:main"],
    },
)
