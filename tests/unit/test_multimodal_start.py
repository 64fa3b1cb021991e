"""What a multimodal checkpoint needs in its tokenizer directory for SGLang to start, and preflight's refusal when it
lacks it: the image processor (real SGLang 0.5.17 exits at start without preprocessor_config.json) and a chat template
(its warm-up's chat completion gets 400 and it kills itself), as recorded in tests/recordings/
sglang-0.5.17-h200-tiny-qwen3.5 (no_processor, no_chat_template; no_video_processor served)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.sglang.fleet.plugins.module_utils import model_facts as module
from ansible_collections.sglang.fleet.plugins.module_utils.instance_checks import multimodal_architecture, tokenizer_paths
from ansible_collections.sglang.fleet.plugins.module_utils.sglang_support import Support
from conftest import ROOT, STAND_IN_FILES

Plan = Callable[..., dict[str, Any]]
MODEL = "/srv/models/Qwen3.6-27B"  # the stand-in's path in the production settings (conftest.plan_settings)
TOKENIZER = "/srv/tokenizers/qwen"
RECORDING = ROOT / "tests/recordings/sglang-0.5.17-h200-tiny-qwen3.5"

NO_PROCESSOR = (
    f'ct129 instance sglang-30000: sglang_model_path="{MODEL}": Qwen3_5ForConditionalGeneration is multimodal in SGLang '
    f"0.5.23, which builds its image processor at start from the tokenizer directory {MODEL} (the model directory: "
    "tokenizer-path is not set), even with skip-tokenizer-init; it has no preprocessor_config.json (nor an "
    "image_processor in processor_config.json), so SGLang exits at start (OSError: Can't load image processor); fix: "
    f"preprocessor_config.json: copy the model repository's one into {MODEL}, or point sglang_server_args.tokenizer-path "
    "at a directory that has it (skip-tokenizer-init does not avoid this)"
)
NO_CHAT_TEMPLATE = (
    f'ct129 instance sglang-30000: sglang_model_path="{MODEL}": Qwen3_5ForConditionalGeneration is a vision model in '
    f"SGLang 0.5.23, whose warm-up is a chat completion; the tokenizer directory {MODEL} (the model directory: "
    "tokenizer-path is not set) has no chat template (no chat_template.jinja, nor chat_template in "
    "tokenizer_config.json) and sglang_server_args sets no chat-template, so the warm-up gets 400 "
    "(tokenizer.chat_template is not set) and SGLang kills itself after it began listening; fix: chat_template.jinja: "
    f"copy the model repository's one into {MODEL}; or set sglang_server_args.chat-template (a template file on the "
    "host, or a built-in name), or point tokenizer-path at a directory with one (skip-tokenizer-init: true avoids it "
    "too, but the server then takes token ids only)"
)


@pytest.fixture
def plan(support_tables: list[dict[str, Any]]) -> Plan:
    """plan(host, model, **variables): the plan of a production host whose probe read `model`."""
    from ansible_collections.sglang.fleet.plugins.filter.sglang_plan import sglang_plan
    from conftest import host_facts, plan_settings

    def run(host: str, model: dict[str, Any], **variables: Any) -> dict[str, Any]:
        result: dict[str, Any] = sglang_plan(plan_settings(host, **variables), host_facts(host, model), support_tables)
        return result

    return run


@pytest.fixture
def checked(plan: Plan, model_facts: dict[str, Any]) -> Callable[..., list[str]]:
    """checked(model_changes, host="ct129", **variables): the plan's problems for the stand-in changed so."""

    def run(changes: dict[str, Any] | None = None, host: str = "ct129", **variables: Any) -> list[str]:
        problems: list[str] = plan(host, {**model_facts, **(changes or {})}, **variables)["problems"]
        return problems

    return run


def multimodal_lines(problems: list[str]) -> list[str]:
    return [line for line in problems if "image processor" in line or "chat template" in line]


# The tokenizer directory's facts.


def test_the_recorded_failures_are_what_the_plan_refuses() -> None:
    """The recording the rules come from: what each server's directory held, and how it ended."""
    headline = json.loads((RECORDING / "summary.json").read_text())["headline"]
    listing = json.loads((RECORDING / "models/listing.json").read_text())
    assert "preprocessor_config.json" not in listing["tiny-qwen3.5-no-processor"]
    assert (
        headline["no_processor"]["returncode"] == 1 and "Can't load image processor" in headline["no_processor"]["error_lines"][0]
    )
    assert "chat_template.jinja" not in listing["tiny-qwen3.5-no-chat-template"]
    assert "chat_template" not in json.loads(listing["tiny-qwen3.5-no-chat-template"]["tokenizer_config.json"])
    assert headline["no_chat_template"]["returncode"] == -9
    assert "tokenizer.chat_template is not set" in headline["no_chat_template"]["error_lines"][0]
    assert "video_preprocessor_config.json" not in listing["tiny-qwen3.5-no-video-processor"]
    assert headline["no_video_processor"]["ready"] is True, "the video processor's own file is not needed"


def test_the_stand_in_has_what_sglang_loads_and_the_test_hosts_get_the_same_files(model_facts: dict[str, Any]) -> None:
    assert model_facts["processor_config"] == "preprocessor_config.json"
    assert model_facts["chat_template"] == "chat_template.jinja"
    assert model_facts["model_type"] == "qwen3_5" and model_facts["vision_config"] is True
    assert model_facts["auto_map"] is False and model_facts["language_model_only"] is False
    testhost_vars = yaml.safe_load((ROOT / "roles/testhost/vars/main.yml").read_text())
    assert list(STAND_IN_FILES) == testhost_vars["_testhost_model_files"]


@pytest.mark.parametrize(
    ("files", "processor", "template"),
    [
        ({}, None, None),
        ({"preprocessor_config.json": "{}"}, "preprocessor_config.json", None),
        ({"video_preprocessor_config.json": "{}"}, None, None),  # the video processor's file alone is not enough
        ({"processor_config.json": '{"image_processor": {"patch_size": 16}}'}, "processor_config.json", None),
        ({"processor_config.json": '{"feature_extractor": {"sampling_rate": 16000}}'}, "processor_config.json", None),
        ({"processor_config.json": '{"processor_class": "Qwen3VLProcessor"}'}, None, None),
        ({"processor_config.json": '{"chat_template": "{{ x }}"}'}, None, "processor_config.json"),
        ({"chat_template.jinja": "{{ x }}"}, None, "chat_template.jinja"),
        ({"chat_template.json": '{"chat_template": "{{ x }}"}'}, None, "chat_template.json"),
        ({"tokenizer_config.json": '{"chat_template": "{{ x }}"}'}, None, "tokenizer_config.json"),
        ({"tokenizer_config.json": '{"chat_template": null, "eos_token": "<e>"}'}, None, None),
        ({"tokenizer_config.json": "not json"}, None, None),
        ({"additional_chat_templates/tool_use.jinja": "{{ x }}"}, None, "additional_chat_templates/"),
    ],
)
def test_where_the_processor_and_the_chat_template_are_found(
    tmp_path: Path, files: dict[str, str], processor: str | None, template: str | None
) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert module.tokenizer_files(str(tmp_path)) == {"processor_config": processor, "chat_template": template}


def test_what_config_json_says_of_a_multimodal_start(tmp_path: Path) -> None:
    config = {"architectures": ["DeepseekVL2ForCausalLM"], "model_type": "deepseek_vl_v2", "auto_map": {"AutoModel": "m.M"},
              "vision_config": {"layers": 1}, "language_model_only": True}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    facts = module.describe(str(tmp_path), {})
    assert (facts["model_type"], facts["auto_map"], facts["vision_config"], facts["language_model_only"]) == (
        "deepseek_vl_v2",
        True,
        True,
        True,
    )
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    facts = module.describe(str(tmp_path), {})
    assert (facts["model_type"], facts["auto_map"], facts["vision_config"], facts["language_model_only"]) == (
        None,
        False,
        False,
        False,
    )
    assert (facts["processor_config"], facts["chat_template"]) == (None, None)


def test_the_servers_account_must_read_the_chat_template_too(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "chat_template.jinja").write_text("{{ x }}")
    assert "chat_template.jinja" in module.files_to_read(str(tmp_path))


def test_tokenizer_directories_are_read_beside_the_model_by_the_host_module(stand_in_model_dir: Path, tmp_path: Path) -> None:
    tokenizer = tmp_path / "tokenizer"
    tokenizer.mkdir()
    (tokenizer / "preprocessor_config.json").write_text("{}")
    gone = str(tmp_path / "gone")
    facts = module.model_facts(str(stand_in_model_dir), {}, tokenizer_paths=[str(tokenizer), gone])
    assert facts["tokenizers"] == {
        str(tokenizer): {
            "path": str(tokenizer),
            "exists": True,
            "processor_config": "preprocessor_config.json",
            "chat_template": None,
        },
        gone: {"path": gone, "exists": False},
    }
    assert "tokenizers" not in module.model_facts(str(stand_in_model_dir), {})
    # Module sglang_host_facts, run as Ansible runs it, passes the option through.
    args = tmp_path / "args.json"
    model = {"path": str(stand_in_model_dir), "tokenizer_paths": [str(tokenizer)]}
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"nvidia_smi": str(tmp_path / "no-smi"), "model": model}}))
    done = subprocess.run(
        [sys.executable, str(ROOT / "plugins/modules/sglang_host_facts.py"), str(args)],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(ROOT / "collections")},
    )
    assert json.loads(done.stdout)["model"]["tokenizers"][str(tokenizer)]["processor_config"] == "preprocessor_config.json"


def test_the_tokenizer_paths_the_probe_reads() -> None:
    server_args = {"tokenizer-path": "/srv/a", "dtype": "bfloat16"}
    overrides = {0: {"server_args": {"tokenizer_path": "/srv/b"}}, 1: {"server_args": {"--tokenizer-path": "/srv/a"}},
                 2: {"environment": {"X": "1"}}, 3: {"server_args": {"tokenizer-path": "relative/dir"}}, 4: None}  # fmt: skip
    assert tokenizer_paths(server_args, overrides) == ["/srv/a", "/srv/b"]
    assert tokenizer_paths({"tokenizer-path": "Qwen/Qwen3-VL-8B"}, {}) == [], "a Hub name is no directory to read"
    assert tokenizer_paths({}, {}) == [] and tokenizer_paths("not a mapping", ["nor this"]) == []


# Which architectures SGLang starts as multimodal: the pinned release's table.


def test_the_tables_say_which_architectures_start_multimodal(support_tables: list[dict[str, Any]]) -> None:
    for table in support_tables:
        support = Support.load(table)
        assert "Qwen3_5ForConditionalGeneration" in support.multimodal_architectures, support.version
        assert "Gemma3ForConditionalGeneration" in support.multimodal_architectures_opt_in
        assert "Gemma3ForConditionalGeneration" not in support.multimodal_architectures
        assert "Qwen3_5ForCausalLM" not in support.multimodal_architectures | support.multimodal_architectures_opt_in
        assert "CLIPModel" in support.non_generation_architectures
        assert "deepseek_vl_v2" in support.conversation_template_model_types & support.own_processor_model_types
        assert any("internvl" in pattern for pattern in support.conversation_template_path_patterns)
    by_version = {table["sglang_version"]: Support.load(table) for table in support_tables}
    assert "Qwen4ExpForConditionalGeneration" in by_version["0.5.23"].multimodal_architectures
    assert "Qwen4ExpForConditionalGeneration" not in by_version["0.5.17"].multimodal_architectures


def test_opt_in_architectures_are_multimodal_only_with_enable_multimodal() -> None:
    support = Support.load(
        {
            "sglang_version": "9",
            "flags": [],
            "architectures": [],
            "speculative_algorithms": [],
            "multimodal_architectures": ["VlmA"],
            "multimodal_architectures_opt_in": ["Gemma3ForConditionalGeneration"],
        }
    )
    assert multimodal_architecture(support, ["VlmA"], False) == "VlmA"
    assert multimodal_architecture(support, ["Gemma3ForConditionalGeneration"], False) is None
    assert multimodal_architecture(support, ["Gemma3ForConditionalGeneration"], True) == "Gemma3ForConditionalGeneration"
    # SGLang turns multimodal off by the first architecture only.
    assert multimodal_architecture(support, ["Text", "Gemma3ForConditionalGeneration"], False) == "Gemma3ForConditionalGeneration"
    assert multimodal_architecture(support, ["Text"], True) is None and multimodal_architecture(support, [], True) is None


# The plan's problems.


def test_a_complete_multimodal_checkpoint_is_no_problem(checked: Callable[..., list[str]]) -> None:
    assert checked() == []
    assert checked(host="b200") == []


def test_no_image_processor_is_refused_before_anything_changes(checked: Callable[..., list[str]]) -> None:
    assert checked({"processor_config": None}) == [NO_PROCESSOR]
    on_b200 = checked({"processor_config": None}, host="b200")
    assert len(on_b200) == 7 and all("preprocessor_config.json" in line for line in on_b200), "one line per instance"


def test_no_chat_template_is_refused_before_anything_changes(checked: Callable[..., list[str]]) -> None:
    assert checked({"chat_template": None}) == [NO_CHAT_TEMPLATE]
    assert checked({"chat_template": None, "processor_config": None}) == [NO_PROCESSOR, NO_CHAT_TEMPLATE]


def test_skip_tokenizer_init_avoids_only_the_chat_templates_failure(checked: Callable[..., list[str]]) -> None:
    args = {"sglang_server_args": {"dtype": "bfloat16", "trust-remote-code": True, "skip-tokenizer-init": True}}
    assert checked({"chat_template": None}, **args) == []
    assert multimodal_lines(checked({"chat_template": None, "processor_config": None}, **args)) == [NO_PROCESSOR]


@pytest.mark.parametrize(
    "server_args",
    [
        {"chat-template": "/etc/sglang-fleet/qwen.jinja"},
        {"chat_template": "chatml"},
        {"skip-server-warmup": True},
        {"disaggregation-mode": "prefill"},
        {"is-embedding": True},
    ],
    ids=["chat-template-file", "chat-template-name", "no-warm-up", "disaggregated", "embedding"],
)
def test_settings_that_need_no_chat_template_of_the_tokenizer(
    checked: Callable[..., list[str]], server_args: dict[str, Any]
) -> None:
    assert multimodal_lines(checked({"chat_template": None}, sglang_server_args=server_args)) == []


def test_a_model_without_a_vision_tower_warms_up_without_a_chat_template(checked: Callable[..., list[str]]) -> None:
    assert checked({"chat_template": None, "vision_config": False}) == []
    # A non-generation architecture warms up with /encode, but builds its processor all the same.
    clip = {"architectures": ["CLIPModel"], "chat_template": None}
    assert multimodal_lines(checked(clip)) == []
    assert len(multimodal_lines(checked({**clip, "processor_config": None}))) == 1


def test_a_conversation_template_sglang_picks_itself_needs_none_of_the_tokenizer(checked: Callable[..., list[str]]) -> None:
    assert checked({"chat_template": None, "model_type": "internvl_chat"}) == []
    internvl = "/srv/models/InternVL3-8B"
    assert multimodal_lines(checked({"chat_template": None}, sglang_model_path=internvl)) == []
    assert multimodal_lines(checked({"chat_template": None}, sglang_model_path="/srv/models/Other-VL")) != []


def test_a_processor_of_sglangs_own_or_of_the_models_own_code_is_not_judged(checked: Callable[..., list[str]]) -> None:
    assert checked({"processor_config": None, "model_type": "deepseek_vl_v2"}) == []
    # The model's own code with the host's trust-remote-code needs the opt-in (issue 38), given here.
    assert checked({"processor_config": None, "auto_map": True}, sglang_allow_model_code=True) == []


def test_text_only_architectures_and_opt_in_ones_need_neither(checked: Callable[..., list[str]]) -> None:
    missing = {"processor_config": None, "chat_template": None}
    assert checked({**missing, "architectures": ["Qwen3_5ForCausalLM"]}) == []
    gemma = {**missing, "architectures": ["Gemma3ForConditionalGeneration"]}
    assert multimodal_lines(checked(gemma)) == []
    args = {"dtype": "bfloat16", "trust-remote-code": True, "enable-multimodal": True}
    assert len(multimodal_lines(checked(gemma, sglang_server_args=args))) == 2


def test_a_language_model_only_start_is_a_release_that_knows_it(checked: Callable[..., list[str]]) -> None:
    """SGLang 0.5.23 skips the processor with --language-model-only or language_model_only in config.json; 0.5.17
    knows neither."""
    missing = {"processor_config": None, "chat_template": None}
    args = {"dtype": "bfloat16", "trust-remote-code": True, "language-model-only": True}
    assert checked(missing, sglang_server_args=args) == []
    assert checked({**missing, "language_model_only": True}) == []
    on_0_5_17 = multimodal_lines(checked({**missing, "language_model_only": True}, sglang_version="0.5.17"))
    assert [line.replace("0.5.17", "0.5.23") for line in on_0_5_17] == [NO_PROCESSOR, NO_CHAT_TEMPLATE]


def tokenizer_dir(**files: Any) -> dict[str, Any]:
    return {TOKENIZER: {"path": TOKENIZER, "exists": True, "processor_config": None, "chat_template": None, **files}}


def test_a_tokenizer_directory_elsewhere_is_judged_by_the_hosts_reading_of_it(checked: Callable[..., list[str]]) -> None:
    args = {"dtype": "bfloat16", "trust-remote-code": True, "tokenizer-path": TOKENIZER}
    # The model directory says nothing then: it lacks both, the tokenizer directory has both.
    complete = tokenizer_dir(processor_config="preprocessor_config.json", chat_template="chat_template.jinja")
    missing = {"processor_config": None, "chat_template": None}
    assert checked({**missing, "tokenizers": complete}, sglang_server_args=args) == []
    lines = checked({"tokenizers": tokenizer_dir()}, sglang_server_args=args)
    named = f'ct129 instance sglang-30000: sglang_server_args.tokenizer-path="{TOKENIZER}": '
    assert len(lines) == 2 and all(line.startswith(named) for line in lines)
    assert f"from the tokenizer directory {TOKENIZER} (tokenizer-path)" in lines[0]
    assert f"copy the model repository's one into {TOKENIZER}" in lines[0]
    # Not read (a Hub name, or facts of an older probe), or no directory there: no verdict.
    assert checked(missing, sglang_server_args=args) == []
    gone = {TOKENIZER: {"path": TOKENIZER, "exists": False}}
    assert checked({**missing, "tokenizers": gone}, sglang_server_args=args) == []
    # The model's own directory, named again, is the model directory.
    same = {"dtype": "bfloat16", "trust-remote-code": True, "tokenizer-path": MODEL + "/"}
    assert checked({"processor_config": None}, sglang_server_args=same) == [
        NO_PROCESSOR.replace("(the model directory: tokenizer-path is not set)", "(the model directory, as tokenizer-path says)")
    ]


def test_one_instances_override_is_judged_for_that_instance(checked: Callable[..., list[str]]) -> None:
    overrides = {3: {"server_args": {"tokenizer-path": TOKENIZER}}}
    lines = checked(
        {"tokenizers": tokenizer_dir(chat_template="chat_template.jinja")}, host="b200", sglang_instance_overrides=overrides
    )
    assert len(lines) == 1 and lines[0].startswith("b200 instance sglang-30003: sglang_server_args.tokenizer-path=")


def test_a_fetched_model_names_sglang_model_and_its_allow_patterns(plan: Plan, model_facts: dict[str, Any]) -> None:
    from test_model_role import PATH, SOURCE, fetched

    copy = {**model_facts, "processor_config": None}
    on_host = {"path": PATH, "exists": False, "disk_free_bytes": 1 << 50}
    settings = {"sglang_model": SOURCE, "sglang_model_path": "", "sglang_model_source": fetched(copy)}
    [line] = plan("ct129", on_host, **settings)["problems"]
    assert line.startswith('ct129 instance sglang-30000: sglang_model="Qwen3.6-27B": Qwen3_5ForConditionalGeneration is')
    assert f"from the tokenizer directory {PATH} (the model directory" in line
    assert (
        "fix: preprocessor_config.json: where the repository has it, select it in sglang_model (allow_patterns) and write "
        "the lock again (playbooks/model_lock.yml), or point" in line
    )
    # The host's reading of a tokenizer directory is kept beside the control node's copy.
    args = {"dtype": "bfloat16", "trust-remote-code": True, "tokenizer-path": TOKENIZER}
    complete = tokenizer_dir(processor_config="preprocessor_config.json", chat_template="chat_template.jinja")
    assert plan("ct129", {**on_host, "tokenizers": complete}, **settings, sglang_server_args=args)["problems"] == []


# The extraction of the table's keys (scripts/extract_sglang_facts.py), on a package laid out as SGLang's.

MODEL_CONFIG = """
MIMO_V2_MULTIMODAL_ARCHS = ("MiMoV2ForCausalLM",)


class ModelConfig:
    def __init__(self, enable_multimodal=None):
        if enable_multimodal is None:
            mm_disabled_models = ["Gemma3ForConditionalGeneration"]
            if self.hf_config.architectures[0] in mm_disabled_models and self.model_impl != "transformers":
                enable_multimodal = False
            elif self.hf_config.architectures[0] in MIMO_V2_MULTIMODAL_ARCHS and not hasattr(self.hf_config, "x"):
                enable_multimodal = False
            else:
                enable_multimodal = True


def is_generation_model(model_architectures, is_embedding=False):
    if "CLIPModel" in model_architectures or "BertModel" in model_architectures:
        return False
    return not is_embedding


multimodal_model_archs = [
    "CLIPModel",
    "Gemma3ForConditionalGeneration",
    *MIMO_V2_MULTIMODAL_ARCHS,
    "Qwen3_5ForConditionalGeneration",
]
"""
CONVERSATION = """
MODEL_TYPE_TO_TEMPLATE = {"internvl_chat": "internvl-2-5", "whisper": "whisper"}


@register_conv_template_matching_function
def match_internvl(model_path: str):
    if re.search(r"internvl", model_path, re.IGNORECASE):
        return "internvl-2-5"
    model_type = get_model_type(model_path)
    return MODEL_TYPE_TO_TEMPLATE.get(model_type)


@register_conv_template_matching_function
def match_minicpm(model_path: str):
    model_type = get_model_type(model_path)
    if model_type in ("minicpmv4_6", "minicpmv4_7"):
        return None
    if model_type == "unlimited-ocr" or "phi-4-multimodal" in model_path.lower() or "Exact" in model_path:
        return "x"
    if re.match(r"vicuna", model_path):
        return "vicuna_v1.1"
"""
PROCESSORS = """
class DeepseekVL2Config(PretrainedConfig):
    model_type = "deepseek_vl_v2"


@register_customized_processor(processor_class=Qwen3ASRProcessor)
class Qwen3ASRConfig(PretrainedConfig):
    model_type = "qwen3_asr"


AutoProcessor.register(DeepseekVL2Config, DeepseekVLV2Processor)
"""
UTILS = """
def register_processor(config, processor):
    AutoProcessor.register(config, processor, exist_ok=True)
"""


@pytest.fixture
def extract(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    import extract_sglang_facts

    return extract_sglang_facts


def sglang_package(root: Path, version: str = "0.5.23", **files: str) -> Path:
    texts = {
        "_version.py": f"__version__ = version = '{version}'\n",
        "srt/configs/model_config.py": MODEL_CONFIG,
        "srt/parser/conversation.py": CONVERSATION,
        "srt/configs/deepseekvl2.py": PROCESSORS,
        "srt/configs/utils.py": UTILS,
        **files,
    }
    for name, text in texts.items():
        (root / "sglang" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "sglang" / name).write_text(text)
    return root / "sglang"


def test_the_multimodal_keys_are_read_from_sglangs_source(extract: Any, tmp_path: Path) -> None:
    assert extract.multimodal_facts(sglang_package(tmp_path)) == {
        "multimodal_architectures": ["CLIPModel", "Qwen3_5ForConditionalGeneration"],
        # Off unless --enable-multimodal (MiMo-V2 also unless its config has the towers: not judged either).
        "multimodal_architectures_opt_in": ["Gemma3ForConditionalGeneration", "MiMoV2ForCausalLM"],
        "non_generation_architectures": ["BertModel", "CLIPModel"],
        # An exclusion (minicpmv4_6/4_7 return None) is listed too: it only makes the plan skip a check.
        "conversation_template_model_types": ["internvl_chat", "minicpmv4_6", "minicpmv4_7", "unlimited-ocr", "whisper"],
        "conversation_template_path_patterns": ["(?i)internvl", "(?i)phi\\-4\\-multimodal", "Exact", "^vicuna"],
        "own_processor_model_types": ["deepseek_vl_v2", "qwen3_asr"],
    }


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("srt/configs/model_config.py", MODEL_CONFIG.replace("multimodal_model_archs = [", "other = ["), "no module-level"),
        ("srt/configs/model_config.py", MODEL_CONFIG.replace("is None:", "is False:"), "no `if enable_multimodal is None:`"),
        (
            "srt/configs/model_config.py",
            MODEL_CONFIG.replace('    "CLIPModel",\n    "Gemma', '    name(),\n    "Gemma'),
            "cannot read",
        ),
        ("srt/parser/conversation.py", CONVERSATION.replace("@register_conv_template_matching_function", ""), "no @register"),
        ("srt/parser/conversation.py", CONVERSATION.replace('re.match(r"vicuna"', "re.match(PATTERN"), "no literal"),
        ("srt/parser/conversation.py", CONVERSATION.replace('model_type == "unlimited-ocr"', "model_path > 'a'"), "cannot read"),
        ("srt/configs/deepseekvl2.py", PROCESSORS.replace('model_type = "deepseek_vl_v2"', "model_type = TYPE"), "no literal"),
    ],
    ids=["no-archs", "no-default-block", "not-literal", "no-matchers", "pattern-not-literal", "odd-compare", "odd-type"],
)
def test_a_release_laid_out_otherwise_stops_the_extraction(
    extract: Any, tmp_path: Path, name: str, text: str, message: str
) -> None:
    with pytest.raises(SystemExit, match=message):
        extract.multimodal_facts(sglang_package(tmp_path, **{name: text}))


def test_static_refresh_rewrites_only_the_multimodal_keys(extract: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--static <package>` (how both tables got the keys): every other key stays byte for byte, and again is the same."""
    original = json.loads((ROOT / "roles/sglang_plan/files/sglang-0.5.23.json").read_text())
    before = {key: value for key, value in original.items() if key not in extract.MULTIMODAL_KEYS}
    before["source"] = before["source"].replace(" " + extract.MULTIMODAL_SOURCE, "")
    table = tmp_path / "sglang-0.5.23.json"
    table.write_text(extract.dump(before))
    monkeypatch.setattr(extract, "table_path", lambda version: tmp_path / f"sglang-{version}.json")
    monkeypatch.setattr(extract, "simulator_table_path", lambda version: tmp_path / f"simulator-sglang-{version}.json")
    package = sglang_package(tmp_path / "wheel")
    assert extract.refresh_static(package) == 0
    assert (tmp_path / "simulator-sglang-0.5.23.json").read_bytes() == table.read_bytes(), "the simulator's copy too"
    after = json.loads(table.read_text())
    assert after["source"] == before["source"] + " " + extract.MULTIMODAL_SOURCE
    assert {key: value for key, value in after.items() if key not in (*extract.MULTIMODAL_KEYS, "source")} == {
        key: value for key, value in before.items() if key != "source"
    }
    assert after["multimodal_architectures"] == ["CLIPModel", "Qwen3_5ForConditionalGeneration"]
    first = table.read_bytes()
    assert extract.refresh_static(package) == 0 and table.read_bytes() == first
    assert extract.dump(json.loads(first)) == first.decode(), "the file is the script's own dump"
    assert extract.refresh_static(sglang_package(tmp_path / "other", version="0.6.0")) == 2, "no table for it"


def test_the_tables_were_written_by_the_script(extract: Any, support_tables: list[dict[str, Any]]) -> None:
    for table in support_tables:
        path = ROOT / f"roles/sglang_plan/files/sglang-{table['sglang_version']}.json"
        assert path.read_text() == extract.dump(table)
        assert set(extract.MULTIMODAL_KEYS) <= set(table) and table["source"].endswith(extract.MULTIMODAL_SOURCE)
