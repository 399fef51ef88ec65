"""Resolution of `$ref` inside one schema document: JSON pointers, `$anchor`s and embedded `$id`s.

Besides the given schema, the official json-schema.org metaschemas (draft-04 to 2020-12, with the
vocabulary metaschemas of 2019-09 and 2020-12) resolve offline, from the copies the jsonschema
package ships (jsonschema-specifications); each is read as the draft it declares. Any other remote
reference raises ConstraintError: nothing is fetched or read from disk at compile time.
"""

from __future__ import annotations

import copy
import functools
from urllib.parse import unquote, urldefrag, urljoin

from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.json_schema.drafts import to_latest

_DEFAULT_BASE = "https://sgl.invalid/root-schema"
_NOT_SCHEMAS = ("enum", "const", "examples", "default")
_SCHEMA_MAPS = ("properties", "patternProperties", "definitions", "$defs", "dependentSchemas", "dependencies")


class RefResolver:
    """Indexes a schema document once; resolves `$ref` strings relative to a node's base URI."""

    def __init__(self, root) -> None:
        self.root = root
        self.base_of: dict[int, str] = {}
        self.resources: dict[str, object] = {}
        self.anchors: dict[str, object] = {}
        self.dynamic_anchors: dict[str, object] = {}
        self._refs: list[tuple[str, str]] = []  # (reference, base URI) of every $ref / $dynamicRef met
        self.loaded: dict[str, object] = {}  # the metaschemas indexed besides the document, by URL
        self.dynamic_nodes: list = []  # the schemas holding a $dynamicRef or $recursiveRef
        self.dynamic = False  # whether some indexed schema uses $dynamicRef (dynamic scope then matters)
        self._index(root, _DEFAULT_BASE)
        self._load_metaschemas()

    def _load_metaschemas(self) -> None:
        """Index each official metaschema the documents refer to (and those it refers to)."""
        while self._refs:
            ref, base = self._refs.pop()
            url = urldefrag(_join(base, ref))[0]
            if url in self.resources:
                continue
            known = _metaschema(url)
            if known is not None:
                self._index(known, url)
                self.resources[url] = self.resources.get(url, known)
                self.loaded[url] = known

    def _index(self, node, base: str, names_schemas: bool = False) -> None:
        """names_schemas: `node` maps names to schemas (properties, $defs...), so a key such as
        "default" names a schema rather than holding an instance."""
        if names_schemas:
            if isinstance(node, dict):
                for value in node.values():
                    self._index(value, base)
            return
        if isinstance(node, list):
            for item in node:
                self._index(item, base)
            return
        if not isinstance(node, dict):
            return
        if isinstance(node.get("$id"), str):
            base, _ = urldefrag(_join(base, node["$id"]))
            self.resources.setdefault(base, node)
        if base not in self.resources:
            self.resources[base] = node
        self.base_of[id(node)] = base
        for key in ("$anchor", "$dynamicAnchor"):
            if isinstance(node.get(key), str):
                self.anchors.setdefault(f"{base}#{node[key]}", node)
        if isinstance(node.get("$dynamicAnchor"), str):
            self.dynamic_anchors.setdefault(f"{base}#{node['$dynamicAnchor']}", node)
        for key in ("$ref", "$dynamicRef"):
            if isinstance(node.get(key), str):
                self._refs.append((node[key], base))
        self.dynamic = self.dynamic or isinstance(node.get("$dynamicRef"), str)
        if "$dynamicRef" in node or "$recursiveRef" in node:
            self.dynamic_nodes.append(node)
        for key, value in node.items():
            if key not in _NOT_SCHEMAS:
                self._index(value, base, key in _SCHEMA_MAPS)

    def base(self, node) -> str:
        return self.base_of.get(id(node), _DEFAULT_BASE)

    def resolve(self, ref: str, node) -> object:
        """The schema that `ref` (found in `node`) points to."""
        target = _join(self.base(node), ref)
        doc_url, fragment = urldefrag(target)
        doc = self.resources.get(doc_url)
        if doc is None:
            raise ConstraintError(
                f"$ref: cannot resolve remote reference {ref!r} (only references inside the schema and to "
                "the json-schema.org metaschemas resolve; nothing is fetched)"
            )
        if not fragment:
            return doc
        if fragment.startswith("/"):
            return self._pointer(doc, fragment, ref)
        anchored = self.anchors.get(f"{doc_url}#{fragment}")
        if anchored is None:
            raise ConstraintError(f"$ref: unknown anchor in {ref!r}")
        return anchored

    def resolve_dynamic(self, ref: str, node, scope: list[str]) -> object:
        """`$dynamicRef`: like $ref, unless it lands on a `$dynamicAnchor`; then the outermost
        resource in the dynamic `scope` (base URIs, outermost first) defining that anchor wins."""
        target = self.resolve(ref, node)
        fragment = urldefrag(_join(self.base(node), ref))[1]
        if (
            fragment
            and not fragment.startswith("/")
            and isinstance(target, dict)
            and target.get("$dynamicAnchor") == fragment
        ):
            for base in scope:
                hit = self.dynamic_anchors.get(f"{base}#{fragment}")
                if hit is not None:
                    return hit
        return target

    @staticmethod
    def _pointer(doc, fragment: str, ref: str) -> object:
        node = doc
        for token in fragment.split("/")[1:]:
            token = unquote(token).replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and token in node:
                node = node[token]
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
            else:
                raise ConstraintError(f"$ref: pointer {ref!r} does not resolve")
        return node


@functools.lru_cache(maxsize=64)
def _metaschema(url: str):
    """The official metaschema at `url` (http or https), rewritten to draft 2020-12; None if unknown.
    Built once per process and shared: schemas are only read after to_latest."""
    if "json-schema.org/" not in url:
        return None
    from jsonschema_specifications import REGISTRY

    for candidate in (url, url.replace("https://", "http://", 1), url.replace("http://", "https://", 1)):
        try:
            contents = REGISTRY.contents(candidate)
        except LookupError:
            continue
        return to_latest(copy.deepcopy(contents))  # a copy of our own, never jsonschema's registry
    return None


def _join(base: str, ref: str) -> str:
    """urljoin that also handles fragments against non-hierarchical bases (urn:...)."""
    if ref.startswith("#"):
        return urldefrag(base)[0] + ref
    if ":" in ref.split("/", 1)[0]:
        return ref
    return urljoin(base, ref)
