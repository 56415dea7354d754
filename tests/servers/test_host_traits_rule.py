"""Only the runtime boundary (`servers/runtime.py`) tells the kinds of node apart: every other
module asks `host_traits(node)` what a node's host offers, so a feature an agent serves and the
simulated node does not is one trait, not a branch per caller. (The model's own state rule,
"the simulated node is always online", is the one other comparison.)"""

import ast
from pathlib import Path

from servers.models import Node, NodeKind
from servers.runtime import AGENT_TRAITS, SIMULATED_TRAITS, host_traits
from tests.gshost.test_domain_errors import ROOT, product_modules

MAY_COMPARE_KINDS = {Path("servers/runtime.py"), Path("servers/models.py")}


def compares_a_kind(node: ast.AST) -> bool:
    """`server.node.kind == …`, `… != NodeKind.X`, `is_agent`: a branch on a node's kind."""
    if isinstance(node, ast.Attribute) and node.attr == "is_agent":
        return True
    if not isinstance(node, ast.Compare):
        return False
    said = [ast.unparse(operand) for operand in (node.left, *node.comparators)]
    return any("NodeKind" in text or text.endswith(("node.kind", "Node.kind")) for text in said)


def test_no_module_but_the_runtime_branches_on_a_nodes_kind() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in product_modules()
        if path.relative_to(ROOT) not in MAY_COMPARE_KINDS
        for node in ast.walk(ast.parse(path.read_text()))
        if compares_a_kind(node)
    ]
    assert found == []


def test_an_agent_node_and_the_simulated_node_have_their_own_traits() -> None:
    assert host_traits(Node(kind=NodeKind.AGENT)) == AGENT_TRAITS
    assert host_traits(Node(kind=NodeKind.SIMULATED)) == SIMULATED_TRAITS
    assert AGENT_TRAITS.serves_files and not SIMULATED_TRAITS.serves_files
