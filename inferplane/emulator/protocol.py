"""SGLang 0.5.23's request contract and response shapes (native ``/generate`` and OpenAI).

``/generate`` bodies are checked like ``sglang.api.v1.GenerateRequest``: unknown top-level keys are
ignored, ``sampling_params`` is a closed struct (an unknown key is a 400 with serde's
``unknown field `x`, expected one of ...`` text), and types are checked with serde's wording. Then
the tokenizer manager's semantic checks apply (text or input_ids, sampling ranges, context length).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from inferplane.emulator import tokenizer
from inferplane.emulator.engine import IMAGE_TOKENS, Bootstrap, Request
from inferplane.emulator.model import Sampling


class ContractError(ValueError):
    """The body violates the JSON contract: 400 ``{"error": "<message>"}``."""


class RequestError(ValueError):
    """The request is well-formed but invalid: 400 ``{"error": {"message": ...}}``."""


SAMPLING_FIELDS = (
    "max_new_tokens",
    "stop",
    "stop_token_ids",
    "stop_regex",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "frequency_penalty",
    "presence_penalty",
    "repetition_penalty",
    "min_new_tokens",
    "n",
    "json_schema",
    "regex",
    "ebnf",
    "structural_tag",
    "ignore_eos",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "no_stop_trim",
    "stream_interval",
    "logit_bias",
    "sampling_seed",
    "custom_params",
    "beam_width",
    "watermark",
    "choice",
)
_INT = ("max_new_tokens", "top_k", "min_new_tokens", "n", "stream_interval", "sampling_seed", "beam_width")
_FLOAT = ("temperature", "top_p", "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty")
_BOOL = ("ignore_eos", "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim")
_STR = ("json_schema", "regex", "ebnf", "structural_tag")
_WATERMARK_FIELDS = ("enabled", "key", "context_window")


def _unexpected(v: Any) -> str:
    """serde's ``Unexpected`` wording, so messages match the Rust-generated contract."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"boolean `{'true' if v else 'false'}`"
    if isinstance(v, int):
        return f"integer `{v}`"
    if isinstance(v, float):
        return f"floating point `{v}`"
    if isinstance(v, str):
        return f'string "{v}"'
    if isinstance(v, list):
        return "sequence"
    if isinstance(v, dict):
        return "map"
    return type(v).__name__


def _invalid(v: Any, expected: str) -> ContractError:
    return ContractError(f"invalid type: {_unexpected(v)}, expected {expected}")


def _unknown(key: str, known: tuple[str, ...]) -> ContractError:
    listed = ", ".join(f"`{f}`" for f in known)
    return ContractError(f"unknown field `{key}`, expected one of {listed}")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _check_string_or_list(v: Any, what: str) -> None:
    if isinstance(v, list):
        for e in v:
            if e is not None and not isinstance(e, str):
                raise _invalid(e, "a string")
    elif not isinstance(v, str):
        raise _invalid(v, f"a value or an array of values for {what}")


def _check_int_or_list(v: Any, what: str) -> None:
    if isinstance(v, list):
        for e in v:
            if e is not None and not _is_int(e):
                raise _invalid(e, "i64")
    elif not _is_int(v):
        raise _invalid(v, f"a value or an array of values for {what}")


def check_sampling_params(value: Any) -> None:
    if not isinstance(value, dict):
        raise _invalid(value, "struct SamplingParams")
    for key, x in value.items():
        if key not in SAMPLING_FIELDS:
            raise _unknown(key, SAMPLING_FIELDS)
        if x is None or key == "custom_params":
            continue
        if key in _INT and not _is_int(x):
            raise _invalid(x, "i64")
        if key in _FLOAT and not _is_number(x):
            raise _invalid(x, "f64")
        if key in _BOOL and not isinstance(x, bool):
            raise _invalid(x, "a boolean")
        if key in _STR and not isinstance(x, str):
            raise _invalid(x, "a string")
        if key in ("stop", "stop_regex"):
            _check_string_or_list(x, "StringOrList")
        if key == "stop_token_ids" and (not isinstance(x, list) or not all(_is_int(e) for e in x)):
            raise _invalid(x, "a sequence")
        if key == "logit_bias":
            if not isinstance(x, dict):
                raise _invalid(x, "a map")
            for e in x.values():
                if not _is_number(e):
                    raise _invalid(e, "f64")
        if key == "choice" and (not isinstance(x, list) or not all(isinstance(e, str) for e in x)):
            raise _invalid(x, "a sequence")
        if key == "watermark":
            if not isinstance(x, dict):
                raise _invalid(x, "struct WatermarkRequestConfig")
            for wk in x:
                if wk not in _WATERMARK_FIELDS:
                    raise ContractError(f"unknown field `{wk}`, expected one of {', '.join(f'`{f}`' for f in _WATERMARK_FIELDS)}")


def check_generate_contract(body: Any) -> None:
    """Raise ContractError as SGLang 0.5.23's ``generate_contract_error`` would."""
    if not isinstance(body, dict):
        raise _invalid(body, "struct GenerateRequest")
    for key, x in body.items():
        if x is None:
            continue
        if key in ("rid", "text"):
            _check_string_or_list(x, "StringOrList")
        elif key in ("input_ids", "token_ids_logprob"):
            if not isinstance(x, list):
                raise _invalid(x, "a value or an array of values for TokenIdsOrList")
            rows = x if x and not _is_number(x[0]) else [x]
            for row in rows:
                if not isinstance(row, list):
                    raise _invalid(row, "a sequence")
                for e in row:
                    if not _is_int(e):
                        raise _invalid(e, "i64")
        elif key in ("stream", "return_text_in_logprobs", "return_prompt_token_ids"):
            if not isinstance(x, bool):
                raise _invalid(x, "a boolean")
        elif key == "sampling_params":
            for sp in x if isinstance(x, list) else [x]:
                check_sampling_params(sp)
        elif key in ("return_logprob", "return_hidden_states"):
            if isinstance(x, list):
                if not all(isinstance(e, bool) for e in x):
                    raise _invalid(x, "a sequence of booleans")
            elif not isinstance(x, bool):
                raise _invalid(x, "a value or an array of values for BoolOrList")
        elif key == "bootstrap_host":
            _check_string_or_list(x, "OptionalStringOrList")
        elif key in ("bootstrap_port", "bootstrap_room", "decode_tp_size", "logprob_start_len", "top_logprobs_num"):
            _check_int_or_list(x, "OptionalInt64OrList")
        elif key in ("routed_dp_rank", "disagg_prefill_dp_rank", "priority", "max_thinking_tokens") and not _is_int(x):
            raise _invalid(x, "i64")


def to_sampling(params: dict[str, Any] | None, default_max_new_tokens: int | None = 128) -> Sampling:
    """SamplingParams with SGLang's defaults, then ``SamplingParams.verify``'s range checks."""
    p = {k: v for k, v in (params or {}).items() if v is not None}
    stop = p.get("stop", ())
    constraint = next((str(p[k]) for k in _STR if p.get(k) is not None), None)
    max_new = p.get("max_new_tokens", default_max_new_tokens)
    s = Sampling(
        max_new_tokens=-1 if max_new is None else int(max_new),
        min_new_tokens=int(p.get("min_new_tokens", 0)),
        temperature=float(p.get("temperature", 1.0)),
        top_p=float(p.get("top_p", 1.0)),
        top_k=int(p.get("top_k", 1 << 30)),
        min_p=float(p.get("min_p", 0.0)),
        frequency_penalty=float(p.get("frequency_penalty", 0.0)),
        presence_penalty=float(p.get("presence_penalty", 0.0)),
        repetition_penalty=float(p.get("repetition_penalty", 1.0)),
        stop=(stop,) if isinstance(stop, str) else tuple(stop),
        stop_token_ids=tuple(p.get("stop_token_ids", ())),
        ignore_eos=bool(p.get("ignore_eos", False)),
        sampling_seed=p.get("sampling_seed"),
        constraint=constraint,
        logit_bias=tuple(sorted((str(k), float(v)) for k, v in p.get("logit_bias", {}).items())),
    )
    if s.temperature < 0.0:
        raise RequestError(f"temperature must be a non-negative finite number, got {s.temperature}.")
    if not 0.0 < s.top_p <= 1.0:
        raise RequestError(f"top_p must be in (0, 1], got {s.top_p}.")
    if not 0.0 <= s.min_p <= 1.0:
        raise RequestError(f"min_p must be in [0, 1], got {s.min_p}.")
    if s.top_k < 1 and s.top_k != -1:
        raise RequestError(f"top_k must be -1 (disable) or at least 1, got {s.top_k}.")
    for name in ("frequency_penalty", "presence_penalty"):
        if not -2.0 <= getattr(s, name) <= 2.0:
            raise RequestError(f"{name} must be in [-2, 2], got {getattr(s, name)}.")
    if not 0.0 < s.repetition_penalty <= 2.0:
        raise RequestError(f"repetition_penalty must be in (0, 2] (1.0 = no penalty), got {s.repetition_penalty}.")
    if s.min_new_tokens < 0:
        raise RequestError(f"min_new_tokens must be in [0, max_new_tokens], got {s.min_new_tokens}.")
    if max_new is not None:
        if s.max_new_tokens < 0:
            raise RequestError(f"max_new_tokens must be at least 0, got {s.max_new_tokens}.")
        if s.min_new_tokens > s.max_new_tokens:
            raise RequestError(f"min_new_tokens must be in [0, max_new_tokens({s.max_new_tokens})], got {s.min_new_tokens}.")
    if sum(k in p for k in _STR) > 1:
        raise RequestError("Only one of json_schema, regex, ebnf, or structural_tag can be set.")
    return s


@dataclass(frozen=True)
class Limits:
    context_length: int


def apply_context_length(s: Sampling, prompt_tokens: int, limits: Limits) -> Sampling:
    """The tokenizer manager's length checks; an unset ``max_new_tokens`` runs to the context end."""
    if prompt_tokens >= limits.context_length:
        raise RequestError(
            f"The input ({prompt_tokens} tokens) is longer than the model's context length ({limits.context_length} tokens)."
        )
    if s.max_new_tokens < 0:
        return replace(s, max_new_tokens=limits.context_length - prompt_tokens)
    if s.max_new_tokens + prompt_tokens > limits.context_length:
        raise RequestError(
            f"Requested token count exceeds the model's maximum context length of {limits.context_length} tokens. "
            f"You requested a total of {s.max_new_tokens + prompt_tokens} tokens: {prompt_tokens} tokens from the input "
            f"messages and {s.max_new_tokens} tokens for the completion. Please reduce the number of tokens in the input "
            "messages or the completion to fit within the limit."
        )
    return s


def _nth(value: Any, i: int, batch: bool) -> Any:
    return value[i] if batch and isinstance(value, list) else value


def _images(body: dict[str, Any]) -> list[str]:
    data = body.get("image_data")
    if data is None:
        return []
    items = data if isinstance(data, list) else [data]
    return [str(item.get("url", item)) if isinstance(item, dict) else str(item) for item in items]


def prompt_ids(text: str | None, ids: list[int] | None, images: list[str]) -> list[int]:
    out = list(ids) if ids is not None else tokenizer.encode(text or "")
    for image in images:
        out += tokenizer.image_placeholder_ids(image, IMAGE_TOKENS)
    return out


def generate_requests(body: dict[str, Any], new_rid: Any, limits: Limits) -> tuple[list[Request], bool]:
    """The requests a checked ``/generate`` body asks for, and whether it was a batch."""
    text, ids = body.get("text"), body.get("input_ids")
    if text is None and ids is None:
        raise RequestError("Either text, input_ids or input_embeds should be provided.")
    if text is not None:
        batch = isinstance(text, list)
        prompts: list[tuple[str | None, list[int] | None]] = [(t, None) for t in text] if batch else [(text, None)]
    else:
        assert ids is not None
        batch = bool(ids) and isinstance(ids[0], list)
        prompts = [(None, row) for row in ids] if batch else [(None, ids)]
    if batch and not prompts:
        raise RequestError("The batch is empty: text or input_ids is an empty list.")
    sp = body.get("sampling_params")
    if isinstance(sp, list) and len(sp) != len(prompts):
        raise RequestError(f"sampling_params has {len(sp)} entries for a batch of {len(prompts)}.")
    rids = body.get("rid")
    images = _images(body)
    requests: list[Request] = []
    for i, (t, row) in enumerate(prompts):
        params = sp[i] if isinstance(sp, list) else sp
        sampling = to_sampling(params)
        n = int((params or {}).get("n") or 1)
        pids = prompt_ids(t, row, images)
        sampling = apply_context_length(sampling, len(pids), limits)
        rid = _nth(rids, i, batch) if rids is not None else None
        bootstrap = Bootstrap(
            host=_nth(body.get("bootstrap_host"), i, batch),
            port=_nth(body.get("bootstrap_port"), i, batch),
            room=_nth(body.get("bootstrap_room"), i, batch),
        )
        for j in range(n):
            requests.append(
                Request(
                    rid=(str(rid) if n == 1 else f"{rid}-{j}") if rid is not None else new_rid(),
                    prompt_ids=pids,
                    sampling=sampling,
                    stream=bool(body.get("stream")),
                    bootstrap=bootstrap,
                    images=images,
                    sample_index=j if n > 1 else 0,
                    log_metrics=body.get("log_metrics", True) is not False,
                )
            )
    return requests, batch or len(requests) > 1


def meta_info(req: Request, weight_version: str) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "id": req.rid,
        "finish_reason": req.finish_reason,
        "prompt_tokens": req.prompt_tokens,
        "weight_version": weight_version,
        "num_retractions": 0,
        "reasoning_tokens": 0,
        "completion_tokens": req.completion_tokens,
        "cached_tokens": req.cached_tokens,
        "request_received_ts": req.created,
    }
    if req.first_token_at is not None:
        meta["first_token_latency"] = req.first_token_at - req.started
    if req.finish_reason is not None:
        meta["request_finished_ts"] = time.time()
        meta["e2e_latency"] = req.e2e_latency()
    return meta


def generate_output(req: Request, weight_version: str, index: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"text": req.text, "output_ids": list(req.output_ids), "meta_info": meta_info(req, weight_version)}
    if index is not None:
        out["index"] = index
    return out


def abort_status(req: Request) -> int | None:
    """The HTTP status a non-streaming abort turns into (None: a normal 200 with an abort reason)."""
    fr = req.finish_reason or {}
    code = fr.get("status_code")
    if fr.get("type") == "abort" and isinstance(code, int) and 400 <= code < 600:
        return code
    return None


def error_body(status: int, message: str) -> dict[str, Any]:
    """SGLang's error bodies: ValueError -> ``{"error": {"message"}}``; HTTPException -> ErrorResponse."""
    if status == 400:
        return {"error": {"message": message}}
    return http_exception_body(status, message)


def http_exception_body(status: int, message: str) -> dict[str, Any]:
    """What SGLang's HTTPException handler answers: an OpenAI ErrorResponse typed by the status."""
    return {"object": "error", "message": message, "type": str(status), "param": None, "code": status}


def openai_error(message: str, status: int = 400, err_type: str = "BadRequestError") -> dict[str, Any]:
    return {"object": "error", "message": message, "type": err_type, "param": None, "code": status}


# -- OpenAI ------------------------------------------------------------------------------------------


def openai_finish(req: Request) -> tuple[str | None, Any]:
    fr = req.finish_reason
    if fr is None:
        return None, None
    if fr["type"] == "stop":
        return "stop", fr.get("matched")
    return fr["type"], None


def usage(reqs: list[Request]) -> dict[str, Any]:
    prompt = reqs[0].prompt_tokens if reqs else 0
    completion = sum(r.completion_tokens for r in reqs)
    return {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": None,
        "reasoning_tokens": 0,
        "completion_tokens_details": None,
    }


def openai_sampling(body: dict[str, Any], default_max_tokens: int | None) -> dict[str, Any]:
    """OpenAI request fields -> SGLang sampling params (serving_chat / serving_completions)."""
    mapping = {
        "temperature": "temperature",
        "top_p": "top_p",
        "top_k": "top_k",
        "min_p": "min_p",
        "frequency_penalty": "frequency_penalty",
        "presence_penalty": "presence_penalty",
        "repetition_penalty": "repetition_penalty",
        "stop": "stop",
        "stop_token_ids": "stop_token_ids",
        "ignore_eos": "ignore_eos",
        "seed": "sampling_seed",
        "min_tokens": "min_new_tokens",
        "regex": "regex",
        "ebnf": "ebnf",
        "logit_bias": "logit_bias",
    }
    params = {dst: body[src] for src, dst in mapping.items() if body.get(src) is not None}
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    params["max_new_tokens"] = max_tokens if max_tokens is not None else default_max_tokens
    for key, value in params.items():
        if key in _INT and value is not None and not _is_int(value):
            raise RequestError(f"{key}: expected an integer, got {value!r}")
        if key in _FLOAT and not _is_number(value):
            raise RequestError(f"{key}: expected a number, got {value!r}")
    return params


def check_openai_common(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise RequestError("The request body must be a JSON object.")
    n = body.get("n", 1)
    if not _is_int(n) or n < 1:
        raise RequestError(f"n: expected a positive integer, got {n!r}")
    if "stream" in body and body["stream"] is not None and not isinstance(body["stream"], bool):
        raise RequestError(f"stream: expected a boolean, got {body['stream']!r}")
    return body
