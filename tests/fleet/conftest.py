from tests.node.conftest import nodes  # noqa: F401  (the same node-process fixture)
