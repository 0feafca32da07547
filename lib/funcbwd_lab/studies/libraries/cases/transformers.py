"""transformers 5.25.0: models built from small configs (no weights, no network), called on
``inputs_embeds`` as functions, and a classifier's per-sample gradients."""

from __future__ import annotations

import torch

from funcbwd_lab.studies.libraries.case import randint, randn
from funcbwd_lab.studies.libraries.cases import lib, module_fn

L = "transformers"
H = 8  # hidden size


def T():
    return lib("transformers")


def tests(model: str) -> str:
    return f"huggingface/transformers: tests/models/{model}/test_modeling_{model}.py"


def embeds(g):
    return (randn(g, 4, H),)


def _model(config_cls: str, model_cls: str, **config):
    def make():
        t = T()
        cfg = getattr(t, config_cls)(**config)
        cfg._attn_implementation = "eager"
        return getattr(t, model_cls)(cfg).eval()
    return make


def on_embeds(name: str, config_cls: str, model_cls: str, model: str, **kw):
    config = kw.pop("config")
    return module_fn(f"transformers.{model_cls}", L,
                     f"{model_cls}({config_cls}(...))(inputs_embeds=x).last_hidden_state",
                     tests(model), _model(config_cls, model_cls, **config), embeds,
                     call_with=lambda m: (lambda x: m(inputs_embeds=x[None]).last_hidden_state[0]),
                     **kw)


SMALL = dict(hidden_size=H, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16,
             vocab_size=20)


def _bert_classifier():
    t = T()
    cfg = t.BertConfig(**SMALL, num_labels=10, hidden_dropout_prob=0.0,
                       attention_probs_dropout_prob=0.0, max_position_embeddings=16)
    cfg._attn_implementation = "eager"
    return t.BertForSequenceClassification(cfg).train()


CASES = [
    on_embeds("gpt2", "GPT2Config", "GPT2Model", "gpt2",
              config=dict(n_embd=H, n_layer=1, n_head=2, vocab_size=20, n_positions=16,
                          resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0), group="control"),
    on_embeds("bert", "BertConfig", "BertModel", "bert",
              config=dict(SMALL, max_position_embeddings=16), group="control"),
    on_embeds("llama", "LlamaConfig", "LlamaModel", "llama",
              config=dict(SMALL, num_key_value_heads=2, max_position_embeddings=16)),
    on_embeds("rwkv", "RwkvConfig", "RwkvModel", "rwkv",
              config=dict(hidden_size=H, num_hidden_layers=2, attention_hidden_size=H,
                          intermediate_size=16, vocab_size=20, context_length=16),
              what="recurrent step on CPU: writes each step into a zeros_like output"),
    on_embeds("mamba", "MambaConfig", "MambaModel", "mamba",
              config=dict(hidden_size=H, state_size=4, num_hidden_layers=1, vocab_size=20,
                          expand=2, conv_kernel=2),
              what="the selective scan's slow (CPU) path"),
    on_embeds("t5", "T5Config", "T5EncoderModel", "t5",
              config=dict(d_model=H, d_kv=4, d_ff=16, num_layers=1, num_heads=2,
                          vocab_size=20, dropout_rate=0.0)),
    module_fn("transformers.BertForSequenceClassification", L,
              "BertForSequenceClassification(BertConfig(...)).train()", tests("bert"),
              _bert_classifier, lambda g: (randint(g, 20, 5), randint(g, 10)), kind="model",
              what="per-sample gradients of a transformer from a config"),
]
