"""Setuptools shim: metadata lives in setup.cfg; the package list is here
because one package, conductor.data, is the data/ folder of the checkout
(setup.cfg's package_dir), which no package finder can see."""
from setuptools import find_packages, setup

setup(packages=find_packages(include=["api", "api.*", "conductor", "conductor.*",
                                      "agent", "agent.*"]) + ["conductor.data"])
