"""Where the `skald` data commands connect: flags > SKALD_* variables > the profile file."""

from __future__ import annotations

from pathlib import Path

import pytest

from skald.cli.connect import DEFAULT_URL, CliError, load_profile, profile_path, resolve

PROFILES = """default = "local"

[profiles.local]
url = "http://127.0.0.1:2000"
account = "acme"
user = "alice"

[profiles.prod]
url = "https://example.test"
api_key = "k-prod"
timeout = 30
"""


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in (
        "SKALD_URL",
        "SKALD_API_KEY",
        "SKALD_ACCOUNT",
        "SKALD_USER",
        "SKALD_PROFILE",
        "SKALD_TIMEOUT",
        "SKALD_PROFILE_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    return tmp_path / "skald" / "profile.toml"


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def no_flags(profile: str | None = None) -> dict[str, str | None]:
    return {"url": None, "api_key": None, "account": None, "user": None, "profile": profile}


def test_defaults_without_a_file(clean_env: Path) -> None:
    assert profile_path() == clean_env
    conn = resolve(**no_flags())
    assert (conn.url, conn.api_key, conn.account, conn.user) == (DEFAULT_URL, None, None, None)


def test_default_profile_then_named_profile(clean_env: Path) -> None:
    write(clean_env, PROFILES)
    local = resolve(**no_flags())
    assert (local.url, local.account, local.user) == ("http://127.0.0.1:2000", "acme", "alice")
    prod = resolve(**no_flags("prod"))
    assert (prod.url, prod.api_key, prod.timeout, prod.account) == (
        "https://example.test",
        "k-prod",
        30.0,
        None,
    )


def test_flags_beat_variables_beat_the_file(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(clean_env, PROFILES)
    monkeypatch.setenv("SKALD_ACCOUNT", "from-env")
    monkeypatch.setenv("SKALD_PROFILE", "prod")
    conn = resolve(**{**no_flags(), "user": "from-flag"})
    assert (conn.url, conn.account, conn.user) == ("https://example.test", "from-env", "from-flag")


def test_flat_file_is_one_profile(clean_env: Path) -> None:
    write(clean_env, 'url = "http://h:1"\napi_key = "k"\n')
    assert load_profile(None) == {"url": "http://h:1", "api_key": "k"}


@pytest.mark.parametrize(
    "text,name,code,fragment",
    [
        (PROFILES, "nope", "NOT_FOUND", "profile 'nope' not in"),
        ('url = "x"\n', "prod", "NOT_FOUND", "no [profiles] table"),
        ("[profiles.a]\nurl = 1\n", "a", "INVALID_ARGUMENT", "'url' has the wrong type"),
        ("[profiles.a]\nkey = 'x'\n", "a", "INVALID_ARGUMENT", "unknown keys: key"),
        ("not toml = = \n", None, "INVALID_ARGUMENT", "cannot read profile file"),
    ],
)
def test_bad_profiles_are_clear_errors(
    clean_env: Path, text: str, name: str | None, code: str, fragment: str
) -> None:
    write(clean_env, text)
    with pytest.raises(CliError) as info:
        load_profile(name)
    assert info.value.code == code and fragment in info.value.message


def test_a_named_profile_needs_the_file(clean_env: Path) -> None:
    with pytest.raises(CliError) as info:
        resolve(**no_flags("prod"))
    assert info.value.code == "NOT_FOUND" and str(clean_env) in info.value.message
