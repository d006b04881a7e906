"""parse_config and format_config as tables (the unit part; avsmd -T and -t are black-box tests elsewhere)."""

import pytest

import avsm


README_CONFIG = """\
nightly: "03:00"
default: anthropic
backends:
  anthropic: { kind: anthropic, model: claude-opus-5-5, key: anthropic }
  deepseek: { kind: openai, url: https://api.deepseek.com/v1/chat/completions, model: deepseek-chat, key: deepseek }
  local: { kind: openai, url: http://127.0.0.1:11434/v1/chat/completions, model: llama3 }
  mine: { kind: command, run: /opt/mine/classify }
"""

README_ESCALATE = """\
escalate: claude
backends:
  claude: { kind: command, run: /path/to/avsm/examples/backends/claude, offbox: true }
"""

FULL = """\
nightly: never
ratchet: 0
forecast: {days: 7, seeds: 0}
canary_asks: {every: 20}
adapters:
  stripe: {url: https://api.stripe.com/v1}
  github: {url: https://api.github.com}
  mail: {command: "sendmail -t -i", from: you@example.com}
research: /opt/research
"""


@pytest.mark.parametrize("text", ["", "# nothing set\n"])
def test_defaults(text):
    """CONFIG-03, CONFIG-05, SELF-02, SELF-05, FORECAST-02, MODEL-02: every key is optional; the defaults."""
    cfg = avsm.parse_config(text, "c.yaml")
    assert cfg["nightly"] == "03:00"
    assert cfg["ratchet"] == 5
    assert "port" not in cfg
    assert cfg["canary_asks"] is None
    assert cfg["forecast"] is None
    assert cfg["backends"] == {} and cfg["default"] is None and cfg["escalate"] is None
    assert cfg["adapters"] == {} and cfg["research"] is None


def test_readme_backends():
    """MODEL-04..08, ESC-07, CONFIG-04: the README's config with four backends; anthropic and openai are off-box,
    a command backend is not unless it says so. MODEL-08: the command backend takes run, offbox left out."""
    cfg = avsm.parse_config(README_CONFIG, "c.yaml")
    assert cfg["nightly"] == "03:00"
    assert cfg["default"] == "anthropic"
    b = cfg["backends"]
    assert set(b) == {"anthropic", "deepseek", "local", "mine"}
    assert (b["anthropic"]["kind"], b["anthropic"]["model"], b["anthropic"]["key"]) == ("anthropic", "claude-opus-5-5", "anthropic")
    assert (b["deepseek"]["url"], b["deepseek"]["model"], b["deepseek"]["key"]) == (
        "https://api.deepseek.com/v1/chat/completions", "deepseek-chat", "deepseek")
    assert "key" not in b["local"] and b["local"]["model"] == "llama3"
    assert b["mine"]["run"] == "/opt/mine/classify"
    assert [b[n]["offbox"] for n in ("anthropic", "deepseek", "local", "mine")] == [True, True, True, False]


def test_readme_escalate():
    """ESC-01, ESC-07, EXAMPLE-06, CONFIG-09, MODEL-08: `escalate:` names a command backend flagged off-box."""
    cfg = avsm.parse_config(README_ESCALATE, "c.yaml")
    assert cfg["escalate"] == "claude"
    assert cfg["backends"]["claude"]["offbox"] is True


def test_every_other_key():
    """CONFIG-04..08, SELF-02, SELF-04, FORECAST-04, MODEL-02: the README's other keys, each as written."""
    cfg = avsm.parse_config(FULL, "c.yaml")
    assert cfg["nightly"] == "never"
    assert cfg["ratchet"] == 0
    assert cfg["forecast"] == {"days": 7, "seeds": 0}
    assert cfg["canary_asks"] == {"every": 20}
    assert cfg["adapters"]["mail"] == {"command": "sendmail -t -i", "from": "you@example.com"}
    assert cfg["adapters"]["stripe"] == {"url": "https://api.stripe.com/v1"}
    assert cfg["research"] == "/opt/research"


def test_anthropic_effort():
    """MODEL-06, open point 44: an anthropic backend takes url and effort, low to max."""
    cfg = avsm.parse_config("backends:\n  a: {kind: anthropic, model: m, key: k, url: https://x.example/v1, effort: max}\n", "c.yaml")
    assert cfg["backends"]["a"]["effort"] == "max"


def test_anthropic_version_and_max_tokens():
    """MODEL-06, MODEL-07, issue 12: anthropic-version is 2026-10-21 and max_tokens 16000 unless the backend
    says; an openai backend sends max_tokens only when it says (null: the server's own); effort takes xhigh."""
    cfg = avsm.parse_config("backends:\n  a: {kind: anthropic, model: m, key: k, effort: xhigh}\n"
                            "  b: {kind: anthropic, model: m, key: k, version: 2023-06-01, max_tokens: 2000}\n"
                            "  o: {kind: openai, url: http://x, model: m}\n  p: {kind: openai, url: http://x, model: m, max_tokens: 300}\n",
                            "c.yaml")
    b = cfg["backends"]
    assert (b["a"]["version"], b["a"]["max_tokens"], b["a"]["effort"]) == ("2026-10-21", 16000, "xhigh")
    assert (b["b"]["version"], b["b"]["max_tokens"]) == ("2023-06-01", 2000)
    assert b["o"]["max_tokens"] is None and b["p"]["max_tokens"] == 300 and "version" not in b["o"]
    assert avsm.parse_config(avsm.format_config(cfg), "printed.yaml") == cfg


# (id, config text, "line:col", [words the message must hold], requirement IDs)
REFUSALS = [
    ("unknown-key", 'nightly: "03:00"\nratchett: 5\n', "2:1",
     ["unknown key 'ratchett'", "did you mean 'ratchet'"], "CONFIG-04, CONFIG-10, open point 22"),
    ("default-names-no-backend", README_CONFIG.replace("default: anthropic", "default: anthropik"), "2:1",
     ["default: 'anthropik' names no backend", "name one under backends:"], "MODEL-04, CONFIG-10"),
    ("escalate-names-no-backend", "escalate: claude\nbackends:\n  mine: {kind: command, run: /opt/mine}\n", "1:1",
     ["escalate: 'claude' names no backend", "name one under backends:"], "CONFIG-09, CONFIG-10"),
    ("effort-extreme", "backends:\n  a: {kind: anthropic, model: m, key: k, effort: extreme}\n", "2:42",
     ["effort must be one of low, medium, high, xhigh, max", "extreme"], "MODEL-06, open point 44"),
    ("version-not-a-date", "backends:\n  a: {kind: anthropic, model: m, key: k, version: latest}\n", "2:42",
     ["version is the API's version date, as 2026-10-21", "latest"], "MODEL-06, issue 12"),
    ("max-tokens-zero", "backends:\n  a: {kind: anthropic, model: m, key: k, max_tokens: 0}\n", "2:42",
     ["max_tokens must be a whole number of at least 1"], "MODEL-06, issue 12"),
    ("max-tokens-text", "backends:\n  a: {kind: openai, url: http://x, model: m, max_tokens: lots}\n", "2:46",
     ["max_tokens must be a whole number of at least 1"], "MODEL-07, issue 12"),
    ("version-on-openai", "backends:\n  a: {kind: openai, url: http://x, model: m, version: 2026-10-21}\n", "2:46",
     ["unknown key 'version'"], "MODEL-07, issue 12"),
    ("backend-kind", "backends:\n  a: {kind: gemini, model: m}\n", "2:3",
     ["needs kind: anthropic, openai or command"], "MODEL-05"),
    ("command-without-run", "backends:\n  c: {kind: command, offbox: true}\n", "2:3",
     ["backend 'c' has no 'run'", "a command backend says run"], "MODEL-08"),
    ("command-with-model", "backends:\n  c: {kind: command, run: /opt/mine/classify, model: m}\n", "2:47",
     ["unknown key 'model' in a command backend"], "MODEL-08"),
    ("command-offbox-not-a-boolean", "backends:\n  c: {kind: command, run: /opt/mine/classify, offbox: maybe}\n",
     "2:47", ["offbox must be true or false"], "MODEL-08"),
    ("openai-without-url", "backends:\n  a: {kind: openai, model: m}\n", "2:3",
     ["has no 'url'"], "MODEL-07"),
    ("nightly-not-a-time", "nightly: 3am\n", "1:1",
     ["not a time", '"HH:MM"', "never"], "MODEL-02"),
    ("port-is-gone", "port: 2876\n", "1:1", ["avsm opens no listener", "avsm --host"], "CONFIG-05, issue 23 item 4"),
    ("checkpoint-key-relative", "checkpoint: {key: id_ed25519}\n", "1:14", ["absolute path"], "issue 24 item 4"),
    ("checkpoint-every-short", "checkpoint: {every: 5s}\n", "1:14", ["at least 1m"], "issue 24 item 4"),
    ("checkpoint-unknown-key", "checkpoint: {sign: yes}\n", "1:14", ["unknown key 'sign' in checkpoint"], "issue 24 item 4"),
    ("ratchet-negative", "ratchet: -1\n", "1:1", ["ratchet must be a whole number of at least 0"], "SELF-02"),
    ("canary-every-zero", "canary_asks: {every: 0}\n", "1:15", ["every must be a whole number of at least 1"], "SELF-04"),
    ("adapter-unknown", "adapters:\n  slack: {url: https://x.example}\n", "2:3",
     ["unknown key 'slack'"], "CONFIG-06, open point 22"),
]


@pytest.mark.parametrize("case, text, where, words, reqs", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_refusal_says_the_fix(case, text, where, words, reqs):
    """CONFIG-10, EXIT-10 and the requirement in `reqs`: a config that does not hold is 78 and says the fix."""
    with pytest.raises(avsm.Fail) as err:
        avsm.parse_config(text, "c.yaml")
    assert err.value.code == avsm.EX_CONFIG == 78
    for word in words:
        assert word in str(err.value), f"{case}: {word!r} not in {str(err.value)!r}"


@pytest.mark.parametrize("case, text, where, words, reqs", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_refusal_names_file_line_col(case, text, where, words, reqs):
    """CONFIG-10 and the requirement in `reqs`: the message starts `c.yaml:LINE:COL: ` at the fault."""
    with pytest.raises(avsm.Fail) as err:
        avsm.parse_config(text, "c.yaml")
    assert str(err.value).startswith(f"c.yaml:{where}: "), f"{case}: {str(err.value)!r}"


# ---- format_config: what `avsmd -T` prints (CLI-04, SELF-06, FORECAST-05) -----------------------------------

def test_format_shows_canary_null_and_forecast_comment():
    """SELF-06, FORECAST-05, CLI-04: with both left out, canary_asks prints null and the forecast default
    prints as a comment."""
    text = avsm.format_config(avsm.parse_config("", "c.yaml"))
    lines = text.splitlines()
    assert "canary_asks: null" in lines
    assert any(line.startswith("# forecast: {days: 30, seeds: 16}") for line in lines)
    assert not any(line.startswith("forecast:") for line in lines)


def test_format_shows_every_key():
    """CLI-04, CONFIG-04: every key of the config appears, as a key or (forecast) as a comment."""
    text = avsm.format_config(avsm.parse_config("", "c.yaml"))
    for key in ("nightly", "default", "backends", "escalate", "ratchet", "canary_asks", "adapters", "research", "checkpoint"):
        assert any(line.startswith(f"{key}:") for line in text.splitlines()), key
    assert "forecast:" in text


def test_format_shows_a_set_forecast_as_a_key():
    """FORECAST-04, CLI-04: a forecast that is set prints as a key, not a comment."""
    text = avsm.format_config(avsm.parse_config("forecast: {days: 7, seeds: 8}\n", "c.yaml"))
    assert "forecast: {days: 7, seeds: 8}" in text.splitlines()
    assert "# forecast" not in text


ROUND_TRIP = [
    pytest.param("", id="defaults"),
    pytest.param(FULL, id="every-other-key"),
    pytest.param(README_ESCALATE, id="escalate-command-backend"),
    pytest.param(README_CONFIG, id="readme-backends"),
]


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_format_reads_back_to_the_same_config(text):
    """CLI-04, CONFIG-04: what `avsmd -T` prints is YAML (avsm.parse_yaml reads it, every key present) that
    parse_config reads back to the same config."""
    cfg = avsm.parse_config(text, "c.yaml")
    printed = avsm.format_config(cfg)
    doc = avsm.parse_yaml(printed)
    assert set(doc) == avsm.CONFIG_KEYS - {"forecast"} | ({"forecast"} if cfg["forecast"] else set())
    assert avsm.parse_config(printed, "printed.yaml") == cfg


def test_the_backend_line_says_when_decisions_are_made():
    """Issue 22 item 9, CONFIG-04: `avsmd -t` and `status` name a model venture's backend and its nightly time,
    and with `nightly: never` say there is no nightly decision (not `nightly at never`)."""
    m = avsm.parse_mandate("purpose: p\nmetric: m\ncontroller: {kind: model, backend: mine}\ncadence: 1m\n"
                           "permitted:\n  - {name: up, run: ./up, cap: 1/hour, reversible: true}\n", "mandate.yaml")
    for nightly, words in (("never", "backend: mine, no nightly decision"), ('"04:30"', "backend: mine, nightly at 04:30")):
        cfg = avsm.parse_config(f"nightly: {nightly}\nbackends:\n  mine: {{kind: command, run: /opt/mine}}\n", "c.yaml")
        assert avsm.backend_note(m, cfg) == words
