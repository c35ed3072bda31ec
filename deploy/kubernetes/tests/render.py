"""Renders the kustomize base as `kubectl kustomize` would, for the tests.

It covers the part of kustomize that this base uses: `resources` (files in
the base directory, several documents per file) and a `configMapGenerator`
from files with `disableNameSuffixHash: true` and optional labels. Any other
key or option raises `Unsupported`, so this renderer and kustomize cannot
drift apart without a failing test.
"""

import os

import yaml

BASE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

KNOWN_KEYS = {"apiVersion", "kind", "resources", "configMapGenerator"}
KNOWN_GENERATOR_KEYS = {"name", "files", "options"}
KNOWN_OPTIONS = {"disableNameSuffixHash", "labels"}


class Unsupported(Exception):
    """The kustomization uses something this renderer does not do."""


def _config_map(gen, base):
    unknown = set(gen) - KNOWN_GENERATOR_KEYS
    if unknown:
        raise Unsupported(f"configMapGenerator keys {sorted(unknown)}")
    options = gen.get("options", {})
    unknown = set(options) - KNOWN_OPTIONS
    if unknown:
        raise Unsupported(f"configMapGenerator options {sorted(unknown)}")
    if options.get("disableNameSuffixHash") is not True:
        raise Unsupported("a generated name with a content hash")
    data = {}
    for entry in gen["files"]:
        key, _, path = entry.partition("=")
        path = path or key
        with open(os.path.join(base, path), encoding="utf-8") as f:
            data[os.path.basename(key)] = f.read()
    metadata = {"name": gen["name"]}
    if options.get("labels"):
        metadata["labels"] = dict(options["labels"])
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}


def render(base=BASE):
    """Every document of the base, resources first, then generated ones."""
    with open(os.path.join(base, "kustomization.yaml"), encoding="utf-8") as f:
        k = yaml.safe_load(f)
    unknown = set(k) - KNOWN_KEYS
    if unknown:
        raise Unsupported(f"kustomization keys {sorted(unknown)}")
    if k.get("kind") != "Kustomization":
        raise Unsupported(f"kind {k.get('kind')!r}")
    docs = []
    for name in k.get("resources", []):
        with open(os.path.join(base, name), encoding="utf-8") as f:
            docs.extend(d for d in yaml.safe_load_all(f) if d is not None)
    for gen in k.get("configMapGenerator", []):
        docs.append(_config_map(gen, base))
    return docs


def find(docs, kind, name=None):
    """The one document of `kind` (and `name`), or an AssertionError."""
    found = [
        d for d in docs
        if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]
    if len(found) != 1:
        raise AssertionError(f"expected one {kind} {name or ''}, found {len(found)}")
    return found[0]


if __name__ == "__main__":
    print(yaml.safe_dump_all(render(), sort_keys=False), end="")
