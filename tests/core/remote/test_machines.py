"""Remote machines: kept in the user config folder, checked field by field, never with a secret."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from studio.core.remote.machines import (
    MachineError,
    RemoteMachine,
    get_machine,
    load_machines,
    machines_path,
    remove_machine,
    save_machine,
)
from studio.core.remote.passphrases import key_is_encrypted
from studio.core.remote.ssh import remote_path


@pytest.fixture
def key(tmp_path: Path) -> Path:
    path = tmp_path / "id_test"
    path.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n")
    return path


def test_machines_are_kept_in_the_user_config_folder_and_read_back(key: Path) -> None:
    machine = RemoteMachine("pod-1", "203.0.113.7", user="root", port=22022, key_file=str(key),
                            workspace="/workspace", python="/opt/venv/bin/python", env={"HF_HOME": "/workspace/hf"})
    path = save_machine(machine)
    assert path == machines_path() and path.is_file()
    assert load_machines() == {"pod-1": machine}
    assert get_machine("pod-1").describe() == "root@203.0.113.7:22022"
    assert remove_machine("pod-1") and not remove_machine("pod-1")
    with pytest.raises(MachineError, match=r"no remote machine named 'pod-1' .*studio-train remote add pod-1"):
        get_machine("pod-1")


@pytest.mark.parametrize(("change", "message"), [
    ({"name": "my box"}, "machine name 'my box'"),
    ({"host": "-oProxyCommand=evil"}, "is not a host name"),
    ({"port": 70000}, "port 70000 must be between 1 and 65535"),
    ({"user": "-l"}, "user '-l' is not a login name"),
    ({"detach": "systemd"}, "detach 'systemd' must be one of auto, tmux, screen, nohup"),
    ({"env": {"HF_TOKEN": "hf_abcdefghijklmnopqrstuvwx"}}, "env.HF_TOKEN look like a password or token"),
    ({"env": {"NOTE": "sk-abcdefghijklmnopqrstuvwxyz"}}, "env.NOTE look like a password or token"),
    # Secrets under other names, with values no pattern knows.
    ({"env": {"WANDB_KEY": "0123abcd"}}, "env.WANDB_KEY look like a password or token"),
    ({"env": {"OPENAI_API_KEY": "plain"}}, "env.OPENAI_API_KEY look like a password or token"),
    ({"env": {"GITLAB_TOKEN": "plain"}}, "env.GITLAB_TOKEN look like a password or token"),
    ({"env": {"S3_SECRET": "plain"}}, "env.S3_SECRET look like a password or token"),
    ({"env": {"DB_PASSWORD": "hunter2"}}, "env.DB_PASSWORD look like a password or token"),
    ({"env": {"DB_PASS": "hunter2", "HF_HOME": "/workspace/hf"}}, r"env.DB_PASS look like a password or token; "),
])
def test_a_wrong_field_is_refused_with_its_name_and_what_to_do(change: dict[str, object], message: str) -> None:
    fields = {"name": "box", "host": "example.org", **change}
    with pytest.raises(MachineError, match=message):
        save_machine(RemoteMachine(**fields))  # type: ignore[arg-type]
    assert not machines_path().exists()  # nothing written


def test_settings_that_only_mention_tokens_or_keys_are_no_secrets() -> None:
    from studio.core.export.bundle_files import find_secrets

    env = {"HF_HOME": "/workspace/hf", "WANDB_PROJECT": "shapes", "KEYBOARD": "us", "HF_HUB_ENABLE_HF_TRANSFER": "1"}
    assert find_secrets({"env": env, "dataset": {"keep_tokens": 2}, "sampling": {"max_tokens": 77}}) == []


def test_a_public_key_or_a_missing_key_file_is_refused(key: Path, tmp_path: Path) -> None:
    public = tmp_path / "id_test.pub"
    public.write_text("ssh-ed25519 AAAA test\n")
    with pytest.raises(MachineError, match=r"is a public key; name the private key beside it \(.*id_test\)"):
        save_machine(RemoteMachine("box", "example.org", key_file=str(public)))
    with pytest.raises(MachineError, match=r"the key file .*nothing does not exist"):
        save_machine(RemoteMachine("box", "example.org", key_file=str(tmp_path / "nothing")))


def test_a_machines_file_saved_by_notepad_with_a_byte_order_mark_is_read(key: Path) -> None:
    machine = RemoteMachine("pod-1", "203.0.113.7", user="root", key_file=str(key))
    path = save_machine(machine)
    path.write_text(path.read_text(encoding="utf-8"), encoding="utf-8-sig")  # Notepad's "UTF-8 with BOM"
    assert load_machines() == {"pod-1": machine}


def test_a_broken_machines_file_is_named(key: Path) -> None:
    machines_path().parent.mkdir(parents=True, exist_ok=True)
    machines_path().write_text("[machines.box]\nhost = 'x'\npassword = 'hunter2'\n")
    with pytest.raises(MachineError, match=r"machine 'box'.*allowed keys: host, user"):
        load_machines()


def test_an_encrypted_key_is_recognised(tmp_path: Path) -> None:
    if subprocess.run(["which", "ssh-keygen"], capture_output=True).returncode:
        pytest.skip("ssh-keygen is not installed")
    for name, passphrase in (("plain", ""), ("locked", "secret phrase")):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-f", str(tmp_path / name)], check=True)
    assert not key_is_encrypted(tmp_path / "plain")
    assert key_is_encrypted(tmp_path / "locked")


def test_remote_paths_keep_the_remote_home_and_quote_the_rest() -> None:
    assert remote_path("~/studio remote") == "\"$HOME\"/'studio remote'"
    assert remote_path("/workspace/a b") == "'/workspace/a b'"
    assert remote_path("~") == '"$HOME"'


@pytest.mark.parametrize(("entry", "says"), [
    ("host = '-oProxyCommand=touch PWNED'", "host '-oProxyCommand=touch PWNED' is not a host name"),
    ("host = 'box'\nuser = '-oProxyCommand=sh'", "user '-oProxyCommand=sh' is not a login name"),
    ("host = 'box'\nport = '22; touch PWNED'", "port = '22; touch PWNED' must be int"),
    ("host = 'box'\ndetach = 'sh -c x'", "detach 'sh -c x' must be one of"),
    ("host = 'box'\nenv = { 'A;B' = 'x' }", "'A;B' is not an environment variable name"),
    ("host = 'box'\npython = \"python3\\ntouch PWNED\"", "python must name the interpreter"),
    ("host = 'box'\nkey_file = '-oProxyCommand=sh'", "does not exist"),
])
def test_a_machines_file_edited_by_hand_is_checked_when_read(entry: str, says: str) -> None:
    machines_path().parent.mkdir(parents=True, exist_ok=True)
    machines_path().write_text(f"[machines.box]\n{entry}\n")
    for read in (load_machines, lambda: get_machine("box")):
        with pytest.raises(MachineError) as raised:
            read()
        assert str(machines_path()) in str(raised.value) and says in str(raised.value)


def test_a_moved_key_file_leaves_the_list_readable_and_is_named_when_connecting(key: Path) -> None:
    save_machine(RemoteMachine("box", "example.org", key_file=str(key)))
    key.unlink()
    assert list(load_machines()) == ["box"]
    with pytest.raises(MachineError, match=r"the key file .* does not exist"):
        get_machine("box")
