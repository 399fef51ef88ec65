"""The real-world schema corpus (benchmarks/schema_corpus/) through the real compile path with the
Qwen2.5 tokenizer: on a fixed subset of 30 schemas, no invalid instance may be accepted and no
valid one rejected, deciding each instance by walking its tokens through the matcher exactly as
benchmarks/schema_corpus.py does. The corpus itself must keep its size, sources and labels."""

import importlib.util
import json
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# 30 schemas fast to compile (< 0.3 s each here), from the CloudFormation, project and tool sources;
# the full corpus is the benchmark's (benchmarks/schema_corpus.py).
SUBSET = [
    "cfn/AWS_ApiGateway_BasePathMapping",
    "cfn/AWS_ApiGatewayV2_Deployment",
    "cfn/AWS_AppStream_Fleet",
    "cfn/AWS_CloudFormation_WaitCondition",
    "cfn/AWS_CodeStar_GitHubRepository",
    "cfn/AWS_EC2_RouteTable",
    "cfn/AWS_EC2_VPCBlockPublicAccessOptions",
    "cfn/AWS_ElasticBeanstalk_ConfigurationTemplate",
    "cfn/AWS_Greengrass_SubscriptionDefinition",
    "cfn/AWS_IdentityStore_GroupMembership",
    "cfn/AWS_MediaConvert_JobTemplate",
    "cfn/AWS_Pinpoint_EmailChannel",
    "cfn/AWS_SageMaker_Workteam",
    "cfn-other/deployment_files/git_sync",
    "cfn-other/metadata/cfn_lint",
    "cfn-other/metadata/interface",
    "cfn-other/resources/metadata",
    "project/api_address",
    "project/api_order",
    "project/api_payment",
    "project/api_webhook_event",
    "project/config_k8s_deployment",
    "project/config_logging",
    "project/fn_book_flight",
    "project/fn_create_github_issue",
    "project/fn_send_email",
    "project/fn_translate_text",
    "tools/test_tool_calls/get_weather",
    "tools/test_tool_calls/search",
    "tools/tool_call/get_weather",
]


def _load(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, REPO / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench():
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    return _load("schema_corpus", "benchmarks/schema_corpus.py")


@pytest.fixture(scope="module")
def corpus(bench):
    return {e["name"]: e for e in bench.load_corpus()}


def test_corpus_size_sources_and_licences(corpus):
    manifest = json.loads((REPO / "benchmarks/schema_corpus/manifest.json").read_text())
    assert len(corpus) == len(manifest) >= 300
    sources = Counter(name.split("/")[0] for name in corpus)
    assert {"schemastore", "cfn", "cfn-other", "openapi", "jsonschema", "project", "tools"} <= set(sources)
    for entry in manifest:
        assert entry["licence"] and entry["source"]
        if entry["licence_file"]:
            assert (REPO / "benchmarks/schema_corpus/LICENSES" / entry["licence_file"]).is_file(), entry
    assert sum(len(e["valid"]) for e in corpus.values()) >= 1000
    assert sum(len(e["invalid"]) for e in corpus.values()) >= 1000


def test_instances_carry_jsonschemas_labels(corpus, bench):
    from schema_instances import validator_for

    for name in SUBSET + ["schemastore/citation-file-format", "schemastore/gitlab-ci"]:
        entry = corpus[name]
        # the same label whether `format` is an annotation (jsonschema's default) or an assertion
        for validator in (validator_for(entry["schema"]), validator_for(entry["schema"], formats=True)):
            assert all(validator.is_valid(v) for v in entry["valid"]), name
            assert not any(validator.is_valid(v) for v in entry["invalid"]), name


def test_labels_leave_out_instances_that_only_formats_decide(bench):
    from schema_instances import Labeller

    label = Labeller({"type": "object", "properties": {"day": {"type": "string", "format": "date"}}})
    assert label({"day": "2024-09-30"}) is True
    assert label({"day": 7}) is False
    assert label({"day": "2024-09-31"}) is None  # valid as an annotation, invalid as an assertion


def test_subset_has_no_false_accepts_and_no_false_rejects(corpus, bench):
    from schema_corpus_libs import Ours

    from sgl_runtime.constrained.vocabulary import Vocabulary
    from sgl_runtime.model_loader.demo_tokenizer import load_qwen2_tokenizer

    tokenizer = load_qwen2_tokenizer()
    lib = Ours(tokenizer, Vocabulary.from_tokenizer(tokenizer))
    checked, wrong = Counter(), []
    for name in SUBSET:
        result = bench.run_schema(lib, tokenizer, corpus[name])
        assert result["status"] == "compiled", (name, result)
        checked.update(valid=len(corpus[name]["valid"]), invalid=len(corpus[name]["invalid"]))
        wrong += [(name, "false accept", t) for t in result["invalid_accepted"]]
        wrong += [(name, "false reject", t) for t in result["valid_rejected"]]
    assert wrong == []
    assert checked["valid"] >= 3 * len(SUBSET) and checked["invalid"] >= 3 * len(SUBSET), checked


# Too large for one automaton (ConstraintError after 8-10 s CPU before the grammar form, a timeout of the benchmark):
# now the grammar form, with small parts as tokens.
LARGE = ["schemastore/codecov", "cfn/AWS_Cases_Template", "cfn/AWS_B2BI_Partnership"]


@pytest.mark.slow
@pytest.mark.parametrize("name", LARGE)
def test_large_schemas_compile_to_the_grammar_form_exactly(corpus, name):
    from sgl_runtime.constrained.json_schema.grammar_form import SchemaGrammar
    from sgl_runtime.constrained.json_schema.language import compile_schema
    from sgl_runtime.constrained.json_schema.serialize import compact_json

    entry = corpus[name]
    language = compile_schema(entry["schema"])
    assert isinstance(language, SchemaGrammar)
    assert entry["valid"] and entry["invalid"]
    for instance in entry["valid"]:
        text = compact_json(instance, entry["schema"])
        # documented: long constrained strings leave out control characters other than \n \r \t
        assert language.accepts(text) or "\\u00" in text, instance
    for instance in entry["invalid"]:
        assert not language.accepts(compact_json(instance, entry["schema"])), instance
