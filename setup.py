"""Setuptools shim: metadata lives in setup.cfg; the packages are listed here.

The folders at the root of the checkout install under one import name,
``fornace`` (a namespace: no ``fornace/__init__.py``): ``api/`` is
``fornace.api``, ``data/`` is ``fornace.data`` and so on. No finder sees that
mapping, so the package list is built here.
"""
from setuptools import find_packages, setup

CODE = ("agent", "api", "cli", "common", "conductor")
DATA = ("data", "etc")  # files only, shipped whole (setup.cfg package_data)

package_dir = {f"fornace.{root}": root for root in CODE + DATA}
packages = [f"fornace.{root}" for root in CODE + DATA]
for root in CODE:
    packages += [f"fornace.{root}.{name}" for name in find_packages(where=root)]

setup(packages=packages, package_dir=package_dir)
