"""Citation graphs (Cora, CiteSeer) for link prediction, read by PyG's ``Planetoid``.

The raw files (``ind.<name>.{x,y,tx,ty,allx,ally,graph,test.index}``, GitHub
``kimiyoung/planetoid`` at a pinned commit) are found in the data directory
(``<data_dir>/planetoid/``) or downloaded, checked against pinned SHA-256 values, then
placed in a PyG root (``<cache>/planetoid-pyg/<Name>/raw``) so that ``Planetoid`` reads
them without downloading.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import logging
import shutil
from pathlib import Path

import torch

from bench.datasets.download import RemoteFile, default_cache_dir, fetch
from bench.datasets.graph import Graph
from bench.datasets.provenance import record_data_file
from bench.errors import ConfigError

log = logging.getLogger(__name__)

COMMIT = "af6abf468a772cc055bec88c52e4d6f51b7c37e3"
URL = "https://github.com/kimiyoung/planetoid/raw/{commit}/data/ind.{name}.{suffix}"
SUFFIXES = ("x", "y", "tx", "ty", "allx", "ally", "graph", "test.index")
NAMES = {"cora": "Cora", "citeseer": "CiteSeer"}
SHA256 = {
    "cora": {
        "x": "23cfa55d91c6f624233f5eb7b6e3f141f1bd2b2ae39608a63cf5d084bb27baab",
        "y": "94465c14eb53e04ca262198dcbb2521ee8af60fb3f3d546cd6ca24a511b0e7d1",
        "tx": "b9afbaa4a400df991f6f02ef677e1e44da55ffc04801fd02f9e673987829226a",
        "ty": "41f5ac76596a1699cc33f53084a2419e92961c42bb75f36fc38e616d348532ad",
        "allx": "9419ba2f26f5c35243db64aba110e0f35a04851609e0dc5433450676ca6b8543",
        "ally": "2b998f5cc7fedc86e7f97ca2498f47a1ffc1462c29e2d578b23bf3f62b6e7d71",
        "graph": "58f13302f39dde8852dad6fe6d15b89b077b6d7f837626bce671ef80344b383d",
        "test.index": "297ce89af2b51a6a194181c7dbe1796c6a1cf9cd9349a88383b1b1e227867875",
    },
    "citeseer": {
        "x": "d20de19150741e555de0ed037195630fc194114ebc7fd72ced62810148aa22f6",
        "y": "8ba87e515d8e3ee3cf52f6d2c5b86aa73f11ecad825a808455209ec26cd54924",
        "tx": "539a8906a2da97628d212f2fdd668c109a8b3f0d36574b59e5d3fd5b5303da21",
        "ty": "55e5bd1ba1e733a04598753ad1a8d57957f4b8f89e74519f41f4f4938767e4ce",
        "allx": "2ac30345d95c9ec933a817ee0bdd6a5f077f8c184a20e696910192d534414668",
        "ally": "f704b2d986dde6c2669934de1f3ae5696a6cf9455c0f6b2646a2d135ea0a1c95",
        "graph": "d79a4ef9d3e7169aee8946145f6b7306e35bc79bffad26346cfb94e10e9912a7",
        "test.index": "2af990671580b6b2df5d158d1038f8292e30c9cd821b5453f399659b25b723d4",
    },
}


class Planetoid:
    """Loader for ``cora`` / ``citeseer`` (see module docstring)."""

    def __init__(self, name: str, data_dir: str | None = None, cache_dir: str | None = None,
                 download: bool = True) -> None:
        if name not in NAMES:
            raise ConfigError(f"unknown Planetoid graph '{name}'; known: {', '.join(NAMES)}")
        self.name, self.data_dir, self.cache_dir, self.download = name, data_dir, cache_dir, download

    def load(self) -> Graph:
        from torch_geometric.datasets import Planetoid as PyGPlanetoid

        cache = Path(self.cache_dir).expanduser() if self.cache_dir else default_cache_dir()
        root = cache / "planetoid-pyg"
        raw = root / NAMES[self.name] / "raw"
        raw.mkdir(parents=True, exist_ok=True)
        # runs started together share the cache: one at a time copies the raw files and lets PyG
        # process them (two writing PyG's processed file at once left one reading it half-written:
        # an EOFError traceback, seen with two Cora runs on an empty cache)
        with open(root / f".{self.name}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            for suffix in SUFFIXES:
                remote = RemoteFile(rel=f"planetoid/ind.{self.name}.{suffix}",
                                    url=URL.format(commit=COMMIT, name=self.name, suffix=suffix),
                                    sha256=SHA256[self.name][suffix])
                path = fetch(remote, self.data_dir, self.cache_dir, self.download)
                record_data_file(path, remote.rel)  # PyG reads the copy below, which has the same bytes
                target = raw / f"ind.{self.name}.{suffix}"
                if not target.exists() or target.stat().st_size != path.stat().st_size:
                    shutil.copyfile(path, target)
            said = io.StringIO()
            with contextlib.redirect_stderr(said):  # PyG's bare "Processing... Done!", said below in words
                data = PyGPlanetoid(str(root), NAMES[self.name])[0]
            if "Processing" in said.getvalue():
                log.info("%s: PyG processed the raw files into %s (once per cache)", self.name, root)
        u, v = data.edge_index
        keep = u < v
        edges = torch.unique(torch.stack([u[keep], v[keep]], 1), dim=0)
        return Graph(name=self.name, x=data.x.float(), edges=edges, info={"source": str(raw)})
