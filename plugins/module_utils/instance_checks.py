"""What SGLang or the host would refuse of a host's derived instances: values SGLang holds to, the model directory
and its access, memory on the GPUs and in the host's RAM, the GPUs and the ports."""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Mapping
from typing import Any

from ansible_collections.sglang.fleet.plugins.module_utils.flags import flag_name
from ansible_collections.sglang.fleet.plugins.module_utils.problems import HostProblems
from ansible_collections.sglang.fleet.plugins.module_utils.reshape import fleet_gpus
from ansible_collections.sglang.fleet.plugins.module_utils.server_settings import truthy
from ansible_collections.sglang.fleet.plugins.module_utils.sglang_support import Support, since


def port_taken(port: int, taken: Mapping[str, Any]) -> str:
    """What holds `port` (a listener of the host's facts: pid, name), as problem lines say it."""
    if taken.get("pid"):
        return f"port {port} is taken by PID {taken['pid']} ({taken.get('name', '?')})"
    return f"port {port} is taken by a process that cannot be named here"


GIB = 1024**3
MIB = 1024**2

# Bounds SGLang (or any careful operator) holds values to, by argparse dest (so aliases count):
# dest: (minimum, exclusive maximum or None, whether the minimum itself is excluded, what the value must be).
VALUE_BOUNDS: dict[str, tuple[float, float | None, bool, str]] = {
    "mem_fraction_static": (0, 1, True, "must be between 0 and 1 (exclusive)"),
    "max_running_requests": (1, None, False, "must be at least 1"),
    "context_length": (1, None, False, "must be at least 1"),
    "max_total_tokens": (1, None, False, "must be at least 1"),
    "max_prefill_tokens": (1, None, False, "must be at least 1"),
    "hicache_ratio": (0, None, True, "must be above 0"),
    "hicache_size": (0, None, False, "must not be negative"),
}
ALLOW_LONGER_CONTEXT = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"

# The algorithms SGLang 0.5.23 runs only with a draft model of their own (--speculative-draft-model-path): EAGLE3's draft
# head, and DFLASH's (speculative_hook._handle_dflash refuses to start without one).
DRAFT_MODEL_NEEDED = frozenset({"EAGLE3", "DFLASH"})


def _by_dest(support: Support, instance: Mapping[str, Any]) -> dict[str, tuple[str, Any]]:
    """An instance's server args as {argparse dest: (variable, value)}."""
    found: dict[str, tuple[str, Any]] = {}
    for key, value in instance.get("settings", {}).items():
        known = support.flags.get(flag_name(str(key)))
        if known and known.dest:
            found[known.dest] = (f"sglang_server_args.{key}", value)
    return found


def value_problems(problems: HostProblems, support: Support, instances: list[dict[str, Any]], model: Mapping[str, Any]) -> None:
    """What SGLang refuses at start (or a careful operator never wants), beyond what its parser refuses."""
    for instance in instances:
        where = f"instance {instance['name']}"
        values = _by_dest(support, instance)
        for dest, (minimum, maximum, exclusive, text) in VALUE_BOUNDS.items():
            if dest not in values:
                continue
            variable, value = values[dest]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue  # a wrong type is reported by the flag check
            low = value <= minimum if exclusive else value < minimum
            if low or (maximum is not None and value >= maximum):
                problems.add(
                    where, variable, value, text, "e.g. 0.85" if dest == "mem_fraction_static" else "give a sensible value"
                )
        tensor = int(instance["tensor_parallel_size"])
        attn_tp, over = tensor, f"{tensor} GPUs"
        if values.get("enable_dp_attention", ("", False))[1] is True:
            # DP attention splits the attention heads over tp / dp GPUs only.
            data = max(1, int(instance["ranks"]) // (tensor * int(instance["pipeline_parallel_size"])))
            attn_tp, over = max(1, tensor // data), f"{max(1, tensor // data)} GPUs (tp / dp with DP attention)"
        heads = model.get("num_attention_heads")
        kv_heads = model.get("num_key_value_heads")
        if isinstance(heads, int) and heads > 0 and heads % attn_tp:
            problems.add(
                where,
                "sglang_tensor_parallel_size",
                tensor,
                f"the model's {heads} attention heads cannot be split over {over} (SGLang asserts "
                "num_attention_heads % tp_size == 0 at start)",
                f"use a tensor parallel size that divides {heads}",
            )
        elif isinstance(kv_heads, int) and kv_heads > 0 and (kv_heads % attn_tp if kv_heads >= attn_tp else attn_tp % kv_heads):
            problems.add(
                where,
                "sglang_tensor_parallel_size",
                tensor,
                f"the model's {kv_heads} KV heads can be neither split over nor replicated across {over} "
                "(SGLang asserts one divides the other)",
                f"use a tensor parallel size that divides {kv_heads} or is a multiple of it",
            )
        if "context_length" in values:
            variable, value = values["context_length"]
            limit = model.get("context_length")
            allowed = truthy(instance.get("environment", {}).get(ALLOW_LONGER_CONTEXT, ""))
            if (
                isinstance(limit, int)
                and isinstance(value, int)
                and not isinstance(value, bool)
                and value > limit
                and not allowed
            ):
                problems.add(
                    where,
                    variable,
                    value,
                    f"above the model's context length {limit} (config.json); SGLang refuses to start unless "
                    f"{ALLOW_LONGER_CONTEXT}=1, and outputs beyond it may be wrong",
                    f'context-length <= {limit}, or set sglang_environment.{ALLOW_LONGER_CONTEXT}: "1" deliberately',
                )


def model_problems(
    problems: HostProblems,
    settings: Mapping[str, Any],
    model: Mapping[str, Any],
    instances: list[dict[str, Any]],
    support: Support,
) -> int:
    """Checks the model directory; returns the weight bytes (0 when unknown)."""
    path = settings["model_path"]
    if not model.get("exists") and settings.get("model_sourced"):
        # Neither the control node's copy (its fetch failed, a problem the role sglang_model reports with the cause)
        # nor the host's: nothing to check here, and nothing to add to that problem.
        return 0
    if not model.get("exists"):
        problems.add("host", "sglang_model_path", path, "no such directory on the host", "copy the model there or fix the path")
        return 0
    if not model.get("config"):
        problems.add(
            "host", "sglang_model_path", path, "no readable config.json in the model directory", "copy the complete model"
        )
        return 0
    architectures = model.get("architectures") or []
    unknown = [arch for arch in architectures if arch not in support.architectures]
    if not architectures or unknown:
        having = support.versions_with(lambda other: bool(unknown) and set(unknown) <= other.architectures)
        problems.add(
            "host",
            "sglang_model_path",
            path,
            f"architecture {unknown or architectures} is not supported by SGLang {support.version}"
            + (f" ({since(having)} supports it)" if having else ""),
            f"pin sglang_version {having[0]} or serve another model"
            if having
            else "pin an SGLang version that supports it (see the support table) or serve another model",
        )
    for shard in model.get("missing_shards", []):
        problems.add(
            "host", "sglang_model_path", path, f"shard {shard} listed in the index is missing", "copy the complete model"
        )
    for shard in model.get("empty_shards", []):
        problems.add("host", "sglang_model_path", path, f"shard {shard} is empty", "copy the complete model")
    total = int(model.get("total_size") or 0)
    on_disk = int(model.get("shard_bytes") or 0)
    if total and on_disk and on_disk < total:
        problems.add(
            "host",
            "sglang_model_path",
            path,
            f"shards hold {on_disk / GIB:.1f} GiB but the index declares {total / GIB:.1f} GiB of tensors",
            "copy the complete model (a download was cut short)",
        )
    for name, problem in sorted((model.get("checksum_problems") or {}).items()):
        problems.add("host", "sglang_model_sha256", name, problem, "copy the file again")
    for instance in instances:
        algorithm = instance["speculative"]["algorithm"]
        draft_path = instance["speculative"].get("draft_model_path")
        if algorithm in ("NEXTN", "EAGLE") and not draft_path and not (model.get("has_mtp_tensors") and model.get("mtp_layers")):
            problems.add(
                f"instance {instance['name']}",
                "sglang_speculative.algorithm",
                algorithm,
                f"{algorithm} without a draft model needs MTP weights in the checkpoint "
                f"(mtp.* tensors: {bool(model.get('has_mtp_tensors'))}, "
                f"MTP layers in config.json: {model.get('mtp_layers') or 0})",
                "serve a checkpoint with MTP layers or set sglang_speculative.draft_model_path",
            )
        if algorithm in DRAFT_MODEL_NEEDED and not draft_path:
            problems.add(
                f"instance {instance['name']}",
                "sglang_speculative.draft_model_path",
                None,
                f"{algorithm} needs a draft model",
                "set draft_model_path",
            )
    return total or on_disk


def tokenizer_paths(server_args: Any, instance_overrides: Any) -> list[str]:
    """The absolute --tokenizer-path values of a host's server args and instance overrides (by any spelling): the
    directories sglang_host_facts reads beside the model's (`tokenizer_paths`), for multimodal_start_problems. Read
    before the plan checks the values: anything else is skipped here and reported there."""
    found: set[str] = set()
    overrides = instance_overrides.values() if isinstance(instance_overrides, Mapping) else []
    for args in [server_args, *((override or {}).get("server_args") for override in overrides if isinstance(override, Mapping))]:
        for key, value in args.items() if isinstance(args, Mapping) else []:
            if flag_name(str(key)) == "--tokenizer-path" and isinstance(value, str) and value.startswith("/"):
                found.add(value)
    return sorted(found)


def _switched(values: Mapping[str, tuple[str, Any]], dest: str) -> bool:
    """Whether an instance's command line (its values by destination, `_by_dest`) turns the switch `dest` on."""
    return values.get(dest, ("", None))[1] is True


def multimodal_architecture(support: Support, architectures: list[str], enabled: bool) -> str | None:
    """The architecture for which the pinned SGLang starts the checkpoint as multimodal (ModelConfig: with
    --enable-multimodal unset it turns multimodal off for the first architecture's opt-in models), or None."""
    if not architectures or (architectures[0] in support.multimodal_architectures_opt_in and not enabled):
        return None
    listed = support.multimodal_architectures | support.multimodal_architectures_opt_in
    return next((name for name in architectures if name in listed), None)


def multimodal_start_problems(
    problems: HostProblems,
    settings: Mapping[str, Any],
    model: Mapping[str, Any],
    instances: list[dict[str, Any]],
    support: Support,
) -> None:
    """What SGLang reads from the tokenizer directory (--tokenizer-path, else the model's) of a multimodal checkpoint:
    its processor at start (without it SGLang exits) and, for a vision model, a chat template for the warm-up's chat
    completion (without it SGLang kills itself after it began listening). Real SGLang 0.5.17 did both:
    tests/recordings/sglang-0.5.17-h200-tiny-qwen3.5 (no_processor, no_chat_template).

    A tokenizer directory elsewhere is judged by the host's reading of it (`tokenizers`, as sglang_host_facts read the
    --tokenizer-path values); one it did not read, or that is no directory there (a Hub name), is not judged."""
    if not model.get("config"):
        return  # model_problems says why
    architectures = [str(name) for name in model.get("architectures") or []]
    model_path = str(settings["model_path"])
    sourced = truthy(settings.get("model_sourced"))
    model_variable = "sglang_model" if sourced else "sglang_model_path"
    model_value = (settings.get("model_source") or {}).get("name") or model_path if sourced else model_path
    knows_lm_only = any(flag.dest == "language_model_only" for flag in support.flags.values())
    for instance in instances:
        values = _by_dest(support, instance)
        switched = functools.partial(_switched, values)
        architecture = multimodal_architecture(support, architectures, switched("enable_multimodal"))
        if architecture is None or switched("language_model_only") or (knows_lm_only and model.get("language_model_only")):
            continue  # text-only to SGLang: no processor, a text warm-up
        where = f"instance {instance['name']}"
        variable, value = model_variable, model_value
        directory, files, told = model_path, model, "the model directory: tokenizer-path is not set"
        tokenizer = values.get("tokenizer_path", ("", None))
        if isinstance(tokenizer[1], str) and os.path.normpath(tokenizer[1]) == os.path.normpath(model_path):
            told = "the model directory, as tokenizer-path says"
        elif isinstance(tokenizer[1], str):
            files = (model.get("tokenizers") or {}).get(tokenizer[1]) or {}
            if not files.get("exists"):
                continue
            (variable, value), directory, told = tokenizer, tokenizer[1], "tokenizer-path"
        if sourced and variable == model_variable:
            how = (
                "where the repository has it, select it in sglang_model (allow_patterns) and write the lock again "
                "(playbooks/model_lock.yml)"
            )
        else:
            how = f"copy the model repository's one into {directory}"
        own_processor = model.get("auto_map") or model.get("model_type") in support.own_processor_model_types
        if "processor_config" in files and not files["processor_config"] and not own_processor:
            problems.add(
                where,
                variable,
                value,
                f"{architecture} is multimodal in SGLang {support.version}, which builds its image processor at start "
                f"from the tokenizer directory {directory} ({told}), even with skip-tokenizer-init; it has no "
                "preprocessor_config.json (nor an image_processor in processor_config.json), so SGLang exits at start "
                "(OSError: Can't load image processor)",
                f"preprocessor_config.json: {how}, or point sglang_server_args.tokenizer-path at a directory that has it "
                "(skip-tokenizer-init does not avoid this)",
            )
        disaggregation = values.get("disaggregation_mode", ("", None))[1]
        chat_warmup = (
            model.get("vision_config")
            and not any(name in support.non_generation_architectures for name in architectures)
            and not any(
                switched(dest)
                for dest in ("is_embedding", "skip_tokenizer_init", "skip_server_warmup", "language_only", "encoder_only")
            )
            and disaggregation in (None, "null")
        )
        guessed = model.get("model_type") in support.conversation_template_model_types or any(
            re.search(pattern, model_path) for pattern in support.conversation_template_path_patterns
        )
        given = values.get("chat_template", ("", None))[1]
        if chat_warmup and not guessed and not given and "chat_template" in files and not files["chat_template"]:
            problems.add(
                where,
                variable,
                value,
                f"{architecture} is a vision model in SGLang {support.version}, whose warm-up is a chat completion; the "
                f"tokenizer directory {directory} ({told}) has no chat template (no chat_template.jinja, nor "
                "chat_template in tokenizer_config.json) and sglang_server_args sets no chat-template, so the warm-up "
                "gets 400 (tokenizer.chat_template is not set) and SGLang kills itself after it began listening",
                f"chat_template.jinja: {how}; or set sglang_server_args.chat-template (a template file on the host, or a "
                "built-in name), or point tokenizer-path at a directory with one (skip-tokenizer-init: true avoids it "
                "too, but the server then takes token ids only)",
            )


# Problem lines for unreadable model files: the first ones, then a count.
UNREADABLE_SHOWN = 5


# What the host's copy of a fetched model says about the host, not about the model: whether the servers can see it,
# and the tokenizer directories elsewhere (--tokenizer-path), which the deploy does not send.
HOST_MODEL_KEYS = ("hidden_by", "unreadable", "read_as", "tokenizers")


def checked_model(settings: Mapping[str, Any], on_host: Mapping[str, Any]) -> Mapping[str, Any]:
    """The model the checks read. For a model the role sglang_model fetched (settings["model_source"] has the control
    node's copy): that copy - the host may not have the revision yet, and the files it lacks or has wrong are what the
    deploy sends (not problems) - with the host's own view of its access. Otherwise the host's directory."""
    copy = (settings.get("model_source") or {}).get("facts") or {}
    if not copy:
        return on_host
    return {**copy, "path": settings["model_path"], **{key: on_host[key] for key in HOST_MODEL_KEYS if key in on_host}}


def model_room_need(settings: Mapping[str, Any], on_host: Mapping[str, Any]) -> dict[str, Any] | None:
    """For a fetched model: the bytes its files the host lacks or has wrong will write there, with the filesystem they
    go to (the host facts' disk_path, disk_free_bytes, disk_device); None when nothing is to be sent."""
    files = (settings.get("model_source") or {}).get("files") or {}
    missing = sorted(set(on_host.get("checksum_problems") or {}) & set(files) if on_host.get("exists") else files)
    needed = sum(int(files[name].get("size") or 0) for name in missing)
    if not needed:
        return None
    return {
        "variable": "sglang_model_root",
        "what": f"the model's revision ({len(missing)} file(s) to send)",
        "path": settings["model_path"],
        "bytes": needed,
        **{key: on_host.get(key) for key in ("disk_path", "disk_free_bytes", "disk_device")},
    }


def model_source_problems(problems: HostProblems, settings: Mapping[str, Any], need: Mapping[str, Any] | None) -> None:
    """Both ways of naming the model set; for a fetched model, the room its missing files need where they go
    (`need`: model_room_need's)."""
    if settings.get("model_path_given") and settings.get("model_sourced"):
        problems.add(
            "host",
            "sglang_model_path",
            settings["model_path_given"],
            "set together with sglang_model, which derives the model directory itself",
            "remove sglang_model_path (or sglang_model, to keep managing the files by hand)",
        )
    free = need and need["disk_free_bytes"]
    if need and isinstance(free, int) and need["bytes"] > free:
        problems.add(
            "host",
            need["variable"],
            str(need["disk_path"] or need["path"]),
            f"{need['what']} needs {need['bytes'] / GIB:.1f} GiB more and the filesystem has {free / GIB:.1f} GiB free",
            "free space there, or set sglang_model_root to a filesystem with room (see sglang_model_keep_previous)",
        )


def model_access_problems(problems: HostProblems, settings: Mapping[str, Any], model: Mapping[str, Any]) -> None:
    """The model as the servers' account sees it: not hidden by the unit's sandbox, every file it opens readable."""
    path = settings["model_path"]
    if model.get("hidden_by"):
        problems.add(
            "host",
            "sglang_model_path",
            path,
            f"the servers cannot see it: their unit's {model['hidden_by']} (root can read it, the service cannot)",
            "move the model out of /home, /root, /run/user and /tmp, e.g. to /srv/models, and set sglang_model_path",
        )
        return
    unreadable = [str(line) for line in model.get("unreadable") or []]
    who = model.get("read_as") or "the service account"
    for line in unreadable[:UNREADABLE_SHOWN]:
        problems.add(
            "host",
            "sglang_model_path",
            path,
            f"{line}: the servers' account {who} cannot read it",
            "make it readable, e.g. chmod -R o+rX (or chgrp -R the servers' group and chmod -R g+rX) the model directory",
        )
    if len(unreadable) > UNREADABLE_SHOWN:
        problems.add(
            "host",
            "sglang_model_path",
            path,
            f"{len(unreadable) - UNREADABLE_SHOWN} more files or directories the servers' account {who} cannot read",
            "make the whole model directory readable to it",
        )


def model_code_problems(
    problems: HostProblems,
    support: Support,
    settings: Mapping[str, Any],
    model: Mapping[str, Any],
    instances: list[dict[str, Any]],
) -> None:
    """trust-remote-code with a model whose config.json names code of its own (auto_map) runs that code in every
    server and in preflight's parser check: only with the explicit opt-in sglang_allow_model_code."""
    if not model.get("auto_map") or truthy(settings.get("allow_model_code")):
        return
    for instance in instances:
        variable, value = _by_dest(support, instance).get("trust_remote_code", ("", None))
        if value is True or (isinstance(value, str) and truthy(value)):
            problems.add(
                f"instance {instance['name']}",
                variable,
                value,
                f"the model's config.json names code of its own (auto_map) that trust-remote-code would run in the "
                f"servers and in preflight's parser check ({settings['model_path']})",
                "read that code, then set sglang_allow_model_code: true; or remove trust-remote-code",
            )
            return


def _memory_fraction(instance: dict[str, Any], gpu_mib: int, auto_reserve_mib: int) -> tuple[float, str]:
    value = instance["settings"].get("mem-fraction-static")
    if value is not None:
        return float(value), "mem-fraction-static"
    return round((gpu_mib - auto_reserve_mib) / gpu_mib, 3), "SGLang's automatic mem-fraction-static (estimated)"


def memory_problems(
    problems: HostProblems,
    settings: Mapping[str, Any],
    facts: Mapping[str, Any],
    instances: list[dict[str, Any]],
) -> None:
    """Each instance's model (its `weight_bytes`) fits its GPUs; the host cache of every instance fits the host's RAM."""
    gpus = {gpu["index"]: gpu for gpu in facts.get("gpus") or []}
    margin = float(settings["memory_margin_gib"]) * GIB
    host_cache_bytes = 0.0
    for instance in instances:
        where = f"instance {instance['name']}"
        memories = [gpus[gpu]["memory_total_mib"] for gpu in instance["gpu_ids"] if gpu in gpus]
        if not memories:
            continue
        gpu_mib = min(memories)
        fraction, source = _memory_fraction(instance, gpu_mib, int(settings["auto_reserve_mib"]))
        if not 0 < fraction < 1:
            if source != "mem-fraction-static":  # a value given is reported by value_problems
                problems.add(
                    where,
                    f"{instance.get('settings_variable', 'sglang_server_args')}.mem-fraction-static",
                    fraction,
                    "must be between 0 and 1",
                    "use e.g. 0.85",
                )
            continue
        weight_bytes = int(instance.get("weight_bytes") or 0)
        # Tensor parallel splits every layer, pipeline parallel splits the layers: each GPU holds a share.
        weight_share = weight_bytes / instance["tensor_parallel_size"] / instance["pipeline_parallel_size"]
        available = gpu_mib * MIB * fraction
        needed = weight_share + margin
        if weight_bytes and needed > available:
            fits_fraction = math.ceil(needed / (gpu_mib * MIB) * 100) / 100
            tp_needed = math.ceil(weight_bytes / (available - margin)) if available > margin else None
            fixes = [f"mem-fraction-static >= {fits_fraction:.2f}" if fits_fraction < 0.98 else None]
            if tp_needed:
                fixes.append(f"tensor parallel >= {tp_needed}")
            problems.add(
                where,
                f"{instance.get('settings_variable', 'sglang_server_args')}.mem-fraction-static",
                fraction,
                f"weights {weight_bytes / GIB:.1f} GiB / tp {instance['tensor_parallel_size']} = {weight_share / GIB:.1f} GiB "
                f"+ {margin / GIB:.0f} GiB margin need {needed / GIB:.1f} GiB per GPU, but {gpu_mib / 1024:.1f} GiB x {fraction} "
                f"({source}) = {available / GIB:.1f} GiB: short by {(needed - available) / GIB:.1f} GiB",
                " or ".join(fix for fix in fixes if fix) or "use GPUs with more memory",
            )
        if instance["settings"].get("enable-hierarchical-cache"):
            size_gb = instance["settings"].get("hicache-size") or 0
            if size_gb:
                per_rank = float(size_gb) * 1e9
            else:
                ratio = float(instance["settings"].get("hicache-ratio") or 2.0)
                per_rank = ratio * max(0.0, available - weight_share)
            host_cache_bytes += per_rank * instance["ranks"]
    ram_mb = int(settings["host_memory_mb"] or facts.get("memtotal_mb") or 0)
    reserve = float(settings["host_ram_reserve_gib"]) * GIB
    usable = ram_mb * MIB - reserve
    if host_cache_bytes and host_cache_bytes > usable:
        host_size = settings["server_args"].get("hicache-size")
        # Name the instances whose own size differs from the host's, when overrides are what tip the sum.
        overridden = {
            instance["name"]: instance["settings"].get("hicache-size")
            for instance in instances
            if instance["settings"].get("enable-hierarchical-cache") and instance["settings"].get("hicache-size") != host_size
        }
        groups = sorted({str(i["group"]) for i in instances if i["name"] in overridden and i.get("group")})
        variable = "sglang_instance_overrides[].server_args.hicache-size" if overridden else "sglang_server_args.hicache-size"
        if groups:
            variable = f"sglang_instance_groups.{'|'.join(groups)}.server_args.hicache-size"
        problems.add(
            "host",
            variable,
            overridden or host_size,
            f"host cache {host_cache_bytes / 1e9:.0f} GB over all ranks exceeds host RAM {ram_mb / 1024:.0f} GiB "
            f"minus {settings['host_ram_reserve_gib']} GiB reserve = {usable / GIB:.0f} GiB",
            f"hicache-size <= {max(0, int(usable / 1e9 / max(1, sum(i['ranks'] for i in instances))))} GB per rank",
        )


def gpu_and_port_problems(
    problems: HostProblems, settings: Mapping[str, Any], facts: Mapping[str, Any], instances: list[dict[str, Any]]
) -> None:
    known = {gpu["index"] for gpu in facts.get("gpus") or []}
    # The fleet's own instances, planned or not: the deploy stops those it no longer plans, and those a reshape
    # displaces (module reshape), before anything starts on their GPUs and ports.
    own_units = {instance["name"] + ".service" for instance in instances} | set(fleet_gpus(facts))
    for instance in instances:
        where = f"instance {instance['name']}"
        for gpu in instance["gpu_ids"]:
            if gpu not in known:
                problems.add(
                    where,
                    "sglang_gpu_ids",
                    gpu,
                    f"GPU {gpu} does not exist (nvidia-smi lists {sorted(known)})",
                    "list existing GPU indexes",
                )
        for process in facts.get("gpu_processes") or []:
            if process.get("gpu_index") in instance["gpu_ids"] and process.get("unit") not in own_units:
                problems.add(
                    where,
                    "sglang_gpu_ids",
                    instance["gpu_ids"],
                    f"GPU {process['gpu_index']} holds {process.get('used_mib', '?')} MiB of PID {process['pid']} "
                    f"({process.get('name', '?')}, unit {process.get('unit') or 'none'})",
                    "stop that process (an orphaned scheduler?) or use other GPUs",
                )
    seen: dict[int, str] = {}
    listeners = {entry["port"]: entry for entry in facts.get("listening") or []}
    for instance in instances:
        for variable, port in (("sglang_port_base", instance["port"]), ("sglang_nccl_port_base", instance["nccl_port"])):
            where = f"instance {instance['name']}"
            if port > 65535:
                problems.add(where, variable, port, "port beyond 65535", "use a lower base")
            if port in seen:
                problems.add(
                    where, variable, port, f"port {port} is also {seen[port]}", "choose bases whose ranges do not overlap"
                )
            seen[port] = f"{instance['name']}'s {variable}"
            taken = listeners.get(port)
            if taken and taken.get("unit") not in own_units:
                problems.add(
                    where,
                    variable,
                    port,
                    port_taken(port, taken),
                    "stop that program or choose another base",
                )
    ids = list(settings["gpu_ids"] or [])
    duplicates = sorted({gpu for gpu in ids if ids.count(gpu) > 1})
    if duplicates:
        problems.add(
            "host", "sglang_gpu_ids", ids, f"GPU(s) {duplicates} listed twice would serve two instances", "list each GPU once"
        )
