"""An AEAD secret box: AES-256-GCM under a key-encryption key, with the key's id kept for rotation.

Service secrets (and PSP credentials) are stored sealed. Each sealed value records the id of the key
that sealed it, so after `PSP_CONFIG_KEK` is rotated the previous keys (`PSP_CONFIG_KEK_PREVIOUS`)
still open older rows while new rows use the current key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from dataclasses import dataclass
from typing import Generic, TypeVar

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from paymanager.logging import get_logger

log = get_logger("paymanager.secret_box")

KEY_BYTES = 32
NONCE_BYTES = 12
# A fixed development key so `make run` works with no configuration; start-up warns loudly about it.
_DEVELOPMENT_KEK = hashlib.sha256(
    b"paymanager development key-encryption key; never use in production"
).digest()

T = TypeVar("T")
# The development key's warning is written once per process, however many boxes are built.
_warned_development_key = False


class Secret(Generic[T]):
    """A value that prints masked, so a secret cannot leak through logs or reprs by accident."""

    __slots__ = ("_value",)

    def __init__(self, value: T) -> None:
        self._value = value

    def reveal(self) -> T:
        return self._value

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__


class SecretBoxError(Exception):
    """A sealed value cannot be opened: unknown key id, wrong key, or tampered bytes."""


def key_id_of(key: bytes) -> str:
    return "k" + hashlib.sha256(key).hexdigest()[:12]


def parse_kek(text: str, name: str = "PSP_CONFIG_KEK") -> bytes:
    try:
        key = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"{name} must be base64 of {KEY_BYTES} bytes") from exc
    if len(key) != KEY_BYTES:
        raise ValueError(f"{name} must decode to {KEY_BYTES} bytes, not {len(key)}")
    return key


def parse_keks(kek: str | None, previous: str | None) -> tuple[bytes | None, tuple[bytes, ...]]:
    """PSP_CONFIG_KEK (None when unset) and the comma-separated PSP_CONFIG_KEK_PREVIOUS; a bad one
    raises ValueError naming its variable (config.py checks them so at start-up)."""
    current = parse_kek(kek) if kek is not None else None
    older = tuple(
        parse_kek(item, "PSP_CONFIG_KEK_PREVIOUS") for item in (previous or "").split(",") if item.strip()
    )
    return current, older


@dataclass(frozen=True, slots=True)
class Sealed:
    key_id: str
    ciphertext: bytes  # nonce || AES-GCM ciphertext and tag


class SecretBox:
    """Seals with the current key; opens with any known key, chosen by the sealed value's key id."""

    def __init__(self, current: bytes, previous: tuple[bytes, ...] = ()) -> None:
        assert len(current) == KEY_BYTES
        self._current_id = key_id_of(current)
        self._keys = {key_id_of(key): AESGCM(key) for key in (*previous, current)}

    @classmethod
    def from_config(cls, kek: str | None, previous: str | None = None, *, warn: bool = True) -> SecretBox:
        """`warn=False` (CLI commands): no warning about the development key; a server warns once."""
        global _warned_development_key
        current, older = parse_keks(kek, previous)
        if current is None:
            if warn and not _warned_development_key:
                _warned_development_key = True
                log.warning("PSP_CONFIG_KEK is unset: secrets are sealed with the public development key")
            current = _DEVELOPMENT_KEK
        return cls(current, older)

    @property
    def current_key_id(self) -> str:
        return self._current_id

    def seal(self, plaintext: bytes, associated: bytes) -> Sealed:
        """Encrypt `plaintext`, bound to `associated` (the owning row's id) so rows cannot be swapped."""
        nonce = os.urandom(NONCE_BYTES)
        ciphertext = self._keys[self._current_id].encrypt(nonce, plaintext, associated)
        return Sealed(self._current_id, nonce + ciphertext)

    def open(self, sealed: Sealed, associated: bytes) -> Secret[bytes]:
        aead = self._keys.get(sealed.key_id)
        if aead is None:
            raise SecretBoxError(
                f"no key with id {sealed.key_id}; was PSP_CONFIG_KEK rotated without keeping the old "
                "key in PSP_CONFIG_KEK_PREVIOUS?"
            )
        nonce, ciphertext = sealed.ciphertext[:NONCE_BYTES], sealed.ciphertext[NONCE_BYTES:]
        try:
            return Secret(aead.decrypt(nonce, ciphertext, associated))
        except InvalidTag as exc:
            raise SecretBoxError("the sealed value does not open: wrong key or tampered bytes") from exc
