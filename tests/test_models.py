"""Model specs: the shipped examples, file specs, config overrides, and every user mistake
as a one-line ModelSpecError (and exit 2 through the CLI, with nothing written)."""
from __future__ import annotations

import importlib.util
import sys
import textwrap

import pytest
import torch
from typer.testing import CliRunner

from autokernel.cli import app
from autokernel.models import (EXAMPLES, ModelSpecError, examples_dir, load_model, output_tensor,
                               parse_config_overrides, parse_input_shape)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_each_example_builds_and_runs(name):
    loaded = load_model(name, dtype=torch.float32, device="cpu", input_shape=[3, 10])
    (ids,) = loaded.make_inputs(1)
    vocab = loaded.model.config.vocab_size
    assert ids.dtype == torch.long and ids.shape == (3, 10)
    assert int(ids.min()) >= 0 and int(ids.max()) < vocab
    with torch.no_grad():
        logits = loaded.model(ids)
    assert logits.shape == (3, 10, vocab)
    assert torch.isfinite(logits).all()
    assert not loaded.model.training
    # same seed, same inputs; another seed, other inputs
    assert torch.equal(loaded.make_inputs(1)[0], ids)
    assert not torch.equal(loaded.make_inputs(2)[0], ids)


def test_example_in_bf16_and_config_overrides():
    loaded = load_model("llama", dtype=torch.bfloat16, device="cpu", input_shape="1x8",
                        config_overrides="dim=32,n_layers=1,n_heads=2,n_kv_heads=1,vocab_size=50")
    cfg = loaded.model.config
    assert (cfg.dim, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.vocab_size) == (32, 1, 2, 1, 50)
    assert len(loaded.model.layers) == 1
    assert all(p.dtype == torch.bfloat16 for p in loaded.model.parameters())
    with torch.no_grad():
        out = loaded.model(*loaded.make_inputs(0))
    assert out.dtype == torch.bfloat16 and out.shape == (1, 8, 50)
    assert "dim=32" in loaded.description and "1x8" in loaded.description


def test_llama_example_structure_is_findable():
    """The profiler and the integration look for these names."""
    from autokernel.models import import_model_file

    module = import_model_file(examples_dir() / "llama.py")
    model = module.Llama()
    classes = {type(m).__name__ for m in model.modules()}
    assert {"RMSNorm", "Attention", "MLP"} <= classes
    assert callable(module.apply_rotary) and callable(module.rotate_half)
    attn = model.layers[0].attn
    assert attn.n_kv_heads < attn.n_heads
    assert all(m.bias is None for m in model.modules() if isinstance(m, torch.nn.Linear))


def test_rmsnorm_has_hf_semantics():
    from autokernel.models import import_model_file

    module = import_model_file(examples_dir() / "llama.py")
    norm = module.RMSNorm(16, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(0.5, 1.5, 16))
    x = torch.randn(5, 16, dtype=torch.bfloat16)
    xf = x.float()
    expected = norm.weight.to(torch.bfloat16) * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(torch.bfloat16)
    assert torch.equal(norm.to(torch.bfloat16)(x), expected)


def test_gpt2_lm_head_is_tied():
    model = load_model("gpt2").model
    assert model.lm_head.weight is model.wte.weight


def test_file_spec_with_config_dataclass_and_kwargs(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text(textwrap.dedent("""
        from dataclasses import dataclass
        import torch
        from torch import nn

        @dataclass
        class Cfg:
            vocab: int = 40
            width: int = 8

        class Tok(nn.Module):
            def __init__(self, cfg: Cfg | None = None):
                super().__init__()
                cfg = cfg or Cfg()
                self.emb = nn.Embedding(cfg.vocab, cfg.width)
                self.out = nn.Linear(cfg.width, 3)
            def forward(self, ids):
                return self.out(self.emb(ids))

        class Dense(nn.Module):
            def __init__(self, width: int = 6, act: bool = True):
                super().__init__()
                self.lin = nn.Linear(width, width)
                self.act = act
            def forward(self, x):
                y = self.lin(x)
                return y.relu() if self.act else y
    """))
    tok = load_model(f"{path}:Tok", config_overrides={"vocab": "17"}, input_shape=[2, 5])
    assert tok.input_kind == "tokens" and tok.model.emb.num_embeddings == 17
    assert int(tok.make_inputs(0)[0].max()) < 17

    dense = load_model(f"{path}:Dense", input_shape="4x9", config_overrides="width=9,act=false")
    assert dense.input_kind == "float" and dense.model.lin.in_features == 9 and dense.model.act is False
    (x,) = dense.make_inputs(0)
    assert x.shape == (4, 9) and x.dtype == torch.float32


def test_kernelbench_model_file(tmp_path):
    path = tmp_path / "kb.py"
    path.write_text(textwrap.dedent("""
        import torch
        from torch import nn
        class Model(nn.Module):
            def __init__(self, n):
                super().__init__()
                self.n = n
            def forward(self, a, b):
                return torch.matmul(a, b)[:, : self.n]
        def get_inputs():
            return [torch.randn(8, 4), torch.randn(4, 6)]
        def get_init_inputs():
            return [5]
    """))
    loaded = load_model(str(path))  # the class name may be left out
    assert loaded.input_kind == "kernelbench" and loaded.model.n == 5
    a, b = loaded.make_inputs(3)
    assert a.shape == (8, 4) and b.shape == (4, 6)
    assert torch.equal(loaded.make_inputs(3)[0], a)


def test_parsers():
    assert parse_input_shape("1x1024") == [1, 1024]
    assert parse_input_shape("2,3,4") == [2, 3, 4]
    assert parse_input_shape(None) is None
    assert parse_config_overrides("a=1, b=x") == {"a": "1", "b": "x"}
    for bad in ("1xq", "0x4"):
        with pytest.raises(ModelSpecError):
            parse_input_shape(bad)
    with pytest.raises(ModelSpecError):
        parse_config_overrides("a")


def test_output_tensor():
    t = torch.ones(2)
    assert output_tensor(t) is t
    assert output_tensor((t, 1)) is t
    assert output_tensor({"x": 1, "y": t}) is t

    class Out:
        logits = t
    assert output_tensor(Out()) is t


BAD_FILES = {
    "broken.py": ("import torch\nraise RuntimeError('boom at import')\n", "Model", "RuntimeError: boom at import"),
    "syntax.py": ("def f(:\n", "Model", "SyntaxError"),
    "noclass.py": ("import torch\nclass Other(torch.nn.Module):\n    pass\n", "Model", "no 'Model'"),
    "notmodule.py": ("class Model:\n    pass\n", "Model", "not a torch.nn.Module"),
    "needsargs.py": ("import torch\nclass Model(torch.nn.Module):\n    def __init__(self, a, b):\n"
                     "        super().__init__()\n", "Model", "cannot give (a, b)"),
    "ctorfails.py": ("import torch\nclass Model(torch.nn.Module):\n    def __init__(self):\n"
                     "        super().__init__()\n        assert False, 'bad width'\n", "Model", "bad width"),
}


@pytest.mark.parametrize("file_name", sorted(BAD_FILES))
def test_bad_model_files(tmp_path, file_name):
    source, cls, message = BAD_FILES[file_name]
    path = tmp_path / file_name
    path.write_text(source)
    with pytest.raises(ModelSpecError) as info:
        load_model(f"{path}:{cls}")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_bad_specs_and_shapes(tmp_path):
    lin = tmp_path / "lin.py"
    lin.write_text("import torch\nclass Model(torch.nn.Module):\n    def __init__(self):\n"
                   "        super().__init__()\n        self.l = torch.nn.Linear(16, 8)\n"
                   "    def forward(self, x):\n        return self.l(x)\n")
    cases = [
        (dict(spec=str(tmp_path / "missing.py:M")), "not found"),
        (dict(spec="notamodel"), "unknown model"),
        (dict(spec=f"{lin}:Model", input_shape=[4, 10]), "does not fit"),
        (dict(spec=f"{lin}:Model"), "--input-shape"),
        (dict(spec=f"{lin}:Model", input_shape=[4, 16], config_overrides={"width": "3"}), "no setting 'width'"),
        (dict(spec="llama", input_shape=[2, 3, 4]), "BxS"),
        (dict(spec="llama", input_shape=[1, 5000]), "does not fit"),
        (dict(spec="llama", config_overrides={"nope": "1"}), "no field 'nope'"),
        (dict(spec="llama", config_overrides={"dim": "wide"}), "expected an integer"),
        (dict(spec="llama", config_overrides={"dim": "[64,64]"}), "expected an integer"),  # lists: hf: configs only
        (dict(spec="llama", config_overrides={"dim": "30", "n_heads": "4"}), "must split into 4 heads"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ModelSpecError) as info:
            load_model(**kwargs)
        assert message in str(info.value), (kwargs, str(info.value))
        assert "\n" not in str(info.value)


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers is not installed")
def test_null_switches_off_an_optional_float_setting():
    """Gemma-2's soft caps are floats (50, 30) that None switches off: ``null`` said "expected a number"."""
    small = "hidden_size=32,num_hidden_layers=1,num_attention_heads=2,num_key_value_heads=1,head_dim=16,intermediate_size=64"
    loaded = load_model("hf:gemma2", config_overrides=small + ",vocab_size=64,attn_logit_softcapping=null,"
                        "final_logit_softcapping=None", input_shape=[1, 4])
    config = loaded.model.model.config
    assert config.attn_logit_softcapping is None and config.final_logit_softcapping is None


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers is not installed")
def test_a_rejected_config_says_why_on_one_line():
    """transformers' config validation puts its reason on the line after "Class validation error
    for validator ...:", which alone was the message."""
    with pytest.raises(ModelSpecError) as info:
        load_model("hf:gemma2", config_overrides="hidden_size=64,num_hidden_layers=1,num_attention_heads=3,"
                   "num_key_value_heads=2,head_dim=16,intermediate_size=64,vocab_size=64", input_shape=[1, 4])
    assert "not a multiple of the number of attention heads (3)" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers is not installed")
def test_a_hugging_face_model_in_bf16_keeps_what_it_keeps_in_fp32():
    """Built in the dtype, as from_pretrained(dtype=...) builds it: RoPE's inv_freq stays fp32.  A
    .to(bf16) after building made it bf16, and the rotary tables of every bf16 run (a GPU run's
    default) were no rotary_table problem."""
    from autokernel.profiler import profile_model

    loaded = load_model("hf:llama", config_overrides="hidden_size=64,num_hidden_layers=1,num_attention_heads=2,"
                        "intermediate_size=64,vocab_size=64", input_shape=[1, 8], dtype=torch.bfloat16)
    inner = loaded.model.model.model
    assert inner.rotary_emb.inv_freq.dtype == torch.float32 and inner.layers[0].mlp.gate_proj.weight.dtype == torch.bfloat16
    plan = profile_model(loaded, warmup=0, iters=1)
    assert any(p.kind == "rotary_table" and p.dtype == "bf16" and p.supported for p in plan.problems)


def test_hf_spec_without_transformers(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` raises ImportError
    with pytest.raises(ModelSpecError) as info:
        load_model("hf:llama")
    assert "transformers" in str(info.value) and "\n" not in str(info.value)


def test_hf_spec_with_transformers():
    pytest.importorskip("transformers")
    loaded = load_model("hf:llama", input_shape=[1, 8], config_overrides=(
        "hidden_size=32,intermediate_size=64,num_hidden_layers=1,num_attention_heads=4,"
        "num_key_value_heads=2,vocab_size=64"))
    with torch.no_grad():
        assert loaded.model(*loaded.make_inputs(0)).shape == (1, 8, 64)
    with pytest.raises(ModelSpecError):
        load_model("hf:llama", config_overrides={"no_such_setting": "1"})


def test_hf_architecture_without_sdpa_is_built_with_its_own_attention():
    """gpt_oss refuses attn_implementation="sdpa"; the refusal marked the config as sdpa, so the
    plain retry was refused too and hf:gpt_oss could not be built at all."""
    pytest.importorskip("transformers")
    loaded = load_model("hf:gpt_oss", input_shape=[1, 8], config_overrides=(
        "hidden_size=32,intermediate_size=32,num_hidden_layers=1,num_attention_heads=4,num_key_value_heads=2,"
        "head_dim=8,vocab_size=64,num_local_experts=4"))
    with torch.no_grad():
        assert loaded.model(*loaded.make_inputs(0)).shape == (1, 8, 64)


def test_the_small_moe_vocabulary_keeps_the_padding_id_inside_it():
    """flex_olmo pads with id 100277; the small MoE default vocabulary (4096) must not leave it
    outside the embedding table (transformers refused to build the model)."""
    pytest.importorskip("transformers")
    loaded = load_model("hf:flex_olmo", input_shape=[1, 8], config_overrides="num_hidden_layers=1")
    assert "vocab_size=4096" in loaded.description
    with torch.no_grad():
        assert loaded.model(*loaded.make_inputs(0)).shape == (1, 8, 4096)


# ------------------------------------------------------------------ CLI: exit 2, one line
def _cli(args, cwd):
    return CliRunner().invoke(app, args, catch_exceptions=False)


@pytest.mark.parametrize("args,message", [
    (["--model", "{tmp}/missing.py:Model"], "not found"),
    (["--model", "{tmp}/broken.py:Model"], "could not import"),
    (["--model", "{tmp}/plain.py:NotAModule"], "not a torch.nn.Module"),
    (["--model", "llama", "--input-shape", "1x9999"], "does not fit"),
    (["--model", "llama", "--input-shape", "banana"], "malformed input shape"),
    (["--model", "llama", "--config", "dim"], "malformed config"),
    (["--model", "llama", "--dtype", "int3"], "unknown dtype"),
    (["--model", "llama", "--device", "tpu"], "unknown device"),
    (["--model", "hf:llama"], "transformers"),
])
def test_cli_bad_input_exits_2_with_one_line(tmp_path, monkeypatch, args, message):
    if "hf:llama" in args:
        monkeypatch.setitem(sys.modules, "transformers", None)  # as on a machine without it
    (tmp_path / "broken.py").write_text("raise ImportError('no such dependency')\n")
    (tmp_path / "plain.py").write_text("class NotAModule:\n    pass\n")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "plan.json"
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    result = _cli(["profile", *args, "--device", "cpu", "--out", str(out)] if "--device" not in args
                  else ["profile", *args, "--out", str(out)], tmp_path)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("autokernel: error:"), result.output
    assert message in lines[0]
    assert "Traceback" not in result.output
    assert not out.exists()


@pytest.mark.parametrize("arch,config", [("deepseek_v2", "num_experts_per_tok=2"), ("deepseek_v3", None)])
def test_the_small_moe_config_keeps_deepseek_buildable_and_with_experts(arch, config):
    """DeepSeek's attention has as many kv heads as query heads; the small MoE default's 4 of 8
    broke its forward ("input 1x8 does not fit"), and V3's first 3 dense layers left the 2 small
    layers without experts.  (V2's default config leaves num_experts_per_tok unset.)"""
    pytest.importorskip("transformers")
    loaded = load_model(f"hf:{arch}", input_shape=[1, 8], config_overrides=config)
    assert "num_key_value_heads=8" in loaded.description
    with torch.no_grad():
        assert loaded.model(*loaded.make_inputs(0)).shape == (1, 8, 4096)
    assert any(name.endswith("mlp.experts") for name, _ in loaded.model.named_modules())


@pytest.mark.parametrize("config,message", [
    ("num_local_experts=4,num_experts_per_tok=8", "num_experts_per_tok=8 experts a token is more than the 4 experts"),
    ("num_local_experts=1", "num_experts_per_tok=2 experts a token is more than the 1 experts"),
    ("num_local_experts=0", "num_local_experts=0"),
    ("num_experts_per_tok=0", "num_experts_per_tok=0"),
    ("hf:deepseek_v2", "num_experts_per_tok (experts a token) is not set"),  # its default config's gap
])
def test_an_moe_config_routing_more_experts_than_there_are_is_a_config_error(tmp_path, config, message):
    """Not 'input 1x8 does not fit hf:mixtral: ... selected index k out of range' from the forward."""
    pytest.importorskip("transformers")
    model, config = (config, "num_hidden_layers=2") if config.startswith("hf:") else ("hf:mixtral", config)
    result = _cli(["profile", "--model", model, "--device", "cpu", "--input-shape", "1x8", "--config", config,
                   "--out", str(tmp_path / "plan.json")], tmp_path)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"autokernel: error: {model} config") and message in lines[0]
    assert "does not fit" not in lines[0]


def test_a_config_with_per_layer_settings_gets_the_small_moe_default_not_a_traceback():
    """dots3_note's config raises (not AttributeError) on reading a per-layer setting such as
    num_attention_heads globally; `hasattr` let that through as a traceback."""
    transformers = pytest.importorskip("transformers")
    try:
        transformers.AutoConfig.for_model("dots3_note_text")
    except (ValueError, KeyError):
        pytest.skip("this transformers has no dots3_note_text")
    loaded = load_model("hf:dots3_note_text", input_shape=[1, 8], config_overrides="num_hidden_layers=2",
                        validate=False)
    assert "num_attention_heads=8, num_key_value_heads=8" in loaded.description
    assert any(name.endswith("mlp.experts") for name, _ in loaded.model.named_modules())


def test_profile_keeps_every_config_given_and_verify_rebuilds_with_it(tmp_path):
    """`profile --config n_layers=1 --config hidden_dim=96` kept only the last (the option took
    one value), and the plan did not record the config at all: `optimize --plan` then `verify`
    rebuilt the default model (a new user's hf:qwen3 at its real size was killed for memory; the
    LLaMA example verified the wrong model and passed)."""
    from autokernel.plan import load_plan
    from autokernel.verify import run_config

    out = tmp_path / "plan.json"
    result = _cli(["profile", "--model", "llama", "--device", "cpu", "--input-shape", "1x8", "--config", "n_layers=1",
                   "--config", "hidden_dim=96", "--iters", "1", "--warmup", "0", "--out", str(out)], tmp_path)
    assert result.exit_code == 0, result.output
    plan = load_plan(out)
    assert plan.config == {"n_layers": "1", "hidden_dim": "96"}
    assert run_config(tmp_path / "no-run-json", plan)["config"] == {"n_layers": "1", "hidden_dim": "96"}
    rebuilt = load_model(plan.model, config_overrides=run_config(tmp_path, plan)["config"], input_shape=[1, 8]).model
    down = [m for name, m in rebuilt.named_modules() if name.endswith(".down")]
    assert len(rebuilt.layers) == 1 and len(down) == 1 and down[0].in_features == 96


def test_a_model_too_large_for_the_memory_free_is_refused_with_the_way_out(tmp_path, monkeypatch):
    """A forgotten --config on a dense model (hf:qwen3's default is 8B parameters) grew to 23 GB
    and was killed for memory with no word.  The weights are counted on the meta device first."""
    pytest.importorskip("transformers")
    import autokernel.models as models_mod

    monkeypatch.setattr(models_mod, "free_memory_bytes", lambda device: 4 * 2**30)
    with pytest.raises(ModelSpecError) as info:
        load_model("hf:qwen3", input_shape=[1, 8])
    message = str(info.value)
    assert "B parameters" in message and "4.0 GiB free on cpu" in message and "--config" in message
    result = _cli(["profile", "--model", "hf:qwen3", "--device", "cpu", "--input-shape", "1x8",
                   "--out", str(tmp_path / "plan.json")], tmp_path)
    assert result.exit_code == 2 and "--config" in result.output and "Traceback" not in result.output
    small = load_model("hf:qwen3", config_overrides="hidden_size=64,num_hidden_layers=1,num_attention_heads=4,"
                       "num_key_value_heads=2,head_dim=16,intermediate_size=128,vocab_size=128", input_shape=[1, 8])
    assert small.model is not None


@pytest.mark.parametrize("arch", ["falcon", "qwen3", "gpt2", "t5"])
def test_the_size_refusals_config_builds_a_model(arch, monkeypatch):
    """New-user trial: hf:falcon's refusal suggested intermediate_size (FalconConfig has no such
    setting) and, once that was left out, the default 71 heads at hidden 512 (head_dim 7) failed
    to build.  The suggestion names the config's own settings, and it builds."""
    pytest.importorskip("transformers")
    import autokernel.models as models_mod

    monkeypatch.setattr(models_mod, "free_memory_bytes", lambda device: 2**20)
    with pytest.raises(ModelSpecError) as info:
        load_model(f"hf:{arch}", input_shape=[1, 8])
    hint = str(info.value).rsplit("e.g. ", 1)[1]
    monkeypatch.setattr(models_mod, "free_memory_bytes", lambda device: None)
    small = load_model(f"hf:{arch}", config_overrides=hint + ",vocab_size=128", input_shape=[1, 8])
    assert small.model is not None


def test_a_config_with_a_zero_size_or_sizes_that_disagree_is_named_not_a_traceback():
    """--config hidden_size=0 ended in a traceback from the profiler (cannot reshape a tensor of
    0 elements); a config whose sizes disagree was blamed on the input alone."""
    pytest.importorskip("transformers")
    base = "num_hidden_layers=1,num_attention_heads=4,num_key_value_heads=2,intermediate_size=128,vocab_size=128"
    with pytest.raises(ModelSpecError, match="empty weight .* every size must be positive"):
        load_model("hf:qwen3", config_overrides="hidden_size=0," + base, input_shape=[1, 8])
    with pytest.raises(ModelSpecError) as info:
        # 6 kv heads for 4 heads: named before the forward fails
        load_model("hf:qwen3", config_overrides="hidden_size=48,num_hidden_layers=1,num_attention_heads=4,"
                   "num_key_value_heads=6,intermediate_size=128,vocab_size=128", input_shape=[1, 8])
    assert "num_attention_heads=4 is not a multiple of num_key_value_heads=6:" in str(info.value)
    assert "\n" not in str(info.value)


def test_heads_that_the_default_kv_heads_do_not_divide_are_named():
    """hf:stablelm (32 kv heads by default) given --config num_attention_heads=8 failed in its first
    forward with "The size of tensor a (8) must match the size of tensor b (32)", blamed on the
    input and on "one of" the settings."""
    pytest.importorskip("transformers")
    with pytest.raises(ModelSpecError, match=r"num_attention_heads=8 is not a multiple of num_key_value_heads=32 "
                                             r"\(the default\).*e\.g\. num_key_value_heads=8"):
        load_model("hf:stablelm", config_overrides="hidden_size=64,num_hidden_layers=1,num_attention_heads=8,"
                   "intermediate_size=128,vocab_size=128", input_shape=[1, 8])
    small = load_model("hf:stablelm", config_overrides="hidden_size=64,num_hidden_layers=1,num_attention_heads=8,"
                       "num_key_value_heads=4,intermediate_size=128,vocab_size=128", input_shape=[1, 8])
    assert small.model.model.config.num_key_value_heads == 4


def test_no_heads_at_all_is_named_before_the_build():
    """New-user trial: hf:stablelm --config num_key_value_heads=0 (or num_attention_heads=0) said
    "building hf:stablelm failed: ZeroDivisionError: integer division or modulo by zero"."""
    pytest.importorskip("transformers")
    base = "hidden_size=64,num_hidden_layers=1,intermediate_size=128,vocab_size=128,"
    with pytest.raises(ModelSpecError, match=r"num_key_value_heads=0: attention needs at least one head"):
        load_model("hf:stablelm", config_overrides=base + "num_attention_heads=8,num_key_value_heads=0", validate=False)
    with pytest.raises(ModelSpecError, match=r"num_attention_heads=0: attention needs at least one head"):
        load_model("hf:stablelm", config_overrides=base + "num_attention_heads=0", validate=False)


def test_an_image_model_given_a_token_shape_says_which_shape_it_takes():
    """hf:vit --input-shape 2x32 failed with 'not enough values to unpack (expected 4, got 2)'."""
    pytest.importorskip("transformers")
    with pytest.raises(ModelSpecError, match=r"takes a float input of 4 dimensions \(e\.g\. 2x3x32x32"):
        load_model("hf:vit", config_overrides="hidden_size=64,num_hidden_layers=1,num_attention_heads=4,"
                   "intermediate_size=128,image_size=32,patch_size=8", input_shape=[2, 32])


def test_sizes_and_sequence_lengths_out_of_range_are_named():
    """A new user's `--config dim=-4` read "must split into 4 heads of even size", and hf:gpt2 at
    2000 tokens "IndexError: index out of range in self"."""
    with pytest.raises(ModelSpecError, match="dim must be positive, got -4"):
        load_model("llama", config_overrides="dim=-4")
    with pytest.raises(ModelSpecError, match="n_layer must be positive"):
        load_model("gpt2", config_overrides="n_layer=0")
    assert load_model("gpt2", config_overrides="bias=false,n_layer=1", input_shape=[1, 8]) is not None
    with pytest.raises(ModelSpecError, match=r"input 1x2000 does not fit gpt2: 2000 tokens are more than it has "
                                             r"positions for \(block_size=1024\); use --input-shape 1x1024"):
        load_model("gpt2", config_overrides="n_layer=1", input_shape=[1, 2000])
    if importlib.util.find_spec("transformers") is not None:
        with pytest.raises(ModelSpecError, match=r"n_positions=64"):
            load_model("hf:gpt2", config_overrides="n_layer=1,n_embd=32,n_head=2,n_positions=64,vocab_size=128",
                       input_shape=[1, 100])


def test_the_profile_table_says_what_its_shape_numbers_are():
    from autokernel.cli.profile_cmd import shape_legend
    from autokernel.plan import Plan, PlanProblem

    plan = Plan(model="m", device="cpu", time_kind="cpu", dtype="fp32", input_shape=[1, 8], total_time_us=1.0,
                problems=[PlanProblem("a", "attention", "fp32", [{"B": 1}], [1], 1.0, 0.5),
                          PlanProblem("l", "linear_gelu", "fp32", [{"M": 1}], [1], 1.0, 0.5)])
    assert shape_legend(plan) == ("shapes: attention BxHxHkvxSxDxcausal, linear_gelu MxNxKxtanh "
                                  "(`autokernel problems KIND` explains a kind)")


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers is not installed")
def test_hf_spec_suggests_close_names_and_a_small_vocabulary_keeps_its_special_tokens_inside(capfd):
    """New-user trial: hf:gemma_2 and hf:qwen2moe said only "unknown architecture"; GPT-2 with
    vocab_size=128 printed transformers' warnings about bos/eos 50256 on every build."""
    with pytest.raises(ModelSpecError, match="did you mean gemma2"):
        load_model("hf:gemma_2")
    with pytest.raises(ModelSpecError, match="did you mean qwen2_moe"):
        load_model("hf:qwen2moe")
    capfd.readouterr()
    loaded = load_model("hf:gpt2", config_overrides="n_layer=1,n_embd=64,n_head=2,vocab_size=128", input_shape=[1, 8],
                        dtype=torch.float32)
    config = loaded.model.model.config
    assert config.bos_token_id is None and config.eos_token_id is None
    assert "bos_token_id" not in capfd.readouterr().err
    kept = load_model("hf:gpt2", config_overrides="n_layer=1,n_embd=64,n_head=2,vocab_size=128,bos_token_id=3",
                      input_shape=[1, 8], dtype=torch.float32)
    assert kept.model.model.config.bos_token_id == 3  # what the user sets stays


def test_ctrl_c_in_profile_says_so(tmp_path, monkeypatch):
    """New-user trial: Ctrl-C during `profile` (and `bench`) exited 130 with nothing said."""
    import autokernel.profiler

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(autokernel.profiler, "profile_model", interrupted)
    result = _cli(["profile", "--model", "llama", "--input-shape", "1x8", "--out", str(tmp_path / "plan.json")], tmp_path)
    assert result.exit_code == 130 and "interrupted; no plan was written" in result.output
    assert not (tmp_path / "plan.json").exists()


def test_the_input_shape_example_fits_the_models_first_layer():
    """New-user trial: a ConvNet with no --input-shape was told "e.g. 8x512"."""
    from torch import nn

    from autokernel.models import float_input_example

    assert float_input_example(nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU())) == "8x3x32x32"
    assert float_input_example(nn.Sequential(nn.Linear(64, 10))) == "8x64"
    assert float_input_example(nn.Sequential(nn.LayerNorm(5))) == "8x512"


def test_an_architecture_with_several_head_classes_builds_without_named_architectures():
    """hf:deit failed with "building hf:deit failed: TypeError: 'NoneType' object is not iterable":
    transformers maps deit's image classification to two classes and picks one by
    ``config.architectures``, None on a config built from scratch."""
    pytest.importorskip("transformers")
    loaded = load_model("hf:deit", config_overrides="hidden_size=64,num_hidden_layers=1,num_attention_heads=4,"
                        "intermediate_size=128,image_size=32,patch_size=8")
    assert type(loaded.model.model).__name__ == "DeiTForImageClassification"


WHISPER = ("d_model=64,encoder_layers=1,decoder_layers=1,encoder_attention_heads=4,decoder_attention_heads=4,"
           "encoder_ffn_dim=128,decoder_ffn_dim=128,vocab_size=256,max_source_positions=32,max_target_positions=48")


def test_whisper_is_built_whole_and_fed_mel_features():
    """hf:whisper built WhisperForCausalLM, its decoder alone, fed token ids: a speech
    encoder-decoder takes log-mel features (as many frames as its encoder's positions hold, twice)
    and its decoder token ids of its own."""
    pytest.importorskip("transformers")
    from autokernel.models import SPEECH_DECODER_TOKENS

    loaded = load_model("hf:whisper", config_overrides=WHISPER)
    assert type(loaded.model.model).__name__ == "WhisperForConditionalGeneration"
    assert loaded.input_shape == [2, 80, 64] and loaded.input_kind == "float"
    tokens = min(48, SPEECH_DECODER_TOKENS)
    assert f"decoder fed {tokens} token ids" in loaded.description
    with torch.no_grad():
        logits = loaded.model(*loaded.make_inputs(0))
    assert logits.shape == (2, tokens, 256)
    with pytest.raises(ModelSpecError, match=r"takes a float input of 3 dimensions \(e\.g\. 2x80x64"):
        load_model("hf:whisper", config_overrides=WHISPER, input_shape=[2, 32])


def test_whisper_given_other_frames_says_which_config_takes_them():
    """A new user's trial: `--input-shape 2x80x128` on hf:whisper failed with transformers' own
    "expects the mel input features to be of length 3000" and no word of the config that takes 128."""
    pytest.importorskip("transformers")
    with pytest.raises(ModelSpecError, match=r"takes exactly 2 x max_source_positions = 64 frames; for 128 frames "
                                             r"give --config max_source_positions=64"):
        load_model("hf:whisper", config_overrides=WHISPER, input_shape=[2, 80, 128])
    with pytest.raises(ModelSpecError, match="an even number of frames"):
        load_model("hf:whisper", config_overrides=WHISPER, input_shape=[2, 80, 65])
    assert load_model("hf:whisper", config_overrides=WHISPER.replace("=32,max_target", "=64,max_target"),
                      input_shape=[2, 80, 128]).input_shape == [2, 80, 128]


def test_whispers_decoder_start_stays_inside_a_small_vocabulary(capfd):
    """New-user trial: `autokernel run --model hf:whisper --config ...,vocab_size=256` printed
    transformers' "Model config: decoder_start_token_id must be `None` or an integer within the
    vocabulary (between 0 and 255), got 50257" at every build (profile, verify, report): the
    default's decoder start lay outside the vocabulary the user made smaller."""
    pytest.importorskip("transformers")
    from transformers.utils import logging as hf_logging

    hf_logging.get_logger("transformers").warning_once.cache_clear()  # warned once a process
    capfd.readouterr()
    loaded = load_model("hf:whisper", config_overrides=WHISPER, validate=False)
    assert "within the vocabulary" not in capfd.readouterr().err
    assert loaded.model.model.config.decoder_start_token_id == 255
    kept = load_model("hf:whisper", config_overrides=WHISPER + ",decoder_start_token_id=7", validate=False)
    assert kept.model.model.config.decoder_start_token_id == 7  # what the user sets stays


def test_a_list_setting_is_given_in_brackets():
    """Swin's ``depths`` and ``num_heads`` are lists: ``--config depths=[2,2],num_heads=[2,4]``
    was split at every comma and refused as "malformed config override '2]'", and a bare
    ``depths=2`` reached transformers as the string "2"."""
    pytest.importorskip("transformers")
    assert parse_config_overrides("depths=[1,1],num_heads=[1, 2],image_size=32") == \
        {"depths": "[1,1]", "num_heads": "[1, 2]", "image_size": "32"}
    loaded = load_model("hf:swin", config_overrides="embed_dim=16,depths=[1,1],num_heads=[1,2],image_size=32,"
                        "window_size=4,patch_size=4")  # validate: one forward pass runs
    config = loaded.model.model.config
    assert config.depths == [1, 1] and config.num_heads == [1, 2] and loaded.input_shape == [2, 3, 32, 32]
    with pytest.raises(ModelSpecError, match=r"depths='2': expected a list in brackets, e\.g\. depths=\[2,2,6,2\]"):
        load_model("hf:swin", config_overrides="depths=2", validate=False)


def test_an_image_size_may_be_given_per_dimension():
    """New-user trial: ``--config image_size=[64,48]`` was refused ("expected an integer": the
    default is one int) although Swin and ViT take (height, width); the default input follows it."""
    pytest.importorskip("transformers")
    from autokernel.models import hf_default_input_shape

    loaded = load_model("hf:swin", config_overrides="embed_dim=16,depths=[1],num_heads=[1],image_size=[32,24],"
                        "window_size=4,patch_size=4", validate=False)
    assert loaded.model.model.config.image_size == [32, 24] and loaded.input_shape == [2, 3, 32, 24]
    assert hf_default_input_shape(type("C", (), {"image_size": (16, 8), "patch_size": 4})()) == [2, 3, 16, 8]
    with pytest.raises(ModelSpecError, match=r"image_size='\[32,b\]': item 'b': expected an integer"):
        load_model("hf:swin", config_overrides="image_size=[32,b]", validate=False)
    with pytest.raises(ModelSpecError, match=r"image_size=\[32, 24, 2\] is no image size: give one number or a height"):
        load_model("hf:swin", config_overrides="image_size=[32,24,2]", validate=False)  # was "does not take token ids"


def test_lists_that_go_together_are_named_when_their_lengths_differ():
    """New-user trial: `profile --model hf:swin --config ...,num_heads=[3,4]` (four stages by
    default) failed with "building hf:swin failed: IndexError: list index out of range" alone,
    and `depths=[2,2]` with the default four num_heads failed in the forward pass with a
    reshape's message: neither named the two lists of one item a stage."""
    pytest.importorskip("transformers")
    small = "embed_dim=32,image_size=64,window_size=4,patch_size=4"
    with pytest.raises(ModelSpecError, match=r"IndexError.*num_heads has 2 item\(s\) but depths=\[2,2,6,2\] "
                                             r"\(the default\) has 4"):
        load_model("hf:swin", config_overrides=small + ",num_heads=[3,4]", validate=False)
    with pytest.raises(ModelSpecError, match=r"depths has 3 item\(s\) but num_heads=\[2,4\] has 2"):
        load_model("hf:swin", config_overrides=small + ",depths=[2,2,2],num_heads=[2,4]", validate=False)
    with pytest.raises(ModelSpecError, match=r"does not fit hf:swin .*depths has 2 item\(s\) but "
                                             r"num_heads=\[3,6,12,24\] \(the default\) has 4.*forward pass failed"):
        load_model("hf:swin", config_overrides=small + ",depths=[2,2]")


def test_a_malformed_list_is_named_whole():
    """New-user trial: hf:swin --config depths=[2,2]] said "config depths='2]': expected an
    integer", and depths=[a,b] "config depths='a': expected an integer": an item, not the list."""
    pytest.importorskip("transformers")
    with pytest.raises(ModelSpecError, match=r"config depths='\[2,2\]\]': expected one list in brackets, "
                                             r"e\.g\. depths=\[2,2,6,2\]"):
        load_model("hf:swin", config_overrides="depths=[2,2]]", validate=False)
    with pytest.raises(ModelSpecError, match=r"config depths='\[2,a\]': item 'a': expected an integer"):
        load_model("hf:swin", config_overrides="depths=[2,a]", validate=False)


def test_a_json_object_in_braces_sets_a_dict_setting():
    """New-user trial: hf:llama --config 'rope_scaling={"rope_type":"linear","factor":2.0}' was
    split at its comma and refused as "malformed config override '"factor":2.0}'"; given alone
    it reached transformers as a string and failed its validation."""
    pytest.importorskip("transformers")
    rope = 'rope_scaling={"rope_type":"linear","factor":2.0}'
    assert parse_config_overrides(f"vocab_size=128,{rope},hidden_size=64") == \
        {"vocab_size": "128", "rope_scaling": '{"rope_type":"linear","factor":2.0}', "hidden_size": "64"}
    loaded = load_model("hf:llama", config_overrides=f"hidden_size=64,num_hidden_layers=1,num_attention_heads=2,"
                        f"intermediate_size=128,vocab_size=128,{rope}", input_shape=[1, 8])
    config = loaded.model.model.config
    scaling = getattr(config, "rope_parameters", None) or config.rope_scaling
    assert scaling["rope_type"] == "linear" and scaling["factor"] == 2.0
    with pytest.raises(ModelSpecError, match=r"rope_scaling='linear': expected a JSON object in braces"):
        load_model("hf:llama", config_overrides="rope_scaling=linear", validate=False)


def test_a_json_object_in_braces_sets_a_nested_config():
    """hf:dbrx does not build from its default config on transformers 5.25 (its attention config
    lacks ``rope_theta``; the forward clamps by ``clip_qkv``, None by default), and the way round,
    ``--config 'attn_config={"rope_theta":10000,"clip_qkv":8}'``, reached transformers as a
    string: the setting's default is a config object, not a dict, so the braces were not read."""
    pytest.importorskip("transformers")
    attn = 'attn_config={"rope_theta":10000.0,"clip_qkv":8.0}'
    ffn = 'ffn_config={"ffn_hidden_size":64,"moe_num_experts":4,"moe_top_k":2}'
    loaded = load_model("hf:dbrx", config_overrides=f"d_model=32,n_heads=2,n_layers=1,max_seq_len=64,"
                        f"vocab_size=128,{attn},{ffn}", input_shape=[1, 8])
    config = loaded.model.model.config
    assert config.attn_config.rope_theta == 10000.0 and config.attn_config.clip_qkv == 8.0
    assert config.ffn_config.moe_num_experts == 4


def test_hf_dbrx_builds_without_its_attention_settings_and_says_what_was_filled():
    """hf:dbrx failed to build unless --config gave ``attn_config={"rope_theta":...,"clip_qkv":...}``
    (transformers 5.17 and 5.25: ``DbrxAttention`` reads ``rope_theta``, which its config class
    lacks, and clamps by ``clip_qkv``, None by default).  Both are filled and the description says
    so; a value the user gives wins."""
    pytest.importorskip("transformers")
    small = 'd_model=32,n_heads=2,n_layers=1,vocab_size=128,ffn_config={"ffn_hidden_size":32}'
    loaded = load_model("hf:dbrx", config_overrides=small, input_shape=[1, 8])
    attn = loaded.model.model.config.attn_config
    assert attn.rope_theta == 10000.0 and attn.clip_qkv == 8.0
    assert "filled in: attn_config.rope_theta=10000.0" in loaded.description
    assert "attn_config.clip_qkv=8.0" in loaded.description
    mine = load_model("hf:dbrx", config_overrides=small + ',attn_config={"clip_qkv":4}', input_shape=[1, 8])
    assert mine.model.model.config.attn_config.clip_qkv == 4
    assert "clip_qkv=8" not in mine.description and "attn_config.rope_theta=10000.0" in mine.description


def test_a_setting_the_config_lacks_suggests_close_names():
    """New-user trial: hf:swin --config num_head=[2,4] (or Depths=[2,2]) said only "SwinConfig has
    no setting 'num_head'"."""
    pytest.importorskip("transformers")
    with pytest.raises(ModelSpecError, match=r"no setting 'num_head'; did you mean num_heads\?"):
        load_model("hf:swin", config_overrides="num_head=[2,4]", validate=False)
    with pytest.raises(ModelSpecError, match=r"no setting 'Depths'; did you mean depths\?"):
        load_model("hf:swin", config_overrides="Depths=[2,2]", validate=False)
    with pytest.raises(ModelSpecError, match=r"no setting 'bogus'$"):
        load_model("hf:swin", config_overrides="bogus=3", validate=False)


def test_the_default_configs_own_warnings_are_not_shown(capfd):
    """hf:starcoder2's default config has bos and eos 50256 outside its 49152-token vocabulary:
    reading it (to type the --config values) printed two "Model config: bos_token_id must be
    `None` or an integer within the vocabulary (between 0 and 49151)" warnings at every build,
    though the user's vocabulary was 256 and the model built from it had no such ids."""
    pytest.importorskip("transformers")
    loaded = load_model("hf:starcoder2", config_overrides="hidden_size=32,num_hidden_layers=1,num_attention_heads=2,"
                        "num_key_value_heads=1,intermediate_size=64,vocab_size=256", input_shape=[1, 8])
    assert loaded.model.model.config.bos_token_id is None
    err = capfd.readouterr().err
    assert "must be `None` or an integer within the vocabulary" not in err, err


def test_a_list_written_with_spaces_resumes_the_same_run():
    """New-user trial: `run --model hf:swin --config "depths=[2, 2],..."` on the workdir of a run made
    with `depths=[2,2]` was refused: "already holds a run ... with other settings (config depths
    '[2,2]' -> '[2, 2]')"."""
    from autokernel.pipeline import _run_differences

    saved = {"model": "hf:swin", "dtype": "fp32", "input_shape": [2, 3, 64, 64],
             "config": {"depths": "[2,2]", "rope_scaling": '{"rope_type":"linear","factor":2.0}', "embed_dim": "32"}}
    same = dict(saved, config={"depths": "[2, 2]", "rope_scaling": '{"rope_type": "linear", "factor": 2.0}',
                               "embed_dim": "32"})
    assert _run_differences(saved, same) == []
    other = dict(saved, config=dict(saved["config"], depths="[2, 4]"))
    assert _run_differences(saved, other) == ["config depths '[2,2]' -> '[2, 4]'"]
