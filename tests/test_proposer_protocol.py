"""The `Proposer` protocol says what the loop calls (evolver.propose: `revise` for each phase,
`candidates` for the k revisions it ranks), and every registered proposer answers it."""
import inspect

from evolver.proposers import Proposer
from evolver.proposers.agent import AgentProposer
from evolver.proposers.offline import OfflineProposer


def _parameters(method) -> list[str]:
    return list(inspect.signature(method).parameters)


def test_every_proposer_takes_the_protocols_arguments_for_what_the_loop_calls():
    for verb in ("revise", "candidates"):
        declared = _parameters(getattr(Proposer, verb))
        for proposer in (OfflineProposer, AgentProposer):
            assert _parameters(getattr(proposer, verb)) == declared, (proposer.__name__, verb)


def test_the_loop_calls_no_proposer_method_the_protocol_does_not_declare():
    import ast
    from pathlib import Path

    import evolver.propose

    tree = ast.parse(Path(evolver.propose.__file__).read_text())
    called = {node.func.attr for node in ast.walk(tree) if isinstance(node, ast.Call)
              and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Attribute)
              and node.func.value.attr == "proposer"}
    assert called == {"revise", "candidates"}
    assert all(hasattr(Proposer, verb) for verb in called)
